"""Prediction verdicts (sim.calibrate.validate), expected values written out: a prediction
whose load generator was saturated is void, never "agrees"; tolerances by percentile; a
rate judged by overlapping CIs."""

from __future__ import annotations

import math

import pytest

from sim.calibrate.validate import CLIENT_CPU_VOID, METRICS, compare


def _reps(v: float) -> list[dict[str, float]]:
    return [{k: v * (1 + 0.01 * i) for k in METRICS} for i in range(5)]


def test_a_saturated_load_generator_voids_every_verdict() -> None:
    measured = {k: 1.0 for k in METRICS}
    ci = {k: (0.9, 1.1) for k in METRICS}
    assert {r.verdict for r in compare(_reps(1.0), measured, ci)} == {"agrees"}
    assert {r.verdict for r in compare(_reps(1.0), measured, ci, void=True)} == {"void"}
    assert 0.5 < CLIENT_CPU_VOID < 1.0  # a share of one core


def test_percentile_tolerances_and_ci_overlap() -> None:
    pred = _reps(1.0)  # mean 1.02
    rows = {r.metric: r for r in compare(pred, {k: 1.02 * 1.25 for k in METRICS},
                                         {k: (1.2, 1.35) for k in METRICS})}
    # +25 %: p50 (±20 %) differs, p95 (±30 %) and p99 (±35 %) agree
    assert rows["completion_s.p50"].verdict == "differs"
    assert rows["completion_s.p95"].verdict == "agrees"
    assert rows["completion_s.p99"].verdict == "agrees"
    assert rows["completion_s.p50"].error == pytest.approx(0.25)
    others = [k for k in METRICS if not k.rsplit(".", 1)[-1].startswith("p")]
    for k in others:  # no tolerance: CIs overlap? measured CI [1.2, 1.35] vs ~[1.0, 1.04]
        assert rows[k].tolerance == "CIs overlap" and rows[k].verdict == "differs"


def test_an_undefined_figure_is_not_applicable_not_agreeing() -> None:
    measured = {k: math.nan for k in METRICS}
    ci = {k: (math.nan, math.nan) for k in METRICS}
    assert {r.verdict for r in compare(_reps(1.0), measured, ci)} == {"n/a"}
