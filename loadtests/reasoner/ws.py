"""JSON-RPC over WebSocket at ``/ws`` on the same request handler as the HTTP bindings.

Auth and negotiation happen on the upgrade (middleware; the echo is in the
upgrade response).  Then every text (or UTF-8 binary) frame is one JSON-RPC
request with an ``id``; every response and stream event is one frame
``{"jsonrpc": "2.0", "id": <same id>, "result"|"error": ...}``.  Requests run
concurrently (at most ``max_in_flight`` per socket), so frames of different
ids interleave.  A malformed frame gets a JSON-RPC error frame and the socket
stays up; a frame above ``Bounds.body_bytes`` gets ``-32600``; a frame above
the server's hard ``ws_max_size`` closes the socket with 1009 (uvicorn).
Closing the socket stops the relaying, not the turns: they finish and their
outcomes are stored for replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.jsonrpc_models import InternalError, InvalidRequestError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils import json_utils
from starlette.websockets import WebSocket, WebSocketDisconnect

from rtalab.loadtests.reasoner import metrics
from rtalab.loadtests.reasoner.jsonrpc import (
    Decoded,
    DecodeError,
    ProfileJsonRpcDispatcher,
    decode_request,
)
from rtalab.loadtests.reasoner.wire import BINDING_KEY, Keys, frame_ends

log = logging.getLogger("rtalab.reasoner")
INTERNAL_TEXT = "Internal error"  # never the exception's text: it may name internal addresses


class WsBinding:
    """The ``/ws`` endpoint."""

    def __init__(self, dispatcher: ProfileJsonRpcDispatcher, keys: Keys, max_frame_bytes: int,
                 max_in_flight: int = 64):
        self.dispatcher = dispatcher
        self.keys = keys
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight

    async def endpoint(self, websocket: WebSocket) -> None:
        """Accept the upgrade and serve frames until the client goes away."""
        await websocket.accept()
        metrics.WS_CONNECTIONS.inc()
        try:
            await _Connection(self, websocket).run()
        finally:
            metrics.WS_CONNECTIONS.dec()


class _Connection:
    """One socket: a reader loop and one task per request in flight."""

    def __init__(self, binding: WsBinding, websocket: WebSocket):
        self.b = binding
        self.ws = websocket
        self.tasks: dict[Any, asyncio.Task[None]] = {}  # the in-flight slots, by request id
        self.running: set[asyncio.Task[None]] = set()  # every request task not finished yet
        self.send_lock = asyncio.Lock()
        self.open = True

    async def run(self) -> None:
        """Read frames; dispatch requests; cancel the relays on disconnect."""
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                try:
                    await self._on_frame(msg.get("text"), msg.get("bytes"))
                except Exception:  # a bad frame never takes the socket (and its turns) down
                    log.exception("frame handling failed")
                    await self._error(DecodeError(None, InternalError(
                        message="The frame could not be handled")))
        except WebSocketDisconnect:
            pass
        finally:
            self.open = False
            for task in self.running:
                task.cancel()
            await asyncio.gather(*self.running, return_exceptions=True)

    async def _on_frame(self, text: str | None, data: bytes | None) -> None:
        """Validate one frame and start its request."""
        raw: str | bytes = text if text is not None else (data or b"")
        if len(raw) > self.b.max_frame_bytes or (
                isinstance(raw, str) and len(raw.encode("utf-8")) > self.b.max_frame_bytes):
            await self._error(DecodeError(None, InvalidRequestError(
                message=f"Frame too large (limit {self.b.max_frame_bytes} bytes)")))
            return
        decoded = decode_request(raw)
        if isinstance(decoded, DecodeError):
            await self._error(decoded)
            return
        problem = None
        if not decoded.has_id or decoded.id is None:
            problem = "An id is required on the WebSocket binding"
        elif decoded.id in self.tasks:
            problem = "A request with this id is already in flight on this socket"
        elif len(self.tasks) >= self.b.max_in_flight:
            problem = f"Too many requests in flight on this socket (limit {self.b.max_in_flight})"
        if problem:
            await self._error(DecodeError(decoded.id, InvalidRequestError(message=problem)))
            return
        task = asyncio.create_task(self._serve(decoded))
        self.tasks[decoded.id] = task
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    def _free(self, rid: Any) -> None:
        """Free the slot of request ``rid`` (if it is still this task's: the id may already
        name a new request)."""
        if self.tasks.get(rid) is asyncio.current_task():
            del self.tasks[rid]

    async def _error(self, err: DecodeError) -> None:
        """Answer a malformed frame."""
        body = err.response()
        metrics.BAD_REQUESTS.labels("ws", str(body["error"]["code"])).inc()
        await self._send(body)

    async def _serve(self, req: Decoded) -> None:
        """Dispatch one request and relay its response frames."""
        result: dict[str, Any] | AsyncGenerator[dict[str, Any], None] | None = None
        try:
            context = self.b.dispatcher._context_builder.build(self.ws)  # type: ignore[arg-type]  # the builder reads only headers and user, as on a Request
            context.state[BINDING_KEY] = "ws"
            result = await self.b.dispatcher.dispatch(req, context)
            if isinstance(result, dict):
                self._free(req.id)
                await self._send(result)
                return
            try:
                async for item in result:
                    last = frame_ends(item)
                    if last:  # free the slot BEFORE the final frame: the client may answer it
                        self._free(req.id)  # with a new request before this task resumes
                    if not await self._send(item) or last:
                        break
            except Exception:
                log.exception("stream error id=%r", req.id)
                self._free(req.id)
                await self._send(build_error_response(req.id, InternalError(message=INTERNAL_TEXT)))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request error id=%r", req.id)
            self._free(req.id)
            await self._send(build_error_response(req.id, InternalError(message=INTERNAL_TEXT)))
        finally:
            if result is not None and not isinstance(result, dict):
                with contextlib.suppress(Exception):
                    await result.aclose()
            self._free(req.id)

    async def _send(self, obj: dict[str, Any]) -> bool:
        """Send one frame; False if the socket is gone."""
        if not self.open:
            return False
        try:
            async with self.send_lock:
                await self.ws.send_text(json_utils.dumps(obj))
            return True
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.open = False
            return False
