"""The proxy's TCP front: owns the public listener, so outages act on connections.

Every accepted connection is piped to the L7 app (uvicorn on a private loopback
port).  The gate maps the app-side connection (``scope["client"]``) back to the
caller's socket so the app can *reset* a caller mid-stream (:meth:`Gate.abort`).
Outages (seconds since ``t0``), by kind (:meth:`ChaosConfig.kind_of`):

- ``reasoner-down`` (``--outage-mode refuse``): at the window's start the listener is
  closed (new connections get ECONNREFUSED) and every open connection is reset; at its end
  the listener reopens on the same port.
- ``reset``: at the window's start every open connection is reset; a connection accepted
  during the window is reset at once.
- ``blackhole``: a connection accepted during an uplink window is held, never
  answered, until the caller gives up (as a partition: the caller's timers decide; the L7
  app black-holes requests and stream events on connections already open).
- ``loss``: nothing at this level (the L7 app loses requests and stream events).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from .config import ChaosConfig
from .ledger import ChaosLedger

log = logging.getLogger("rtalab.chaos")
BUF = 64 * 1024


@dataclass(eq=False)
class Conn:
    """One caller connection and its pipe to the app."""

    outer: asyncio.StreamWriter
    inner: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def reset(writer: asyncio.StreamWriter | None) -> None:
    """Close ``writer``'s socket with a TCP RST (SO_LINGER 0)."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Gate:
    """Public listener -> app pipe, with refuse / black-hole outages."""

    def __init__(self, host: str, port: int, app_host: str, app_port: int, cfg: ChaosConfig,
                 ledger: ChaosLedger, t0: float, binding: str = "tcp",
                 schedule_lines: bool = True):
        self.host, self.port = host, port
        # the ledger's binding of this gate's lines; the proxy's second gate (in front of its
        # gRPC server) leaves the outage-start/-end lines to the first one
        self.binding, self.schedule_lines = binding, schedule_lines
        self.app_host, self.app_port = app_host, app_port
        self.cfg, self.ledger, self.t0 = cfg, ledger, t0
        self.server: asyncio.Server | None = None
        self.conns: set[Conn] = set()
        self.by_app_port: dict[int, Conn] = {}
        self.held: set[asyncio.StreamWriter] = set()
        self._window_end = asyncio.Event()

    def now_s(self) -> float:
        """Seconds since the proxy's clock start."""
        return time.monotonic() - self.t0

    async def start(self) -> None:
        """Listen (the port is fixed after the first bind, also for port 0)."""
        self.server = await asyncio.start_server(self._accept, self.host, self.port,
                                                 reuse_address=True, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]

    def stop_listening(self) -> None:
        """Close the listener (callers now get connection refused)."""
        if self.server is not None:
            self.server.close()
            self.server = None

    def reset_all(self) -> int:
        """Reset every open connection; how many."""
        n = 0
        for c in list(self.conns):
            reset(c.outer)
            reset(c.inner)
            n += 1
        for w in list(self.held):
            reset(w)
            n += 1
        return n

    def abort(self, client: tuple[str, int] | list[Any] | None) -> bool:
        """Reset the caller behind the app connection ``client`` (scope["client"])."""
        if not client:
            return False
        conn = self.by_app_port.get(int(client[1]))
        if conn is None:
            return False
        reset(conn.outer)
        reset(conn.inner)
        return True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Hold (black-hole window) or pipe one caller connection."""
        if self.cfg.outage_at(self.now_s(), "uplink", "reset") is not None:
            self.ledger.record("reset", binding=self.binding, what="connection")
            reset(writer)
            return
        o = self.cfg.outage_at(self.now_s(), "uplink", "blackhole")
        if o is not None:  # packets vanish: held, unanswered, until the caller gives up
            self.held.add(writer)
            self.ledger.record("blackhole", binding=self.binding, what="connection")
            try:
                async with asyncio.timeout(self.cfg.max_hold_s):
                    while await reader.read(BUF):
                        pass
            except (TimeoutError, ConnectionError, OSError):
                pass
            finally:
                self.held.discard(writer)
                reset(writer)
            return
        conn = Conn(outer=writer)
        try:
            app_r, app_w = await asyncio.open_connection(self.app_host, self.app_port)
        except OSError as e:
            log.error("chaos: app not reachable: %s", e)
            reset(writer)
            return
        conn.inner = app_w
        app_port = app_w.get_extra_info("sockname")[1]
        self.conns.add(conn)
        self.by_app_port[app_port] = conn
        try:
            up = asyncio.create_task(self._pipe(reader, app_w))
            down = asyncio.create_task(self._pipe(app_r, writer))
            conn.tasks = [up, down]
            # either side closing ends the connection (the pipe has already flushed what the
            # app wrote; a caller's EOF means it is gone: the app must see the disconnect)
            await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in conn.tasks:
                t.cancel()
        finally:
            self.conns.discard(conn)
            self.by_app_port.pop(app_port, None)
            for w in (app_w, writer):
                with contextlib.suppress(Exception):
                    w.close()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Copy bytes until EOF or an error."""
        try:
            while data := await src.read(BUF):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass

    async def run_outages(self) -> None:
        """Apply the outage schedule (windows in start order; overlapping ones merge)."""
        for o in self.cfg.outages:
            start, end = o.start_s, o.start_s + o.duration_s
            if end <= self.now_s():
                continue
            await asyncio.sleep(max(0.0, start - self.now_s()))
            n = None
            kind = self.cfg.kind_of(o)
            if kind == "reasoner-down":  # act first: a reader of the line sees it in force
                self.stop_listening()
            if kind in ("reasoner-down", "reset"):
                n = self.reset_all()
            if self.schedule_lines:
                self.ledger.record("outage-start", binding="tcp", mode=kind,
                                   direction=o.direction, start_s=start, duration_s=o.duration_s)
            if n is not None:
                self.ledger.record("refused" if kind == "reasoner-down" else "reset",
                                   binding=self.binding, connections=n)
            await asyncio.sleep(max(0.0, end - self.now_s()))
            if kind == "reasoner-down":
                await self._reopen()
            if self.schedule_lines:
                self.ledger.record("outage-end", binding="tcp", mode=kind, direction=o.direction)

    async def _reopen(self) -> None:
        """Listen again on the same port (retrying briefly if the kernel still holds it)."""
        for _ in range(50):
            try:
                await self.start()
                return
            except OSError:
                await asyncio.sleep(0.05)
        log.error("chaos: could not listen again on %s:%s", self.host, self.port)
