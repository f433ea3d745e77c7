"""Per-process in-memory dedup store: the negative control (not shared, not durable).

Each Reasoner worker process has its own dict, so a duplicate that reaches another
worker is executed again — exactly what the load tests must be able to show.
Waiters are woken by asyncio futures; outcomes go through JSON like the other
backends so a replay never shares mutable state with the original.
"""

from __future__ import annotations

import heapq
import json
import time
from typing import Any

from rtalab.loadtests.dedup._common import (
    EntryKey,
    PeekState,
    PollingStore,
    Row,
    judge,
    peek_view,
)
from rtalab.loadtests.dedup.base import Claim, StoreStats, lost_outcome
from rtalab.sim.shared.dedup_rule import expired


class MemoryStore(PollingStore):
    """A dict of entries plus a completion-time heap for purging."""

    name = "memory"
    durable = False
    shared = False

    # no other process to poll: only to notice an expired lease; completions wake waiters at once
    poll_min_s = poll_max_s = 1.0

    def __init__(self, window_s: float = 300.0, **kwargs: Any):
        super().__init__(window_s, **kwargs)
        self._rows: dict[EntryKey, Row] = {}
        self._in_flight: set[EntryKey] = set()
        self._done_heap: list[tuple[float, EntryKey]] = []
        self._bindings: dict[str, tuple[str, float]] = {}  # contextId -> (principal, bound at)
        self._bind_heap: list[tuple[float, str]] = []

    async def claim(self, context_id: str, key: str, owner: str, now_s: float,
                    dead_owner: str | None = None, fingerprint: str = "") -> Claim:
        """Register ``key`` as in flight for ``owner`` unless known (atomic: no await inside)."""
        k = (context_id, key)
        row = self._rows.get(k)
        verdict = judge(row, now_s, self.window_s, self.lease_s, self.on_stale, dead_owner,
                        fingerprint)
        claim: Claim
        if verdict == "conflict":
            assert row is not None
            claim = Claim("conflict", owner=row.owner)
        elif verdict == "insert":
            self._rows[k] = Row("in_flight", owner, now_s, fingerprint=fingerprint)
            self._in_flight.add(k)
            claim = Claim("new")
        elif verdict == "done":
            assert row is not None and row.outcome is not None
            claim = Claim("done", json.loads(row.outcome), owner=row.owner)
        elif verdict == "in_flight":
            assert row is not None
            claim = Claim("in_flight", owner=row.owner)
        elif verdict == "reclaim":
            assert row is not None
            prev = row.owner
            row.owner, row.claimed_at, row.outcome = owner, now_s, None
            row.fingerprint = row.fingerprint or fingerprint
            claim = Claim("new", owner=prev, stale=True)
        else:  # lost
            assert row is not None
            outcome = self._mark_lost(k, row, now_s)
            claim = Claim("done", outcome, owner=row.owner, stale=True)
        self._count_claim(claim)
        return claim

    def _mark_lost(self, k: EntryKey, row: Row, now_s: float) -> dict[str, Any]:
        """Turn a stale in-flight row into done with the lost outcome."""
        outcome = lost_outcome(row.owner, row.claimed_at, now_s, row.outcome)
        self._finish(k, row, json.dumps(outcome), now_s)
        return outcome

    def _finish(self, k: EntryKey, row: Row, outcome_json: str, now_s: float) -> None:
        """Mark ``row`` done, index it for purge and wake local waiters."""
        row.state, row.completed_at, row.outcome = "done", now_s, outcome_json
        self._in_flight.discard(k)
        heapq.heappush(self._done_heap, (now_s, k))
        self._wakeups.notify(k)

    async def complete(self, context_id: str, key: str, outcome: dict[str, Any],
                       now_s: float, owner: str | None = None, fingerprint: str = "") -> bool:
        """Store the outcome; refused (False) if ``owner`` no longer owns the entry."""
        k = (context_id, key)
        text = json.dumps(outcome)
        row = self._rows.get(k)
        if owner is not None and (row is None or row.owner != owner):
            self._counters["completes_refused"] += 1
            return False
        if row is None:
            row = self._rows[k] = Row("done", "", now_s)
        row.fingerprint = row.fingerprint or fingerprint
        self._finish(k, row, text, now_s)
        self._counters["completes"] += 1
        return True

    async def progress(self, context_id: str, key: str, owner: str, value: str) -> bool:
        """Keep ``value`` in the in-flight row's outcome slot (if ``owner`` holds it)."""
        row = self._rows.get((context_id, key))
        if row is None or row.state != "in_flight" or row.owner != owner:
            return False
        row.outcome = value
        return True

    async def abandon(self, context_id: str, key: str, owner: str | None = None) -> bool:
        """Drop an in-flight entry (owned by ``owner`` if given); waiters get ``None``."""
        k = (context_id, key)
        row = self._rows.get(k)
        if row is None or row.state != "in_flight" or (owner is not None and row.owner != owner):
            return False
        del self._rows[k]
        self._in_flight.discard(k)
        self._wakeups.notify(k)
        self._counters["abandons"] += 1
        return True

    async def bind(self, context_id: str, principal: str, now_s: float) -> str:
        """Bind ``context_id`` to ``principal`` unless bound (atomic: no await inside)."""
        hit = self._bindings.get(context_id)
        if hit is not None and not expired(hit[1], self.window_s, now_s):
            self._counters["binds" if hit[0] == principal else "binds_foreign"] += 1
            return hit[0]
        self._bindings[context_id] = (principal, now_s)
        heapq.heappush(self._bind_heap, (now_s, context_id))
        self._counters["binds"] += 1
        return principal

    async def _peek(self, context_id: str, key: str) -> tuple[PeekState, dict[str, Any] | None]:
        """State of an entry for a waiter (a stale lease is resolved like a claim would)."""
        k = (context_id, key)
        row = self._rows.get(k)
        now_s = time.time()
        view = peek_view(row, judge(row, now_s, self.window_s, self.lease_s, self.on_stale))
        if view is not None:
            return view
        assert row is not None
        return "done", self._mark_lost(k, row, now_s)

    async def purge(self, now_s: float) -> int:
        """Drop done entries and bindings older than the window, in-flight ones past lease +
        window."""
        dropped = 0
        heap = self._done_heap
        while heap and expired(heap[0][0], self.window_s, now_s):
            t, k = heapq.heappop(heap)
            row = self._rows.get(k)
            if row is not None and row.state == "done" and row.completed_at == t:
                del self._rows[k]
                dropped += 1
        bheap = self._bind_heap
        while bheap and expired(bheap[0][0], self.window_s, now_s):
            t, ctx = heapq.heappop(bheap)
            hit = self._bindings.get(ctx)
            if hit is not None and hit[1] == t:
                del self._bindings[ctx]
                dropped += 1
        orphaned = [k for k in self._in_flight
                    if expired(self._rows[k].claimed_at, self.lease_s + self.window_s, now_s)]
        for k in orphaned:
            del self._rows[k]
            self._in_flight.discard(k)
            self._wakeups.notify(k)
            dropped += 1
        self._counters["purged"] += dropped
        return dropped

    async def stats(self) -> StoreStats:
        """Counts of this process's dict."""
        return self._stats(len(self._rows), len(self._in_flight),
                           bindings=len(self._bindings), waiting_keys=len(self._wakeups))
