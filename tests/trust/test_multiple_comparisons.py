"""Holm's correction wherever many metrics are judged at once: sim-vs-load agreement,
``rtalab compare``, tune's candidates.  Each test fails when the correction is skipped
(plain p < 0.05 per metric)."""

from __future__ import annotations

import numpy as np

from rtalab.sim.answers.tune import Objective, judge
from rtalab.sim.shared.agreement import DIFFERS, agreement_rows
from rtalab.sim.shared.stats import holm

N_METRICS = 80


def _null_summaries(rng: np.random.Generator) -> tuple[dict, dict]:
    """80 metrics; the load run is one more draw from the simulated law (no difference)."""
    sim = {"metrics": {}}
    load = {"kind": "load", "metrics": {}}
    for k in range(N_METRICS):
        mu, sd = 1.0 + k, 0.1 * (1 + k % 5)
        sim["metrics"][f"m{k}"] = {"values": list(rng.normal(mu, sd, 10))}
        load["metrics"][f"m{k}"] = {"mean": float(rng.normal(mu, sd))}
    return sim, load


def test_agreement_of_80_metrics_raises_a_false_alarm_in_at_most_5_percent_of_runs() -> None:
    """Family-wise: without Holm, P(some of 80 null metrics "differs") = 1 − 0.95^80 ≈ 98 %."""
    rng = np.random.default_rng(5)
    runs, alarms = 200, 0
    for _ in range(runs):
        sim, load = _null_summaries(rng)
        rows = agreement_rows(sim, load)
        assert len(rows) == N_METRICS
        alarms += any(r.verdict == DIFFERS for r in rows)
    assert alarms / runs <= 0.08, alarms


def test_agreement_still_finds_a_real_difference_among_80() -> None:
    rng = np.random.default_rng(6)
    sim, load = _null_summaries(rng)
    load["metrics"]["m3"]["mean"] = 4.0 + 3.0  # 7.5 sd away (sd 0.4)
    rows = {r.metric: r for r in agreement_rows(sim, load)}
    assert rows["m3"].verdict == DIFFERS


def test_holm_by_hand() -> None:
    # m = 4: sorted 0.01 <= 0.05/4, 0.02 > 0.05/3 -> stop; only the first is rejected
    assert holm([0.02, 0.01, 0.03, 0.04]) == [False, True, False, False]
    assert holm([0.001, 0.01, 0.02, 0.04]) == [True, True, True, True]  # 0.04 <= 0.05/1
    assert holm([0.04] * 2) == [False, False]  # uncorrected: both


def test_tune_judges_all_candidates_with_one_holm_correction() -> None:
    """10 candidates, each 'better' at p = 0.01: uncorrected, all ten are better; with Holm
    over the 10 tests (0.01 > 0.05 / 10) none is."""
    objs = [Objective("completion_s.p99", "minimize")]
    tests = [(i, "completion_s.p99", 0.01, -0.2) for i in range(10)]
    better, worse = judge(tests, 11, objs)
    assert better == [False] * 11 and worse == [False] * 11
    # one strong candidate survives the correction
    tests[4] = (4, "completion_s.p99", 0.001, -0.2)
    better, _ = judge(tests, 11, objs)
    assert better == [i == 4 for i in range(11)]


def test_compare_of_two_sims_flags_no_null_metric_among_80_with_holm() -> None:
    """``rtalab compare`` of two simulations drawn from the same law, 80 metrics, 10
    replications each: Holm keeps the family-wise alarm rate at 5 %; uncorrected, 4 of 80
    would 'differ' on average."""
    from pathlib import Path

    from rtalab.sim.shared.compare import RunFolder, compare_table

    rng = np.random.default_rng(8)
    alarms, runs = 0, 60
    for _ in range(runs):
        folders = [RunFolder(Path(f"r{j}"), f"r{j}", {"metrics": {
            f"m{k}": {"values": list(rng.normal(k + 1, 0.3, 10))} for k in range(N_METRICS)}})
            for j in range(2)]
        df = compare_table(folders)
        alarms += bool(df["differs"].eq(True).any())
    assert alarms / runs <= 0.12, alarms


def test_benjamini_hochberg_by_hand() -> None:
    from rtalab.sim.shared.stats import benjamini_hochberg

    # m = 4, q = 0.05: thresholds 0.0125, 0.025, 0.0375, 0.05; the largest rank under its
    # threshold is 3 (0.03 <= 0.0375), so the three smallest are rejected
    assert benjamini_hochberg([0.03, 0.001, 0.02, 0.5]) == [True, True, True, False]
    assert benjamini_hochberg([0.03, 0.06]) == [False, False]  # uncorrected: the first
    assert benjamini_hochberg([0.04, 0.045]) == [True, True]  # 0.045 <= 2 × 0.05 / 2


def test_sweep_answers_flag_no_metric_of_80_null_ones_in_most_sweeps() -> None:
    """A sweep's "what differs between the points" (Welch ANOVA per metric, Benjamini–
    Hochberg over all): 3 points × 5 replications of 80 metrics that do not differ flag
    something in <= 12 % of 60 sweeps (uncorrected: almost all)."""
    import pandas as pd

    from rtalab.sim.report.sweeps import sweep_differences

    rng = np.random.default_rng(12)
    flagged = 0
    for _ in range(60):
        rows, point_metrics = [], []
        for p in range(3):
            pm = {}
            for k in range(N_METRICS):
                vals = list(rng.normal(k + 1, 0.5, 5))
                pm[f"m{k}"] = {"values": vals}
                rows.append({"point": p, "metric": f"m{k}", "mean": float(np.mean(vals))})
            point_metrics.append(pm)
        flagged += bool(sweep_differences(pd.DataFrame(rows), point_metrics))
    assert flagged / 60 <= 0.12, flagged


def test_holm_rejects_a_p_value_exactly_at_its_threshold() -> None:
    """Holm with 2 tests at 5 %: the smallest p is compared with 0.05 / 2; p = 0.025 is at
    the threshold and is rejected (p <= alpha / (m - rank)), the other kept."""
    from rtalab.sim.shared.stats import holm

    assert holm([0.025, 0.5], alpha=0.05) == [True, False]
    assert holm([0.0250001, 0.5], alpha=0.05) == [False, False]
