"""Slow and idle clients cannot starve the Reasoner: connection deadlines and limits.

uvicorn (0.54) bounds neither the time a client may take to send a request's
headers or body nor the number of connections one client may hold, so a client
trickling bytes (or blank lines, or a body that declares 2**64-1 bytes) held
sockets forever and, with the open-file limit reached, left every other client
unserved.  :class:`GuardedHttpToolsProtocol` (uvicorn's httptools protocol, given
to uvicorn as ``http=``) adds, per worker process:

- a **header deadline** (``header_timeout_s``): from the connection's start, or the
  first byte after an idle keep-alive pause, to the end of the request's headers;
- a **body deadline** (``body_timeout_s``): from the end of the headers to the end of
  the body (the application may answer earlier, e.g. 413: the deadline still ends
  the connection if the client never finishes);
- an **idle deadline** (``idle_timeout_s``): uvicorn's keep-alive timeout, counted;
- a **total connection limit** (``max_connections``) and a **per-client limit**
  (``max_connections_per_client``, by peer IP address), both below the process's
  open-file limit: a connection beyond a limit is closed at once, before any read;
- a **share for clients that complete requests**: connections that have not yet sent a
  complete request (new, or sending headers or a body) hold at most ``max_pending``
  slots, globally (default: half of ``max_connections``).  A new connection beyond that
  cap closes the oldest pending connection *of the address holding the most pending
  connections* (reason ``limit-pending``): slow or silent sockets from any number of
  addresses take at most that share, and a flood from some addresses evicts its own
  sockets, never those of a client whose request is still on its way (under a reconnect
  flood, a prompt client's connection is soon older than the flood's, so evicting the
  globally oldest would close it on a busy machine).

A WebSocket keeps its place in the limits until it closes (no deadline after the
upgrade: the WebSocket protocol has its own ping timeouts).  Every closure is
counted on ``/metrics`` (``rta_reasoner_connections_closed_total{reason}``) and
logged: one WARNING line per reason at most every second, with the count of
closures since the last line and one example peer (a flood of closures cannot
flood the log).  ``rta_reasoner_connections`` is the number of open connections.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rtalab.loadtests.reasoner import metrics
from rtalab.loadtests.reasoner.settings import ServerSettings

log = logging.getLogger("rtalab.reasoner")

REASONS = ("header-timeout", "body-timeout", "idle", "limit-total", "limit-client", "limit-pending",
           "ws-control-flood", "ws-backpressure", "ws-invalid-utf8")
FD_RESERVE_MIN = 128  # open files kept for everything but client sockets (store, logs, pools)
LOG_EVERY_S = 1.0


def file_limit() -> int:
    """The process's soft open-file limit (a large number when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_file_limit(target: int = 65536) -> tuple[int, int]:
    """Raise the soft open-file limit towards ``min(hard, target)`` where allowed;
    ``(before, after)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, want
    return soft, soft


def default_max_connections(limit: int) -> int:
    """Client sockets allowed per process: the file limit minus a reserve (10 %, >= 128)."""
    return max(16, limit - max(FD_RESERVE_MIN, limit // 10))


@dataclass(frozen=True)
class Limits:
    """The deadlines and limits in force in one worker process."""

    header_timeout_s: float
    body_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    max_connections_per_client: int
    max_pending: int = 0  # 0: max_connections (no share kept)

    @classmethod
    def of(cls, s: ServerSettings, limit: int | None = None) -> Limits:
        """From the settings; 0 connection limits mean: derived from the file limit."""
        total = s.max_connections or default_max_connections(limit or file_limit())
        per_client = s.max_connections_per_client or max(1, total // 2)
        pending = s.max_pending_connections or max(1, total // 2)
        return cls(s.header_timeout_s, s.body_timeout_s, s.idle_timeout_s, total,
                   min(per_client, total), min(pending, total))


class _Throttled:
    """One log line per reason at most every :data:`LOG_EVERY_S`, with the count since."""

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()
        self.last: dict[str, float] = {}

    def __call__(self, reason: str, peer: str, limits: Limits) -> None:
        self.pending[reason] += 1
        now = time.monotonic()
        if now - self.last.get(reason, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        n, self.pending[reason] = self.pending[reason], 0
        self.last[reason] = now
        log.warning("closed %d connection(s): %s (e.g. peer %s; header %.1fs, body %.1fs, "
                    "idle %.1fs, max %d, per client %d, pending %d)", n, reason, peer,
                    limits.header_timeout_s, limits.body_timeout_s, limits.idle_timeout_s,
                    limits.max_connections, limits.max_connections_per_client,
                    limits.max_pending)


class Guard:
    """The open connections of this process, by peer, and those still pending (no complete
    request yet), oldest first."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.open: dict[int, str] = {}  # id(transport) -> peer host
        self.per_peer: Counter[str] = Counter()
        # pending connections by peer, oldest first within a peer: id -> (since, transport)
        self.pending: dict[str, OrderedDict[int, tuple[int, asyncio.Transport]]] = {}
        self.n_pending = 0
        self._seq = 0  # order in which connections became pending
        self._log = _Throttled()

    def _pend(self, transport: asyncio.Transport, peer: str) -> None:
        """Mark a connection pending (the youngest of its peer)."""
        mine = self.pending.setdefault(peer, OrderedDict())
        self._seq += 1
        if id(transport) not in mine:
            self.n_pending += 1
        mine.pop(id(transport), None)
        mine[id(transport)] = (self._seq, transport)

    def _unpend(self, transport: asyncio.Transport, peer: str | None) -> None:
        """No longer pending (idempotent)."""
        if peer is None or peer not in self.pending:
            return
        mine = self.pending[peer]
        if mine.pop(id(transport), None) is not None:
            self.n_pending -= 1
            if not mine:
                del self.pending[peer]

    def _evict_one(self) -> None:
        """Close the oldest pending connection of the peer holding the most of them (of
        those, the peer whose oldest is the oldest)."""
        def rank(p: str) -> tuple[int, int]:
            mine = self.pending[p]
            return len(mine), -next(iter(mine.values()))[0]
        peer = max(self.pending, key=rank)
        _, oldest = next(iter(self.pending[peer].values()))
        self.closed("limit-pending", peer)
        self.release(oldest)
        oldest.abort()

    def admit(self, transport: asyncio.Transport, peer: str) -> str | None:
        """Register a new (pending) connection; the reason to refuse it, or None.  At the
        pending cap the oldest pending connection is closed to make room."""
        if self.per_peer[peer] >= self.limits.max_connections_per_client:
            return "limit-client"
        if len(self.open) >= self.limits.max_connections:
            return "limit-total"
        cap = self.limits.max_pending or self.limits.max_connections
        while self.n_pending >= cap and self.pending:
            self._evict_one()
        self.open[id(transport)] = peer
        self.per_peer[peer] += 1
        self._pend(transport, peer)
        metrics.CONNECTIONS.inc()
        return None

    def serving(self, transport: asyncio.Transport) -> None:
        """The connection sent a complete request (or upgraded): no longer pending."""
        self._unpend(transport, self.open.get(id(transport)))

    def waiting(self, transport: asyncio.Transport) -> None:
        """The connection started a new request after an idle pause: pending (youngest)."""
        peer = self.open.get(id(transport))
        if peer is not None:
            self._pend(transport, peer)

    def release(self, transport: asyncio.Transport) -> None:
        """Forget a connection (idempotent)."""
        self._unpend(transport, self.open.get(id(transport)))
        peer = self.open.pop(id(transport), None)
        if peer is None:
            return
        self.per_peer[peer] -= 1
        if self.per_peer[peer] <= 0:
            del self.per_peer[peer]
        metrics.CONNECTIONS.dec()

    def closed(self, reason: str, peer: str) -> None:
        """Count and log one closure."""
        metrics.CONNECTIONS_CLOSED.labels(reason).inc()
        self._log(reason, peer, self.limits)


_GUARD: Guard | None = None


def guard() -> Guard:
    """This process's guard (settings from
    :data:`rtalab.loadtests.reasoner.settings.SETTINGS_ENV`)."""
    global _GUARD
    if _GUARD is None:
        _GUARD = Guard(Limits.of(ServerSettings.from_env()))
    return _GUARD


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and limits of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.guard = guard()
        self._timer: asyncio.TimerHandle | None = None
        self._phase = "new"  # new | headers | body | busy | idle | upgraded | refused
        self._peer = "?"

    # ------------------------------------------------------------------ deadlines

    def _arm(self, phase: str, delay_s: float, reason: str) -> None:
        """Enter ``phase``; close the connection with ``reason`` after ``delay_s`` (0: never)."""
        self._disarm()
        self._phase = phase
        if delay_s > 0:
            self._timer = self.loop.call_later(delay_s, self._expire, reason)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, reason: str) -> None:
        """A deadline passed: count, log, close (the application sees a disconnect)."""
        self._timer = None
        if self.transport.is_closing():
            return
        self.guard.closed(reason, self._peer)
        self.transport.abort()

    # ------------------------------------------------------------------ protocol hooks

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn hands a Transport
        """Admit (or refuse at once) and start the header deadline."""
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else "?"
        reason = self.guard.admit(transport, self._peer)
        if reason is not None:
            self._phase = "refused"
            self.guard.closed(reason, self._peer)
            transport.abort()
            return
        self._arm("headers", self.guard.limits.header_timeout_s, "header-timeout")

    def data_received(self, data: bytes) -> None:
        """The first byte after an idle pause starts a new header deadline."""
        if self._phase == "refused":
            return
        if self._phase == "idle":
            self._arm("headers", self.guard.limits.header_timeout_s, "header-timeout")
            self.guard.waiting(self.transport)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        """Headers in time: the body deadline starts (ends at the message's end)."""
        self._arm("body", self.guard.limits.body_timeout_s, "body-timeout")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The request is read: no deadline while the application answers."""
        self.guard.serving(self.transport)
        if self._phase == "body":
            if self.cycle is not None and self.cycle.response_complete:
                # answered before the body ended (e.g. 413): uvicorn's keep-alive timer was
                # cancelled by the body's bytes and is not re-armed, so idle is ours
                self._arm("idle", self.guard.limits.idle_timeout_s, "idle")
            else:
                self._disarm()
                self._phase = "busy"
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """Answered: idle (uvicorn's keep-alive timer) unless a pipelined request waits."""
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None and self._phase != "body":
            self._disarm()
            self._phase = "idle"

    def timeout_keep_alive_handler(self) -> None:
        """The idle deadline: count and log, then uvicorn closes."""
        if not self.transport.is_closing():
            self.guard.closed("idle", self._peer)
        super().timeout_keep_alive_handler()

    def handle_websocket_upgrade(self) -> None:
        """No deadline after the upgrade; the WebSocket protocol releases the slot."""
        self._disarm()
        self._phase = "upgraded"
        transport = self.transport
        self.guard.serving(transport)
        super().handle_websocket_upgrade()
        ws = transport.get_protocol()
        lost = ws.connection_lost
        release = self.guard.release

        def connection_lost(exc: Exception | None) -> None:
            release(transport)
            lost(exc)

        ws.connection_lost = connection_lost  # type: ignore[method-assign]  # the per-connection hook wraps uvicorn's

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the deadline, free the slot."""
        self._disarm()
        self.guard.release(self.transport)
        super().connection_lost(exc)
