"""Retry-storm analysis (issue 9, acceptance 3)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.answers.storm import (
    STRATEGIES,
    Detector,
    StormError,
    case_figures,
    detect_metastable,
    recovery_time,
    run_storm,
    trigger_window,
    validate_strategies,
)
from rtalab.sim.config import ConfigError
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.results import read_meta


def synthetic(goodput_after: float, back_at_s: float | None, end_s: float = 100.0,
              n: int = 250, offered: float = 10.0) -> pd.DataFrame:
    """Offered 10 turns/s throughout; goodput = offered before the trigger (50..end_s), 0
    during it, ``goodput_after`` × offered after it until ``back_at_s`` (then = offered)."""
    t = np.arange(n, dtype=float)
    good = np.full(n, offered)
    good[(t >= 50) & (t < end_s)] = 0.0
    after = t >= end_s
    if back_at_s is not None:
        after &= t < back_at_s
    good[after] = goodput_after * offered
    return pd.DataFrame({S.T_S: t, S.OFFERED_TURNS_PER_S: np.full(n, offered),
                         S.COMPLETED_TURNS_PER_S: good})


def test_detector_on_synthetic_series():
    trig = (50.0, 100.0)
    det = Detector(fraction=0.9, hold_s=60.0, window_s=10.0, noise_z=0.0)
    # back at once: goodput = offered from the trigger's end
    quick = synthetic(0.0, back_at_s=100.0)
    assert not detect_metastable(quick, trig, det)
    assert recovery_time(quick, trig, det) == 0.0
    # stuck at 30 % of offered for the rest of the run: metastable, never recovers
    stuck = synthetic(0.3, back_at_s=None)
    assert detect_metastable(stuck, trig, det)
    assert recovery_time(stuck, trig, det) is None
    # back only 70 s after the end: the first 10 s window averaging >= 90 % of offered
    # starts at 169 (1 s at 30 % + 9 s at 100 %): recovered after 69 s, which is
    # metastable with a 60 s hold and recovered with a 90 s hold
    late = synthetic(0.3, back_at_s=170.0)
    assert recovery_time(late, trig, det) == 69.0
    assert detect_metastable(late, trig, det)
    assert not detect_metastable(late, trig, Detector(0.9, 90.0, 10.0, 0.0))
    # at 85 % of offered: below a 0.9 fraction (metastable), above a 0.8 one (recovered)
    mild = synthetic(0.85, back_at_s=None)
    assert detect_metastable(mild, trig, det)
    assert not detect_metastable(mild, trig, Detector(0.8, 60.0, 10.0, 0.0))
    # a burst of completions (the backlog) then a relapse is not a recovery
    relapse = synthetic(0.3, back_at_s=None)
    relapse.loc[relapse[S.T_S].between(100, 119), S.COMPLETED_TURNS_PER_S] = 15.0
    assert detect_metastable(relapse, trig, det)
    with pytest.raises(StormError, match="ends before"):
        detect_metastable(quick, (50.0, 200.0), det)


def test_strategies_are_validated_and_unknown_keys_skipped():
    sc = load_scenario("retry_storm")
    table = {"ok": ("", {"live.backoff.strategy": "none"}),
             "future": ("", {"live.budget.not_yet.enabled": True})}
    runnable, skipped = validate_strategies(sc, None, table)
    assert list(runnable) == ["ok"] and list(skipped) == ["future"]
    with pytest.raises(StormError, match="unknown strategy"):
        validate_strategies(sc, ["nope"])
    with pytest.raises(ConfigError):  # a bad value is an error, not a skip
        validate_strategies(sc, None, {"bad": ("", {"live.backoff.strategy": "sometimes"})})
    # every strategy of the shipped table either applies or is skipped, none crashes
    runnable, skipped = validate_strategies(sc)
    assert set(runnable) | set(skipped) == set(STRATEGIES)


def test_trigger_window():
    assert trigger_window(load_scenario("retry_storm")) == (120.0, 160.0)
    spike = load_scenario("baseline").with_overrides({
        "workload.arrival": "schedule",
        "workload.schedule": [{"start_s": 0, "calls_per_s": 2}, {"start_s": 100,
                                                                 "calls_per_s": 6},
                              {"start_s": 130, "calls_per_s": 2}]})
    assert trigger_window(spike) == (100.0, 130.0)
    with pytest.raises(StormError, match="no trigger"):
        trigger_window(load_scenario("baseline"))


CASES = {
    # preset: (strategies, one expected metastable, one expected recovered)
    "retry_storm": ["exponential", "grpc_throttling", "breaker"],
    "metastable_spike": ["no_backoff", "full_jitter"],
}


@pytest.mark.parametrize("preset", sorted(CASES))
def test_storm_one_metastable_one_recovered(tmp_path, preset):
    sc = load_scenario(preset)
    det = Detector()
    res = run_storm(sc, tmp_path, strategies=CASES[preset], replications=2, detector=det)
    verdicts = {n: res.verdict(n) for n in res.runs}
    assert "metastable" in verdicts.values() and "recovered" in verdicts.values(), verdicts
    end = res.trigger[1]
    for name, run_dir in res.runs.items():
        ts_all = pd.read_parquet(run_dir / "timeseries.parquet")
        for rep, ts in ts_all.groupby(S.REPLICATION):
            # the verdict agrees with the raw series: mean goodput over the hold period
            # against offered load (no sliding windows, no detector code)
            hold = ts[(ts[S.T_S] >= end + 15) & (ts[S.T_S] < end + det.hold_s)]
            share = hold[S.COMPLETED_TURNS_PER_S].sum() / hold[S.OFFERED_TURNS_PER_S].sum()
            late = ts[(ts[S.T_S] >= end + det.hold_s) & (ts[S.T_S] < sc.run.duration_s)]
            late_share = late[S.COMPLETED_TURNS_PER_S].sum() / late[S.OFFERED_TURNS_PER_S].sum()
            if verdicts[name] == "metastable":
                assert share < 0.5 and late_share < 0.5, (name, rep, share, late_share)
            elif verdicts[name] == "recovered":
                assert late_share > 0.9, (name, rep, late_share)
    # the table's figures are reproducible from the run folders ...
    table = res.table()
    for name, run_dir in res.runs.items():
        assert case_figures(run_dir, res.trigger, det) == res.figures[name]
    assert set(table["strategy"]) == set(res.runs)
    for reps in res.figures.values():
        for r in reps:  # goodput falls during the trigger, never below zero
            assert 0.0 < r["goodput_dip"] <= 1.0
            assert r["peak_amplification"] >= 0.9
            if r["metastable"]:
                assert r["goodput_dip"] > 0.9
    # ... and each folder is a plain run: re-running its scenario.toml with the seeds its
    # meta.json records gives the same time series bit for bit
    run_dir = res.runs[CASES[preset][-1]]
    meta = read_meta(run_dir)
    sc_again = load_scenario(run_dir / "scenario.toml")
    outs = [run_once(sc_again, r["seed"], r["replication"]) for r in meta["replication_seeds"]]
    again = pd.concat([o.timeseries for o in outs], ignore_index=True)
    stored = pd.read_parquet(run_dir / "timeseries.parquet")
    pd.testing.assert_frame_equal(again, stored[again.columns], check_dtype=False)
    # a rerun into the same folder reuses the finished strategies
    before = {n: (d / "meta.json").stat().st_mtime_ns for n, d in res.runs.items()}
    run_storm(sc, tmp_path, strategies=list(res.runs), replications=2, detector=det)
    assert before == {n: (d / "meta.json").stat().st_mtime_ns for n, d in res.runs.items()}


def test_run_too_short_is_refused(tmp_path):
    sc = load_scenario("retry_storm").with_overrides({"run.duration_s": 220.0})
    with pytest.raises(StormError, match="must reach"):
        run_storm(sc, tmp_path, strategies=["exponential"], replications=1)
