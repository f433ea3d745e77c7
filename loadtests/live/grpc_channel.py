"""Binding 3: the A2A gRPC binding (``A2AService/SendStreamingMessage``) under gevent.

(Not ``grpc.py``: Locust puts the locustfile's folder, this one, first on ``sys.path``,
where a ``grpc.py`` would hide the grpcio package.)

grpcio's blocking API cooperates with gevent only in its gevent mode:
:func:`init_gevent` (``grpc.experimental.gevent.init_gevent()``) must run after gevent's
monkey patching (Locust does it on import) and before any gRPC object is made; this
module calls it once, when its first channel is made.  Without it a blocked call stalls
the whole process (every greenlet waits for it).

A call's requests go as server-streaming RPCs on one ``grpc.Channel`` per Locust process and
target (one HTTP/2 connection, streams multiplexed: what a media pipeline in front of its
Reasoner would hold).  The Live layer (:mod:`rtalab.loadtests.live.call`) speaks in JSON-RPC
request bodies and response objects, the same on every binding; this channel translates:

- the request body becomes a ``SendMessageRequest`` (the same ids, text and ``rta/*``
  metadata), the profile is asked for with the ``a2a-extensions`` metadata, the bearer token
  is ``authorization`` metadata, ``a2a-version: 1.0`` is sent;
- the server's initial metadata is the answer's headers: its ``a2a-extensions`` echo
  settles the negotiation (as the first SSE answer's header does), ``x-rta-worker`` names
  the worker; ``http_status`` is 200 for an accepted stream;
- every ``StreamResponse`` becomes the JSON-RPC object the other bindings read (only what
  :func:`rtalab.loadtests.live.wire.parse_event` reads: kind, ids, state, metadata, the status
  message's metadata and text parts), so sequenceId reordering, the ledgers and every rule
  are the same code on every binding;
- a call that ends with a gRPC status other than OK is one error frame carrying the
  profile's code (:func:`code_of_status`: the ``google.rpc.ErrorInfo`` the server sent, else
  A2A §5.4's mapping read backwards); ``http_status`` is the status's HTTP equivalent
  (:data:`HTTP_OF_STATUS`, the table of gRPC's own HTTP mapping) so that the checker's
  answered-as-sent counts read alike on every binding.  ``UNAVAILABLE`` and ``CANCELLED``
  are the transport failing (no connection, a cut stream): a broken stream, as on HTTP.

``CancelTask`` and ``GetTask`` are the unary RPCs; cancel is advisory (best effort, its
answer's ``rta/sideEffect`` is read).  Certificates are verified on every gRPC channel
(:func:`rtalab.loadtests.common.tls.client_grpc_credentials`: grpcio cannot skip verification).
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from rtalab.loadtests.common.tls import ClientTls, client_grpc_credentials, diagnose
from rtalab.loadtests.live.call import StreamBroken
from rtalab.loadtests.live.wire import code_of_http_status

REQUEST_NAME: Final = "SendStreamingMessage"
EXT_METADATA: Final = "a2a-extensions"
WORKER_METADATA: Final = "x-rta-worker"
CANCEL_TIMEOUT_S: Final = 2.0
# what gRPC itself answers at the HTTP level for each status (grpc/doc/http-grpc-status-mapping
# read backwards, plus the usual ones for the rest), so refused answers count alike everywhere
HTTP_OF_STATUS: Final = {
    "OK": 200, "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404, "ALREADY_EXISTS": 409,
    "ABORTED": 409, "RESOURCE_EXHAUSTED": 429, "CANCELLED": 499, "UNKNOWN": 500,
    "INTERNAL": 500, "DATA_LOSS": 500, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
# the profile's code of a gRPC status when the server sent no ErrorInfo of its own (A2A §5.4
# maps A2A errors to statuses; errors.md §2 maps them to the profile's codes)
CODE_OF_STATUS: Final = {
    "UNAUTHENTICATED": "auth", "PERMISSION_DENIED": "auth",
    "INVALID_ARGUMENT": "schema-validation", "FAILED_PRECONDITION": "schema-validation",
    "OUT_OF_RANGE": "schema-validation", "UNIMPLEMENTED": "schema-validation",
    "NOT_FOUND": "session-not-found", "RESOURCE_EXHAUSTED": "rate-limited",
    "DEADLINE_EXCEEDED": "upstream-timeout", "ABORTED": "internal", "ALREADY_EXISTS": "internal",
    "UNKNOWN": "internal", "INTERNAL": "internal", "DATA_LOSS": "internal",
}
# the A2A ErrorInfo reasons (domain a2a-protocol.org) and the profile's codes
CODE_OF_REASON: Final = {
    "TASK_NOT_FOUND": "session-not-found", "INVALID_PARAMS": "schema-validation",
    "INVALID_REQUEST": "schema-validation", "METHOD_NOT_FOUND": "schema-validation",
    "UNSUPPORTED_OPERATION": "schema-validation", "CONTENT_TYPE_NOT_SUPPORTED":
    "schema-validation", "VERSION_NOT_SUPPORTED": "schema-validation",
    "EXTENSION_SUPPORT_REQUIRED": "extension-inactive", "TASK_NOT_CANCELABLE":
    "schema-validation", "INTERNAL_ERROR": "internal", "INVALID_AGENT_RESPONSE": "internal",
}
TRANSPORT_STATUSES: Final = frozenset({"UNAVAILABLE", "CANCELLED"})
# reconnect within 0.1-1 s of a lost connection (gRPC's defaults, 1 s growing to 120 s, would
# keep failing calls fast long after a restarted server is back: an HTTP client reconnects
# on the next request)
RECONNECT_OPTIONS: Final = (("grpc.initial_reconnect_backoff_ms", 100),
                            ("grpc.min_reconnect_backoff_ms", 100),
                            ("grpc.max_reconnect_backoff_ms", 1000))
_GEVENT = [False]
_CHANNELS: dict[tuple[str, bool, ClientTls], Any] = {}


def init_gevent() -> None:
    """grpcio's gevent mode, once per process, before the first gRPC object."""
    if not _GEVENT[0]:
        # lazy: +81 ms (grpc) off importing grpc_channel
        import grpc.experimental.gevent as grpc_gevent

        grpc_gevent.init_gevent()
        _GEVENT[0] = True


def grpc_address(url: str) -> tuple[str, bool]:
    """``(host:port, secure)`` of an advertised gRPC URL: ``host:port`` (plaintext unless the
    run's target is https: the caller decides), or ``grpc://``/``grpcs://``/``http://``/
    ``https://`` + ``host:port``."""
    for prefix, secure in (("grpcs://", True), ("https://", True), ("grpc://", False),
                           ("http://", False)):
        if url.startswith(prefix):
            return url[len(prefix):].rstrip("/"), secure
    return url.rstrip("/"), False


def channel_for(address: str, secure: bool, tls: ClientTls) -> Any:
    """The process's channel to ``address`` (made on first use)."""
    key = (address, secure, tls)
    ch = _CHANNELS.get(key)
    if ch is None:
        init_gevent()
        # lazy: +63 ms (grpc) off importing grpc_channel
        import grpc

        opts = [("grpc.max_receive_message_length", 4 * 1024 * 1024), *RECONNECT_OPTIONS]
        ch = (grpc.secure_channel(address, client_grpc_credentials(tls), options=opts) if secure
              else grpc.insecure_channel(address, options=opts))
        _CHANNELS[key] = ch
    return ch


def close_channels() -> None:
    """Close every channel of this process (end of run)."""
    for ch in _CHANNELS.values():
        ch.close()
    _CHANNELS.clear()


def metadata(ext_uri: str, token: str | None, active: bool) -> tuple[tuple[str, str], ...]:
    """A request's metadata: version, the profile asked for (``active``), the bearer token."""
    md: list[tuple[str, str]] = [("a2a-version", "1.0")]
    if active:
        md.append((EXT_METADATA, ext_uri))
    if token:
        md.append(("authorization", f"Bearer {token}"))
    return tuple(md)


def send_request(body: bytes) -> Any:
    """The ``SendMessageRequest`` of a JSON-RPC ``SendStreamingMessage`` body."""
    # lazy: +105 ms (a2a, starlette, google) off importing grpc_channel
    from a2a.types import Message, Part, Role, SendMessageRequest

    m = json.loads(body)["params"]["message"]
    msg = Message(message_id=m["messageId"], role=Role.ROLE_USER,
                  context_id=m.get("contextId") or "", task_id=m.get("taskId") or "",
                  parts=[Part(text=p["text"]) for p in m.get("parts", ()) if "text" in p])
    meta = m.get("metadata")
    if meta:
        msg.metadata.update(meta)
    return SendMessageRequest(message=msg)


# ---------------------------------------------------------------- StreamResponse -> JSON frame

_KIND: Final = {"task": "task", "status_update": "statusUpdate",
                "artifact_update": "artifactUpdate", "message": "message"}
_STATE_NAMES: dict[int, str] = {}


def _state_name(value: int) -> str:
    name = _STATE_NAMES.get(value)
    if name is None:
        # lazy: +92 ms (a2a, starlette, google) off importing grpc_channel
        from a2a.types import TaskState

        name = _STATE_NAMES[value] = TaskState.Name(value)
    return name


def _value(v: Any) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        return v.number_value
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return struct_dict(v.struct_value)
    if kind == "list_value":
        return [_value(x) for x in v.list_value.values]
    return None


def struct_dict(s: Any) -> dict[str, Any]:
    """A protobuf Struct as plain JSON data."""
    return {k: _value(v) for k, v in s.fields.items()}


def frame_of(rpc_id: str, sr: Any) -> dict[str, Any]:
    """One ``StreamResponse`` as the JSON-RPC result object the Live layer reads."""
    kind = sr.WhichOneof("payload")
    if kind is None:
        return {"jsonrpc": "2.0", "id": rpc_id, "result": {}}
    body = getattr(sr, kind)
    out: dict[str, Any] = {"contextId": body.context_id}
    if kind == "task":
        out["id"] = body.id
    else:
        out["taskId"] = body.task_id
    if body.metadata.fields:
        out["metadata"] = struct_dict(body.metadata)
    if kind == "task" or kind == "status_update":
        st = body.status
        status: dict[str, Any] = {"state": _state_name(st.state)}
        if st.HasField("message"):
            m = st.message
            status["message"] = {"metadata": struct_dict(m.metadata),
                                 "parts": [{"text": p.text} for p in m.parts if p.text]}
        out["status"] = status
    return {"jsonrpc": "2.0", "id": rpc_id, "result": {_KIND[kind]: out}}


# ---------------------------------------------------------------- gRPC status -> profile code

def error_info(err: Any) -> tuple[str | None, str | None, float | None]:
    """(the profile's code, the ErrorInfo reason, retryAfterMs) of the ``google.rpc.ErrorInfo``
    a failed call carries in ``grpc-status-details-bin`` (Nones without one)."""
    try:
        trailing = err.trailing_metadata() or ()
    except Exception:
        return None, None, None
    for k, v in trailing:
        if k != "grpc-status-details-bin":
            continue
        # lazy: +39 ms (google) off importing grpc_channel
        from google.rpc import error_details_pb2, status_pb2

        status = status_pb2.Status()
        try:
            status.ParseFromString(v)
        except Exception:
            return None, None, None
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                own = info.metadata.get("errorCode")
                retry = info.metadata.get("retryAfterMs")
                try:
                    retry_ms = float(retry) if retry is not None else None
                except ValueError:
                    retry_ms = None
                if own:
                    return own, info.reason, retry_ms
                return CODE_OF_REASON.get(info.reason), info.reason, retry_ms
    return None, None, None


def code_of_status(err: Any) -> tuple[str, str, float | None]:
    """(the profile's code, the status's name, retryAfterMs) of a failed gRPC call."""
    name = err.code().name
    own, _, retry_ms = error_info(err)
    code = own or CODE_OF_STATUS.get(name) or code_of_http_status(HTTP_OF_STATUS.get(name, 500))
    return code, name, retry_ms


def error_frame(rpc_id: str | None, err: Any, ext_uri: str) -> dict[str, Any]:
    """A failed call as one JSON-RPC error frame (the profile's code in ``error.data``)."""
    code, name, retry_ms = code_of_status(err)
    data: dict[str, Any] = {f"{ext_uri}/errorCode": code}
    if retry_ms is not None:
        data[f"{ext_uri}/retryAfterMs"] = retry_ms
    details = (err.details() or "")[:200]
    return {"jsonrpc": "2.0", "id": rpc_id,
            "error": {"code": HTTP_OF_STATUS.get(name, 500), "message": f"gRPC {name}: {details}",
                      "data": data}}


def _transport_failure(err: Any, channel: GrpcChannel | None = None) -> str:
    """A one-line cause of a failed connection or cut stream.  gRPC says only "Socket
    closed" when a TLS server refuses the handshake: on a secure channel one handshake of
    our own names the cause (:func:`rtalab.loadtests.common.tls.diagnose`: unknown CA, hostname
    mismatch, expired, client certificate required ...)."""
    details = (err.details() or "").replace("\n", " ")
    text = f"gRPC {err.code().name}: {details}"
    if channel is not None and channel.secure and err.code().name == "UNAVAILABLE":
        cause = diagnose(f"grpcs://{channel.address}", channel.tls)
        if cause:
            text = f"{cause} (gRPC UNAVAILABLE)"
    return text[:300]


# ---------------------------------------------------------------- the channel

class GrpcExchange:
    """One ``SendStreamingMessage`` call in flight."""

    __slots__ = ("_call", "_channel", "_done", "_error", "_it", "_start", "_t0", "echo", "events",
                 "ext_uri", "http_status", "name", "rpc_id", "worker")

    def __init__(self, channel: GrpcChannel, rpc_id: str, body: bytes, active: bool) -> None:
        self.rpc_id = rpc_id
        self._channel = channel
        self.ext_uri = channel.ext_uri
        self.events = channel.events
        self.name = REQUEST_NAME
        self._t0 = time.perf_counter()
        self._start = time.time()
        self._done = False
        self._error: dict[str, Any] | None = None
        self.echo = False
        self.worker: str | None = None
        self.http_status: int | None = None
        # lazy: +78 ms (grpc) off importing grpc_channel
        import grpc

        try:
            request = send_request(body)
        except (ValueError, KeyError, TypeError) as e:
            raise StreamBroken(f"request not representable on gRPC: {e}") from None
        self._call = channel.stub().SendStreamingMessage(
            request, metadata=metadata(channel.ext_uri, channel.token, active))
        self._it = iter(self._call)
        try:
            md = self._call.initial_metadata()  # the answer's headers (or its end: refused)
            if md:
                self.http_status = 200
                for k, v in md:
                    if k == EXT_METADATA:
                        self.echo = channel.ext_uri in v
                    elif k == WORKER_METADATA:
                        self.worker = v
            else:  # trailers only: refused before any event
                self._refused(self._call)
        except grpc.RpcError as e:
            self._refused(e)
        except BaseException:  # a Live-layer timer fired while waiting: end the call
            self._call.cancel()
            raise

    def _refused(self, err: Any) -> None:
        """The call ended without events: an error frame, or a broken stream."""
        name = err.code().name if err.code() is not None else "UNKNOWN"
        if name == "OK":
            return
        if name in TRANSPORT_STATUSES:
            failure = _transport_failure(err, self._channel)
            self.close(f"connection failed: {failure}")
            raise StreamBroken(f"connection failed: {failure}")
        self.http_status = HTTP_OF_STATUS.get(name, 500)
        self._error = error_frame(self.rpc_id, err, self.ext_uri)

    def next_frame(self) -> dict[str, Any] | None:
        """The next event as a JSON-RPC object, None at the stream's end (raises
        StreamBroken when the transport fails)."""
        if self._error is not None:
            frame, self._error = self._error, None
            self._it = iter(())
            return frame
        # lazy: +55 ms (grpc) off importing grpc_channel
        import grpc

        try:
            sr = next(self._it)
        except StopIteration:
            return None
        except grpc.RpcError as e:
            name = e.code().name
            if name in TRANSPORT_STATUSES:
                raise StreamBroken(f"stream broken: {_transport_failure(e)}") from None
            return error_frame(self.rpc_id, e, self.ext_uri)
        return frame_of(self.rpc_id, sr)

    def close(self, failure: str | None = None) -> None:
        """End the call (cancelled if still open) and report it as one Locust stats row."""
        if self._done:
            return
        self._done = True
        self._call.cancel()  # a no-op on a finished call
        self.events.request.fire(
            request_type="gRPC", name=self.name, start_time=self._start,
            response_time=(time.perf_counter() - self._t0) * 1000.0, response_length=0,
            exception=RuntimeError(failure) if failure else None, context={})


class GrpcChannel:
    """A call's binding over gRPC: every request is one streaming RPC on the process's
    channel to the target's advertised gRPC address."""

    binding = "grpc"

    def __init__(self, address: str, secure: bool, ext_uri: str, token: str | None,
                 events: Any, tls: ClientTls | None = None) -> None:
        self.address = address
        self.secure = secure
        self.ext_uri = ext_uri
        self.token = token
        self.events = events
        self.tls = tls or ClientTls()
        self._stub: Any = None

    def stub(self) -> Any:
        """The A2AService stub on the process's channel."""
        if self._stub is None:
            # lazy: +104 ms (grpc, a2a, starlette) off importing grpc_channel
            from a2a.types import a2a_pb2_grpc

            self._stub = a2a_pb2_grpc.A2AServiceStub(channel_for(self.address, self.secure,
                                                                 self.tls))
        return self._stub

    def open(self, negotiation_s: float) -> bool | None:
        """No upgrade: the first answer's ``a2a-extensions`` echo decides (None = not yet)."""
        return None

    def send(self, rpc_id: str, body: bytes, active: bool) -> GrpcExchange:
        """Start one streaming call."""
        return GrpcExchange(self, rpc_id, body, active)

    def cancel(self, rpc_id: str, task_id: str, active: bool) -> str | None:
        """``CancelTask`` (best effort, at most :data:`CANCEL_TIMEOUT_S`); the
        ``rta/sideEffect`` its answer reports, if any."""
        # lazy: +99 ms (a2a, starlette, google) off importing grpc_channel
        from a2a.types import CancelTaskRequest

        t0, start, failure, reported = time.perf_counter(), time.time(), None, None
        try:
            task = self.stub().CancelTask(CancelTaskRequest(id=task_id),
                                          metadata=metadata(self.ext_uri, self.token, active),
                                          timeout=CANCEL_TIMEOUT_S)
            v = task.status.message.metadata.fields.get(f"{self.ext_uri}/sideEffect")
            reported = v.string_value if v is not None and v.string_value else None
        except Exception as e:  # a cancel is advisory: record, never raise
            failure = str(e.code().name) if hasattr(e, "code") else type(e).__name__
        self.events.request.fire(
            request_type="gRPC", name="CancelTask", start_time=start,
            response_time=(time.perf_counter() - t0) * 1000.0, response_length=0,
            exception=RuntimeError(failure) if failure else None, context={})
        return reported

    def get_task(self, task_id: str, active: bool, timeout_s: float = 10.0
                 ) -> dict[str, Any]:
        """``GetTask`` as the JSON-RPC object the other bindings answer: ``{"result": {"task":
        ...}}`` or an error frame with the profile's code."""
        # lazy: +124 ms (grpc, a2a, starlette) off importing grpc_channel
        import grpc
        from a2a.types import GetTaskRequest, StreamResponse

        try:
            task = self.stub().GetTask(GetTaskRequest(id=task_id),
                                       metadata=metadata(self.ext_uri, self.token, active),
                                       timeout=timeout_s)
        except grpc.RpcError as e:
            return error_frame("get", e, self.ext_uri)
        sr = StreamResponse()
        sr.task.CopyFrom(task)
        return frame_of("get", sr)

    def close(self) -> None:
        """Nothing per call: the channel is the process's."""


def open_channel(ctx: Any) -> GrpcChannel:
    """A gRPC channel for one call from a binding registry's context (``ctx.settings`` the
    run's :class:`~rtalab.loadtests.live.config.LoadSettings`: ``grpc_target``, ``grpc_secure``;
    ``ctx.ext_uri``, ``ctx.token``, ``ctx.events``, ``ctx.tls``)."""
    s = ctx.settings
    return GrpcChannel(s.grpc_target, s.grpc_secure, ctx.ext_uri, ctx.token, ctx.events, ctx.tls)
