"""A canned A2A stream server for the Live-user benchmark: no reasoning, just bytes.

``python -m rtalab.loadtests.loadrun.canned PORT`` serves, on 127.0.0.1:PORT, the same
turn for every request (but for its taskId, new per request as A2A demands of a new
turn: ``task-N`` replaces the template's in the serialized bytes): Task SUBMITTED, a
``progress`` directive, three spoken chunks and COMPLETED, each with ``rta/sequenceId``
and the request's JSON-RPC ``id``.  HTTP ``POST /`` answers it as an SSE body
(keep-alive, Content-Length) from a raw asyncio protocol, ``POST /message:stream``
(HTTP+JSON) as the bare ``StreamResponse`` objects; ``/ws`` (``websockets``) answers every request
frame with the same events as frames; with a third port, the A2A gRPC binding
(``grpc.aio``) answers every ``SendStreamingMessage`` with the same events as
``StreamResponse`` messages (serialized once), the echo in its initial metadata.  It is
fast enough that one client core, not the server, is the bottleneck.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any

from rtalab.loadtests.live.wire import DEFAULT_EXT_URI

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


TEMPLATE_TASK = "task-0000000000"  # the template's taskId: replaced, same length
EVENTS = turn_events(TEMPLATE_TASK)
_TASKS = itertools.count(1)


def new_task_id() -> bytes:
    """A taskId of the same length as the template's (``task-`` and 10 digits)."""
    return f"task-{next(_TASKS):010d}".encode()


def sse_body(rpc_id: Any) -> bytes:
    """The SSE body of one turn (a new taskId)."""
    body = b"".join(b"data: " + json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": r},
                                           separators=(",", ":")).encode() + b"\n\n"
                    for r in EVENTS)
    return body.replace(TEMPLATE_TASK.encode(), new_task_id())


REST_BODY = b"".join(b"data: " + json.dumps(r, separators=(",", ":")).encode() + b"\n\n"
                     for r in EVENTS)  # HTTP+JSON: the bare StreamResponse objects


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
            if head.split(" ", 2)[1:2] == ["/message:stream"]:
                out = REST_BODY.replace(TEMPLATE_TASK.encode(), new_task_id())
            else:
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
        task = new_task_id().decode()
        for r in EVENTS:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": r},
                                     separators=(",", ":")).replace(TEMPLATE_TASK, task))


async def grpc_server(port: int) -> Any:
    """The canned turn over the A2A gRPC binding on ``port`` (started)."""
    # lazy: +85 ms (grpc, a2a, starlette) off importing canned
    import grpc
    from a2a.types import StreamResponse
    from google.protobuf.json_format import ParseDict

    echo = (("a2a-extensions", DEFAULT_EXT_URI),)
    wire = [ParseDict(r, StreamResponse()).SerializeToString() for r in EVENTS]
    template = TEMPLATE_TASK.encode()

    async def stream(request: Any, context: Any) -> Any:
        await context.send_initial_metadata(echo)
        task = new_task_id()  # same length: the protobuf framing of the template stays valid
        for w in wire:
            yield w.replace(template, task)

    handler = grpc.method_handlers_generic_handler("lf.a2a.v1.A2AService", {
        "SendStreamingMessage": grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=lambda b: b, response_serializer=lambda b: b)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def serve(http_port: int, ws_port: int, grpc_port: int | None = None) -> None:
    """Serve HTTP/SSE on ``http_port``, WebSocket on ``ws_port`` (and gRPC on ``grpc_port``)
    forever."""
    # lazy: +21 ms (websockets) off importing canned
    from websockets.asyncio.server import serve as ws_serve

    loop = asyncio.get_running_loop()
    server = await loop.create_server(HttpProtocol, "127.0.0.1", http_port)
    grpc_srv = await grpc_server(grpc_port) if grpc_port else None  # noqa: F841 (kept alive)

    def with_echo(connection: Any, request: Any, response: Any) -> Any:
        response.headers["A2A-Extensions"] = DEFAULT_EXT_URI
        return response

    async with server, ws_serve(ws_handler, "127.0.0.1", ws_port, compression=None,
                                process_response=with_echo):
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(serve(*(int(a) for a in sys.argv[1:4])))
