"""THE dedup decision rule, shared by the simulator and every reference store (D4 of
docs/decisions.md).

Pure functions, no SimPy and no I/O, so the simulator's store
(:mod:`rtalab.sim.model.dedup`), the reference Reasoner's memory and SQLite stores
(:mod:`rtalab.loadtests.dedup`) call them and the Redis store's Lua claim script
mirrors them line by line (a parity test drives one table of cases through both).

Window (closed).  An outcome stored at ``completed_at_s`` with window
``window_s`` is still replayed at ``now_s <= completed_at_s + window_s`` and is
expired (the key is new again) at ``now_s > completed_at_s + window_s``.

Lease.  An in-flight entry whose claim is older than ``lease_s``
(``now_s - claimed_at_s > lease_s``), or whose owner is known to be gone
(``dead_owner``: the claimant could tell the owner process no longer exists,
see :mod:`rtalab.loadtests.reasoner.owners`), is stale: under ``on_stale = "fail"`` its
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


# ---------------------------------------------------------------------------- side effects
# Never claim "nothing ran" without proof (docs/reasoner.md "When the dedup store fails").
# errors.md §3 lets a client retry a retryable failure under a NEW requestGuid, so telling it
# "nothing of it ran" when the side effect may have run invites a second execution.  Two rules
# make the claim provable:
#
# 1. a side effect starts only after its start is durably recorded with the request's claim
#    (:func:`may_start`): a store that cannot record it refuses the request (retryable), the
#    tool is not called;
# 2. recovery answers from that record and the tool's own ledger (:func:`known_side_effect`):
#    "not-run" only with proof, "unknown" whenever the side effect may have run.

SideEffectKnown = Literal["ran", "unknown", "not-run"]
PROGRESS_STARTED, PROGRESS_DONE, PROGRESS_UNANSWERED, PROGRESS_NOT_RUN = (
    "started", "done", "unknown", "none")


def may_start(start_recorded: bool) -> bool:
    """Rule 1: the tool call may start only once its start is durably recorded."""
    return start_recorded


def known_side_effect(progress: str | None, witnessed: bool | None,
                      has_ledger: bool) -> SideEffectKnown:
    """Rule 2: what may be said of a request whose owner is gone, from its last progress
    record (``None``: none was written; ``"started"``, ``"done"``, ``"unknown"``: the tool
    gave no answer in time, ``"none"``: the tool answered that it did not run) and the tool's
    ledger (``witnessed``: True / False, None when it could not be asked; ``has_ledger``:
    there is one).

    - the ledger saw it, or the record says done: ``ran``;
    - the record says the tool refused: ``not-run``;
    - started or unanswered, and the ledger did not see it (or cannot be asked): ``unknown``
      (it may still be running, or be lost in transit);
    - no record: by rule 1 nothing was started — unless a ledger exists that could not be
      asked (a record may be lost by a store that loses acknowledged writes): ``not-run`` if
      the ledger says so or there is none, else ``unknown``.
    """
    if witnessed or progress == PROGRESS_DONE:
        return "ran"
    if progress == PROGRESS_NOT_RUN:
        return "not-run"
    if progress in (PROGRESS_STARTED, PROGRESS_UNANSWERED):
        return "unknown"
    return "not-run" if witnessed is False or not has_ledger else "unknown"
