"""THE dedup decision rule, shared by the simulator and every reference store (D4 of
docs/decisions.md).

Pure functions, no SimPy and no I/O, so the simulator's store
(:mod:`sim.model.dedup`), the reference Reasoner's memory and SQLite stores
(:mod:`loadtests.dedup`) call them and the Redis store's Lua claim script
mirrors them line by line (a parity test drives one table of cases through both).

Window (closed).  An outcome stored at ``completed_at_s`` with window
``window_s`` is still replayed at ``now_s <= completed_at_s + window_s`` and is
expired (the key is new again) at ``now_s > completed_at_s + window_s``.

Lease.  An in-flight entry whose claim is older than ``lease_s``
(``now_s - claimed_at_s > lease_s``), or whose owner is known to be gone
(``dead_owner``: the claimant could tell the owner process no longer exists,
see :mod:`loadtests.reasoner.owners`), is stale: under ``on_stale = "fail"`` its
outcome becomes *lost* (never re-executed), under ``"reclaim"`` the claimant
takes it over.

Fingerprint.  A claim presents the fingerprint of the request's meaning
(the Reasoner: method, taskId, parts and the profile's side-effect metadata; the
contextId is the entry's scope).  A live entry (in flight, or stored inside its
window) whose fingerprint differs from the claim's is a *conflict*: the same key
was reused for a different request, which is neither replayed nor executed (the
Reasoner answers ``schema-validation``).  An empty fingerprint on either side
(entries of claims that are not requests: continuation claims, side-effect
guards) never conflicts.  The conflict is judged before the lease: a request
that reuses a crashed owner's key is refused, never handed its lost outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["insert", "done", "in_flight", "lost", "reclaim", "conflict"]
StalePolicy = Literal["fail", "reclaim"]


@dataclass
class Row:
    """One stored entry as the rule sees it (the outcome is opaque to it)."""

    state: str  # "in_flight" | "done"
    owner: str
    claimed_at: float
    completed_at: float | None = None
    outcome: str | None = None
    fingerprint: str = ""  # of the request that claimed it ("" = none: never conflicts)


def expires_at(completed_at_s: float, window_s: float) -> float:
    """The last instant at which a stored outcome is still replayed."""
    return completed_at_s + window_s


def expired_after(expires_at_s: float, now_s: float) -> bool:
    """True once ``now_s`` is past :func:`expires_at` (closed window)."""
    return now_s > expires_at_s


def expired(completed_at_s: float, window_s: float, now_s: float) -> bool:
    """True if an outcome completed at ``completed_at_s`` is no longer replayed at ``now_s``."""
    return expired_after(expires_at(completed_at_s, window_s), now_s)


def stale(claimed_at_s: float, lease_s: float, now_s: float) -> bool:
    """True if an in-flight claim made at ``claimed_at_s`` has outlived its lease at ``now_s``."""
    return now_s - claimed_at_s > lease_s


def conflicts(stored: object, presented: object) -> bool:
    """True if a request presenting fingerprint ``presented`` reused the key of the one that
    stored ``stored`` (both set and different; a falsy one never conflicts)."""
    return bool(stored) and bool(presented) and stored != presented


def judge(row: Row | None, now_s: float, window_s: float, lease_s: float,
          on_stale: StalePolicy, dead_owner: str | None = None,
          fingerprint: str = "") -> Verdict:
    """What a claim at ``now_s`` presenting ``fingerprint`` finds for ``row``: insert a new
    claim, replay a stored outcome, wait for the in-flight owner, resolve a stale claim
    (lost / reclaim), or refuse a reuse of the key by a different request (conflict)."""
    if row is None:
        return "insert"
    if row.state == "done":
        assert row.completed_at is not None
        if expired(row.completed_at, window_s, now_s):
            return "insert"
        return "conflict" if conflicts(row.fingerprint, fingerprint) else "done"
    if conflicts(row.fingerprint, fingerprint):
        return "conflict"
    if stale(row.claimed_at, lease_s, now_s) or (dead_owner is not None
                                                 and row.owner == dead_owner):
        return "reclaim" if on_stale == "reclaim" else "lost"
    return "in_flight"
