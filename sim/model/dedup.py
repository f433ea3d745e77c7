"""The Reasoner's dedup store: which requests count as repeats, for how long, at what memory cost.

Modes (``[reasoner] dedup``):

* ``request-guid`` — key ``(contextId, rta/requestGuid)`` (errors.md §4: a repeated
  requestGuid is a no-op replay; scoped by contextId, never across it), held as the one int
  ``requestGuid << CONTEXT_BITS | contextId``;
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

from collections import deque
from collections.abc import Hashable
from typing import Any

from rtalab.sim.model.messages import Request
from rtalab.sim.shared.dedup_rule import conflicts, expired_after, expires_at

INF = float("inf")
_new = object.__new__
#: request-guid mode's key: ``requestGuid << CONTEXT_BITS | contextId``, injective for the
#: contextIds in ``[0, 2**CONTEXT_BITS)`` (:meth:`DedupStore.key` refuses any other)
CONTEXT_BITS = 40


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


class DedupStore:
    """Keyed entries with a completion-time window, lazily purged in completion order: one
    dict (the ``records = "all"`` path; bounded-memory runs use :class:`GenerationStore`,
    the same answers in tables that never grow with the run)."""

    def __init__(self, mode: str, window_s: float, entry_bytes: int, peak_from_s: float) -> None:
        if mode not in ("request-guid", "turn"):
            raise ValueError(f"no dedup store for mode {mode!r}")
        self.by_turn = mode == "turn"
        self.window_s = window_s
        self.entry_bytes = entry_bytes
        self.peak_from_s = peak_from_s
        #: every held entry (a :class:`GenerationStore`: the newest generation's only)
        self.entries: dict[Hashable, Entry] = {}
        #: whether ``entries`` is all the store holds (False: look in :meth:`lookup`)
        self.one_table = True
        self._expiry: deque[tuple[float, Hashable, Entry]] = deque()
        self.peak_entries = 0

    def key(self, req: Request, context_id: int | None = None) -> Hashable:
        """The idempotency key of ``req`` in this mode, in the server session ``context_id``
        (default: the contextId ``req`` carries; docs/decisions.md D1 for a message without
        one)."""
        ctx = req.context_id if context_id is None else context_id
        if self.by_turn:
            return (ctx, req.task_id, req.phase)
        if ctx >> CONTEXT_BITS:  # negative or too big: the int below would not be injective
            raise OverflowError(f"contextId {ctx!r} outside [0, 2**{CONTEXT_BITS})")
        # (ctx, requestGuid) as one int, requestGuid first (an int: the model mints them), so
        # keys order by requestGuid: no tuple to build and hash per request, and the
        # GenerationStore's filter compares ints
        return req.request_guid << CONTEXT_BITS | ctx

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
        """Entries held at ``now_s`` (after purging)."""
        self.purge(now_s)
        n = len(self.entries)
        if n > self.peak_entries and now_s >= self.peak_from_s:
            self.peak_entries = n
        return n

    def held(self) -> int:
        """Entries held now, expired ones not purged yet included (no purge)."""
        return len(self.entries)

    def bounded(self) -> GenerationStore:
        """An empty :class:`GenerationStore` with this store's settings (bounded memory)."""
        if self.held() or self._expiry:
            raise RuntimeError("a dedup store filled before it was bounded")
        mode = "turn" if self.by_turn else "request-guid"
        return GenerationStore(mode, self.window_s, self.entry_bytes, self.peak_from_s)

    def state(self) -> dict[str, Any]:
        """Counters for the run's ``counters`` dict."""
        return {"dedup_peak_entries": self.peak_entries,
                "dedup_peak_bytes": self.peak_entries * self.entry_bytes}


#: opens into one generation's dict before the next starts (its table: 2**17 slots, ~2.5 MiB)
GENERATION_OPENS = 1 << 16


class GenerationStore(DedupStore):
    """The store of bounded-memory runs: the same keys, entries and answers as
    :class:`DedupStore`'s one dict at every moment, held in generations instead.

    With the window full, one dict holds a constant number of live entries constantly
    replaced; every insertion takes a fresh slot (a deleted one stays a dummy), and when the
    slots run out CPython rebuilds the whole table (at ~350 k live entries: the old and the
    new 20-40 MiB tables side by side, a transient of the hour's peak RSS).  Here an entry is
    opened into the newest generation, a dict that takes :data:`GENERATION_OPENS` opens and
    is then left to empty as its entries expire or are dropped; the oldest generation, once
    empty or nearly (what is left: long executions in flight), is let go whole, its last
    entries moved into the newest (:meth:`size`, once per simulated second).  No table ever
    holds more than a generation, nothing is ever rebuilt at the live size.  A key is in one
    generation at most (``open`` drops it from the others, as the dict's assignment replaces
    it): a lookup checks the few live generations, newest first; the count of entries is
    kept, so the peak is the plain store's to the entry.  In mode ``request-guid`` the keys
    are ints ordered by requestGuid and the greatest key ever opened is kept: a lookup of a
    greater one is answered None at once (no generation can hold it, whatever the order of
    the opens), which is every new request's lookup, as the model mints requestGuids
    increasing (a retry that reuses its requestGuid, a network copy: below it, all
    generations checked).
    """

    def __init__(self, mode: str, window_s: float, entry_bytes: int, peak_from_s: float) -> None:
        super().__init__(mode, window_s, entry_bytes, peak_from_s)
        #: the generations, newest first (``entries`` is the newest)
        self.gens: list[dict[Hashable, Entry]] = [self.entries]
        self.one_table = False
        self._opens = 0  # opens (and moves) into the newest generation
        self._n = 0  # entries held: the plain store's ``len(entries)``
        #: the last lookup's key if no generation held it, none opened since (else None)
        self._missed: Hashable = None
        #: request-guid mode (int keys, ordered by requestGuid): the greatest key ever opened,
        #: so a lookup of a greater one (every new request's: requestGuids are minted
        #: increasing) answers None without a look into any generation
        self._ordered = not self.by_turn
        self._top: Any = -INF

    def lookup(self, key: Hashable, now_s: float) -> Entry | None:
        if self._ordered and key > self._top:  # above every key opened: in no generation
            self._missed = key
            return None
        for gen in self.gens:
            e = gen.get(key)
            if e is not None:
                if expired_after(e.expires_s, now_s):
                    del gen[key]
                    self._n -= 1
                    break
                return e
        self._missed = key  # no generation holds it now (only open adds a key)
        return None

    def open(self, key: Hashable, now_s: float, context_id: int,
             fingerprint: Hashable = None) -> Entry:
        e = Entry(context_id, fingerprint)
        if key != self._missed:  # the dict's assignment replaces a held key: drop it first
            self._drop(key, None)
        self._missed = None
        if self._opens >= GENERATION_OPENS:
            self.entries = {}
            self.gens.insert(0, self.entries)
            self._opens = 0
        self._opens += 1
        self.entries[key] = e
        self._n += 1
        if self._ordered and key > self._top:
            self._top = key
        if self._n > self.peak_entries and now_s >= self.peak_from_s:
            self.purge(now_s)
            if self._n > self.peak_entries:
                self.peak_entries = self._n
        return e

    def close(self, key: Hashable, e: Entry, now_s: float, status: int, error_code: str | None,
              context_id: int) -> None:
        newest = self.entries.get(key) is e  # window 0: the plain close deletes it from there
        super().close(key, e, now_s, status, error_code, context_id)
        if self.window_s <= 0.0:
            if newest:
                self._n -= 1
            else:
                self._drop(key, e)

    def release(self, key: Hashable, e: Entry) -> None:
        e.done = True
        e.waiters = None
        e.expires_s = -INF
        self._drop(key, e)

    def _drop(self, key: Hashable, e: Entry | None) -> None:
        """Delete ``key``'s entry if it is ``e`` (None: whichever it is); the oldest generation
        first (an expiring entry is an old one)."""
        for gen in reversed(self.gens):
            held = gen.get(key)
            if held is not None:
                if e is None or held is e:
                    del gen[key]
                    self._n -= 1
                return

    def purge(self, now_s: float) -> None:
        q = self._expiry
        drop = self._drop
        while q and expired_after(q[0][0], now_s):
            _, key, e = q.popleft()
            drop(key, e)

    def size(self, now_s: float) -> int:
        """Entries held at ``now_s`` (after purging); the oldest of three or more generations,
        once empty or nearly, goes whole, its last entries moved into the newest (the same
        keys and entries)."""
        self.purge(now_s)
        gens = self.gens
        if len(gens) > 2 and len(gens[-1]) * 32 <= GENERATION_OPENS:
            old = gens.pop()
            self.entries.update(old)
            self._opens += len(old)
        n = self._n
        if n > self.peak_entries and now_s >= self.peak_from_s:
            self.peak_entries = n
        return n

    def held(self) -> int:
        return self._n
