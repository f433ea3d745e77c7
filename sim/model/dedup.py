"""The Reasoner's dedup store: which requests count as repeats, for how long, at what memory cost.

Modes (``[reasoner] dedup``):

* ``request-guid`` — key ``(contextId, rta/requestGuid)`` (errors.md §4: a repeated
  requestGuid is a no-op replay; scoped by contextId, never across it);
* ``turn`` — key ``(contextId, taskId/rta/turnId, phase)``: any repeat of a turn's
  message is a replay, whatever its requestGuid (the INPUT_REQUIRED continuation
  is a different phase, so it is not a repeat).  As in the reference Reasoner
  (``loadtests/reasoner/idempotency.py``), a *retryable* failure releases the
  key instead of storing it — errors.md §3: a repeat attempt must be able to
  succeed — and the side effect is guarded by its own entry ``("side-effect",
  server contextId, taskId)``, claimed when the tool call starts and kept for
  the window after the execution ends: a retry of the same turn skips the tool;
* ``none`` — no store: every copy executes.

An entry is created when a request is admitted for execution, is *in flight*
until the execution ends, then holds the stored outcome for ``dedup_window_s``
(closed window, :mod:`rtalab.sim.shared.dedup_rule`: still replayed at ``end + window``,
purged after it; window 0: no retention at all, purged at once).  A repeat of an in-flight key joins
the execution (gets its outcome when it ends, also a released failure); a
repeat of a stored key gets the stored outcome replayed at once, without a
worker.  Failed outcomes are stored and replayed too (mode ``turn``: the
non-retryable ones).  Requests refused before execution (rate limit, full
queue, unknown session) and requests of degraded sessions (no requestGuid /
turnId on the wire) create no entry.  Memory = entries (side-effect guards
included) x ``dedup_entry_bytes``.

Fingerprints (:func:`rtalab.sim.shared.dedup_rule.conflicts`).  An entry keeps the
fingerprint of the request that opened it (:func:`fingerprint`: the taskId a
continuation names, the phase and the side-effect and handoff flags); a request
that finds a live entry under its key with another fingerprint reused the key for
a different request and is
refused (``schema-validation``, disposition ``key-conflict``), neither replayed
nor executed.  The modelled Live layer never reuses a key that way (copies and
retries of a request carry its own content), so the refusal is the rule's, kept
identical to the reference Reasoner's, not a modelled hazard.

Never "nothing ran" without proof (:func:`rtalab.sim.shared.dedup_rule.may_start`,
:func:`~rtalab.sim.shared.dedup_rule.known_side_effect`, shared with the reference Reasoner).
A side effect starts only after its start is recorded with its entry, and an answer says
it did not run only with proof.  The modelled store never fails, so the entry is always
open before the tool call (rule 1 holds by construction); injected errors happen before
any tool call (their FAILED is true: nothing ran) and a tool slower than
``upstream_timeout_s`` is answered ``upstream-timeout`` (it may have run, and does: the
witness records it).  The hazard accounting (:mod:`rtalab.sim.shared.summary`) says the same: a
FAILED turn whose side effect ran is a ghost success whatever its code — a "may have run"
answer is never read as "did not run" (tests/test_side_effect_rule.py checks every
simulated FAILED answer against the witness ledger).
"""

from __future__ import annotations

import ctypes
import sys
from collections import deque
from collections.abc import Hashable
from typing import Any

from rtalab.sim.model.messages import Request
from rtalab.sim.shared.dedup_rule import conflicts, expired_after, expires_at

INF = float("inf")
_new = object.__new__


class Entry:
    """One key's execution: in flight (with the requests that joined it) or its stored outcome."""

    __slots__ = ("context_id", "done", "error_code", "expires_s", "fingerprint", "started",
                 "status", "waiters")

    def __init__(self, context_id: int, fingerprint: Hashable = None) -> None:
        self.fingerprint = fingerprint  # of the request that opened it (None: never conflicts)
        self.started = False  # a worker has taken the execution (its stream is WORKING)
        self.done = False
        self.status = -1
        self.error_code: str | None = None
        self.context_id = context_id
        self.expires_s = INF
        self.waiters: list[tuple[Request, bool]] | None = None  # (request, is network copy)


def fingerprint(req: Request) -> Hashable:
    """The meaning of a request, as far as the model has one (see the module docstring): the
    task it names on the wire (a continuation's; a first message names none, whatever its
    logical turn), its phase and its side-effect and handoff flags."""
    return (req.task_id if req.resumes_task else None, req.phase, req.side_effect,
            req.wants_input)


def _trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: the free pages inside the heap back to the system (a table
    freed below the heap's top stays in the process's RSS otherwise); nothing elsewhere."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


def _usable(n: int) -> int:
    """Entries a CPython dict built by copying ``n`` live ones can take before it rebuilds
    itself: its table is the power of two >= 1.5 n, two thirds of which are usable."""
    size = 8
    while size < (3 * n + 1) // 2:
        size <<= 1
    return (size << 1) // 3


class DedupStore:
    """Keyed entries with a completion-time window, lazily purged in completion order.

    Compaction (``compacting``, set for bounded-memory runs).  The store's dict holds a
    constant number of live entries once the window is full, constantly replaced; every
    insertion takes a fresh slot (a deleted one stays a dummy), and when the slots run out
    CPython rebuilds the table at the power of two >= 3x the live entries -- twice the table
    a copy of them would need (and at ~350 k live entries: 42 MiB instead of 21, the old and
    the new table side by side while it rebuilds).  A compacting store counts the windows
    that started (:meth:`size`, once per simulated second: the expiry queue's length and the
    entries it purged) and copies its dict (``dict(entries)``: sized to 1.5x the live
    entries, same keys, same order) when the slots taken since the last rebuild near the
    table's (or right after CPython rebuilt it), if the copy has room for at least half as
    many insertions again; then glibc's free pages go back to the system (``malloc_trim``).
    As the window fills, too, each table is the copy's, not twice it.  What a lookup sees
    never changes; the per-request path is untouched.
    """

    #: bounded-memory runs: rebuild the dict at its live size (World sets it)
    compacting = False
    COMPACT_MIN = 1 << 16  # below this many live entries a table is small: left to CPython

    def __init__(self, mode: str, window_s: float, entry_bytes: int, peak_from_s: float) -> None:
        if mode not in ("request-guid", "turn"):
            raise ValueError(f"no dedup store for mode {mode!r}")
        self.by_turn = mode == "turn"
        self.window_s = window_s
        self.entry_bytes = entry_bytes
        self.peak_from_s = peak_from_s
        self.entries: dict[Hashable, Entry] = {}
        self._expiry: deque[tuple[float, Hashable, Entry]] = deque()
        self.peak_entries = 0
        self._purged = 0  # entries the compacting size() purged (the expiry queue's left end)
        self._last = 0    # windows started, at the last size()
        self._base = 0    # windows started, at the last (re)build of the dict
        self._filled = 0  # slots taken then (its live entries)
        self._usable_now = 0  # slots that table had
        self._table_bytes = sys.getsizeof(self.entries)

    def key(self, req: Request, context_id: int | None = None) -> Hashable:
        """The idempotency key of ``req`` in this mode, in the server session ``context_id``
        (default: the contextId ``req`` carries; docs/decisions.md D1 for a message without
        one)."""
        ctx = req.context_id if context_id is None else context_id
        if self.by_turn:
            return (ctx, req.task_id, req.phase)
        return (ctx, req.request_guid)

    def lookup(self, key: Hashable, now_s: float) -> Entry | None:
        """The live entry for ``key`` (in flight, or stored and inside its window), else None."""
        e = self.entries.get(key)
        if e is not None and expired_after(e.expires_s, now_s):
            del self.entries[key]
            return None
        return e

    @staticmethod
    def conflicts(e: Entry, presented: Hashable) -> bool:
        """True if a request with fingerprint ``presented`` reused the key of live entry ``e``
        (THE rule's :func:`rtalab.sim.shared.dedup_rule.conflicts`)."""
        return conflicts(e.fingerprint, presented)

    def open(self, key: Hashable, now_s: float, context_id: int,
             fingerprint: Hashable = None) -> Entry:
        """Create the in-flight entry of an execution admitted at ``now_s`` in ``context_id``.

        Expired entries are purged lazily, yet the peak stays exact: ``entries`` holds the
        live ones plus any expired ones not purged yet, so while its size is at most the
        peak no live count can exceed it; only a candidate new peak needs the purge.
        (:meth:`size`, sampled every simulated second, purges too.)
        """
        e = _new(Entry)  # as Entry(context_id, fingerprint), without the class call's __init__
        e.fingerprint = fingerprint
        e.started = False
        e.done = False
        e.status = -1
        e.error_code = None
        e.context_id = context_id
        e.expires_s = INF
        e.waiters = None
        entries = self.entries
        entries[key] = e
        if len(entries) > self.peak_entries and now_s >= self.peak_from_s:
            self.purge(now_s)
            n = len(entries)
            if n > self.peak_entries:
                self.peak_entries = n
        return e

    def close(self, key: Hashable, e: Entry, now_s: float, status: int, error_code: str | None,
              context_id: int) -> None:
        """Store the outcome of ``e``'s execution, ended at ``now_s``; start its window."""
        e.done = True
        e.status = status
        e.error_code = error_code
        e.context_id = context_id
        e.waiters = None
        if self.window_s > 0.0:
            e.expires_s = expires_at(now_s, self.window_s)
            self._expiry.append((e.expires_s, key, e))
        else:
            e.expires_s = now_s
            if self.entries.get(key) is e:
                del self.entries[key]

    def release(self, key: Hashable, e: Entry) -> None:
        """Forget ``e``'s execution without storing an outcome (turn mode, retryable failure):
        the next request with ``key`` executes again."""
        e.done = True
        e.waiters = None
        e.expires_s = -INF
        if self.entries.get(key) is e:
            del self.entries[key]

    def purge(self, now_s: float) -> None:
        """Drop entries whose window has ended by ``now_s`` (closed window, D4)."""
        q = self._expiry
        entries = self.entries
        while q and expired_after(q[0][0], now_s):
            _, key, e = q.popleft()
            if entries.get(key) is e:
                del entries[key]

    def size(self, now_s: float) -> int:
        """Entries held at ``now_s`` (after purging); a compacting store may rebuild its dict."""
        if self.compacting:
            q = self._expiry
            before = len(q)
            self.purge(now_s)
            self._purged += before - len(q)
            self._compact()
        else:
            self.purge(now_s)
        n = len(self.entries)
        if n > self.peak_entries and now_s >= self.peak_from_s:
            self.peak_entries = n
        return n

    def _compact(self) -> None:
        """Copy the dict before CPython would rebuild it, or right after it did (see the class
        docstring): the slots taken since the last (re)build counted by the windows started."""
        entries = self.entries
        started = len(self._expiry) + self._purged
        rate, self._last = started - self._last, started  # windows started per second
        n = len(entries)
        if sys.getsizeof(entries) != self._table_bytes:  # CPython rebuilt it, at >= 3x live
            self._table_bytes = sys.getsizeof(entries)
            self._usable_now, self._filled, self._base = _usable(2 * n), n, started
        elif (self._filled + started - self._base + 4 * rate + self._usable_now // 32
              < self._usable_now):  # the slots taken, those of the next seconds, a margin
            return
        room = _usable(n) - n
        if n < self.COMPACT_MIN or 2 * room < n:  # a copy would gain little room: not now
            return
        self.entries = fresh = dict(entries)
        del entries
        _trim_heap()  # the old table's pages back to the system (it may lie inside the heap)
        self._table_bytes = sys.getsizeof(fresh)
        self._usable_now, self._filled, self._base = _usable(n), n, started

    def state(self) -> dict[str, Any]:
        """Counters for the run's ``counters`` dict."""
        return {"dedup_peak_entries": self.peak_entries,
                "dedup_peak_bytes": self.peak_entries * self.entry_bytes}
