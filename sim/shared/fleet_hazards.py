"""A fleet's hazards by cause, counted once for the simulator (``rtalab.sim.model.fleet``) and for a
load run (``rtalab.loadtests.loadrun.fleet``): which replica ran each side-effect execution, and
whether a later one ran where the first one's memory was.

An execution is ``(request_guid, degraded, turn, replica, time)``.  Over the executions in
time order: an execution of a requestGuid that already ran is an extra run (never for a
degraded one: no requestGuid was on the wire); a turn run again under another requestGuid
is re-executed (once per turn).  Each is named by its cause, the first execution having
run on replica ``r0`` at ``t0``: ``cross_replica`` (another replica), ``after_restart``
(the same one, restarted in ``(t0, t]``) or ``same_replica``.  The simulator folds its
executions as the run goes (:class:`CauseFold`), a load run all of them at the end
(:func:`hazards_by_cause`): the same rule, the same counts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

CAUSES = ("cross_replica", "after_restart", "same_replica")

Execution = tuple[Any, bool, Hashable, Any, float]  # guid, degraded, turn, replica, time


class CauseFold:
    """The executions folded one at a time, in time order (:meth:`add`); :meth:`metrics` the
    counts of :func:`hazards_by_cause`.  What it keeps: per requestGuid the incarnation
    (replica, restarts of it so far) of its first execution, per turn that of its first
    execution and the requestGuid it carried, in mappings made by ``memo`` (the simulator's:
    ``rtalab.sim.model.intsets.IntCounts``, a few bytes per dense id, with ``guid_key`` = guid + 1
    as 0 is no entry there) -- not a row per execution.  ``restarts(r)`` must hold every
    restart of ``r`` at or before the time of each execution added."""

    REEXEC = 1 << 20  # added to a turn's code once it is counted re-executed

    def __init__(self, restarts: Callable[[Any], Iterable[float]],
                 memo: Callable[[], Any] = dict,
                 guid_key: Callable[[Any], Any] = lambda g: g) -> None:
        self.restarts = restarts
        self.extra = dict.fromkeys(CAUSES, 0)
        self.reexec = dict.fromkeys(CAUSES, 0)
        self._codes: dict[tuple[Any, int], int] = {}  # incarnation -> its code (from 1)
        self._incarnations: list[tuple[Any, int]] = [(None, 0)]
        self._enc = guid_key
        self.guid_first = memo()  # requestGuid -> incarnation code of its first execution
        self.turn_first = memo()  # turn -> code of its first execution (+ REEXEC once counted)
        self.turn_guid = memo()   # turn -> the (encoded) requestGuid of its first execution

    def _code(self, r: Any, t: float) -> int:
        inc = (r, sum(1 for x in self.restarts(r) if x <= t))
        code = self._codes.get(inc)
        if code is None:
            code = self._codes[inc] = len(self._incarnations)
            self._incarnations.append(inc)
        return code

    def _cause(self, first: int, code: int) -> str:
        (r0, e0), (r, e) = self._incarnations[first], self._incarnations[code]
        if r0 != r:
            return "cross_replica"
        return "after_restart" if e > e0 else "same_replica"

    def add(self, guid: Any, degraded: bool, uid: Hashable, r: Any, t: float) -> None:
        """One execution (no earlier one may come after it)."""
        code = self._code(r, t)
        if not degraded:  # no requestGuid on the wire: not a duplicate of one
            first = self.guid_first.get(guid, 0)
            if first:
                self.extra[self._cause(first, code)] += 1
            else:
                self.guid_first[guid] = code
        f = self.turn_first.get(uid, 0)
        if not f:
            self.turn_first[uid] = code
            self.turn_guid[uid] = self._enc(guid)
        elif f < self.REEXEC and self.turn_guid.get(uid) != self._enc(guid):
            self.turn_first[uid] = f + self.REEXEC
            self.reexec[self._cause(f, code)] += 1

    def metrics(self, n_turns: int) -> dict[str, float | None]:
        """``fleet.dup_request_guid_<cause>_per_1k_turns`` and
        ``fleet.reexecuted_turn_<cause>_per_1k_turns`` per 1000 of ``n_turns`` (None: no turn)."""
        n = n_turns
        out: dict[str, float | None] = {}
        for c in CAUSES:
            out[f"fleet.dup_request_guid_{c}_per_1k_turns"] = (
                1000.0 * self.extra[c] / n if n else None)
            out[f"fleet.reexecuted_turn_{c}_per_1k_turns"] = (
                1000.0 * self.reexec[c] / n if n else None)
        return out


def hazards_by_cause(executions: Iterable[Execution],
                     restarts: Callable[[Any], Iterable[float]], n_turns: int
                     ) -> dict[str, float | None]:
    """The metrics of :class:`CauseFold` over ``executions`` (any order; ties keep theirs),
    with each replica's restart (memory loss) times ``restarts(r)``."""
    fold = CauseFold(restarts)
    for e in sorted(executions, key=lambda x: x[4]):
        fold.add(*e)
    return fold.metrics(n_turns)
