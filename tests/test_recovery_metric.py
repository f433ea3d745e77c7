"""``recovery_s`` in run summaries (rtalab.sim.shared.recovery.run_recovery_s,
sim/shared/summary.py) and as an SLO: finite after a trigger the run recovers from, ``null``
(infinite) after one it does not, absent without a trigger; the same function judges a load
run's table (its outages)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.recovery import run_recovery_s, trigger_span
from rtalab.sim.shared.summary import summarize


def _series(good: np.ndarray, offered: float = 8.0) -> pd.DataFrame:
    return pd.DataFrame({S.T_S: np.arange(len(good)),
                         S.OFFERED_TURNS_PER_S: np.full(len(good), offered),
                         S.COMPLETED_TURNS_PER_S: good})


def test_run_recovery_s_on_a_synthetic_series() -> None:
    good = np.full(200, 8.0)
    good[50:90] = 0.0  # trigger 50-60 s, back 30 s after its end
    defined, rec = run_recovery_s(_series(good), (50.0, 60.0), 10.0, 200.0)
    # back at 90 s; the window from 86 s on averages 4.8 >= 0.9 x 8 - 3 sqrt(8 / 10) = 4.5
    assert defined and rec == pytest.approx(26.0)
    stuck = good.copy()
    stuck[50:] = 1.0
    assert run_recovery_s(_series(stuck), (50.0, 60.0), 10.0, 200.0) == (True, None)
    # no pre-trigger window: not defined
    assert not run_recovery_s(_series(good), (5.0, 10.0), 10.0, 200.0)[0]


@pytest.mark.parametrize("strategy,recovers", [("full_jitter", True), ("none", False)])
def test_recovery_s_in_the_summary_of_metastable_spike(strategy: str, recovers: bool) -> None:
    sc = load_scenario("metastable_spike").with_overrides(
        {"run.duration_s": 220, "live.backoff.strategy": strategy})
    assert trigger_span(sc) == (120, 130)
    summary = summarize([run_once(sc, 1)], sc.run.warmup_s)
    m = summary["metrics"][S.M_RECOVERY_S]
    if recovers:
        assert m["values"][0] is not None and 0 <= m["values"][0] < 30
    else:
        assert m["values"] == [None] and m["mean"] is None  # infinite
    slo = parse_slo("recovery_s<=30")
    assert slo.metric == S.M_RECOVERY_S


def test_no_trigger_no_recovery_metric() -> None:
    sc = load_scenario("baseline").with_overrides({"run.duration_s": 60})
    assert trigger_span(sc) is None
    assert S.M_RECOVERY_S not in summarize([run_once(sc, 1)], sc.run.warmup_s)["metrics"]


def test_a_load_runs_trigger_is_its_outages() -> None:
    from rtalab.loadtests.loadrun.orchestrate import load_trigger

    sc = load_scenario("retry_storm")  # a capacity drop: the simulator's, not a load run's
    assert load_trigger(sc) is None
    out = sc.with_overrides({"network.outages": [{"start_s": 40, "duration_s": 5},
                                                 {"start_s": 60, "duration_s": 10}]})
    assert load_trigger(out) == (40, 70)
    assert not math.isinf(load_trigger(out)[1])


def _turns(back_at: float | None, rate: int = 8, horizon: int = 120) -> pd.DataFrame:
    """One turn a 1/rate s from 0 to horizon; those ending in the outage 40-50 s and after
    it until ``back_at`` (never when None) failed."""
    start = np.arange(0, horizon, 1.0 / rate)
    end = start + 0.2
    lost = (end >= 40) & ((end < back_at) if back_at is not None else np.ones_like(end, bool))
    return pd.DataFrame({S.START_S: start, S.END_S: end,
                         S.OUTCOME: np.where(lost, "failed", "completed")})


def test_predict_judges_measured_recovery_against_the_simulated_replications() -> None:
    import argparse

    from rtalab.loadtests.loadrun.predict import _recovery
    from rtalab.sim.shared.recovery import predict_recovery, turns_recovery_s

    trig = (40.0, 50.0)
    ok, t = turns_recovery_s(_turns(60.0), trig, 10.0, 120.0)
    assert ok and 5.0 <= t <= 10.0
    assert turns_recovery_s(_turns(None), trig, 10.0, 120.0) == (True, None)
    args = argparse.Namespace(warmup=10.0, duration=120.0)
    extra = {"network.outages": [{"start_s": 40.0, "duration_s": 10.0, "direction": "both"}]}
    sims = [_turns(58.0), _turns(62.0), _turns(66.0)]
    rec = _recovery(extra, sims, _turns(61.0), args)
    assert rec.inside and rec.coverage == pytest.approx(0.5)
    assert "inside" in rec.sentence()
    late = _recovery(extra, sims, _turns(90.0), args)
    assert not late.inside and "OUTSIDE" in late.sentence()
    never = _recovery(extra, sims, _turns(None), args)
    assert not never.inside and "measured never" in never.sentence()
    assert _recovery(extra, sims[:1], _turns(61.0), args) is None
    # every prediction "never back": a measured collapse is inside, a recovery is not
    assert predict_recovery([None, None], None).inside
    assert not predict_recovery([None, None], 12.0).inside


def test_a_load_spike_is_a_phase_above_the_first_phases_rate() -> None:
    """Phases at the base rate are no trigger (a schedule that returns to it, or repeats it)."""
    sc = load_scenario("baseline").with_overrides({
        "run.duration_s": 300, "workload.arrival": "schedule", "workload.schedule": [
            {"start_s": 0, "calls_per_s": 2}, {"start_s": 60, "calls_per_s": 2},
            {"start_s": 100, "calls_per_s": 6}, {"start_s": 150, "calls_per_s": 2}]})
    assert trigger_span(sc) == (100, 150)


def test_no_offered_load_before_the_trigger_no_recovery_metric() -> None:
    good = np.full(200, 8.0)
    assert run_recovery_s(_series(good, offered=0.0), (50.0, 60.0), 10.0, 200.0) == (False, None)
