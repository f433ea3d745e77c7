"""The comparison of prediction and measurement (sim/calibrate/validate.py): metrics from a
turns table, bootstrap over calls, verdicts; expected values written out."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.calibrate.validate import bootstrap, compare, html_section, turn_metrics


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


def test_verdicts_by_tolerance_and_ci_overlap() -> None:
    reps = [{"ttfc_s.p50": 1.0, "ttfc_s.p95": 2.0, "ttfc_s.p99": 3.0, "completion_s.p50": 1.0,
             "completion_s.p95": 2.0, "completion_s.p99": 3.0, "success_rate": 0.99,
             "attempts_per_turn": 1.01, "goodput_turns_per_s": 10.0}] * 3
    measured = {"ttfc_s.p50": 1.19, "ttfc_s.p95": 2.7, "ttfc_s.p99": 4.0,
                "completion_s.p50": 0.79, "completion_s.p95": 2.0, "completion_s.p99": 3.0,
                "success_rate": 0.95, "attempts_per_turn": 1.02, "goodput_turns_per_s": 10.2}
    ci = {k: (v - 0.01, v + 0.01) for k, v in measured.items()}
    ci["attempts_per_turn"] = (1.0, 1.05)
    ci["goodput_turns_per_s"] = (9.9, 10.5)
    rows = {r.metric: r for r in compare(reps, measured, ci)}
    assert rows["ttfc_s.p50"].verdict == "agrees"        # +19 % within 20 %
    assert rows["completion_s.p50"].verdict == "differs"  # -21 %
    assert rows["ttfc_s.p95"].verdict == "differs"       # +35 % beyond 30 %
    assert rows["ttfc_s.p99"].verdict == "agrees"        # +33 % within 35 %
    assert rows["ttfc_s.p99"].error == pytest.approx(1 / 3)
    # predicted CI of identical replications is the value itself; 0.95 +- 0.01 misses 0.99
    assert rows["success_rate"].verdict == "differs"
    assert rows["attempts_per_turn"].verdict == "agrees"  # 1.01 inside [1.0, 1.05]
    assert rows["goodput_turns_per_s"].verdict == "agrees"
    void = {r.metric: r.verdict for r in compare(reps, measured, ci, void=True)}
    assert set(void.values()) == {"void"}
    html = html_section([{"name": "B", "rows": list(rows.values()), "png": "",
                          "client_cpu": 0.95, "void": True, "notes": ["<x>"]}], {"A": "1"})
    assert html.startswith('<section class="prediction">') and "VOID" in html
    assert "&lt;x&gt;" in html and 'class="verdict-differs"' in html
