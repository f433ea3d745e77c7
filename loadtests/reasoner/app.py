"""The ASGI application: routes, middleware and lifespan of one Reasoner worker.

Routes: ``POST /`` JSON-RPC (JSON or SSE), the SDK's REST routes
(``/message:stream``, ``/tasks/{id}``, ...), ``/ws`` JSON-RPC over WebSocket,
``/.well-known/agent-card.json``, ``/metrics``, ``/healthz`` and ``/readyz`` (the
last four public; :mod:`rtalab.loadtests.reasoner.storeguard`); with ``--grpc-port`` the A2A
gRPC binding on its own port, served by the same request handler from the same lifespan
(:mod:`rtalab.loadtests.reasoner.grpc_binding`).  Middleware, outermost first: body limit (every
method), bearer auth,
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
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from a2a.server.routes import create_agent_card_routes, create_rest_routes
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp

from rtalab.loadtests.dedup.base import StoreUnavailable
from rtalab.loadtests.reasoner import metrics, otel, unsafe
from rtalab.loadtests.reasoner.auth import BearerAuth
from rtalab.loadtests.reasoner.bodylimit import BodyLimit, RestBodyCheck
from rtalab.loadtests.reasoner.card import build_card
from rtalab.loadtests.reasoner.executor import ReasonerExecutor
from rtalab.loadtests.reasoner.grpc_binding import GrpcBinding
from rtalab.loadtests.reasoner.handler import BindingContextBuilder, ProfileRequestHandler
from rtalab.loadtests.reasoner.jsonrpc import ProfileJsonRpcDispatcher
from rtalab.loadtests.reasoner.negotiation import ExtensionEcho
from rtalab.loadtests.reasoner.runtime import Runtime, build_runtime
from rtalab.loadtests.reasoner.settings import ServerSettings
from rtalab.loadtests.reasoner.taskstore import BoundedTaskStore
from rtalab.loadtests.reasoner.ws import WsBinding
from rtalab.sim.scenario import Scenario

# The card changes only when the server restarts with other settings: clients may reuse it
# for 5 minutes, then revalidate with the SDK's weak ETag (If-None-Match -> 304).
CARD_CACHE_CONTROL = "public, max-age=300"
PUBLIC_PATHS = (AGENT_CARD_WELL_KNOWN_PATH, "/metrics", "/healthz", "/readyz")
log = logging.getLogger("rtalab.reasoner")


async def _purge_loop(rt: Runtime) -> None:
    """Drop expired dedup entries now and then (backends also expire lazily)."""
    period = min(60.0, max(1.0, rt.cfg.dedup_window_s / 2))
    while True:
        await asyncio.sleep(period)
        # a failure is counted and logged by the store guard; the next round tries again
        with contextlib.suppress(StoreUnavailable):
            await rt.store.purge(time.time())


def build_app(settings: ServerSettings, scenario: Scenario | None = None) -> ASGIApp:
    """One worker's application."""
    metrics.count_tracebacks()
    if settings.otlp_file:
        otel.configure(settings.otlp_file, settings.otlp_interval_s)
    rt = build_runtime(settings, scenario)
    ttl_s = max(900.0, 2 * rt.cfg.handoff_timeout_s + 60.0)
    task_store = BoundedTaskStore(max_tasks=settings.max_tasks, ttl_s=ttl_s)
    card = build_card(settings, rt.bounds, rt.cfg.dedup)
    handler = ProfileRequestHandler(rt, ReasonerExecutor(rt), task_store, card)
    dispatcher = ProfileJsonRpcDispatcher(handler, context_builder=BindingContextBuilder("sse"))
    ws = WsBinding(dispatcher, rt.keys, max_frame_bytes=rt.bounds.body_bytes)
    tokens = unsafe.tokens(settings.tokens, settings.unsafe_bugs)
    grpc_binding = None
    if settings.grpc_port:
        auth = BearerAuth(None, tokens, rt.keys)  # type: ignore[arg-type]  # gRPC calls principal() only: no ASGI app
        grpc_binding = GrpcBinding(handler, auth, settings.ext_uri,
                                   settings.host, settings.grpc_port, settings.server_tls,
                                   rt.bounds.body_bytes)
    probes = _WorkerEndpoints(rt, settings, task_store)
    routes: list[BaseRoute] = [
        Route("/", dispatcher.handle_requests, methods=["POST"]),
        WebSocketRoute("/ws", ws.endpoint),
        Route("/metrics", metrics.metrics_endpoint, methods=["GET"]),
        Route("/healthz", probes.healthz, methods=["GET"]),
        Route("/readyz", probes.readyz, methods=["GET"]),
        *create_agent_card_routes(card, cache_control=CARD_CACHE_CONTROL),
        *create_rest_routes(handler, context_builder=BindingContextBuilder("rest")),
    ]
    if settings.test_hooks:
        routes.insert(0, Route("/test/capacity", probes.test_capacity, methods=["POST"]))
    app: ASGIApp = Starlette(routes=routes,
                             lifespan=_lifespan(rt, settings, handler, grpc_binding))
    app = ExtensionEcho(app, settings.ext_uri)
    app = RestBodyCheck(app)
    app = BearerAuth(app, tokens, rt.keys, public_paths=PUBLIC_PATHS)
    return BodyLimit(app, rt.bounds.body_bytes)


class _WorkerEndpoints:
    """This worker's own endpoints: health, readiness and the capacity test hook."""

    def __init__(self, rt: Runtime, settings: ServerSettings, task_store: BoundedTaskStore
                 ) -> None:
        self.rt, self.settings, self.task_store = rt, settings, task_store

    async def healthz(self, request: Request) -> JSONResponse:
        """GET /healthz: liveness plus a few gauges of this worker."""
        rt = self.rt
        store = rt.store.health.as_json()
        body: dict[str, Any] = {"status": "ok" if store["healthy"] else "degraded",
                                "pid": os.getpid(),
                "dedup": rt.store.name, "store": store, "mode": rt.cfg.dedup,
                "tasks": len(self.task_store), "inFlight": rt.in_flight}
        if self.settings.unsafe_bugs:
            body["unsafeBugs"] = list(self.settings.unsafe_bugs)
        return JSONResponse(body)

    async def readyz(self, request: Request) -> JSONResponse:
        """GET /readyz: 200 while the dedup store answers (a probe at most every 0.5 s),
        503 while it is down, frozen or full."""
        rt = self.rt
        store = await rt.store.probe()
        return JSONResponse({"ready": store["healthy"], "pid": os.getpid(),
                             "dedup": rt.store.name, "store": store},
                            status_code=200 if store["healthy"] else 503)

    async def test_capacity(self, request: Request) -> JSONResponse:
        """POST /test/capacity {"workers": N} (only with --test-hooks): a capacity drop of the
        whole Reasoner (every worker process) and its end, as the simulator's
        ``reasoner.capacity_drops``; ``rtalab load run`` calls it on the scenario's schedule."""
        try:
            body = await request.json()
            workers = body["workers"]
            if isinstance(workers, bool) or not isinstance(workers, int) \
                    or not 0 <= workers <= 4096:
                raise ValueError
        except Exception:  # malformed JSON, missing or bad "workers": one safe line
            return JSONResponse({"error": "body must be {\"workers\": an integer 0-4096}"},
                                status_code=400)
        cap = self.rt.capacity
        result = cap.set_workers(workers)
        if asyncio.iscoroutine(result):
            await result
        log.warning("test hook: reasoning workers set to %d", workers)
        return JSONResponse({"workers": workers})


def _lifespan(rt: Runtime, settings: ServerSettings, handler: ProfileRequestHandler,
              grpc_binding: Any) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """The worker's lifespan: open the store, the purge loop (and the gRPC binding); drain
    and close on shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await rt.start()
        purge = asyncio.create_task(_purge_loop(rt))
        if grpc_binding is not None:
            await grpc_binding.start()
        log.info("reasoner worker ready dedup=%s mode=%s auth=%s", rt.store.name, rt.cfg.dedup,
                 "on" if settings.tokens else "off")
        if settings.unsafe_bugs:
            log.warning(unsafe.banner(settings.unsafe_bugs))
        try:
            yield
        finally:
            purge.cancel()
            if grpc_binding is not None:
                await grpc_binding.stop()
            await handler.aclose()
            await rt.close()
            metrics.worker_exit()
            if settings.otlp_file:
                otel.shutdown()

    return lifespan


def create_app() -> ASGIApp:
    """uvicorn factory (``rtalab.loadtests.reasoner.app:create_app``)."""
    return build_app(ServerSettings.from_env())
