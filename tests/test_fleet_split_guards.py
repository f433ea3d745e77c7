"""The split-by-replica safeguards one by one (issue 31: each planted bug of the "fleet split"
area of tests/oneoff/mutate.py fails one of these): the static conditions, the parts'
scenario, and a merge of four short parts (replication 2, a capacity drop as trigger)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtalab.sim.fleetsplit import merge_parts, part_plan, part_scenario, split_reason
from rtalab.sim.runner import run_once
from rtalab.sim.shared import schema as S
from tests.test_fleet_split import FLEET


def test_turns_per_call_must_be_the_constant_one() -> None:
    why = split_reason(FLEET.with_overrides({"workload.turns_per_call": {"dist": "exp",
                                                                          "mean": 1.0}}))
    assert why is not None and "turns_per_call" in why


def test_one_retry_is_already_a_second_request() -> None:
    why = split_reason(FLEET.with_overrides({"live.retry.max_attempts": 2}))
    assert why is not None and "max_attempts = 2" in why


def test_each_schedule_phase_is_divided_among_the_parts() -> None:
    sc = FLEET.with_overrides({"workload.arrival": "schedule", "workload.schedule": [
        {"start_s": 0.0, "calls_per_s": 6.4}, {"start_s": 100.0, "calls_per_s": 3.2}]})
    assert [(p.start_s, p.calls_per_s) for p in part_scenario(sc).workload.schedule] == [
        (0.0, 1.6), (100.0, 0.8)]


@pytest.fixture(scope="module")
def merged() -> tuple[object, list, object]:
    sc = FLEET.with_overrides({"run.duration_s": 60.0, "run.warmup_s": 10.0,
                               "reasoner.capacity_drops": [{"start_s": 20.0, "duration_s": 5.0,
                                                            "workers": 1}]})
    part = part_scenario(sc)
    outs = [run_once(part, s, r) for s, r in part_plan(sc, 9, 2)]
    return sc, outs, merge_parts(sc, outs, 9, 2)


def test_the_merged_series_keep_their_replication(merged: tuple) -> None:
    _, _, m = merged
    assert set(m.timeseries[S.REPLICATION].to_numpy().tolist()) == {2}


def test_the_trigger_span_is_the_parts_own(merged: tuple) -> None:
    _, outs, m = merged
    assert outs[0].counters["trigger_s"] == (20.0, 25.0)
    assert m.counters["trigger_s"] == outs[0].counters["trigger_s"]


def test_the_request_shares_are_over_the_measurement_window(merged: tuple) -> None:
    sc, outs, m = merged
    lo, hi = math.ceil(sc.run.warmup_s), math.ceil(sc.run.duration_s)
    routed = np.array([o.timeseries[S.SERVER_REQUESTS_PER_S].to_numpy()[lo:hi].sum()
                       for o in outs])
    whole = np.array([o.timeseries[S.SERVER_REQUESTS_PER_S].to_numpy()[:hi].sum()
                      for o in outs])
    assert not np.allclose(routed / routed.sum(), whole / whole.sum())  # the window matters
    for i in range(4):
        assert m.counters[f"fleet.replica_requests_share.r{i}"] == pytest.approx(
            routed[i] / routed.sum(), rel=1e-12)
