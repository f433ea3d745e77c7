"""Run the chaos proxy: the L7 app under uvicorn on a private port behind the TCP gate.

``serve(settings)`` runs until SIGINT/SIGTERM, then closes the listener, resets
what is still open and closes ``chaos.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from rtalab.loadtests.common.logs import uvicorn_log_config
from rtalab.loadtests.common.tls import ClientTls, ServerTls

from .balancer import Balancer
from .config import ChaosConfig
from .gate import Gate
from .ledger import ChaosLedger
from .proxy import MAX_WS_FRAME, ChaosProxy, DropConnection


@dataclass(frozen=True)
class ChaosSettings:
    """Validated command-line settings of one proxy."""

    host: str
    port: int
    upstream: str
    cfg: ChaosConfig
    ledger: Path | None
    start_at_unix: float | None = None
    start_file: str | None = None  # second 0 = this JSON file's "t0", once it exists
    log_level: str = "warning"
    tls: ServerTls = field(default_factory=ServerTls)  # what the proxy serves
    upstream_tls: ClientTls = field(default_factory=ClientTls)  # how it verifies the upstream
    # the gRPC side (--grpc-listen / --grpc-upstream): None = HTTP only
    grpc_listen: tuple[str, int] | None = None
    grpc_upstream: str = ""  # host:port
    grpc_upstream_secure: bool = False
    grpc_upstreams: tuple[str, ...] = ()  # every replica's, in the order of upstreams
    # several upstreams: the replicas of a fleet, balanced (rtalab.loadtests.chaos.balancer)
    upstreams: tuple[str, ...] = ()
    balancer: str = "random"
    health_check_s: float = 1.0


class NoiseFilter(logging.Filter):
    """Drop uvicorn's reports of connections the proxy cut on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a deliberate drop."""
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, DropConnection):
            return False
        text = record.getMessage()
        return not ("returned without completing" in text or "without sending" in text)


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config with the noise filter and the proxy's logger."""
    return uvicorn_log_config(level, NoiseFilter)


def _clock_start(start_at_unix: float | None) -> float:
    """The monotonic time that counts as second 0 of the outage schedule."""
    now = time.monotonic()
    return now if start_at_unix is None else now - (time.time() - start_at_unix)


START_FILE_POLL_S = 0.05


async def _outages_from_file(path: str, gates: list[Gate], proxy: ChaosProxy) -> None:
    """Wait for ``path`` (JSON with ``t0``), start the schedule's clock there, run outages."""
    while True:
        try:
            t0_unix = float(json.loads(Path(path).read_text(encoding="utf-8"))["t0"])
            break
        except (OSError, ValueError, KeyError, TypeError):  # not there yet or half-written
            await asyncio.sleep(START_FILE_POLL_S)
    proxy.t0 = _clock_start(t0_unix)
    for gate in gates:
        gate.t0 = proxy.t0
    await asyncio.gather(*(gate.run_outages() for gate in gates))


async def _start_grpc(s: ChaosSettings, proxy: ChaosProxy, ledger: ChaosLedger,
                      t0: float) -> tuple[Any, Any, Gate]:
    """The gRPC side: its server on a private port behind a TCP gate of its own on
    ``--grpc-listen`` (a reset / reasoner-down outage resets its HTTP/2 connections)."""
    # lazy: +793 ms (pandas, pyarrow, gevent) off importing server
    from .grpc_proxy import GrpcChaos, start_grpc

    assert s.grpc_listen is not None
    chaos = GrpcChaos(proxy, s.grpc_upstream, s.grpc_upstream_secure, s.upstream_tls,
                      upstreams=s.grpc_upstreams)
    server, app_port = await start_grpc(chaos, 0, s.tls)
    host, port = s.grpc_listen
    gate = Gate(host, port, "127.0.0.1", app_port, s.cfg, ledger, t0, binding="grpc",
                schedule_lines=False)
    try:
        await gate.start()
    except OSError:
        await server.stop(0)
        await chaos.close()
        raise
    return server, chaos, gate


async def serve(s: ChaosSettings) -> int:
    """Serve until stopped; 0 on a clean stop."""
    # with a start file, second 0 lies in the far future until the file appears
    t0 = time.monotonic() + 1e9 if s.start_file else _clock_start(s.start_at_unix)
    ledger = ChaosLedger(s.ledger)
    app_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    app_sock.bind(("127.0.0.1", 0))
    app_port = app_sock.getsockname()[1]
    gate = Gate(s.host, s.port, "127.0.0.1", app_port, s.cfg, ledger, t0)
    balancer = Balancer(s.upstreams, s.balancer, s.cfg.seed, s.health_check_s, ledger) \
        if len(s.upstreams) > 1 else None
    proxy = ChaosProxy(s.cfg, s.upstream, ledger, gate, t0, tls=s.upstream_tls,
                       balancer=balancer)
    config = uvicorn.Config(proxy, lifespan="on", log_level=s.log_level,
                            log_config=log_config(s.log_level), access_log=False,
                            ws_max_size=MAX_WS_FRAME, ws_ping_interval=None,
                            timeout_graceful_shutdown=2, server_header=False, date_header=False,
                            **s.tls.uvicorn_kwargs())
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[app_sock]))
    while not server.started:
        if task.done():
            return 1
        await asyncio.sleep(0.01)
    gates, grpc_server, grpc_chaos = [gate], None, None
    where = f"{s.host}:{s.port}"
    try:
        if s.grpc_listen is not None:  # first: the HTTP port accepting means both are ready
            where = "{}:{}".format(*s.grpc_listen)
            grpc_server, grpc_chaos, grpc_gate = await _start_grpc(s, proxy, ledger, t0)
            gates.append(grpc_gate)
        where = f"{s.host}:{s.port}"
        await gate.start()
    except OSError as e:
        print(f"rtalab chaos: error: cannot listen on {where}: {e.strerror or e}",
              file=sys.stderr, flush=True)
        server.should_exit = True
        await task
        return 2
    print(f"chaos proxy on {s.tls.scheme}://{s.host}:{gate.port} -> "
          f"{balancer.describe() if balancer else s.upstream} (ledger {s.ledger or 'off'})",
          flush=True)
    if len(gates) > 1 and s.grpc_listen is not None:  # (the gRPC gate: grpc_listen set)
        print(f"chaos proxy on {'grpcs' if s.tls.enabled else 'grpc'}://{s.grpc_listen[0]}:"
              f"{gates[1].port} -> {', '.join(s.grpc_upstreams) or s.grpc_upstream}",
              flush=True)
    outages = asyncio.ensure_future(
        _outages_from_file(s.start_file, gates, proxy) if s.start_file
        else asyncio.gather(*(g.run_outages() for g in gates)))
    watch = asyncio.ensure_future(balancer.watch()) if balancer else None
    try:
        await task
    finally:
        outages.cancel()
        if watch is not None:
            watch.cancel()
        for g in gates:
            g.stop_listening()
            g.reset_all()
        if grpc_server is not None and grpc_chaos is not None:  # (started together)
            await grpc_server.stop(0)
            await grpc_chaos.close()
        ledger.close()
    return 0


def run(s: ChaosSettings) -> int:
    """Blocking entry point (uvloop when installed)."""
    try:
        # lazy: uvloop is optional; +7 ms (uvloop)
        import uvloop

        return uvloop.run(serve(s))
    except ImportError:
        return asyncio.run(serve(s))
