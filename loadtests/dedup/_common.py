"""Pieces shared by the Python-side backends: local wake-ups, the wait loop, counters.

The entry rule itself (:func:`judge`, :class:`Row`) is :mod:`sim.shared.dedup_rule`'s,
re-exported here for the backends."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from loadtests.dedup.base import StoreStats
from sim.shared.dedup_rule import Row, Verdict, judge  # noqa: F401 - THE rule (docs/decisions.md D4)

PeekState = Literal["done", "in_flight", "gone"]
Peek = Callable[[str, str], Awaitable[tuple[PeekState, dict[str, Any] | None]]]
EntryKey = tuple[str, str]


class LocalWakeups:
    """Futures of in-process waiters, resolved when this process completes or abandons a key."""

    def __init__(self) -> None:
        self._futures: dict[EntryKey, set[asyncio.Future[None]]] = {}

    async def wait(self, key: EntryKey, timeout_s: float) -> None:
        """Return when ``key`` is notified or after ``timeout_s``, whichever comes first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._futures.setdefault(key, set())
        waiters.add(fut)
        try:
            await asyncio.wait((fut,), timeout=timeout_s)
        finally:
            waiters.discard(fut)
            if not waiters and self._futures.get(key) is waiters:
                del self._futures[key]

    def notify(self, key: EntryKey) -> None:
        """Wake every local waiter of ``key``."""
        for fut in self._futures.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def __len__(self) -> int:
        """Number of keys with local waiters."""
        return len(self._futures)


async def poll_wait(peek: Peek, wakeups: LocalWakeups, context_id: str, key: str,
                    timeout_s: float, poll_min_s: float, poll_max_s: float,
                    counters: Counter[str]) -> dict[str, Any] | None:
    """Wait for an outcome: local wake-ups are immediate, other processes are polled."""
    counters["waits"] += 1
    deadline = time.monotonic() + max(0.0, timeout_s)
    delay = poll_min_s
    while True:
        state, outcome = await peek(context_id, key)
        if state == "done":
            return outcome
        if state == "gone":
            counters["waits_gone"] += 1
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            counters["wait_timeouts"] += 1
            return None
        await wakeups.wait((context_id, key), min(delay, remaining))
        delay = min(delay * 2, poll_max_s)


def make_stats(entries: int, in_flight: int, counters: Counter[str],
               **extra: Any) -> StoreStats:
    """A :class:`StoreStats` with the per-process counters in ``extra``."""
    hits = counters["claim_in_flight"] + counters["claim_done"]
    return StoreStats(entries=entries, in_flight=in_flight, hits=hits,
                      extra={**dict(sorted(counters.items())), **extra})


def count_claim(counters: Counter[str], state: str, stale: bool) -> None:
    """Book one claim result in the per-process counters."""
    counters["claims"] += 1
    counters[f"claim_{state}"] += 1
    if stale:
        counters["stale_lost" if state == "done" else "stale_reclaimed"] += 1
