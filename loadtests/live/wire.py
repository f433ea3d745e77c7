"""Requests the Live users send and what they read from each stream event (PROTOCOL.md).

Pure functions on plain JSON data: no I/O, no gevent.  An event is one JSON-RPC
response object (an SSE ``data:`` line or a WebSocket frame).  What the
contract leaves open is read tolerantly: ``sequenceId`` may start at 0 or 1
and be an int or a float; directive payloads and artifact names are not
interpreted.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final, NamedTuple

DEFAULT_EXT_URI: Final = "https://schemas.salesforce.com/a2a/ext/realtime-agent/v0.1"
STREAM_END_STATES: Final = frozenset({
    "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
    "TASK_STATE_INPUT_REQUIRED",
})
_ENCODE: Final = json.JSONEncoder(separators=(",", ":")).encode  # built once, not per request
KINDS: Final = ("task", "statusUpdate", "artifactUpdate", "message")
SHORT_KIND: Final = {"task": "task", "statusUpdate": "status", "artifactUpdate": "artifact",
                     "message": "message"}


def headers(ext_uri: str, token: str | None, active: bool, sse: bool = True,
            version: bool = True) -> dict[str, str]:
    """HTTP (or upgrade) headers; ``active`` asks for the profile with ``A2A-Extensions``
    (``version=False`` leaves out ``A2A-Version``: a negative test's request)."""
    h = {"Content-Type": "application/json"}
    if version:
        h["A2A-Version"] = "1.0"
    if sse:
        h["Accept"] = "text/event-stream"
    if active:
        h["A2A-Extensions"] = ext_uri
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


class Ids(NamedTuple):
    """The identifiers of one request (attempt); a tuple: immutable and cheap to make."""

    message_id: str
    request_guid: str
    turn_id: str
    interaction_id: str
    context_id: str | None
    task_id: str | None


def streaming_request(rpc_id: str, ids: Ids, ext_uri: str, active: bool, *, text: str,
                      side_effect: bool, handoff: bool,
                      extra_meta: dict[str, Any] | None = None) -> bytes:
    """The ``SendStreamingMessage`` JSON-RPC request body (UTF-8 JSON).

    Byte for byte what ``_ENCODE`` makes of the request object (keys in this order,
    ASCII-escaped strings), assembled from pre-encoded parts: every attempt sends one,
    and building the nested dicts for the generic encoder cost more than the rest of
    the request's client work.
    """
    if extra_meta:  # forced-error test runs: the generic encoder (keys may collide)
        return _request_object(rpc_id, ids, ext_uri, active, text, side_effect, handoff,
                               extra_meta)
    parts = _request_parts(ext_uri)
    out = [parts[0], _json(rpc_id), parts[1], _json(ids.message_id), parts[2], _json(text),
           "}]"]
    if ids.context_id:
        out += (parts[3], _json(ids.context_id))
    if ids.task_id:
        out += (parts[4], _json(ids.task_id))
    if active:
        out += (parts[5], _json(ids.turn_id), parts[6], _json(ids.request_guid), parts[7],
                _json(ids.interaction_id), parts[8], "true" if side_effect else "false",
                parts[9], "true" if handoff else "false", "}")
    out.append("}}}")
    return "".join(out).encode()


def _request_object(rpc_id: str, ids: Ids, ext_uri: str, active: bool, text: str,
                    side_effect: bool, handoff: bool,
                    extra_meta: dict[str, Any] | None) -> bytes:
    """:func:`streaming_request` through the generic encoder (the reference it must match)."""
    msg: dict[str, Any] = {"messageId": ids.message_id, "role": "ROLE_USER",
                           "parts": [{"text": text}]}
    if ids.context_id:
        msg["contextId"] = ids.context_id
    if ids.task_id:
        msg["taskId"] = ids.task_id
    if active:
        p = ext_uri + "/"
        meta = {p + "turnId": ids.turn_id, p + "requestGuid": ids.request_guid,
                p + "interactionId": ids.interaction_id, p + "sideEffect": side_effect,
                p + "handoff": handoff}
        for k, v in (extra_meta or {}).items():
            meta[p + k] = v
        msg["metadata"] = meta
    return _ENCODE({"jsonrpc": "2.0", "id": rpc_id, "method": "SendStreamingMessage",
                    "params": {"message": msg}}).encode()


def _json(v: Any) -> str:
    """One JSON value as ``_ENCODE`` writes it (a string through the C escaper)."""
    return _ESCAPE(v) if type(v) is str else _ENCODE(v)


_ESCAPE: Final = json.encoder.encode_basestring_ascii
_PARTS: dict[str, tuple[str, ...]] = {}


def _request_parts(ext_uri: str) -> tuple[str, ...]:
    """The constant pieces of a request body under ``ext_uri`` (built once per URI)."""
    parts = _PARTS.get(ext_uri)
    if parts is None:
        p = ext_uri + "/"
        parts = _PARTS[ext_uri] = (
            '{"jsonrpc":"2.0","id":', ',"method":"SendStreamingMessage","params":{"message":'
            '{"messageId":', ',"role":"ROLE_USER","parts":[{"text":', ',"contextId":',
            ',"taskId":', ',"metadata":{' + _ESCAPE(p + "turnId") + ":",
            "," + _ESCAPE(p + "requestGuid") + ":", "," + _ESCAPE(p + "interactionId") + ":",
            "," + _ESCAPE(p + "sideEffect") + ":", "," + _ESCAPE(p + "handoff") + ":")
    return parts


def cancel_request(rpc_id: str, task_id: str) -> bytes:
    """The ``CancelTask`` JSON-RPC request body."""
    return _ENCODE({"jsonrpc": "2.0", "id": rpc_id, "method": "CancelTask",
                    "params": {"id": task_id}}).encode()


class Event:
    """What the Live layer reads from one stream event.

    ``ends_stream`` (a terminal state, INPUT_REQUIRED, or a JSON-RPC error ends this
    request's stream) and ``is_output`` (counts as the turn's first response, errors.md §5:
    a directive, chunk or end state) are worked out once, when it is made: the read loop
    asks both of every event.
    """

    __slots__ = ("context_id", "directive", "ends_stream", "error_code", "is_output", "kind",
                 "retry_after_ms", "sequence_id", "side_effect", "state", "task_id", "timing")

    def __init__(self, kind: str, state: str | None = None, sequence_id: float | None = None,
                 task_id: str | None = None, context_id: str | None = None,
                 error_code: str | None = None, retry_after_ms: float | None = None,
                 directive: bool = False) -> None:
        self.kind = kind  # task | status | artifact | message | error
        self.state = state
        self.sequence_id = sequence_id
        self.task_id = task_id
        self.context_id = context_id
        self.error_code = error_code
        self.retry_after_ms = retry_after_ms
        self.directive = directive
        self.side_effect: str | None = None  # rta/sideEffect of an end state (docs/reasoner.md)
        self.ends_stream = ends = kind == "error" or state in STREAM_END_STATES
        self.is_output = ends or directive or kind == "artifact"
        self.timing: dict[str, float] | None = None  # server timings of a stream's end event

    def __repr__(self) -> str:
        return "Event(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in _EVENT_FIELDS) + ")"

    def __eq__(self, other: object) -> bool:
        return type(other) is Event and all(
            getattr(self, k) == getattr(other, k) for k in _EVENT_FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value


_EVENT_FIELDS: Final = ("kind", "state", "sequence_id", "task_id", "context_id", "error_code",
                        "retry_after_ms", "directive", "side_effect")
# end states whose status message may say what became of the side effect (rta/sideEffect)
_SIDE_EFFECT_STATES: Final = frozenset({"TASK_STATE_CANCELED", "TASK_STATE_FAILED",
                                        "TASK_STATE_COMPLETED"})


def reported_side_effect(status: Any, ext_uri: str) -> str | None:
    """``rta/sideEffect`` of a status (``rolled-forward``: the side effect ran; ``unknown``: it
    may have run), or None."""
    if not isinstance(status, dict):
        return None
    msg = status.get("message")
    meta = msg.get("metadata") if isinstance(msg, dict) else None
    value = meta.get(ext_uri + "/sideEffect") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def cancel_answer_side_effect(frame: Any, ext_uri: str) -> str | None:
    """``rta/sideEffect`` of a ``CancelTask`` answer (the Task), or None."""
    result = frame.get("result") if isinstance(frame, dict) else None
    return reported_side_effect(result.get("status"), ext_uri) if isinstance(result, dict) \
        else None


def decode_frame(text: str) -> Any:
    """One event's JSON text as Python data: ``json.loads`` without its two whitespace
    regex matches in the common case (the C scanner reads the whole text); anything
    else (surrounding whitespace, invalid JSON) goes through the full decoder, which
    raises what ``json.loads`` raises."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODE(text)
    if end != len(text):
        return _DECODE(text)
    return value


_DECODER: Final = json.JSONDecoder()
_DECODE: Final = _DECODER.decode
_SCAN: Final = _DECODER.scan_once  # type: ignore[attr-defined]  # the C scanner (clears its memo after every call); set in __init__, not in typeshed
JSON_SCAN: Final = _SCAN  # (text, index) -> (value, end); StopIteration: no value at index


def _num(v: Any) -> float | None:
    """A JSON number as float (ints and floats alike), else None."""
    if type(v) is float:  # the common case (protobuf Struct numbers), first
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


# The Reasoner's per-turn timings (docs/reasoner.md "Per-turn timings"): metadata key name
# (milliseconds, under the extension URI) -> ledger column (seconds).  A server that does not
# send them leaves the columns empty.
TIMING_COLUMNS: Final = (("serverIntakeMs", "server_intake_s"),
                         ("serverQueueWaitMs", "server_queue_wait_s"),
                         ("serverServiceMs", "server_service_s"),
                         ("serverFirstChunkDelayMs", "server_first_chunk_delay_s"))


_TIMING_KEYS: dict[str, tuple[tuple[str, str], ...]] = {}


def read_timing(meta: dict[str, Any], ext_uri: str) -> dict[str, float] | None:
    """The timing columns present in a stream-end event's metadata (None if none is)."""
    keys = _TIMING_KEYS.get(ext_uri)
    if keys is None:  # the metadata keys under this URI, built once (not per event)
        keys = _TIMING_KEYS[ext_uri] = tuple((f"{ext_uri}/{k}", c) for k, c in TIMING_COLUMNS)
    out = None
    for key, column in keys:
        v = meta.get(key)
        if v is None:  # not sent (the common case of a server without timings)
            continue
        v = _num(v)
        if v is not None and v >= 0.0:
            if out is None:
                out = {}
            out[column] = v / 1000.0
    return out


_JSONRPC_ERROR_CODES: Final = {-32040: "auth", -32602: "schema-validation",
                               -32600: "schema-validation", -32700: "schema-validation"}


# HTTP statuses of a refused request (or WebSocket upgrade) and the profile's code each maps to
# when its body carries none (errors.md §2; rate-limited covers size bounds: 413)
HTTP_STATUS_CODES: Final = {400: "schema-validation", 401: "auth", 403: "auth",
                            404: "session-not-found", 408: "upstream-timeout",
                            413: "rate-limited", 429: "rate-limited", 504: "upstream-timeout"}


def code_of_http_status(status: int) -> str:
    """The profile's code for a non-2xx HTTP status (5xx not listed: ``internal``)."""
    return HTTP_STATUS_CODES.get(status) or ("internal" if status >= 500 else "schema-validation")


def _retry_after_ms(headers: Any) -> float | None:
    """``Retry-After`` (seconds) of an HTTP answer in milliseconds, or None."""
    try:
        v = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        return None
    try:
        return max(0.0, float(v)) * 1000.0 if v is not None else None
    except (TypeError, ValueError):
        return None


ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"


def error_info_metadata(err: Any) -> dict[str, Any]:
    """The ``metadata`` of the ``google.rpc.ErrorInfo`` details of a google.rpc-style error
    object (A2A's HTTP+JSON and gRPC error form: ``{"code", "status", "message",
    "details": [{"@type": ".../google.rpc.ErrorInfo", "reason", "domain", "metadata"}]}``),
    merged; empty when it has none."""
    out: dict[str, Any] = {}
    details = err.get("details") if isinstance(err, dict) else None
    for d in details if isinstance(details, list) else ():
        if isinstance(d, dict) and d.get("@type") == ERROR_INFO_TYPE and isinstance(
                d.get("metadata"), dict):
            out.update(d["metadata"])
    return out


def _meta_num(v: Any) -> float | None:
    """A metadata number: JSON numbers, or the strings of google.rpc's string map."""
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return _num(v)


def http_error_frame(status: int, body: bytes | str | dict[str, Any] | None, headers: Any,
                     ext_uri: str) -> dict[str, Any]:
    """A refused request (non-2xx answer or refused WebSocket upgrade) as one JSON-RPC error
    frame: the body's own profile code when it carries one (JSON-RPC ``error.data``, a
    FAILED status, or the ``google.rpc.ErrorInfo`` metadata of an HTTP+JSON error under the
    extension's key or plain ``errorCode``), else the code of its HTTP status
    (:data:`HTTP_STATUS_CODES`); ``Retry-After`` (or the body's ``retryAfterMs``) becomes
    ``retryAfterMs``.  The body text is kept in ``error.message``.  ``body`` may be the
    already parsed object (an HTTP+JSON stream's error event)."""
    _, _, code_key, retry_key = _KEYS.get(ext_uri) or _keys(ext_uri)
    code = None
    retry_ms = _retry_after_ms(headers)
    if isinstance(body, dict):
        data: Any = body
        err0 = body.get("error")
        text = str(err0.get("message", "")) if isinstance(err0, dict) else ""
    else:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
        try:
            data = json.loads(text) if text.strip() else None
        except ValueError:
            data = None
    if isinstance(data, dict):
        ev = parse_event(data, ext_uri)
        err = data.get("error")
        own = err.get("data") if isinstance(err, dict) else None
        info = error_info_metadata(err)
        if isinstance(own, dict) and isinstance(own.get(code_key), str):
            code = own[code_key]
        elif ev.kind == "status" and ev.state == "TASK_STATE_FAILED":
            code = ev.error_code
        elif isinstance(info.get(code_key) or info.get("errorCode"), str):
            code = info.get(code_key) or info.get("errorCode")
        rest_retry = _meta_num(info.get(retry_key, info.get("retryAfterMs")))
        if ev.retry_after_ms is not None:
            retry_ms = ev.retry_after_ms
        elif rest_retry is not None and rest_retry >= 0:
            retry_ms = rest_retry
    code = code or code_of_http_status(status)
    meta: dict[str, Any] = {code_key: code}
    if retry_ms is not None:
        meta[retry_key] = retry_ms
    return {"jsonrpc": "2.0", "id": None,
            "error": {"code": status, "message": f"HTTP {status}: {text[:200]}", "data": meta}}


_KEYS: dict[str, tuple[str, str, str, str]] = {}


def event_keys(ext_uri: str) -> tuple[str, str, str, str]:
    """The profile's metadata keys under ``ext_uri``: ``sequenceId``, ``eventType``,
    ``errorCode``, ``retryAfterMs`` (:func:`scan_event`'s)."""
    return _KEYS.get(ext_uri) or _keys(ext_uri)


def _keys(ext_uri: str) -> tuple[str, str, str, str]:
    """The profile's metadata keys under ``ext_uri`` (built once per URI, not per event)."""
    keys = _KEYS.get(ext_uri)
    if keys is None:
        p = ext_uri + "/"
        keys = _KEYS[ext_uri] = (p + "sequenceId", p + "eventType", p + "errorCode",
                                 p + "retryAfterMs")
    return keys




def parse_event(frame: dict[str, Any], ext_uri: str) -> Event:
    """The :class:`Event` of one JSON-RPC response object."""
    if "error" in frame:
        return _error_event(frame, ext_uri)
    result = frame.get("result")
    if not isinstance(result, dict) or len(result) != 1:
        return Event("message")
    [(name, body)] = result.items()
    kind = SHORT_KIND.get(name, "message")
    if not isinstance(body, dict):
        return Event(kind)
    keys = _KEYS.get(ext_uri) or _keys(ext_uri)
    meta = body.get("metadata")
    seq, directive = None, False
    if isinstance(meta, dict):
        seq = meta.get(keys[0])
        if type(seq) is not float:
            seq = _num(seq)
        directive = meta.get(keys[1]) == "directive"
    status = body.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    ev = Event(kind, state, seq, body.get("id" if kind == "task" else "taskId"),
               body.get("contextId"), None, None, directive)
    if state is None:  # no end state, nothing more to read (the common case)
        return ev
    return _with_state(ev, status, meta, keys, ext_uri)  # type: ignore[arg-type]  # a dict: it has a state


def _with_state(ev: Event, status: dict[str, Any], meta: Any, keys: tuple[str, str, str, str],
                ext_uri: str) -> Event:
    """What :func:`parse_event` reads of an event with a state (``ev``, made from the same
    ``status`` and ``meta``): the side effect an end state reports, the end event's
    timings, a FAILED state's code and Retry-After."""
    state = ev.state
    if state in _SIDE_EFFECT_STATES and "message" in status:
        ev.side_effect = reported_side_effect(status, ext_uri)
    if ev.ends_stream and isinstance(meta, dict):
        ev.timing = read_timing(meta, ext_uri)
    if state == "TASK_STATE_FAILED":
        smsg = status.get("message") or {}
        smeta = smsg.get("metadata") or {}
        code = smeta.get(keys[2])
        if code is None:  # degraded mode: "<code>: text" (docs/reasoner.md)
            for part in smsg.get("parts") or []:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and ": " in text:
                    code = text.split(": ", 1)[0]
                    break
        ev.error_code = code if isinstance(code, str) else "internal"
        ev.retry_after_ms = _num(smeta.get(keys[3]))
    return ev


# what the read loop asks of every event (:func:`scan_event`): kind, state, sequenceId,
# taskId, contextId, is_output, and the whole Event of one that ends the stream (else None)
EventCells = tuple[str, str | None, float | None, str | None, str | None, bool, Event | None]


def scan_event(frame: dict[str, Any], keys: tuple[str, str, str, str],
               ext_uri: str) -> EventCells:
    """The cells of :func:`parse_event`'s :class:`Event` that the read loop asks of every event
    (:data:`EventCells`), the Event itself made only for the event that ends the stream: the
    common shape (a ``result`` of one StreamResponse whose body, metadata and status are
    plain dicts) read inline, any other through :func:`parse_event`.  ``keys``: the
    profile's metadata keys under ``ext_uri`` (:func:`event_keys`, looked up once)."""
    result = frame.get("result")
    if type(result) is dict and len(result) == 1 and "error" not in frame:
        for name in result:
            body = result[name]
        if type(body) is dict:
            meta = body.get("metadata")
            status = body.get("status")
            if (meta is None or type(meta) is dict) and (status is None or type(status) is dict):
                kind = SHORT_KIND.get(name, "message")
                seq = None
                directive = False
                if meta is not None:
                    seq = meta.get(keys[0])
                    if type(seq) is not float:
                        seq = _num(seq)
                    directive = meta.get(keys[1]) == "directive"
                state = None if status is None else status.get("state")
                task_id = body.get("id" if kind == "task" else "taskId")
                ctx = body.get("contextId")
                if state not in STREAM_END_STATES:
                    return kind, state, seq, task_id, ctx, directive or kind == "artifact", None
                return kind, state, seq, task_id, ctx, True, _with_state(
                    Event(kind, state, seq, task_id, ctx, None, None, directive),
                    status, meta, keys, ext_uri)  # type: ignore[arg-type]  # a dict: it has a state
    ev = parse_event(frame, ext_uri)
    return (ev.kind, ev.state, ev.sequence_id, ev.task_id, ev.context_id, ev.is_output,
            ev if ev.ends_stream else None)


def _error_event(frame: dict[str, Any], ext_uri: str) -> Event:
    """:func:`parse_event` of a JSON-RPC error object."""
    _, _, code_key, retry_key = _KEYS.get(ext_uri) or _keys(ext_uri)
    err = frame.get("error") or {}
    code = None
    data = err.get("data") if isinstance(err, dict) else None
    if isinstance(data, dict):
        code = data.get(code_key)
    if code is None and isinstance(err, dict):
        code = _JSONRPC_ERROR_CODES.get(err.get("code"))  # type: ignore[arg-type]  # a missing or unknown code gives None
    ev = Event("error", error_code=code or "internal")
    if isinstance(data, dict) and retry_key in data:
        ev.retry_after_ms = _num(data.get(retry_key))
    return ev


def rest_frame(obj: Any, ext_uri: str) -> dict[str, Any]:
    """One event of an HTTP+JSON stream (a ``StreamResponse`` object, or an ``error`` event's
    google.rpc error object) as the JSON-RPC response object every binding hands over
    (:func:`parse_event` reads it): ``{"result": <StreamResponse>}`` or one error frame
    carrying the profile's code (:func:`http_error_frame`)."""
    if type(obj) is dict and "error" in obj:
        err = obj.get("error")
        status = err.get("code") if isinstance(err, dict) else None
        if isinstance(status, bool) or not isinstance(status, int):
            status = 500
        return http_error_frame(status, obj, None, ext_uri)
    return {"result": obj}
