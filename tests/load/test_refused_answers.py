"""Every answer read as sent (issue 15 point 4): non-2xx answers and refused WebSocket
upgrades are read with their bodies and mapped to the profile's codes.

A real HTTP server and a real WebSocket server on 127.0.0.1 answer the i-th request (or
upgrade) with case i; the Live user's bindings (Locust's FastHttpSession for SSE,
``websockets`` for WebSocket) run in a subprocess, as under ``rtalab load run``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from rtalab.loadtests.live.wire import (
    DEFAULT_EXT_URI,
    code_of_http_status,
    http_error_frame,
    parse_event,
)

P = DEFAULT_EXT_URI + "/"

# (status, extra headers, body) -> (code, retryAfterMs); the bodies decide where they carry
# a profile code (403 and 503 below: a code the status alone would never give)
CASES = [
    (401, {}, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32040, "message": "Unauthorized", "data": {P + "errorCode": "auth"}}}),
     ("auth", None)),
    (403, {}, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32000, "message": "no", "data": {P + "errorCode": "extension-inactive"}}}),
     ("extension-inactive", None)),
    (404, {}, "", ("session-not-found", None)),
    (413, {}, "too big", ("rate-limited", None)),
    (429, {"Retry-After": "2"}, "{}", ("rate-limited", 2000.0)),
    (503, {}, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32000, "message": "busy", "data": {P + "errorCode": "upstream-timeout",
                                                    P + "retryAfterMs": 1500}}}),
     ("upstream-timeout", 1500.0)),
    (500, {}, "<html>oops</html>", ("internal", None)),
]


def test_status_to_code_table() -> None:
    assert [code_of_http_status(s) for s in (400, 401, 403, 404, 408, 413, 429, 500, 502, 504)] \
        == ["schema-validation", "auth", "auth", "session-not-found", "upstream-timeout",
            "rate-limited", "rate-limited", "internal", "internal", "upstream-timeout"]


@pytest.mark.parametrize(("status", "hdrs", "body", "want"), CASES)
def test_error_frame_takes_the_bodys_code_else_the_statuss(status, hdrs, body, want) -> None:
    frame = http_error_frame(status, body.encode(), hdrs, DEFAULT_EXT_URI)
    ev = parse_event(frame, DEFAULT_EXT_URI)
    assert ev.kind == "error" and ev.ends_stream
    assert (ev.error_code, ev.retry_after_ms) == want
    assert frame["error"]["message"].startswith(f"HTTP {status}: ")


class _Servers:
    """An HTTP and a WebSocket server answering request (upgrade) i with CASES[i]."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.http_port = self.ws_port = 0
        self.http_n = self.ws_n = 0

    def _response(self, n: int) -> bytes:
        status, hdrs, body, _ = CASES[n % len(CASES)]
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body.encode())}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
        return (head + "Content-Type: application/json\r\n\r\n").encode() + body.encode()

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            writer.write(self._response(self.http_n))
            self.http_n += 1
            await writer.drain()

    async def _main(self) -> None:
        from websockets.asyncio.server import serve
        from websockets.datastructures import Headers
        from websockets.http11 import Response

        def refuse(connection, request):
            status, hdrs, body, _ = CASES[self.ws_n % len(CASES)]
            self.ws_n += 1
            return Response(status, "X", Headers(hdrs), body.encode())

        server = await asyncio.start_server(self._http, "127.0.0.1", 0)
        self.http_port = server.sockets[0].getsockname()[1]
        async with serve(lambda ws: ws.close(), "127.0.0.1", 0, process_request=refuse) as ws:
            self.ws_port = ws.sockets[0].getsockname()[1] if hasattr(ws, "sockets") else \
                next(iter(ws.server.sockets)).getsockname()[1]
            self.stop = asyncio.Event()
            self.ready.set()
            await self.stop.wait()
        server.close()
        await server.wait_closed()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())
        self.loop.close()


@pytest.fixture
def servers() -> Iterator[_Servers]:
    s = _Servers()
    t = threading.Thread(target=s.run, daemon=True)
    t.start()
    assert s.ready.wait(10)
    yield s
    s.loop.call_soon_threadsafe(s.stop.set)
    t.join(5)


CLIENT = """
import json, sys
from locust.env import Environment
from locust.contrib.fasthttp import FastHttpSession
from rtalab.loadtests.live.sse import SseChannel
from rtalab.loadtests.live.ws import WsChannel
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI, parse_event
http_port, ws_port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
env = Environment()
out = []
sse = SseChannel(FastHttpSession(f"http://127.0.0.1:{http_port}", env.events.request, None),
                 DEFAULT_EXT_URI, "tok")
ws = WsChannel(f"http://127.0.0.1:{ws_port}", DEFAULT_EXT_URI, "tok", env.events)
for binding, ch in (("sse", sse), ("ws", ws)):
    for i in range(n):
        ex = ch.send(f"r-{i}", b'{"jsonrpc":"2.0","id":"r-%d","method":"x"}' % i, True)
        ev = parse_event(ex.next_frame(), DEFAULT_EXT_URI)
        end = ex.next_frame()
        ex.close("refused")
        out.append([binding, ex.http_status, ev.error_code, ev.retry_after_ms, end])
print(json.dumps(out))
"""


def test_both_bindings_read_refusals_with_their_bodies(servers: _Servers) -> None:
    p = subprocess.run([sys.executable, "-c", CLIENT, str(servers.http_port),
                        str(servers.ws_port), str(len(CASES))], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    want = [[b, status, *codes, None] for b in ("sse", "ws") for status, _, _, codes in CASES]
    assert got == want
