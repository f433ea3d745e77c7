"""The Live layer's reorder buffer: events are played in ``sequenceId`` order.

Every stream event that carries a ``sequenceId`` (directives, spoken chunks,
statuses) enters the buffer; the buffer releases ("plays") an event when it
is the next one expected.  The first expected number is unknown (the contract
leaves 0- or 1-based open): 0 (or below) is played at once; otherwise the
lowest number held is played ``hold_s`` after the first arrival (seen at a
later arrival) or at the end of the stream.  A continuation of a task goes on
counting where its first phase stopped: it starts with ``next_expected``.  A
gap that stays open ``hold_s`` is skipped (the caller hears a gap, as in the
simulator: a lost chunk is skipped); a late event below what was already
played is dropped, never played out of order.  The end of the stream plays
everything still held, in order (the terminal state is authoritative).

With ``reorder=False`` (a test-only switch for the negative control) events
are played in arrival order and ``order_violations`` counts those played
after a higher ``sequenceId``.

The time of the first *playable* chunk is when the first spoken chunk is
played: that is the simulator's "first chunk" (``first_chunk_s``) seen by a
Live layer that reorders.  Checks of pending gaps happen at each arrival and
at the end of the stream (no timers).
"""

from __future__ import annotations

import heapq
import math


class Playback:
    """Reorder buffer of one request's stream."""

    __slots__ = ("_first_arrival_s", "_heap", "_n", "_next", "first_chunk_s", "hold_s",
                 "last_played", "order_violations", "played", "reorder")

    def __init__(self, reorder: bool = True, hold_s: float = 0.25,
                 next_expected: float | None = None) -> None:
        self.reorder = reorder
        self.hold_s = hold_s
        self._heap: list[tuple[float, int, bool, float]] = []  # (seq, n, is_chunk, arrival_s)
        self._n = 0
        self._next = next_expected  # next expected sequenceId, once known
        self._first_arrival_s = math.nan
        self.last_played = -math.inf
        self.played = 0
        self.order_violations = 0
        self.first_chunk_s = math.nan

    def push(self, seq: float, is_chunk: bool, now_s: float) -> list[tuple[int, int]]:
        """An event arrived; return ``(arrival index, play index)`` of every event played now."""
        played = self.push_next(seq, is_chunk, now_s)
        if played is not None:
            return [(self._n - 1, played)]
        n = self._n
        self._n = n + 1
        if not self.reorder:
            if seq < self.last_played:
                self.order_violations += 1
            return [self._play(n, seq, is_chunk, now_s)]
        nxt = self._next
        if nxt is not None and seq < nxt:
            return []  # late: its place was skipped already; never played out of order
        if n == 0:
            self._first_arrival_s = now_s
        heapq.heappush(self._heap, (seq, n, is_chunk, now_s))
        return self._release(now_s, end=False)

    def push_next(self, seq: float, is_chunk: bool, now_s: float) -> int | None:
        """:meth:`push` of the common case, without its list: an event that comes in order
        with nothing held (reordering on) plays at once; its play index (its pair is
        ``(its arrival index, that)``).  None, and nothing changed, in any other case: then
        :meth:`push` it."""
        nxt = self._next
        if self._heap or not self.reorder or (seq > 0 if nxt is None else seq != nxt):
            return None
        n = self._n
        self._n = n + 1
        if n == 0:
            self._first_arrival_s = now_s
        self._next = seq + 1
        if seq > self.last_played:
            self.last_played = seq
        played = self.played
        self.played = played + 1
        if is_chunk and self.first_chunk_s != self.first_chunk_s:  # NaN: no chunk yet
            self.first_chunk_s = now_s
        return played

    def finish(self, now_s: float) -> list[tuple[int, int]]:
        """The stream ended: play everything held, in order (same pairs as :meth:`push`)."""
        return self._release(now_s, end=True) if self._heap else []

    def _release(self, now_s: float, end: bool) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        heap = self._heap
        while heap:
            seq, n, is_chunk, _arrival_s = heap[0]
            if self._next is None:
                ok = end or seq <= 0 or now_s - self._first_arrival_s >= self.hold_s
            else:
                ok = end or seq <= self._next or (
                    now_s - min(e[3] for e in heap) >= self.hold_s)
            if not ok:
                break
            heapq.heappop(heap)
            out.append(self._play(n, seq, is_chunk, now_s))
            self._next = seq + 1
        return out

    def _play(self, n: int, seq: float, is_chunk: bool, now_s: float) -> tuple[int, int]:
        if seq > self.last_played:
            self.last_played = seq
        self.played += 1
        if is_chunk and math.isnan(self.first_chunk_s):
            self.first_chunk_s = now_s
        return n, self.played - 1
