"""Reasoning capacity of one worker process: ``workers`` concurrent turns, a bounded queue.

The same load-shedding rules as the simulator (DECISIONS D3, ``[reasoner]``):

- ``queue_limit``: a turn that would wait while that many already wait is
  refused at once (``full``);
- ``queue_timeout_s`` (0 = off): a turn that waited that long for a worker is
  refused (:class:`QueueTimeout`); both refusals answer ``queue_full_code``
  (``rate-limited`` carries ``retryAfterMs``), and nothing of the turn ran;
- ``queue_discipline``: which waiting turn a freed worker takes, ``fifo``
  (oldest first) or ``lifo`` (newest first: under overload the newest request
  is the one whose client is still waiting, the oldest has probably timed out).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class QueueTimeout(Exception):
    """A turn waited longer than ``queue_timeout_s`` for a worker."""


class Capacity:
    """Workers handed to waiters in FIFO or LIFO order, with a waiting-room limit and deadline."""

    def __init__(self, workers: int, queue_limit: int, discipline: str = "fifo",
                 timeout_s: float = 0.0):
        if discipline not in ("fifo", "lifo"):
            raise ValueError(f"queue discipline must be fifo or lifo, got {discipline!r}")
        self.workers = workers
        self.queue_limit = queue_limit
        self.lifo = discipline == "lifo"
        self.timeout_s = timeout_s
        self.busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Turns waiting for a worker."""
        return len(self._waiters)

    def full(self) -> bool:
        """True if a new turn would have to wait and the waiting room is full."""
        return self.busy + self.waiting >= self.workers + self.queue_limit

    async def acquire(self) -> None:
        """Take a worker, waiting in line if none is free; raise QueueTimeout past the deadline."""
        if self.busy < self.workers and not self._waiters:
            self.busy += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait((fut,), timeout=self.timeout_s or None)
        except BaseException:  # cancelled while waiting
            self._leave(fut)
            raise
        if not fut.done():  # the deadline passed first
            self._leave(fut)
            raise QueueTimeout(f"waited more than {self.timeout_s:g} s for a worker")

    def _leave(self, fut: asyncio.Future[None]) -> None:
        """Leave the line; a worker handed over meanwhile is passed on."""
        if fut.done() and not fut.cancelled():
            self.release()
            return
        fut.cancel()
        with contextlib.suppress(ValueError):  # (already handed over and popped)
            self._waiters.remove(fut)

    def release(self) -> None:
        """Free a worker: hand it to the next waiter (FIFO or LIFO), or back to the pool."""
        while self._waiters:
            nxt = self._waiters.pop() if self.lifo else self._waiters.popleft()
            if not nxt.done():
                nxt.set_result(None)  # the worker passes on: busy stays the same
                return
        self.busy -= 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one reasoning worker for the duration of the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()
