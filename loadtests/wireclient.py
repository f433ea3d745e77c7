"""The project's one synchronous wire client of the Reasoner, and the wire constants.

Used by the tests (``tests/serve``), the fuzzer (:mod:`rtalab.loadtests.fuzz.engine`) and, for
the constants, the bench's raw asyncio client (:mod:`rtalab.benchmarks.serve`):

- wire constants: the extension URI (:data:`EXT`), the states that end one
  request's stream (:data:`END_STATES`), the event kinds of a stream response
  (:data:`EVENT_KINDS`) and the frame-end rule (:func:`frame_ends`), derived from
  the server's own definitions in :mod:`rtalab.loadtests.reasoner.wire`;
- request builders (:func:`message`, :func:`rpc`, :func:`stream`, :func:`headers`, the
  Live users' header rule of :mod:`rtalab.loadtests.live.wire` with this client's defaults);
- :class:`Client` (HTTP JSON-RPC/SSE and WebSocket sessions over real sockets,
  httpx and ``websockets.sync``; the A2A gRPC binding with grpcio's blocking API, at the
  address the agent card advertises) and :class:`Turn`, what one request produced.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from google.protobuf.json_format import MessageToDict, ParseDict
from websockets.sync.client import ClientConnection, connect

from rtalab.loadtests.common.tls import ClientTls
from rtalab.loadtests.live.wire import headers as wire_headers

# the JSON-side wire rules, re-exported
from rtalab.loadtests.reasoner.wire import DEFAULT_EXT_URI, END_STATE_NAMES, json_kind, json_state
from rtalab.loadtests.reasoner.wire import EVENT_KINDS as EVENT_KINDS
from rtalab.loadtests.reasoner.wire import frame_ends as frame_ends

END_STATES = END_STATE_NAMES
kind = json_kind
state = json_state
EXT = DEFAULT_EXT_URI

TOKENS = {"token-alice": "alice", "token-bob": "bob"}
ALICE, BOB = "token-alice", "token-bob"
TIMEOUT_S = 20.0
WORKER_HEADER = "x-rta-worker"  # the pid of the uvicorn worker that served a connection

FAST_HANDOFF_S = 2.5  # the fast scenario's handoff timeout (long enough for a loaded machine)
FAST_SCENARIO = f"""
[workload]
side_effect_share = 0.0

[reasoner]
reasoning_time_s = 0.02
first_chunk_s = 0.0
chunks = 3
chunk_interval_s = 0.01
upstream_timeout_s = 0.5
handoff_timeout_s = {FAST_HANDOFF_S}
context_rate_per_s = 0.5
context_burst = 4
"""


def k(name: str) -> str:
    """The full profile metadata key ``<ext>/<name>``."""
    return f"{EXT}/{name}"


def uid(prefix: str) -> str:
    """A fresh identifier."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------- requests


def message(text: str = "what is my balance", *, ctx: str | None = None,
            task: str | None = None, guid: str | None = None, turn: str | None = None,
            meta: dict[str, Any] | None = None, profile: bool = True,
            parts: list[dict[str, Any]] | None = None, message_id: str | None = None,
            interaction: str | None = None) -> dict[str, Any]:
    """A user message; with ``profile`` it carries turnId/requestGuid/interactionId (fresh
    identifiers unless given)."""
    m: dict[str, Any] = {"messageId": message_id or uid("m"), "role": "ROLE_USER",
                         "parts": parts if parts is not None else [{"text": text}]}
    if ctx:
        m["contextId"] = ctx
    if task:
        m["taskId"] = task
    metadata: dict[str, Any] = {}
    if profile:
        metadata = {k("turnId"): turn or uid("t"), k("requestGuid"): guid or uid("g"),
                    k("interactionId"): interaction or uid("i")}
    metadata.update(meta or {})
    if metadata:
        m["metadata"] = metadata
    return m


def rpc(method: str, params: Any, rid: Any = None) -> dict[str, Any]:
    """A JSON-RPC request object."""
    return {"jsonrpc": "2.0", "id": uid("r") if rid is None else rid, "method": method,
            "params": params}


def stream(msg: dict[str, Any], rid: Any = None) -> dict[str, Any]:
    """A SendStreamingMessage request."""
    return rpc("SendStreamingMessage", {"message": msg}, rid)


def headers(token: str | None = ALICE, ext: bool = True, version: bool = True,
            sse: bool = True) -> dict[str, str]:
    """Request headers of the profile (each piece optional)."""
    return wire_headers(EXT, token, ext, sse, version)


# ---------------------------------------------------------------------------- results


def meta(ev: dict[str, Any]) -> dict[str, Any]:
    """Event-level metadata."""
    return cast("dict[str, Any]", ev[kind(ev)].get("metadata", {}))


def status_message(ev: dict[str, Any]) -> dict[str, Any]:
    """The status message of a task / statusUpdate payload."""
    return cast("dict[str, Any]", ev[kind(ev)].get("status", {}).get("message", {}))


@dataclass
class Turn:
    """Everything one streaming request produced."""

    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200
    frames: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final(self) -> dict[str, Any]:
        """The last event."""
        return self.events[-1]

    @property
    def final_state(self) -> str | None:
        """State of the last event."""
        return state(self.final) if self.events else None

    @property
    def task_id(self) -> str:
        """The task id of the first event."""
        return str(self.events[0]["task"]["id"])

    @property
    def context_id(self) -> str:
        """The context id of the first event."""
        return str(self.events[0]["task"]["contextId"])

    @property
    def worker(self) -> str:
        """``X-RTA-Worker`` of the response (or upgrade): the serving worker's pid, or ``""``."""
        return self.headers.get(WORKER_HEADER, "")

    @property
    def error_code(self) -> str | None:
        """``rta/errorCode`` of a FAILED final event."""
        code = status_message(self.final).get("metadata", {}).get(k("errorCode"))
        return cast("str | None", code)

    @property
    def failure_text(self) -> str:
        """The text part of the final status message."""
        return "".join(p.get("text", "") for p in status_message(self.final).get("parts", []))

    @property
    def seqs(self) -> list[float | None]:
        """``rta/sequenceId`` of every event after the Task."""
        return [meta(e).get(k("sequenceId")) for e in self.events[1:]]

    @property
    def spoken(self) -> list[str]:
        """Text of the spoken chunks."""
        return [p["text"] for e in self.events if kind(e) == "artifactUpdate"
                for p in e["artifactUpdate"]["artifact"]["parts"]]

    def without_ids(self) -> list[dict[str, Any]]:
        """The frames without their JSON-RPC ids (for replay comparisons)."""
        return [{key: v for key, v in f.items() if key != "id"} for f in self.frames]


def _absorb(turn: Turn, frame: dict[str, Any]) -> None:
    """Add one JSON-RPC frame to a Turn."""
    turn.frames.append(frame)
    if "error" in frame:
        turn.errors.append(frame["error"])
    elif isinstance(frame.get("result"), dict):
        turn.events.append(frame["result"])


# ---------------------------------------------------------------------------- clients


class Client:
    """A client of the Reasoner at ``url`` (``http://HOST:PORT`` or ``https://...``;
    ``tls``: what it trusts and presents, :class:`rtalab.loadtests.common.tls.ClientTls` -- without
    it, httpx's and the standard library's defaults verify certificates)."""

    def __init__(self, url: str, tls: ClientTls | None = None):
        self._url = url
        self.tls = tls

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """httpx's ``verify=``: the TLS settings' context, else httpx's default (verify)."""
        return self.tls.httpx_verify() if self.tls is not None else True

    def http(self) -> httpx.Client:
        """An httpx client for this server (its timeout and TLS settings)."""
        return httpx.Client(timeout=TIMEOUT_S, verify=self.verify)

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        return self._url

    @property
    def ws_url(self) -> str:
        """``ws://127.0.0.1:P/ws`` (``wss://`` for an https server)."""
        return self.url.replace("https://", "wss://").replace("http://", "ws://") + "/ws"

    def sse(self, body: Any, hdrs: dict[str, str] | None = None, *,
            raw: bytes | None = None) -> Turn:
        """POST / and read the whole answer (SSE events or one JSON body)."""
        turn = Turn()
        with self.http() as c, c.stream(
                "POST", self.url + "/", headers=hdrs or headers(),
                content=raw if raw is not None else json.dumps(body).encode()) as r:
            turn.status = r.status_code
            turn.headers = dict(r.headers)
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        _absorb(turn, json.loads(line[5:]))
            else:
                _absorb(turn, json.loads(r.read()))
        return turn

    def ws(self, hdrs: dict[str, str] | None = None) -> WsSession:
        """Open a WebSocket session (auth and negotiation on the upgrade)."""
        h = hdrs if hdrs is not None else headers(sse=False)
        context = self.tls.context_for(self.ws_url) if self.tls is not None else None
        conn = connect(self.ws_url, additional_headers=h, open_timeout=TIMEOUT_S,
                       max_size=8 * 1024 * 1024, ssl=context)
        return WsSession(conn)

    def grpc_address(self) -> str:
        """The ``host:port`` of the GRPC interface the agent card advertises."""
        for iface in self.get_json("/.well-known/agent-card.json")["supportedInterfaces"]:
            if iface["protocolBinding"] == "GRPC":
                return str(iface["url"])
        raise AssertionError("the agent card advertises no GRPC interface")

    def grpc(self, body: dict[str, Any], hdrs: dict[str, str] | None = None,
             credentials: Any = None) -> Turn:
        """One JSON-RPC request sent as its gRPC call (the same params; headers become
        metadata: ``Authorization``, ``A2A-Extensions``, ``A2A-Version``); every answer is
        read back as the JSON-RPC frame the other bindings send (``status``: the HTTP
        equivalent of the gRPC status, ``headers``: the initial metadata)."""
        return grpc_request(self.grpc_address(), body, hdrs if hdrs is not None else
                            headers(), credentials)

    def send(self, binding: str, body: dict[str, Any], hdrs: dict[str, str] | None = None
             ) -> Turn:
        """One request over ``binding`` (``sse``: POST /, ``ws``: a fresh socket, ``grpc``:
        one call on a fresh channel)."""
        if binding == "sse":
            return self.sse(body, hdrs)
        if binding == "grpc":
            return self.grpc(body, hdrs)
        with self.ws(None if hdrs is None else {key: v for key, v in hdrs.items()
                                                 if key != "Accept"}) as s:
            return s.request(body)

    def call(self, method: str, params: Any, token: str | None = ALICE) -> dict[str, Any]:
        """A unary JSON-RPC call over HTTP; the response object."""
        r = httpx.post(self.url + "/", json=rpc(method, params),
                       headers=headers(token, sse=False), timeout=TIMEOUT_S, verify=self.verify)
        return dict(r.json())

    def get_json(self, path: str) -> Any:
        """GET a public JSON path."""
        context = self.tls.context_for(self.url) if self.tls is not None else None
        with urllib.request.urlopen(self.url + path, timeout=TIMEOUT_S, context=context) as r:
            return json.loads(r.read())

    def metrics(self) -> str:
        """The /metrics text."""
        return httpx.get(self.url + "/metrics", timeout=TIMEOUT_S, verify=self.verify).text


GRPC_METHODS = {"SendStreamingMessage": ("SendMessageRequest", True),
                "SendMessage": ("SendMessageRequest", False),
                "GetTask": ("GetTaskRequest", False), "CancelTask": ("CancelTaskRequest", False),
                "SubscribeToTask": ("SubscribeToTaskRequest", True)}
_GRPC_HEADERS = ("authorization", "a2a-extensions", "a2a-version")


def grpc_request(address: str, body: dict[str, Any], hdrs: dict[str, str],
                 credentials: Any = None) -> Turn:
    """:meth:`Client.grpc` on ``address`` (``credentials``: a secure channel)."""
    # lazy: +695 ms (pandas, pyarrow, gevent) off importing rtalab.loadtests.wireclient
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from rtalab.loadtests.live.grpc_channel import HTTP_OF_STATUS, error_frame, error_info

    request_type, streaming = GRPC_METHODS[body["method"]]
    request = ParseDict(body.get("params") or {}, getattr(a2a_pb2, request_type)())
    md = [(key.lower(), v) for key, v in hdrs.items() if key.lower() in _GRPC_HEADERS]
    turn = Turn()
    rid = body.get("id")
    channel = (grpc.secure_channel(address, credentials) if credentials is not None
               else grpc.insecure_channel(address))
    try:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        method = getattr(stub, body["method"])
        try:
            if streaming:
                call = method(request, metadata=md, timeout=TIMEOUT_S)
                for sr in call:
                    _absorb(turn, {"jsonrpc": "2.0", "id": rid, "result": MessageToDict(sr)})
            else:
                result, call = method.with_call(request, metadata=md, timeout=TIMEOUT_S)
                _absorb(turn, {"jsonrpc": "2.0", "id": rid, "result": MessageToDict(result)})
            turn.headers = {key: v for key, v in call.initial_metadata() or ()}
        except grpc.RpcError as e:
            turn.status = HTTP_OF_STATUS.get(e.code().name, 500)
            call_error = cast("grpc.Call", e)  # a blocking call's error is the call too
            turn.headers = {key: v for key, v in call_error.initial_metadata() or ()
                            if isinstance(v, str)}
            frame = error_frame(rid, e, EXT)
            frame["error"]["grpcStatus"] = e.code().name
            frame["error"]["reason"] = error_info(e)[1]
            _absorb(turn, frame)
    finally:
        channel.close()
    return turn


class WsSession:
    """One WebSocket: send frames, read frames routed by id."""

    def __init__(self, conn: ClientConnection):
        self.conn = conn
        self.pending: dict[Any, list[dict[str, Any]]] = {}

    @property
    def response_headers(self) -> dict[str, str]:
        """Headers of the upgrade response."""
        assert self.conn.response is not None
        return {key.lower(): v for key, v in self.conn.response.headers.raw_items()}

    def __enter__(self) -> WsSession:
        """Context manager (the connection's own, as websockets requires)."""
        self.conn.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the socket."""
        self.conn.close()

    def send(self, body: Any, raw: str | bytes | None = None) -> None:
        """Send one frame."""
        self.conn.send(raw if raw is not None else json.dumps(body))

    def recv(self) -> dict[str, Any]:
        """The next frame (any id)."""
        return dict(json.loads(self.conn.recv(timeout=TIMEOUT_S)))

    def until_end(self, rid: Any) -> Turn:
        """Frames of ``rid`` until its stream ends (other ids are kept for later)."""
        turn = Turn(headers=self.response_headers)
        backlog = self.pending.pop(rid, [])
        for frame in backlog:
            _absorb(turn, frame)
            if frame_ends(frame):
                return turn
        while True:
            frame = self.recv()
            if frame.get("id") != rid:
                self.pending.setdefault(frame.get("id"), []).append(frame)
                continue
            _absorb(turn, frame)
            if frame_ends(frame):
                return turn

    def request(self, body: dict[str, Any]) -> Turn:
        """Send one request and read its frames to the end."""
        self.send(body)
        return self.until_end(body.get("id"))
