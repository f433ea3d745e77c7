"""The load run's fleet safeguards one by one (issue 31: each planted bug of the "fleet load
run" area of tests/oneoff/mutate.py fails one of these): ledger rows and fakes, no processes."""

from __future__ import annotations

import time

from rtalab.loadtests.loadrun.fleet import (
    FailureSchedule,
    hazard_counters,
    replica_dedup,
    sum_metrics,
)
from rtalab.sim.scenario import load_scenario

T0 = 1000.0
DUP = "fleet.dup_request_guid_{}_per_1k_turns"
REEXEC = "fleet.reexecuted_turn_{}_per_1k_turns"


def _w(uid: str, guid: str | None, server: str, t: float) -> dict:
    return {"interactionId": uid, "requestGuid": guid, "server": server, "tEnd": T0 + t}


def _turn(uid: str, start: float) -> dict:
    return {"interaction_id": uid, "start_s": T0 + start}


def test_a_turn_starting_at_the_end_of_the_warm_up_is_counted() -> None:
    m = hazard_counters([_w("a", "g1", "r0", 3), _w("a", "g1", "r1", 4)], [_turn("a", 1.0)],
                        [], T0, warmup_s=1.0)
    assert m[DUP.format("cross_replica")] == 1000.0


def test_the_injected_copies_are_left_out() -> None:
    rows = [_w("a", "g1", "r0", 3), _w("a", "g1", "r1", 4), _w("b", "g2", "r0", 3)]
    m = hazard_counters(rows, [_turn("a", 2), _turn("b", 2)], [], T0, 1.0,
                        ignore_guids={"g1"})
    assert all(m[k.format(c)] == 0.0 for k in (DUP, REEXEC)
               for c in ("cross_replica", "after_restart", "same_replica"))


def test_a_turn_run_three_times_is_re_executed_once() -> None:
    rows = [_w("d", "g4", "r0", 3), _w("d", "g5", "r1", 4), _w("d", "g6", "r2", 5)]
    m = hazard_counters(rows, [_turn("d", 2)], [], T0, 1.0)
    assert m[REEXEC.format("cross_replica")] == 1000.0


def test_executions_are_taken_in_time_order_whatever_the_row_order() -> None:
    """The later row is the earlier execution: r0 ran g1 at 3 s, was killed at 5 s, ran it
    again at 9 s -- after a restart, whichever row comes first."""
    rows = [_w("a", "g1", "r0", 9), _w("a", "g1", "r0", 3)]
    kills = [{"how": "replica", "replica": 0, "t": T0 + 5}]
    m = hazard_counters(rows, [_turn("a", 2)], kills, T0, 1.0)
    assert m[DUP.format("after_restart")] == 1000.0
    assert m[DUP.format("same_replica")] == 0.0


def _fleet(**over: object) -> object:
    return load_scenario("baseline").with_overrides({"fleet.replicas": 2, **over}).fleet


def test_a_replica_still_down_at_the_end_is_written_not_ready() -> None:
    fleet = _fleet(**{"fleet.failures": [{"replica": 1, "start_s": 1.0, "duration_s": 50.0}]})
    sched = FailureSchedule(fleet)  # type: ignore[arg-type]
    killed, rows, said = [], [], []
    t0 = time.time() - 2.0
    sched.step(2.0, t0, killed.append, lambda r: None, rows.append, said.append)
    assert killed == [1] and rows == [] and sched
    sched.finish(t0, rows.append)
    assert [(r["replica"], r["how"], r["ready"]) for r in rows] == [(1, "replica", False)]
    assert not sched
    # one that came back in time: ready
    again = FailureSchedule(fleet)  # type: ignore[arg-type]
    rows2: list[dict] = []
    again.step(2.0, t0, killed.append, lambda r: None, rows2.append, said.append)
    again.step(51.0, t0, killed.append, lambda r: None, rows2.append, said.append)
    assert [r["ready"] for r in rows2] == [True]


def test_the_fleets_metrics_are_every_replicas_counters_added_up() -> None:
    assert sum_metrics([{"a": 1.0, "b": 2.0}, None, {"a": 3.0}]) == {"a": 4.0, "b": 2.0}
    assert sum_metrics([None, None]) is None


def test_shared_state_puts_every_replica_on_the_one_store() -> None:
    url = "sqlite:///tmp/dedup.db"
    assert replica_dedup(_fleet(**{"fleet.state": "shared"}), url) == url  # type: ignore[arg-type]
    assert replica_dedup(_fleet(**{"fleet.state": "per-replica"}),  # type: ignore[arg-type]
                         url) == "memory"
