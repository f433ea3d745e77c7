"""Bounded request bodies: an oversized body gets a protocol error, never a 5xx or a reset.

The whole body is read (it is small: the bound is a few hundred KiB) and
replayed to the application.  Beyond ``limit`` the rest is drained up to
``drain_limit`` so the client can read the answer; the answer is a JSON-RPC
``-32600`` (HTTP 200, as the SDK answers a 413) on ``POST /`` and HTTP 413 with
the REST error shape elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loadtests.reasoner import metrics

JSONRPC_PATH = "/"


def _payload(path: str, limit: int) -> tuple[int, dict[str, Any]]:
    """Status and body of the too-large answer for ``path``."""
    text = f"Payload too large (limit {limit} bytes)"
    if path == JSONRPC_PATH:
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
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
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
            metrics.BAD_REQUESTS.labels("http", "-32600").inc()
            status, payload = _payload(scope["path"], self.limit)
            data = json.dumps(payload).encode("utf-8")
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(data)).encode())]
            if size > self.drain_limit:
                headers.append((b"connection", b"close"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": data})
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
