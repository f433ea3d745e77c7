"""Requests the Live users send and what they read from each stream event (PROTOCOL.md).

Pure functions on plain JSON data: no I/O, no gevent.  An event is one JSON-RPC
response object (an SSE ``data:`` line or a WebSocket frame).  What the
contract leaves open is read tolerantly: ``sequenceId`` may start at 0 or 1
and be an int or a float; directive payloads and artifact names are not
interpreted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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


def headers(ext_uri: str, token: str | None, active: bool, sse: bool = True) -> dict[str, str]:
    """HTTP (or upgrade) headers; ``active`` asks for the profile with ``A2A-Extensions``."""
    h = {"Content-Type": "application/json", "A2A-Version": "1.0"}
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
    """The ``SendStreamingMessage`` JSON-RPC request body (UTF-8 JSON)."""
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


def cancel_request(rpc_id: str, task_id: str) -> bytes:
    """The ``CancelTask`` JSON-RPC request body."""
    return _ENCODE({"jsonrpc": "2.0", "id": rpc_id, "method": "CancelTask",
                    "params": {"id": task_id}}).encode()


@dataclass(slots=True)
class Event:
    """What the Live layer reads from one stream event."""

    kind: str  # task | status | artifact | message | error
    state: str | None = None
    sequence_id: float | None = None
    task_id: str | None = None
    context_id: str | None = None
    error_code: str | None = None
    retry_after_ms: float | None = None
    directive: bool = False

    @property
    def ends_stream(self) -> bool:
        """A terminal state, INPUT_REQUIRED, or a JSON-RPC error ends this request's stream."""
        return self.kind == "error" or self.state in STREAM_END_STATES

    @property
    def is_output(self) -> bool:
        """Counts as the turn's first response (errors.md §5): a directive, chunk or end state."""
        return self.kind == "artifact" or self.directive or self.ends_stream


def _num(v: Any) -> float | None:
    """A JSON number as float (ints and floats alike), else None."""
    if type(v) is float:  # the common case (protobuf Struct numbers), first
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


_JSONRPC_ERROR_CODES: Final = {-32040: "auth", -32602: "schema-validation",
                               -32600: "schema-validation", -32700: "schema-validation"}


_KEYS: dict[str, tuple[str, str, str, str]] = {}


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
    seq_key, type_key, code_key, retry_key = _KEYS.get(ext_uri) or _keys(ext_uri)
    if "error" in frame:
        err = frame.get("error") or {}
        code = None
        data = err.get("data") if isinstance(err, dict) else None
        if isinstance(data, dict):
            code = data.get(code_key)
        if code is None and isinstance(err, dict):
            code = _JSONRPC_ERROR_CODES.get(err.get("code"))  # type: ignore[arg-type]
        return Event("error", error_code=code or "internal")
    result = frame.get("result")
    if not isinstance(result, dict) or len(result) != 1:
        return Event("message")
    [(name, body)] = result.items()
    kind = SHORT_KIND.get(name, "message")
    if not isinstance(body, dict):
        return Event(kind)
    meta = body.get("metadata")
    seq, directive = None, False
    if isinstance(meta, dict):
        seq = _num(meta.get(seq_key))
        directive = meta.get(type_key) == "directive"
    status = body.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    ev = Event(kind, state, seq, body.get("id" if name == "task" else "taskId"),
               body.get("contextId"), None, None, directive)
    if state == "TASK_STATE_FAILED":
        smsg = status.get("message") or {}
        smeta = smsg.get("metadata") or {}
        code = smeta.get(code_key)
        if code is None:  # degraded mode: "<code>: text" (docs/reasoner.md)
            for part in smsg.get("parts") or []:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and ": " in text:
                    code = text.split(": ", 1)[0]
                    break
        ev.error_code = code if isinstance(code, str) else "internal"
        ev.retry_after_ms = _num(smeta.get(retry_key))
    return ev
