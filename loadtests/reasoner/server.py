"""Run the Reasoner under uvicorn (one or several worker processes)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from typing import Any

import uvicorn

from rtalab.loadtests.common.logs import uvicorn_log_config
from rtalab.loadtests.reasoner.capacity import Capacity, start_broker
from rtalab.loadtests.reasoner.conns import GuardedHttpToolsProtocol, Limits, raise_file_limit
from rtalab.loadtests.reasoner.metrics import MULTIPROC_ENV
from rtalab.loadtests.reasoner.runtime import load_config
from rtalab.loadtests.reasoner.settings import SETTINGS_ENV, ServerSettings
from rtalab.loadtests.reasoner.wsguard import GuardedWsProtocol

APP_FACTORY = "rtalab.loadtests.reasoner.app:create_app"
WS_HARD_MAX_BYTES = 4 * 1024 * 1024  # above this uvicorn closes the socket (1009)


class DenialNoiseFilter(logging.Filter):
    """Drop uvicorn's false alarm after a WebSocket upgrade refused with a 401 response.

    uvicorn's websockets-sansio protocol logs "ASGI callable returned without
    completing handshake" after a ``websocket.http.response`` denial although
    the 401 was sent; the endpoint itself always accepts, so nothing is hidden.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the false alarm."""
        return "returned without completing handshake" not in record.getMessage()


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config plus the Reasoner's and the SDK's loggers."""
    return uvicorn_log_config(level, DenialNoiseFilter, {"a2a": "ERROR"})


def run(settings: ServerSettings) -> int:
    """Serve until SIGINT/SIGTERM; every worker builds its app from :data:`SETTINGS_ENV`.

    The open-file limit is raised first (workers inherit it), so the connection limits
    derived from it (:mod:`rtalab.loadtests.reasoner.conns`) are as high as the system allows."""
    before, after = raise_file_limit()
    limits = Limits.of(settings, after)
    logging.getLogger("rtalab.reasoner").warning(
        "open-file limit %d%s; per worker: %d connections, %d per client, %d pending; "
        "deadlines: headers %.1fs, body %.1fs, idle %.1fs", after,
        f" (raised from {before})" if after != before else "", limits.max_connections,
        limits.max_connections_per_client, limits.max_pending,
        limits.header_timeout_s, limits.body_timeout_s, limits.idle_timeout_s)
    if settings.grpc_port == 0:  # one free port for every worker (they all bind it)
        # lazy: +1.07 s (grpc) off importing server
        from rtalab.loadtests.reasoner.grpc_binding import free_port

        settings = dataclasses.replace(settings, grpc_port=free_port(settings.host))
    broker_dir = None
    if settings.workers > 1:  # `workers` is the whole Reasoner's: one pool for all processes
        broker_dir = tempfile.mkdtemp(prefix="rtalab-capacity-")
        settings = dataclasses.replace(settings,
                                       capacity_socket=os.path.join(broker_dir, "capacity.sock"))
        cfg = load_config(settings).reasoner
        start_broker(Capacity(cfg.workers, cfg.queue_limit, cfg.queue_discipline,
                              cfg.queue_timeout_s), settings.capacity_socket)
    os.environ[SETTINGS_ENV] = settings.to_env()
    prom_dir = None
    if settings.workers > 1 and not os.environ.get(MULTIPROC_ENV):
        prom_dir = tempfile.mkdtemp(prefix="rtalab-prom-")
        os.environ[MULTIPROC_ENV] = prom_dir
    try:
        uvicorn.run(APP_FACTORY, factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, log_level=settings.log_level,
                    log_config=log_config(settings.log_level), access_log=settings.access_log,
                    ws_max_size=WS_HARD_MAX_BYTES, timeout_graceful_shutdown=5,
                    http=GuardedHttpToolsProtocol, ws=GuardedWsProtocol,
                    timeout_keep_alive=settings.idle_timeout_s,  # type: ignore[arg-type]  # uvicorn says int; any seconds work
                    lifespan="on", server_header=False, **settings.server_tls.uvicorn_kwargs())
    finally:
        for d in (prom_dir, broker_dir):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
    return 0
