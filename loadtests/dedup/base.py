"""The dedup (idempotency) store interface shared by every backend.

A store records, per ``(context_id, key)``, whether a request is new, being
executed, or finished with a stored outcome.  ``key`` is the dedup key chosen by
the dedup mode: the ``rta/requestGuid`` (mode ``request-guid``) or the
``rta/turnId`` (mode ``turn``).  Replay detection never crosses ``context_id``.

Protocol of use by the Reasoner, for one incoming request:

1. ``claim = await store.claim(ctx, key, owner, now_s)``
   - ``claim.state == "new"``: this caller owns execution; it runs the turn,
     then calls ``complete(ctx, key, outcome, now_s, owner=owner)`` (or
     ``abandon(ctx, key, owner=owner)`` if it stopped before any side effect and
     the entry should be retried from scratch).
   - ``"in_flight"``: another caller (possibly another worker process) owns it;
     ``await store.wait(ctx, key, timeout_s)`` returns the outcome when it is
     stored, or ``None`` on timeout or when the owner abandoned the entry (then
     claim again); the caller replays the outcome.
   - ``"done"``: ``claim.outcome`` is the stored outcome; replay it, never
     re-execute.  If ``claim.lost`` (see below) the outcome is the synthetic
     :func:`lost_outcome`: answer FAILED with its ``errorCode`` (``internal``).
   - ``"conflict"``: the key is live for a request with another fingerprint
     (``claim(..., fingerprint=...)``, stored with the entry; rule:
     :func:`rtalab.sim.shared.dedup_rule.judge`): a reuse of the key by a different request,
     neither replayed nor executed; nothing is written.
2. Entries are kept at least while in flight and ``window_s`` after completion.
   A claim with ``now_s > completed_at + window_s`` treats the entry as new
   (logical expiry, identical in every backend); ``purge(now_s)`` physically
   drops such entries (Redis does it by key TTL, so its ``purge`` returns 0).

Context bindings.  ``owner = await store.bind(ctx, principal, now_s)`` binds a
``contextId`` to the principal of its first turn in one atomic step (one write
transaction, one statement or script) and returns the principal it is bound to:
``principal`` when this call bound it (or it was already bound to it), the first
principal otherwise.  A binding lasts ``window_s`` after it was made (then the
context may be bound anew; ``purge`` drops it); bindings live apart from the
dedup entries, so no ``(ctx, key)`` can collide with them.  The Reasoner's
:mod:`rtalab.loadtests.reasoner.sessions` uses it for tenant isolation across workers.

Times (``now_s``) are wall-clock epoch seconds (``time.time()``): entries are
compared across worker processes, restarts and (Redis) hosts.

Leases and crashed owners.  An in-flight entry whose ``claimed_at`` is older than
``lease_s`` is *stale*: its owner probably died.  So is one whose owner the
claimant proved dead (``claim(..., dead_owner=owner)``; owner ids name their
process, :mod:`rtalab.loadtests.reasoner.owners`), at once — but it may have run the side
effect before dying, so the outcome is unknown.  ``on_stale`` picks the rule:

- ``"fail"`` (default, at-most-once): the next claim or waiter turns the entry
  into ``done`` with :func:`lost_outcome` and never re-executes under that key.
  The lost outcome carries the owner's last :meth:`DedupStore.progress` record
  (kept in the in-flight entry's outcome slot), so recovery can answer what is
  known.  A requestGuid therefore never runs twice because of the store; the Live
  layer's retry with a *new* requestGuid may (the turn re-execution hazard,
  which the witness ledger counts separately).  If the original owner was only
  slow and later completes, its real outcome replaces the lost marker.
- ``"reclaim"`` (at-least-once): the next claim becomes the new owner
  (``Claim.stale`` is true) and re-executes; the old owner's late ``complete``
  is refused.  The witness ledger then shows a duplicate execution of one
  requestGuid whenever the crashed owner had reached the side effect.

Outcomes are JSON-serialisable dicts (the terminal state, artifacts' text and
metadata, error code) so any worker can replay what another produced.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from rtalab.sim.shared.dedup_rule import StalePolicy as StalePolicy  # re-exported

ClaimState = Literal["new", "in_flight", "done", "conflict"]
STALE_POLICIES: tuple[str, ...] = ("fail", "reclaim")

DEFAULT_LEASE_S = 120.0
LOST_KEY = "rta.dedup.lost"  # marker key of the synthetic outcome of a crashed owner
LOST_ERROR_CODE = "internal"


def lost_outcome(owner: str, claimed_at_s: float, lost_at_s: float,
                 progress: str | None = None) -> dict[str, Any]:
    """The outcome stored for an entry whose owner's lease expired (policy ``fail``), with the
    owner's last :meth:`DedupStore.progress` record as ``sideEffect`` if it made one."""
    outcome: dict[str, Any] = {LOST_KEY: True, "errorCode": LOST_ERROR_CODE, "owner": owner,
                               "claimedAtS": claimed_at_s, "lostAtS": lost_at_s}
    if progress:
        outcome["sideEffect"] = progress
    return outcome


def is_lost_outcome(outcome: dict[str, Any] | None) -> bool:
    """True for the synthetic outcome of :func:`lost_outcome`."""
    return outcome is not None and outcome.get(LOST_KEY) is True


FAILURE_CAUSES: tuple[str, ...] = ("down", "timeout", "full", "busy", "loading", "read-only",
                                   "io", "error")


class StoreUnavailable(Exception):
    """The dedup store could not do ``op`` (:data:`FAILURE_CAUSES`: ``down`` = refused or
    reset, ``timeout`` = no answer in time, e.g. a frozen server, ``full`` = out of disk or
    memory, ...).  Its text names the operation and the cause, never an address: it is safe
    to log, and the Reasoner answers it as FAILED ``internal`` (docs/reasoner.md "When the
    dedup store fails").  Whether ``op`` took effect is unknown for ``timeout`` and ``down``
    (the command may have reached the server)."""

    def __init__(self, op: str, cause: str, retry_after_ms: int | None = None):
        super().__init__(f"dedup store unavailable ({cause}) during {op}")
        self.op = op
        self.cause = cause
        self.retry_after_ms = retry_after_ms


@dataclass(frozen=True)
class Claim:
    """Result of :meth:`DedupStore.claim`."""

    state: ClaimState
    outcome: dict[str, Any] | None = None
    owner: str | None = None  # in_flight: the current owner; stale claims: the previous one
    stale: bool = False  # this claim resolved an expired lease (lost or reclaimed)

    @property
    def lost(self) -> bool:
        """The entry's owner crashed mid-execution; the outcome is unknown."""
        return self.state == "done" and is_lost_outcome(self.outcome)


@dataclass
class StoreStats:
    """Counts for /metrics and checkers; ``hits`` are claims answered in_flight or done."""

    entries: int = 0
    in_flight: int = 0
    hits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class DedupStore(ABC):
    """Async idempotency store; one instance per Reasoner worker process."""

    name: str = "abstract"
    durable: bool = False  # survives a SIGKILL of the Reasoner process
    shared: bool = False  # visible to other worker processes

    def __init__(self, window_s: float = 300.0, *, lease_s: float = DEFAULT_LEASE_S,
                 on_stale: StalePolicy = "fail"):
        if not window_s >= 0:
            raise ValueError(f"window_s must be >= 0, got {window_s!r}")
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        if on_stale not in STALE_POLICIES:
            raise ValueError(f"on_stale must be one of {STALE_POLICIES}, got {on_stale!r}")
        self.window_s = float(window_s)
        self.lease_s = float(lease_s)
        self.on_stale: StalePolicy = on_stale

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections, create schema (called in the app lifespan)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def failure_cause(self, exc: BaseException) -> str | None:
        """The :data:`FAILURE_CAUSES` entry of a backend error (the store is down, frozen,
        full...); None for anything else (a bug, which must not be disguised as an outage)."""
        return None

    async def ping(self) -> None:
        """One cheap round trip (readiness probes); raises the backend's error if it fails."""
        await self.stats()

    async def __aenter__(self) -> DedupStore:
        """``async with open_store(...) as store`` starts and closes the store."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the store."""
        await self.close()

    @abstractmethod
    async def claim(self, context_id: str, key: str, owner: str, now_s: float,
                    dead_owner: str | None = None, fingerprint: str = "") -> Claim:
        """Atomically register ``key`` as in flight for ``owner`` unless already known.

        ``dead_owner``: the caller found the entry in flight for this owner and knows its
        process is gone; if the entry is still that owner's, it is stale now (lease rule).
        ``fingerprint``: the request's meaning, stored with a new entry; a live entry with
        another fingerprint answers ``conflict``."""

    @abstractmethod
    async def complete(self, context_id: str, key: str, outcome: dict[str, Any],
                       now_s: float, owner: str | None = None, fingerprint: str = "") -> bool:
        """Store the outcome and wake waiters; with ``owner``, only if still owned by it.
        ``fingerprint`` (of the request that produced the outcome) is kept by an entry that
        has none (one this write creates: a store that lost its data), so the fingerprint
        rule holds for it as for any other entry."""

    @abstractmethod
    async def progress(self, context_id: str, key: str, owner: str, value: str) -> bool:
        """Record how far the owner of an in-flight entry got (the Reasoner: its side effect
        ``started`` / ``done`` / ``unknown`` / ``none``), durably with the entry; False if
        ``owner`` no longer holds it in flight.  If the owner dies, the lost outcome carries
        the last value as ``sideEffect`` (:func:`lost_outcome`)."""

    @abstractmethod
    async def abandon(self, context_id: str, key: str, owner: str | None = None) -> bool:
        """Forget an in-flight entry that did no side effect (next claim is ``new``)."""

    @abstractmethod
    async def bind(self, context_id: str, principal: str, now_s: float) -> str:
        """Atomically bind ``context_id`` to ``principal`` unless bound; the bound principal."""

    @abstractmethod
    async def wait(self, context_id: str, key: str, timeout_s: float) -> dict[str, Any] | None:
        """Wait for the outcome of an in-flight entry; ``None`` on timeout or abandon."""

    @abstractmethod
    async def purge(self, now_s: float) -> int:
        """Drop finished entries and bindings older than ``window_s``; how many were dropped."""

    @abstractmethod
    async def stats(self) -> StoreStats:
        """Entry counts for /metrics and checkers."""
