"""Bounded, well-formed request bodies: hostile bodies get a stable 4xx, never a 5xx or a reset.

:class:`BodyLimit` (outermost, before authentication reads anything) bounds the
body of EVERY request, whatever its method (a GET, DELETE, HEAD or OPTIONS may
carry a body too).  The whole body is read (it is small: the bound is a few
hundred KiB) and replayed to the application.  Beyond ``limit`` the rest is
drained up to ``drain_limit`` so the client can read the answer (then the
connection is closed); the answer is a JSON-RPC ``-32600`` (HTTP 200, as the
SDK answers a 413) on ``POST /`` and HTTP 413 with the REST error shape elsewhere.

:class:`RestBodyCheck` (inside authentication) refuses a REST body that is not
strict JSON (:mod:`rtalab.loadtests.reasoner.jsontext`: invalid UTF-8, nesting too deep,
unpaired surrogates) with HTTP 400 ``INVALID_ARGUMENT`` before the SDK's
protobuf JSON parser sees it (that parser raises non-``ParseError`` exceptions
on such input, which the SDK answers with a 500).  ``POST /`` (JSON-RPC) does
its own strict decoding (:func:`rtalab.loadtests.reasoner.jsonrpc.decode_request`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rtalab.loadtests.reasoner import metrics
from rtalab.loadtests.reasoner.jsontext import BadJson, load_strict

JSONRPC_PATH = "/"


def _payload(method: str, path: str, limit: int) -> tuple[int, dict[str, Any]]:
    """Status and body of the too-large answer for ``method path``."""
    text = f"Payload too large (limit {limit} bytes)"
    if path == JSONRPC_PATH and method == "POST":
        return 200, {"jsonrpc": "2.0", "id": None,
                     "error": {"code": -32600, "message": text}}
    return 413, {"error": {"code": 413, "status": "INVALID_ARGUMENT", "message": text}}


class BodyLimit:
    """ASGI middleware buffering HTTP request bodies up to ``limit`` bytes."""

    def __init__(self, app: ASGIApp, limit: int, drain_limit: int = 16 * 1024 * 1024):
        self.app = app
        self.limit = limit
        self.drain_limit = drain_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer the body, or answer the too-large error."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        disconnected = False
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                disconnected = True
                break
            body = msg.get("body", b"")
            size += len(body)
            if size <= self.limit:
                chunks.append(body)
            if not msg.get("more_body", False) or size > self.drain_limit:
                break
        if disconnected:
            return
        if size > self.limit:
            status, payload = _payload(scope["method"], scope["path"], self.limit)
            rpc = status == 200  # JSON-RPC's own answer; REST paths get 413
            metrics.BAD_REQUESTS.labels("http" if rpc else "rest", "-32600" if rpc else "413").inc()
            await _answer(send, status, payload, close=size > self.drain_limit)
            return
        whole = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            """The buffered body once, then the real receive (disconnects)."""
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _answer(send: Send, status: int, payload: dict[str, Any], close: bool = False) -> None:
    """Send a JSON error answer."""
    data = json.dumps(payload).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class RestBodyCheck:
    """ASGI middleware: a REST request body must be strict JSON (else HTTP 400)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the (already bounded and buffered) body of a REST request."""
        if scope["type"] != "http" or scope["path"] == JSONRPC_PATH:
            await self.app(scope, receive, send)
            return
        first = await receive()
        body = first.get("body", b"") if first["type"] == "http.request" else b""
        if body:
            try:
                load_strict(body)
            except BadJson as e:
                metrics.BAD_REQUESTS.labels("rest", "400").inc()
                await _answer(send, 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                                    "message": str(e)}})
                return
        replayed = False

        async def replay() -> Message:
            """The checked first message once, then the real receive."""
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.app(scope, replay, send)
