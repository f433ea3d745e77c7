"""A fleet's hazards by cause, counted once for the simulator (``rtalab.sim.model.fleet``) and for a
load run (``rtalab.loadtests.loadrun.fleet``): which replica ran each side-effect execution, and
whether a later one ran where the first one's memory was.

An execution is ``(request_guid, degraded, turn, replica, time)``.  Over the executions in
time order: an execution of a requestGuid that already ran is an extra run (never for a
degraded one: no requestGuid was on the wire); a turn run again under another requestGuid
is re-executed (once per turn).  ``cause(first, replica, time)`` names each: with
``first`` = (replica, time) of the first execution, ``cross_replica`` (another replica),
``after_restart`` (the same one, restarted in between) or ``same_replica``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

CAUSES = ("cross_replica", "after_restart", "same_replica")

Execution = tuple[Any, bool, Hashable, Any, float]  # guid, degraded, turn, replica, time
Cause = Callable[[tuple[Any, float], Any, float], str]


def hazards_by_cause(executions: Iterable[Execution], cause: Cause, n_turns: int
                     ) -> dict[str, float | None]:
    """``fleet.dup_request_guid_<cause>_per_1k_turns`` and
    ``fleet.reexecuted_turn_<cause>_per_1k_turns`` per 1000 of ``n_turns`` (None: no turn)."""
    extra = dict.fromkeys(CAUSES, 0)
    reexec = dict.fromkeys(CAUSES, 0)
    first_of_guid: dict[Any, tuple[Any, float]] = {}
    first_of_turn: dict[Hashable, tuple[Any, Any, float]] = {}  # turn -> guid, replica, time
    reexec_seen: set[Hashable] = set()
    for guid, degraded, uid, r, t in sorted(executions, key=lambda x: x[4]):
        if degraded:  # no requestGuid on the wire: not a duplicate of one (the summary's rule)
            pass
        elif guid in first_of_guid:
            extra[cause(first_of_guid[guid], r, t)] += 1
        else:
            first_of_guid[guid] = (r, t)
        f = first_of_turn.get(uid)
        if f is None:
            first_of_turn[uid] = (guid, r, t)
        elif guid != f[0] and uid not in reexec_seen:
            reexec_seen.add(uid)
            reexec[cause((f[1], f[2]), r, t)] += 1
    n = n_turns
    out: dict[str, float | None] = {}
    for c in CAUSES:
        out[f"fleet.dup_request_guid_{c}_per_1k_turns"] = 1000.0 * extra[c] / n if n else None
        out[f"fleet.reexecuted_turn_{c}_per_1k_turns"] = 1000.0 * reexec[c] / n if n else None
    return out


def restart_cause(restarts: Callable[[Any], Iterable[float]]) -> Cause:
    """The cause of a later execution, given each replica's restart (memory loss) times."""

    def cause(first: tuple[Any, float], r: Any, t: float) -> str:
        r0, t0 = first
        if r0 != r:
            return "cross_replica"
        if any(t0 < x <= t for x in restarts(r)):
            return "after_restart"
        return "same_replica"

    return cause
