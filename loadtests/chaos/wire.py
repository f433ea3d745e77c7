"""Just enough of the wire contract for the proxy: request identity, SSE framing, stream ends.

The proxy never needs the extension URI: profile keys are recognised by their
suffix (``.../requestGuid``, ``.../sequenceId``).  Nothing here raises on bad
input; unknown shapes simply carry no identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TERMINAL = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                      "TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED"})
RESULT_KINDS = ("task", "statusUpdate", "artifactUpdate", "message")


# A2A's HTTP+JSON routes that carry a SendMessageRequest body (a tenant may prefix them):
# path suffix -> the method it is (the same names as on JSON-RPC and gRPC)
REST_METHODS = {"/message:stream": "SendStreamingMessage", "/message:send": "SendMessage"}


@dataclass(frozen=True)
class RpcInfo:
    """Identity of one request (empty strings where absent): a JSON-RPC request, or an
    HTTP+JSON ``SendMessageRequest`` (``binding`` ``rest``, no id)."""

    method: str = ""
    rpc_id: Any = None
    request_guid: str = ""
    binding: str = "sse"

    @property
    def key(self) -> str:
        """The key of its random stream: the requestGuid, else the method and id."""
        return self.request_guid or f"{self.method}:{self.rpc_id!r}"


def _suffix(meta: Any, name: str) -> Any:
    """The value of the metadata key ending in ``/name`` (or equal to it)."""
    if not isinstance(meta, dict):
        return None
    for k, v in meta.items():
        if isinstance(k, str) and (k == name or k.endswith("/" + name)):
            return v
    return None


def rest_method(path: str) -> str:
    """The method of an HTTP+JSON path that carries a message (``""`` for any other path)."""
    for suffix, method in REST_METHODS.items():
        if path.endswith(suffix):
            return method
    return ""


def parse_request(body: bytes | str, path: str = "/") -> tuple[Any, RpcInfo]:
    """The decoded JSON (or None) and the RpcInfo of a request body: JSON-RPC on ``/``, a
    ``SendMessageRequest`` on an HTTP+JSON message path (:data:`REST_METHODS`); any other
    path carries no identity (never faulted)."""
    rest = rest_method(path) if path != "/" else ""
    if path != "/" and not rest:
        return None, RpcInfo(binding="rest")
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None, RpcInfo(binding="rest" if rest else "sse")
    if not isinstance(obj, dict):
        return obj, RpcInfo(binding="rest" if rest else "sse")
    if rest:
        msg = obj.get("message")
        guid = _suffix(msg.get("metadata"), "requestGuid") if isinstance(msg, dict) else None
        return obj, RpcInfo(method=rest, request_guid=guid if isinstance(guid, str) else "",
                            binding="rest")
    method = m if isinstance(m := obj.get("method"), str) else ""
    params = obj.get("params")
    msg = params.get("message") if isinstance(params, dict) else None
    guid = _suffix(msg.get("metadata"), "requestGuid") if isinstance(msg, dict) else None
    return obj, RpcInfo(method=method, rpc_id=obj.get("id"),
                        request_guid=guid if isinstance(guid, str) else "")


@dataclass(frozen=True)
class EventInfo:
    """What the proxy needs of one stream frame."""

    rpc_id: Any = None
    sequence_id: float | None = None
    terminal: bool = False


def parse_frame(data: bytes | str) -> EventInfo:
    """Identity, sequenceId and end-of-stream of one JSON-RPC response frame, or of one
    HTTP+JSON stream event (a bare ``StreamResponse`` or google.rpc error object)."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return EventInfo()
    if not isinstance(obj, dict):
        return EventInfo()
    rid = obj.get("id")
    if "error" in obj:
        return EventInfo(rpc_id=rid, terminal=True)
    rest = "result" not in obj and "jsonrpc" not in obj
    result = obj if rest else obj.get("result")
    if not isinstance(result, dict) or len(result) != 1 or next(iter(result)) not in RESULT_KINDS:
        return EventInfo(rpc_id=rid, terminal=True)  # a unary result
    body = next(iter(result.values()))
    if not isinstance(body, dict):
        return EventInfo(rpc_id=rid)
    seq = _suffix(body.get("metadata"), "sequenceId")
    status = body.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    return EventInfo(rpc_id=rid, sequence_id=float(seq) if isinstance(seq, (int, float))
                     and not isinstance(seq, bool) else None, terminal=state in TERMINAL)


def sse_data(event: bytes) -> bytes:
    """The concatenated ``data:`` lines of one raw SSE event."""
    out = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            out.append(line[5:].lstrip(b" "))
    return b"\n".join(out)


class SseSplitter:
    """Cuts a byte stream into whole SSE events (each returned with its blank-line end)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete events contained in the data so far."""
        self.buf += chunk
        events: list[bytes] = []
        while True:
            cut = [i for i in (self.buf.find(b"\n\n"), self.buf.find(b"\r\n\r\n")) if i >= 0]
            if not cut:
                return events
            i = min(cut)
            end = i + (4 if self.buf.startswith(b"\r\n\r\n", i) else 2)
            events.append(self.buf[:end])
            self.buf = self.buf[end:]

    def rest(self) -> bytes:
        """Bytes after the last complete event."""
        return self.buf
