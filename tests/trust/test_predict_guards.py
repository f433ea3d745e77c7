"""Prediction verdicts (rtalab.sim.calibrate.validate), expected values written out: a prediction
whose load generator was saturated is void, never "inside"; the accuracy targets by
percentile (judged on long runs only); a rate has no target and is judged by the interval."""

from __future__ import annotations

import math

import pytest

from rtalab.sim.calibrate.validate import CLIENT_CPU_VOID, METRICS, compare


def _reps(v: float) -> list[dict[str, float]]:
    return [{k: v * (1 + 0.01 * i) for k in METRICS} for i in range(5)]


def test_a_saturated_load_generator_voids_every_verdict() -> None:
    measured = {k: 1.0 for k in METRICS}
    ci = {k: (0.9, 1.1) for k in METRICS}
    assert {r.verdict for r in compare(_reps(1.0), measured, ci)} == {"inside"}
    assert {r.verdict for r in compare(_reps(1.0), measured, ci, void=True)} == {"void"}
    assert 0.5 < CLIENT_CPU_VOID < 1.0  # a share of one core


def test_percentile_tolerances_and_the_interval() -> None:
    pred = _reps(1.0)  # 1.00 .. 1.04
    rows = {r.metric: r for r in compare(pred, {k: 1.02 * 1.25 for k in METRICS},
                                         {k: (1.2, 1.35) for k in METRICS})}
    # +25 %: p50 (±20 %) beyond its target, p95 (±30 %) and p99 (±35 %) within theirs
    assert rows["completion_s.p50"].accuracy == "beyond"
    assert rows["completion_s.p95"].accuracy == "within"
    assert rows["completion_s.p99"].accuracy == "within"
    assert rows["completion_s.p50"].error == pytest.approx(0.25)
    # 1.275 lies outside the one-run interval of five values within 1.00 .. 1.04
    assert {r.verdict for r in rows.values()} == {"outside"}
    others = [k for k in METRICS if not k.rsplit(".", 1)[-1].startswith("p")]
    for k in others:  # a rate has no accuracy target
        assert rows[k].tolerance == "–" and rows[k].accuracy == "–"
    short = {r.metric: r for r in compare(pred, {k: 1.02 * 1.25 for k in METRICS},
                                          {k: (1.2, 1.35) for k in METRICS}, run_s=90.0)}
    assert short["completion_s.p50"].accuracy.startswith("not judged")


def test_an_undefined_figure_is_not_applicable_not_agreeing() -> None:
    measured = {k: math.nan for k in METRICS}
    ci = {k: (math.nan, math.nan) for k in METRICS}
    assert {r.verdict for r in compare(_reps(1.0), measured, ci)} == {"n/a"}


# ---------------------------------------------------------------- the units of the load B


def test_load_b_is_in_calls_per_second_from_the_offered_utilisation() -> None:
    """B (calls/s) = A (calls/s) x U / offered utilisation at A: at A = 2 calls/s with an
    offered utilisation of 0.4, U = 0.9 gives 4.5 calls/s, where the offered utilisation is
    0.9; --predict-rate is taken as calls/s as given; an unknown utilisation gives 2 x A."""
    from rtalab.loadtests.loadrun.predict import offered_utilisation_at, rate_b_for

    assert rate_b_for(None, 0.9, 2.0, 0.4) == (4.5, None)
    assert offered_utilisation_at(4.5, 2.0, 0.4) == pytest.approx(0.9)
    assert offered_utilisation_at(2.0, 2.0, 0.4) == pytest.approx(0.4)
    assert rate_b_for(None, 0.5, 3.0, 0.75) == (2.0, None)  # a lighter B than A
    assert rate_b_for(7.0, 0.9, 2.0, 0.4) == (7.0, None)
    rate, note = rate_b_for(None, 0.9, 2.0, math.nan)
    assert rate == 4.0 and note is not None and "2 x A" in note
    rate, note = rate_b_for(None, 0.9, 2.0, 0.0)
    assert rate == 4.0 and note is not None


def test_offered_utilisation_counts_turns_per_call_and_the_workers() -> None:
    """calls/s x mean turns per call x mean service / workers, written out: 1.5 calls/s x 4
    turns x 0.5 s / 4 workers = 0.75 (turns, not calls, occupy the workers); none without
    the capacity or the service time."""
    from rtalab.sim.calibrate.estimate import Value, offered_utilisation
    from rtalab.sim.scenario import load_scenario

    base = load_scenario("baseline").with_overrides({"workload.calls_per_s": 1.5,
                                                     "workload.turns_per_call": 4})
    fig: dict = {"mean_service_s": 0.5, "utilisation": 0.3}
    offered_utilisation(fig, [Value("reasoner.workers", 4, "test")], base)
    assert fig["offered_utilisation"] == pytest.approx(0.75)
    assert fig["utilisation"] == 0.3  # the measured busy share is left as it was
    for f, values in (({"mean_service_s": 0.5}, []),
                      ({"mean_service_s": math.nan}, [Value("reasoner.workers", 4, "test")]),
                      ({"mean_service_s": 0.5}, [Value("reasoner.workers", 0, "test")])):
        offered_utilisation(f, values, base)
        assert "offered_utilisation" not in f


def test_the_load_generators_cpu_voids_above_90_percent_of_a_core() -> None:
    from rtalab.loadtests.loadrun.predict import client_void

    assert client_void(0.95) and client_void(1.6)  # 1.6: more than a core (threads)
    assert not client_void(0.90)  # "above 90 %": the limit itself is not void
    assert client_void(0.9001)
    assert not client_void(0.5)
    assert not client_void(math.nan)  # no sample (calibration run given): not void
    assert client_void(0.6, limit=0.5) and not client_void(0.4, limit=0.5)


def _watch(series: dict[int, list[tuple[float, float]]]):
    from rtalab.loadtests.loadrun.predict import CpuWatch

    w = CpuWatch()  # not entered: no sampling thread, the samples are given
    w.seen = series
    return w


def _samples(rate_of) -> list[tuple[float, float]]:
    """CPU seconds sampled every 0.5 s for 20 s of a process using ``rate_of(t)`` cores."""
    out, cpu = [(0.0, 0.0)], 0.0
    for i in range(1, 41):
        cpu += 0.5 * rate_of((i - 1) * 0.5)
        out.append((i * 0.5, cpu))
    return out


def test_busiest_share_is_the_busiest_processes_busiest_window() -> None:
    """0.4 of a core, then 0.95 for 5 s, then 0.2: the busiest 5 s read 0.95, not the mean
    (0.4 x 10 + 0.95 x 5 + 0.2 x 5) / 20 = 0.4875; two processes at 0.6 and 0.7 read 0.7
    (the busiest one, not their sum 1.3)."""
    burst = _samples(lambda t: 0.4 if t < 10 else 0.95 if t < 15 else 0.2)
    assert _watch({1: burst}).busiest_share() == pytest.approx(0.95)
    two = _watch({1: _samples(lambda t: 0.6), 2: _samples(lambda t: 0.7)})
    assert two.busiest_share() == pytest.approx(0.7)
    assert math.isnan(_watch({}).busiest_share())


def test_busiest_share_is_over_five_seconds_and_needs_half_of_them() -> None:
    """A 1-s spike to a full core on 0.2: the share is read over 5 s, so the busiest reads
    (1 + 0.2 x 4) / 5 = 0.36, not 1.0; a process seen for 3 s at 0.8 reads 0.8 (half a
    window is enough), one seen for less than 2.5 s has no share."""
    spike = _samples(lambda t: 1.0 if 8 <= t < 9 else 0.2)
    assert _watch({1: spike}).busiest_share() == pytest.approx(0.36)
    short = [(0.5 * i, 0.4 * i) for i in range(7)]  # 3 s at 0.8
    assert _watch({1: short}).busiest_share() == pytest.approx(0.8)
    assert math.isnan(_watch({1: [(0.0, 0.0), (0.5, 0.5), (2.0, 2.0)]}).busiest_share())


def test_an_unknown_cpu_share_voids_nothing() -> None:
    from rtalab.loadtests.loadrun.predict import client_void

    assert client_void(float("nan")) is False
    assert client_void(0.95) is True and client_void(0.5) is False


def test_peak_is_a_factor_of_a_or_a_rate_in_calls_per_s() -> None:
    """``--peak 1.5x`` is 1.5 x A's call rate; ``--peak 3`` is 3 calls/s whatever A was;
    zero, negative and non-numbers are refused."""
    import argparse
    from types import SimpleNamespace

    from rtalab.loadtests.loadrun.predict import peak_rate, peak_spec

    assert peak_spec("1.5x") == ("factor", 1.5) and peak_spec("3") == ("rate", 3.0)
    for bad in ("0", "-2", "0x", "-1.5x", "fast", "nanx"):
        with pytest.raises(argparse.ArgumentTypeError):
            peak_spec(bad)
    base = SimpleNamespace(workload=SimpleNamespace(calls_per_s=2.0))
    cal = SimpleNamespace(figures={"turns_per_s": 8.0})
    rate, note = peak_rate(SimpleNamespace(peak=("rate", 3.0), source=None), base, cal)
    assert rate == 3.0 and "3 calls/s" in note
    rate, note = peak_rate(SimpleNamespace(peak=("factor", 1.5), source="prometheus:x"),
                           base, cal)
    assert rate == 3.0 and "1.5 x the observed 2 calls/s" in note


def test_the_measured_run_is_judged_after_its_warm_up_and_resampled_from_the_seed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The load run's side of the comparison: turns started in the warm-up are not judged,
    and its bootstrap draws from ``--seed`` (a fixed stream would ignore it)."""
    import argparse

    import numpy as np
    import pandas as pd

    from rtalab.loadtests.loadrun import predict

    seeds: list[int] = []

    def bootstrap(turns: pd.DataFrame, warmup_s: float, duration_s: float,
                  seed: int = 0) -> dict[str, tuple[float, float]]:
        seeds.append(seed)
        return {}

    monkeypatch.setattr(predict, "bootstrap", bootstrap)
    start = np.linspace(0.0, 59.0, 60)
    turns = pd.DataFrame({"start_s": start, "end_s": start + 1.0, "ttfc_s": 0.3,
                          "completion_s": 1.0, "attempts": 1,
                          "outcome": ["completed", "failed"] * 30})
    args = argparse.Namespace(warmup=10.0, duration=60.0, seed=7)
    measured, _, judged = predict.measured_at_b(turns, args)
    assert judged == int((start >= 10.0).sum()) == 50 and seeds == [7]
    assert measured["success_rate"] == 0.5
