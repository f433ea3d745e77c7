"""A canned A2A stream server for the Live-user benchmark: no reasoning, just bytes.

``python -m loadtests.loadrun.canned PORT`` serves, on 127.0.0.1:PORT, the same
turn for every request: Task SUBMITTED, a ``progress`` directive, three spoken
chunks and COMPLETED, each with ``rta/sequenceId`` and the request's JSON-RPC
``id``.  HTTP ``POST /`` answers it as an SSE body (keep-alive, Content-Length)
from a raw asyncio protocol; ``/ws`` (``websockets``) answers every request
frame with the same events as frames.  It is fast enough that one client core,
not the server, is the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from loadtests.live.wire import DEFAULT_EXT_URI

P = DEFAULT_EXT_URI + "/"


def turn_events(task: str = "task-1", ctx: str = "ctx-1") -> list[dict[str, Any]]:
    """The ``result`` payloads of one canned turn."""
    def status(state: str, seq: int, directive: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {P + "sequenceId": float(seq)}
        if directive:
            meta[P + "eventType"] = "directive"
        return {"statusUpdate": {"taskId": task, "contextId": ctx, "metadata": meta,
                                 "status": {"state": state}}}

    chunks = [{"artifactUpdate": {"taskId": task, "contextId": ctx,
                                  "metadata": {P + "sequenceId": float(i + 1)},
                                  "artifact": {"artifactId": f"{task}-spoken", "parts": [
                                      {"text": f"chunk {i} of the answer"}]}}} for i in range(3)]
    return [{"task": {"id": task, "contextId": ctx, "status": {"state": "TASK_STATE_SUBMITTED"}}},
            status("TASK_STATE_WORKING", 0, directive=True), *chunks,
            status("TASK_STATE_COMPLETED", 4)]


EVENTS = turn_events()


def sse_body(rpc_id: Any) -> bytes:
    """The SSE body of one turn."""
    return b"".join(b"data: " + json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": r},
                                           separators=(",", ":")).encode() + b"\n\n"
                    for r in EVENTS)


class HttpProtocol(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive: every POST gets the canned SSE turn."""

    def connection_made(self, transport: Any) -> None:
        self.t = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n"):
                if line.startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            body, self.buf = self.buf[head_end + 4:end], self.buf[end:]
            try:
                rpc_id = json.loads(body).get("id")
            except ValueError:
                rpc_id = None
            out = sse_body(rpc_id)
            self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"A2A-Extensions: " + DEFAULT_EXT_URI.encode() +
                         b"\r\nContent-Length: " + str(len(out)).encode() + b"\r\n\r\n" + out)


async def ws_handler(ws: Any) -> None:
    """Answer every request frame with the canned turn's frames."""
    async for msg in ws:
        rpc_id = json.loads(msg).get("id")
        for r in EVENTS:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": r},
                                     separators=(",", ":")))


async def serve(http_port: int, ws_port: int) -> None:
    """Serve HTTP/SSE on ``http_port`` and WebSocket on ``ws_port`` forever."""
    from websockets.asyncio.server import serve as ws_serve

    loop = asyncio.get_running_loop()
    server = await loop.create_server(HttpProtocol, "127.0.0.1", http_port)

    def with_echo(connection: Any, request: Any, response: Any) -> Any:
        response.headers["A2A-Extensions"] = DEFAULT_EXT_URI
        return response

    async with server, ws_serve(ws_handler, "127.0.0.1", ws_port, compression=None,
                                process_response=with_echo):
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2])))
