"""The network fault model: one :class:`Link` per direction, applied per application message.

Per message, in this order: a message sent during a scheduled outage of its
direction is dropped (a ``blackhole`` outage: silently; ``reset`` / ``reasoner-down``: the
connection is refused, :data:`REFUSED`, and the Live layer cuts every open attempt at the
window's start, :mod:`rtalab.sim.model.live`; a ``loss`` outage: with the outage's ``loss``
probability, from its own stream, noticed as the link's own loss is); otherwise it is lost
with probability ``loss``; a
surviving message takes ``latency_s`` (a fresh draw per message, so messages
may overtake each other), plus ``reorder_delay_s`` with probability
``reorder``; with probability ``duplication`` a second copy arrives
``duplicate_delay_s`` after the first.  Every fault has its own random stream,
and a link with no faults and a constant latency draws nothing at all.

Uplink messages (requests) travel as SimPy events.  On the downlink only the
messages the Live layer reacts to become events (the terminal state); the
arrival times of the ``progress`` directive and of the spoken chunks are
*computed* (see :meth:`Link.chunks`; the Live layer's reorder buffer,
:mod:`rtalab.sim.model.playout`, turns them into playable times).  A duplicated downlink message is
discarded by the Live layer's reorder buffer (same ``sequenceId``), so
downlink duplication has no observable effect and is not drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

import simpy

from rtalab.sim.dist import Const
from rtalab.sim.model.clock import ENTRY_PRIORITY, pusher, scheduler, sim_time
from rtalab.sim.model.rand import Streams
from rtalab.sim.scenario import REFUSING_KINDS, LinkConfig, OutageConfig

INF = float("inf")

Callback = Callable[[Any], None]


class Delivery(IntEnum):
    """What the link did with one uplink message (:meth:`Link.send`)."""

    DELIVERED = 0  # one copy arrives
    DROPPED = 1  # lost (loss or an outage)
    DUPLICATED = 2  # two copies arrive
    REFUSED = 3  # the connection was refused or reset at once (noticed at once)


DELIVERED, DROPPED, DUPLICATED = Delivery.DELIVERED, Delivery.DROPPED, Delivery.DUPLICATED
REFUSED = Delivery.REFUSED


class Link:
    """One direction of the Live <-> Reasoner path."""

    def __init__(self, env: simpy.Environment, name: str, cfg: LinkConfig,
                 outages: tuple[OutageConfig, ...], streams: Streams,
                 stream_prefix: str | None = None) -> None:
        """``name`` is the direction (``uplink`` / ``downlink``); the random streams are named
        ``<stream_prefix or name>.<fault>`` (a second view of a direction, e.g. the extension
        negotiation, draws from its own streams and never shifts the messages' draws)."""
        self.env = env
        self._later = scheduler(env)  # call_later bound to env
        self._push, self._next_id = pusher(env)  # the per-message arrival: no call frame
        self.name = name
        mine = [o for o in outages if o.direction in (name, "both")]
        # blackhole and refusing windows drop every message; a loss window drops with its p
        self.windows = tuple((o.start_s, o.start_s + o.duration_s) for o in mine
                             if o.kind != "loss")
        self.refusing = tuple((o.start_s, o.start_s + o.duration_s) for o in mine
                              if o.kind in REFUSING_KINDS)
        self.loss_windows = tuple((o.start_s, o.start_s + o.duration_s, o.loss) for o in mine
                                  if o.kind == "loss")
        self.loss = cfg.loss
        self.duplication = cfg.duplication
        self.reorder = cfg.reorder
        self.const_latency = (float(cfg.latency_s.value) if isinstance(cfg.latency_s, Const)
                              else None)
        self.clean = not (self.loss or self.duplication or self.reorder or self.windows
                          or self.loss_windows)
        self.fast = self.clean and self.const_latency is not None
        prefix = stream_prefix or name
        self.latency = streams.sampler(f"{prefix}.latency", cfg.latency_s)
        self.u_loss = streams.uniform(f"{prefix}.loss")
        self.u_dup = streams.uniform(f"{prefix}.duplication")
        self.dup_delay = streams.sampler(f"{prefix}.duplicate_delay", cfg.duplicate_delay_s)
        self.u_reorder = streams.uniform(f"{prefix}.reorder")
        self.u_outage_loss = streams.uniform(f"{prefix}.outage_loss")
        self.reorder_delay = streams.sampler(f"{prefix}.reorder_delay", cfg.reorder_delay_s)
        self.sent = 0
        self.dropped = 0
        self.duplicated = 0

    def in_outage(self, t_s: float) -> bool:
        """True if a message sent at ``t_s`` falls in a scheduled outage of this direction."""
        return any(a <= t_s < b for a, b in self.windows)

    def refused(self, t_s: float) -> bool:
        """True if a connection attempted at ``t_s`` is refused or reset at once."""
        return any(a <= t_s < b for a, b in self.refusing)

    def _outage_lost(self, t_s: float) -> bool:
        for a, b, p in self.loss_windows:
            if a <= t_s < b:
                return self.u_outage_loss() < p
        return False

    def transit(self, send_s: float) -> float:
        """Transit time of one message sent at ``send_s``; -1.0 if it is dropped."""
        if self.fast:
            return self.const_latency  # type: ignore[return-value]  # fast: const_latency is set
        if self.windows and self.in_outage(send_s):
            return -1.0
        if self.loss_windows and self._outage_lost(send_s):
            return -1.0
        if self.loss and self.u_loss() < self.loss:
            return -1.0
        d = self.latency()
        if self.reorder and self.u_reorder() < self.reorder:
            d += self.reorder_delay()
        return d

    # ------------------------------------------------------------------ uplink: events

    def send(self, msg: Any, deliver: Callback, deliver_copy: Callback) -> Delivery:
        """Send ``msg`` now; schedule ``deliver`` (and ``deliver_copy`` for a duplicate).

        Both callbacks receive the message.
        """
        self.sent += 1
        now = sim_time(self.env)
        push, eid = self._push, self._next_id  # locals: self.f() is slower (see Reasoner._start)
        if self.fast:  # constant latency, no faults (so no outage either): one copy arrives
            push((now + self.const_latency, ENTRY_PRIORITY, eid(), deliver, msg))  # type: ignore[operator]  # fast: const_latency is set
            return DELIVERED
        if self.refusing and self.refused(now):
            self.dropped += 1
            return REFUSED
        d = self.transit(now)
        if d < 0.0:
            self.dropped += 1
            return DROPPED
        push((now + d, ENTRY_PRIORITY, eid(), deliver, msg))
        if self.duplication and self.u_dup() < self.duplication:
            self.duplicated += 1
            self._later(d + self.dup_delay(), deliver_copy, msg)
            return DUPLICATED
        return DELIVERED

    # ------------------------------------------------------------------ downlink: times

    def arrival(self, send_s: float) -> float:
        """Arrival time of one message sent at ``send_s`` (``inf`` if dropped)."""
        if self.fast:
            return send_s + self.const_latency  # type: ignore[operator]  # fast: const_latency is set
        d = self.transit(send_s)
        return INF if d < 0.0 else send_s + d

    def chunks(self, first_send_s: float, interval_s: float, n: int) -> list[float]:
        """Arrival times of chunks sent at ``first_send_s + k*interval_s``, k < n (``inf``:
        lost).  On a fast link (constant latency, no faults) they arrive in order."""
        if self.fast:
            c = self.const_latency
            return [first_send_s + k * interval_s + c for k in range(n)]  # type: ignore[operator]  # fast: const_latency is set
        out = []
        for k in range(n):
            t = first_send_s + k * interval_s
            d = self.transit(t)
            out.append(INF if d < 0.0 else t + d)
        return out

    def terminal(self, send_s: float) -> tuple[float, bool]:
        """(arrival, lost) of a stream's terminal event sent at ``send_s``.

        A terminal event lost at random is noticed when the stream ends without
        one (the JSON-RPC/SSE binding closes the response after the terminal
        state), at the time the event would have arrived.  One sent during a
        scheduled outage (a partition) is never noticed: nothing, not even the
        end of the stream, gets through, so only the Live layer's timers end the
        attempt (arrival ``inf``).
        """
        if self.fast:
            return send_s + self.const_latency, False  # type: ignore[operator]  # fast: const_latency is set
        if self.windows and self.in_outage(send_s):  # a refusing window cut it already
            return INF, True
        d = self.transit(send_s)
        if d >= 0.0:
            return send_s + d, False
        return send_s + self.latency(), True
