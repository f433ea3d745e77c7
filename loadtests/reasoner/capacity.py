"""Reasoning capacity of one worker process: ``workers`` concurrent turns, a bounded queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Capacity:
    """A semaphore with a waiting-room limit; ``try_slot`` refuses when the room is full."""

    def __init__(self, workers: int, queue_limit: int):
        self.workers = workers
        self.queue_limit = queue_limit
        self._sem = asyncio.Semaphore(workers)
        self.waiting = 0
        self.busy = 0

    def full(self) -> bool:
        """True if a new turn would have to wait and the waiting room is full."""
        return self.busy + self.waiting >= self.workers + self.queue_limit

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one reasoning worker for the duration of the block."""
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self._sem.release()
