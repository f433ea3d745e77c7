"""Pieces shared by the backends: local wake-ups, the wait loop, a waiter's view of an
entry (:func:`peek_view`) and :class:`PollingStore`, their base class (per-process
counters, ``wait``).

The entry rule itself (:func:`judge`, :class:`Row`) is :mod:`rtalab.sim.shared.dedup_rule`'s,
re-exported here for the backends."""

from __future__ import annotations

import asyncio
import json
import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from rtalab.loadtests.dedup.base import Claim, DedupStore, StoreStats

# THE rule (docs/decisions.md D4), re-exported
from rtalab.sim.shared.dedup_rule import Row as Row
from rtalab.sim.shared.dedup_rule import Verdict
from rtalab.sim.shared.dedup_rule import judge as judge

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


def peek_view(row: Row | None, verdict: Verdict) -> tuple[PeekState, dict[str, Any] | None] | None:
    """A waiter's view of ``row`` judged ``verdict`` (by :func:`judge` without a fingerprint):
    ``gone`` (absent, expired or to be reclaimed), ``done`` with the stored outcome, or
    ``in_flight``; ``None`` for a stale lease (``lost``), which the store resolves."""
    if verdict in ("insert", "reclaim"):
        return "gone", None
    assert row is not None
    if verdict == "done":
        assert row.outcome is not None
        return "done", json.loads(row.outcome)
    if verdict == "in_flight":
        return "in_flight", None
    return None


class PollingStore(DedupStore):
    """A backend whose waiters are woken at once by a local future when this process ends the
    entry and otherwise poll :meth:`_peek` (``poll_min_s`` doubling to ``poll_max_s``);
    it keeps the per-process counters that :meth:`_stats` reports."""

    poll_min_s = 0.002
    poll_max_s = 0.05

    def __init__(self, window_s: float = 300.0, **kwargs: Any):
        super().__init__(window_s, **kwargs)
        self._wakeups = LocalWakeups()
        self._counters: Counter[str] = Counter()

    @abstractmethod
    async def _peek(self, context_id: str, key: str) -> tuple[PeekState, dict[str, Any] | None]:
        """A waiter's view of the entry now; resolves a stale lease under policy ``fail``."""

    async def wait(self, context_id: str, key: str, timeout_s: float) -> dict[str, Any] | None:
        """Wait for the outcome: local futures for this process, backoff polling for others."""
        return await poll_wait(self._peek, self._wakeups, context_id, key, timeout_s,
                               self.poll_min_s, self.poll_max_s, self._counters)

    def _count_claim(self, claim: Claim) -> None:
        """Book one claim result in the per-process counters."""
        counters = self._counters
        counters["claims"] += 1
        counters[f"claim_{claim.state}"] += 1
        if claim.stale:
            counters["stale_lost" if claim.state == "done" else "stale_reclaimed"] += 1

    def _stats(self, entries: int, in_flight: int, **extra: Any) -> StoreStats:
        """A :class:`StoreStats` with the per-process counters in ``extra``."""
        counters = self._counters
        hits = counters["claim_in_flight"] + counters["claim_done"]
        return StoreStats(entries=entries, in_flight=in_flight, hits=hits,
                          extra={**dict(sorted(counters.items())), **extra})
