"""Prediction verdicts (sim.calibrate.validate), expected values written out: a prediction
whose load generator was saturated is void, never "inside"; the accuracy targets by
percentile (judged on long runs only); a rate has no target and is judged by the interval."""

from __future__ import annotations

import math

import pytest

from sim.calibrate.validate import CLIENT_CPU_VOID, METRICS, compare


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
