"""Timed delivery of stream frames: latency, reordering within a window, terminal last.

A :class:`Releaser` delivers items at their release times in release-time order
(FIFO among equal times).  :class:`StreamTiming` computes those times for the
events of one stream from the ``[network].downlink`` draws: every event gets
``latency`` (FIFO kept: never released before its predecessor), an event that
carries ``rta/sequenceId`` and is chosen for reordering gets an extra
``reorder_delay`` on top, so later events overtake it; the terminal event is
released after every earlier event unless ``reorder_terminal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtalab.sim.scenario import LinkConfig

from .config import sample

EPS = 1e-6


class Releaser:
    """Deliver items at their release times (loop clock), earliest first, FIFO among ties."""

    def __init__(self, deliver: Callable[[Any], Awaitable[None]]):
        self._deliver = deliver
        self._heap: list[tuple[float, int, Any]] = []
        self._n = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run())

    def put(self, when: float, item: Any) -> None:
        """Schedule ``item`` for loop time ``when``."""
        heapq.heappush(self._heap, (when, self._n, item))
        self._n += 1
        self._wake.set()

    async def _run(self) -> None:
        """Deliver until closed and drained."""
        while True:
            if not self._heap:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            when = self._heap[0][0]
            delay = when - self._loop.time()
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            _, _, item = heapq.heappop(self._heap)
            await self._deliver(item)

    async def drain(self) -> None:
        """Deliver everything scheduled, then stop."""
        self._closed = True
        self._wake.set()
        await self._task

    def cancel(self) -> None:
        """Stop without delivering the rest."""
        self._task.cancel()


@dataclass
class StreamTiming:
    """Release times of one stream's events, and what reordering did to it."""

    link: LinkConfig
    rng: np.random.Generator
    reorder_terminal: bool = False
    last: float = float("-inf")   # release of the last FIFO event
    top: float = float("-inf")    # latest release so far
    events: int = 0
    delayed: int = 0
    overtaken: int = 0            # events released before an earlier one

    @property
    def active(self) -> bool:
        """True if this link can delay anything (else frames go straight through)."""
        lat = self.link.latency_s
        return self.link.reorder > 0 or getattr(lat, "value", None) != 0

    def draw_drop(self) -> bool:
        """Whether the connection is cut at this event (``downlink.loss``)."""
        return bool(self.link.loss > 0 and self.rng.random() < self.link.loss)

    def release(self, now: float, terminal: bool, reorderable: bool = True) -> float:
        """The release time of the next event, received at ``now``.

        Only ``reorderable`` events (those carrying ``rta/sequenceId``, which a
        consumer can put back in order) are ever held back; others stay FIFO.
        """
        self.events += 1
        base = max(now + sample(self.link.latency_s, self.rng), self.last + EPS)
        when = base
        if reorderable and self.link.reorder > 0 and self.rng.random() < self.link.reorder:
            when = base + sample(self.link.reorder_delay_s, self.rng)
            self.delayed += 1
        else:
            self.last = base
        if terminal and not self.reorder_terminal and when <= self.top:
            when = self.top + EPS
            self.last = when
        if when < self.top:
            self.overtaken += 1
        self.top = max(self.top, when)
        return when
