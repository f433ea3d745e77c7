"""The comparison of prediction and measurement (sim/calibrate/validate.py): metrics from a
turns table, bootstrap over calls, verdicts; expected values written out."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.calibrate.validate import bootstrap, compare, html_section, turn_metrics


def _turns(n_calls: int = 40, per_call: int = 3, fail_every: int = 0) -> pd.DataFrame:
    rows = []
    for c in range(n_calls):
        for k in range(per_call):
            i = c * per_call + k
            failed = fail_every and i % fail_every == 0
            start = 1.0 + i * 0.25
            comp = 0.5 + 0.01 * (i % 50)
            rows.append({"call_id": f"c{c}", "start_s": start,
                         "end_s": start + comp, "outcome": "failed" if failed else "completed",
                         "ttfc_s": np.nan if failed else comp - 0.3,
                         "completion_s": np.nan if failed else comp,
                         "attempts": 2 if failed else 1})
    return pd.DataFrame(rows)


def test_turn_metrics_written_out() -> None:
    t = _turns(fail_every=10)  # 120 turns from 1.0 s every 0.25 s; every 10th failed
    m = turn_metrics(t, warmup_s=1.0, duration_s=31.0)
    assert m["success_rate"] == pytest.approx(108 / 120)
    assert m["attempts_per_turn"] == pytest.approx((108 + 2 * 12) / 120)
    # completion = 0.5 + 0.01 (i mod 50) over the completed turns; the p50 is an observed value
    comp = np.array([0.5 + 0.01 * (i % 50) for i in range(120) if i % 10])
    assert m["completion_s.p50"] == pytest.approx(np.sort(comp)[math.ceil(0.5 * len(comp)) - 1])
    assert m["ttfc_s.p50"] == pytest.approx(m["completion_s.p50"] - 0.3)
    # goodput: completed turns ending in [1, 31) per second
    ends = np.array([1.0 + i * 0.25 + 0.5 + 0.01 * (i % 50) for i in range(120) if i % 10])
    assert m["goodput_turns_per_s"] == pytest.approx(((ends >= 1) & (ends < 31)).sum() / 30)
    # warm-up removes the turns that started before it
    assert turn_metrics(t, warmup_s=16.0, duration_s=31.0)["success_rate"] == pytest.approx(
        54 / 60)


def test_bootstrap_ci_holds_the_value_and_shrinks_with_more_calls() -> None:
    small = bootstrap(_turns(20, fail_every=7), 1.0, 100.0, seed=1)
    big = bootstrap(_turns(200, fail_every=7), 1.0, 1000.0, seed=1)
    m = turn_metrics(_turns(200, fail_every=7), 1.0, 1000.0)
    lo, hi = big["success_rate"]
    assert lo <= m["success_rate"] <= hi
    assert (hi - lo) < (small["success_rate"][1] - small["success_rate"][0])


def _reps() -> list[dict[str, float]]:
    """Five replications: completion p50 1.0 +- 0.1 (and the rest spread alike)."""
    out = []
    for d in (-0.1, -0.05, 0.0, 0.05, 0.1):
        out.append({"ttfc_s.p50": 1.0 + d, "ttfc_s.p95": 2.0 + 2 * d, "ttfc_s.p99": 3.0 + 3 * d,
                    "completion_s.p50": 1.0 + d, "completion_s.p95": 2.0 + 2 * d,
                    "completion_s.p99": 3.0 + 3 * d, "success_rate": 0.99 + d / 10,
                    "attempts_per_turn": 1.01 + d / 10, "goodput_turns_per_s": 10.0 + d})
    return out


MEASURED = {"ttfc_s.p50": 1.19, "ttfc_s.p95": 2.7, "ttfc_s.p99": 4.0,
            "completion_s.p50": 0.79, "completion_s.p95": 2.0, "completion_s.p99": 3.0,
            "success_rate": 0.95, "attempts_per_turn": 1.02, "goodput_turns_per_s": 10.1}


def test_verdict_is_the_one_run_prediction_interval() -> None:
    from rtalab.sim.shared.agreement import run_interval

    ci = {k: (v - 0.01, v + 0.01) for k, v in MEASURED.items()}
    rows = {r.metric: r for r in compare(_reps(), MEASURED, ci)}
    for k, r in rows.items():  # the row's interval is run_interval's of the replications
        iv = run_interval([x[k] for x in _reps()], 0.90, metric=k)
        assert r.interval == pytest.approx((iv.low, max(min(iv.high, 1.0), 0.0)) if
                                           k == "success_rate" else (iv.low, iv.high))
        assert r.verdict == ("inside" if r.interval[0] <= MEASURED[k] <= r.interval[1]
                             else "outside"), r
        assert r.interval[0] <= r.predicted <= r.interval[1]
    # log-scale t interval (n = 5) around 1.0 with s ~ 0.08: about [0.82, 1.21]
    assert rows["ttfc_s.p50"].verdict == "inside"         # 1.19
    assert rows["completion_s.p50"].verdict == "outside"  # 0.79
    assert rows["completion_s.p99"].verdict == "inside"   # 3.0, the centre
    assert rows["success_rate"].verdict == "outside"      # 0.95 against 0.98-1.0
    assert rows["goodput_turns_per_s"].verdict == "inside"
    # the interval is a one-run interval: wider than the 95 % CI of the mean
    r = rows["completion_s.p99"]
    assert r.interval[1] - r.interval[0] > r.predicted_ci[1] - r.predicted_ci[0]
    void = {r.metric: r.verdict for r in compare(_reps(), MEASURED, ci, void=True)}
    assert set(void.values()) == {"void"}
    html = html_section([{"name": "B", "rows": list(rows.values()), "png": "",
                          "client_cpu": 0.95, "void": True, "notes": ["<x>"]}], {"A": "1"})
    assert html.startswith('<section class="prediction">') and "VOID" in html
    assert "&lt;x&gt;" in html and 'class="verdict-outside"' in html
    assert "90 % one-run interval" in html


def test_accuracy_targets_only_on_long_runs() -> None:
    """p50 ±20 %, p95 ±30 %, p99 ±35 %: judged on a run of >= 300 s, said not judged below."""
    from rtalab.sim.calibrate.validate import accuracy_note, table_lines

    ci = {k: (v - 0.01, v + 0.01) for k, v in MEASURED.items()}
    rows = {r.metric: r for r in compare(_reps(), MEASURED, ci, run_s=300.0)}
    assert rows["ttfc_s.p50"].accuracy == "within"         # +19 % within 20 %
    assert rows["completion_s.p50"].accuracy == "beyond"   # -21 %
    assert rows["ttfc_s.p95"].accuracy == "beyond"         # +35 % beyond 30 %
    assert rows["ttfc_s.p99"].accuracy == "within"         # +33 % within 35 %
    assert rows["ttfc_s.p99"].error == pytest.approx(1 / 3)
    assert rows["success_rate"].accuracy == "–"            # a rate has no target
    short = {r.metric: r for r in compare(_reps(), MEASURED, ci, run_s=90.0)}
    assert short["completion_s.p50"].accuracy == "not judged (run < 300 s)"
    assert short["completion_s.p50"].verdict == rows["completion_s.p50"].verdict
    assert accuracy_note(300.0) is None
    assert "not judged" in accuracy_note(90.0) and "90 s" in accuracy_note(90.0)
    assert any("not judged" in line for line in table_lines(list(short.values())))


def test_success_rate_resolution_is_one_measured_turn() -> None:
    """Every replication succeeded completely; one failed turn of 200 is inside, three not."""
    reps = [dict(r, success_rate=1.0) for r in _reps()]
    ci = {k: (v, v) for k, v in MEASURED.items()}
    one = compare(reps, dict(MEASURED, success_rate=1 - 1 / 200), ci, turns=200)
    three = compare(reps, dict(MEASURED, success_rate=1 - 3 / 200), ci, turns=200)
    pick = lambda rows: next(r for r in rows if r.metric == "success_rate")  # noqa: E731
    assert pick(one).verdict == "inside"
    assert pick(three).verdict == "outside"
