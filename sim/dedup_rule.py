"""THE dedup decision rule, shared by the simulator and every reference store (DECISIONS D4).

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["insert", "done", "in_flight", "lost", "reclaim"]
StalePolicy = Literal["fail", "reclaim"]


@dataclass
class Row:
    """One stored entry as the rule sees it (the outcome is opaque to it)."""

    state: str  # "in_flight" | "done"
    owner: str
    claimed_at: float
    completed_at: float | None = None
    outcome: str | None = None


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


def judge(row: Row | None, now_s: float, window_s: float, lease_s: float,
          on_stale: StalePolicy, dead_owner: str | None = None) -> Verdict:
    """What a claim at ``now_s`` finds for ``row``: insert a new claim, replay a stored
    outcome, wait for the in-flight owner, or resolve a stale claim (lost / reclaim)."""
    if row is None:
        return "insert"
    if row.state == "done":
        assert row.completed_at is not None
        return "insert" if expired(row.completed_at, window_s, now_s) else "done"
    if stale(row.claimed_at, lease_s, now_s) or (dead_owner is not None
                                                 and row.owner == dead_owner):
        return "reclaim" if on_stale == "reclaim" else "lost"
    return "in_flight"
