"""The ASGI application: routes, middleware and lifespan of one Reasoner worker.

Routes: ``POST /`` JSON-RPC (JSON or SSE), the SDK's REST routes
(``/message:stream``, ``/tasks/{id}``, ...), ``/ws`` JSON-RPC over WebSocket,
``/.well-known/agent-card.json``, ``/metrics`` and ``/healthz`` (the last three
public).  Middleware, outermost first: body limit (every method), bearer auth,
REST body check (strict JSON), extension echo (which also stamps ``X-RTA-Worker``).
``create_app`` is the uvicorn factory: it reads :data:`SETTINGS_ENV`, so every
worker process builds the same app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator

from a2a.server.routes import create_agent_card_routes, create_rest_routes
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp

from loadtests.reasoner import metrics, unsafe
from loadtests.reasoner.auth import BearerAuth
from loadtests.reasoner.bodylimit import BodyLimit, RestBodyCheck
from loadtests.reasoner.card import build_card
from loadtests.reasoner.executor import ReasonerExecutor
from loadtests.reasoner.handler import ProfileRequestHandler
from loadtests.reasoner.jsonrpc import ProfileJsonRpcDispatcher
from loadtests.reasoner.negotiation import ExtensionEcho
from loadtests.reasoner.runtime import Runtime, build_runtime
from loadtests.reasoner.settings import ServerSettings
from loadtests.reasoner.taskstore import BoundedTaskStore
from loadtests.reasoner.ws import WsBinding
from sim.scenario import Scenario

PUBLIC_PATHS = (AGENT_CARD_WELL_KNOWN_PATH, "/metrics", "/healthz")
log = logging.getLogger("rtalab.reasoner")


async def _purge_loop(rt: Runtime) -> None:
    """Drop expired dedup entries now and then (backends also expire lazily)."""
    period = min(60.0, max(1.0, rt.cfg.dedup_window_s / 2))
    while True:
        await asyncio.sleep(period)
        try:
            await rt.store.purge(time.time())
        except Exception:
            log.exception("dedup purge failed")


def build_app(settings: ServerSettings, scenario: Scenario | None = None) -> ASGIApp:
    """One worker's application."""
    metrics.count_tracebacks()
    rt = build_runtime(settings, scenario)
    ttl_s = max(900.0, 2 * rt.cfg.handoff_timeout_s + 60.0)
    task_store = BoundedTaskStore(max_tasks=settings.max_tasks, ttl_s=ttl_s)
    card = build_card(settings, rt.bounds, rt.cfg.dedup)
    handler = ProfileRequestHandler(rt, ReasonerExecutor(rt), task_store, card)
    dispatcher = ProfileJsonRpcDispatcher(handler)
    ws = WsBinding(dispatcher, rt.keys, max_frame_bytes=rt.bounds.body_bytes)

    async def healthz(request: Request) -> JSONResponse:
        """GET /healthz: liveness plus a few gauges of this worker."""
        body = {"status": "ok", "pid": os.getpid(), "dedup": rt.store.name,
                "mode": rt.cfg.dedup, "tasks": len(task_store), "inFlight": rt.in_flight}
        if settings.unsafe_bugs:
            body["unsafeBugs"] = list(settings.unsafe_bugs)
        return JSONResponse(body)

    routes: list[BaseRoute] = [
        Route("/", dispatcher.handle_requests, methods=["POST"]),
        WebSocketRoute("/ws", ws.endpoint),
        Route("/metrics", metrics.metrics_endpoint, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        *create_agent_card_routes(card),
        *create_rest_routes(handler),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        """Open the store and the purge loop; drain and close on shutdown."""
        await rt.start()
        purge = asyncio.create_task(_purge_loop(rt))
        log.info("reasoner worker ready dedup=%s mode=%s auth=%s", rt.store.name, rt.cfg.dedup,
                 "on" if settings.tokens else "off")
        if settings.unsafe_bugs:
            log.warning(unsafe.banner(settings.unsafe_bugs))
        try:
            yield
        finally:
            purge.cancel()
            await handler.aclose()
            await rt.close()
            metrics.worker_exit()

    app: ASGIApp = Starlette(routes=routes, lifespan=lifespan)
    app = ExtensionEcho(app, settings.ext_uri)
    app = RestBodyCheck(app)
    app = BearerAuth(app, unsafe.tokens(settings.tokens, settings.unsafe_bugs), rt.keys,
                     public_paths=PUBLIC_PATHS)
    return BodyLimit(app, rt.bounds.body_bytes)


def create_app() -> ASGIApp:
    """uvicorn factory (``loadtests.reasoner.app:create_app``)."""
    return build_app(ServerSettings.from_env())
