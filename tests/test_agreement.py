"""rtalab.sim.shared.agreement: prediction intervals, the twin tests' simultaneous check, sim vs
load."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rtalab.sim.shared.agreement import (
    AGREES,
    DIFFERS,
    agreement_rows,
    prediction_interval,
    simultaneous_prediction,
    t_quantile,
)
from rtalab.sim.shared.compare import RunFolder, agreement_verdicts, compare_table


def test_t_quantiles_match_the_tables() -> None:
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-5)
    assert t_quantile(0.995, 30) == pytest.approx(2.749996, abs=1e-5)
    assert t_quantile(0.975, 1e9) == pytest.approx(1.959964, abs=1e-5)


def test_prediction_interval_by_hand() -> None:
    # mean 3, s = sqrt(2.5), t(0.975, 4) = 2.776445, sqrt(1 + 1/5): half = 2.776445 * sqrt(3)
    lo, hi = prediction_interval([1, 2, 3, 4, 5])
    assert (lo, hi) == pytest.approx((3 - 4.808947, 3 + 4.808947), abs=1e-5)
    assert prediction_interval([1.0]) is None


def _runs(rng: np.random.Generator, n: int, shift: float = 0.0) -> list[dict[str, float]]:
    """Runs with three correlated, skewed metrics (a load level drives all of them)."""
    load = rng.lognormal(0.0, 0.4, n)
    return [{"ttfc_s.p50": 0.5 * x * (1 + shift) * math.exp(e1),
             "ttfc_s.p99": 2.0 * x ** 1.5 + abs(e2),
             "attempts_per_turn": 1.0 + 0.03 * x + 0.01 * abs(e3)}
            for x, e1, e2, e3 in zip(load, *rng.normal(0, 0.1, (3, n)), strict=True)]


METRICS = ("ttfc_s.p50", "ttfc_s.p99", "attempts_per_turn")


@pytest.mark.parametrize("seed", [1, 2])
def test_a_twin_fails_the_check_at_most_once_in_r_plus_1(seed: int) -> None:
    """Exchangeable runs: the run is the most extreme of R + 1 = 20 with probability 1/20,
    whatever the (skewed, correlated) distributions: 2,000 trials, 5 % +- 3 sd (0.49 %)."""
    rng = np.random.default_rng(seed)
    fails = 0
    for _ in range(2000):
        *sims, run = _runs(rng, 20)
        fails += not simultaneous_prediction(sims, run, METRICS).ok
    assert 0.05 - 0.015 <= fails / 2000 <= 0.05 + 0.015  # 1/(R+1), not just below it


def test_a_shifted_run_fails_and_its_metric_is_outside() -> None:
    rng = np.random.default_rng(7)
    sims = _runs(rng, 300)
    run = _runs(rng, 1, shift=9.0)[0]  # p50 ten times as long
    check = simultaneous_prediction(sims, run, METRICS)
    assert not check.ok and check.false_failure_rate == pytest.approx(1 / 301)
    outside = [r.metric for r in check.rows if not r.inside]
    assert "ttfc_s.p50" in outside


def test_a_perfect_success_rate_is_not_infinitely_sure() -> None:
    """Every replication succeeded completely: one failed turn in ~600 scores 2 (the floor
    is half a turn), not infinity, so it passes beside a metric whose replications reach
    ~3; ten failed turns score 20 and fail."""
    rng = np.random.default_rng(3)
    sims = [{"success_rate": 1.0, "turns": 600.0, "ttfc_s.p50": float(v)}
            for v in rng.lognormal(-0.5, 0.1, 300)]
    both = ("success_rate", "ttfc_s.p50")
    one = simultaneous_prediction(sims, {"success_rate": 1 - 1 / 600, "ttfc_s.p50": 0.6},
                                  both)
    assert one.ok and one.rows[0].z == pytest.approx(2.0)
    assert not simultaneous_prediction(sims, {"success_rate": 1 - 10 / 600,
                                              "ttfc_s.p50": 0.6}, both).ok


def _summary(kind: str, values: dict[str, list[float]], se: dict[str, float] | None = None
             ) -> dict:
    metrics = {}
    for name, v in values.items():
        m = {"mean": sum(v) / len(v), "ci_low": None, "ci_high": None, "values": v}
        if se is not None:
            m["se"] = se[name]
        metrics[name] = m
    return {"kind": kind, "metrics": metrics}


SIM = _summary("sim", {"ttfc_s.p50": [0.70, 0.72, 0.68, 0.71, 0.69],
                       "success_rate": [0.99, 1.0, 0.995, 1.0, 0.99]})


def test_agreement_of_a_load_run_with_a_simulation() -> None:
    near = _summary("load", {"ttfc_s.p50": [0.71], "success_rate": [0.995]},
                    {"ttfc_s.p50": 0.02, "success_rate": 0.004})
    rows = {a.metric: a for a in agreement_rows(SIM, near)}
    assert {m: a.verdict for m, a in rows.items()} == {"ttfc_s.p50": AGREES,
                                                      "success_rate": AGREES}
    assert rows["ttfc_s.p50"].diff == pytest.approx(0.01)
    far = _summary("load", {"ttfc_s.p50": [0.95], "success_rate": [0.995]},
                   {"ttfc_s.p50": 0.02, "success_rate": 0.004})
    rows = {a.metric: a for a in agreement_rows(SIM, far)}
    assert rows["ttfc_s.p50"].verdict == DIFFERS and rows["success_rate"].verdict == AGREES
    # se = sqrt(var_sim / 5 + 0.02^2): var_sim = 0.00025 -> se = 0.02121; diff 0.25
    assert rows["ttfc_s.p50"].diff_ci_low > 0.25 - 3 * 0.02121


def test_compare_says_agrees_or_differs_for_a_load_run() -> None:
    far = _summary("load", {"ttfc_s.p50": [0.95], "success_rate": [0.995]},
                   {"ttfc_s.p50": 0.02, "success_rate": 0.004})
    runs = [RunFolder(Path("sim"), "sim", SIM), RunFolder(Path("load"), "load", far)]
    table = compare_table(runs)
    assert agreement_verdicts(table) == {"ttfc_s.p50": DIFFERS, "success_rate": AGREES}
    row = table[(table["run"] == 1) & (table["metric"] == "ttfc_s.p50")].iloc[0]
    assert row["diff"] == pytest.approx(0.25) and math.isnan(row["diff"]) is False
    # the other order: the difference changes sign, the verdicts stay
    table = compare_table(runs[::-1])
    assert agreement_verdicts(table) == {"ttfc_s.p50": DIFFERS, "success_rate": AGREES}
    row = table[(table["run"] == 1) & (table["metric"] == "ttfc_s.p50")].iloc[0]
    assert row["diff"] == pytest.approx(-0.25)
