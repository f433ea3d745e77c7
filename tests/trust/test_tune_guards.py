"""Tune's recommendation, expected values written out: the direction of a paired
difference, the success guard, the second objective, constraints with confidence."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sim.answers.slo import parse_slo
from sim.answers.tune import ALPHA, Objective, _non_dominated, judge, success_lower
from sim.shared.stats import paired

P99 = "completion_s.p99"
GOOD = "goodput_turns_per_s"


def test_paired_difference_is_candidate_minus_current() -> None:
    current, candidate = [2.0, 2.2, 2.1, 2.4, 2.3], [1.5, 1.8, 1.6, 1.9, 1.7]
    d = paired(current, candidate)
    assert d is not None and d.diff < 0 and d.p_value < ALPHA  # candidate lower


def test_direction_of_the_objective() -> None:
    tests = [(0, P99, 0.001, -0.5), (1, P99, 0.001, +0.5)]
    better, worse = judge(tests, 2, [Objective(P99, "minimize")])
    assert (better, worse) == ([True, False], [False, True])
    tests = [(0, GOOD, 0.001, -0.5), (1, GOOD, 0.001, +0.5)]
    better, worse = judge(tests, 2, [Objective(GOOD, "maximize")])
    assert (better, worse) == ([False, True], [True, False])


def test_a_second_objective_made_worse_marks_the_candidate_worse() -> None:
    objs = [Objective(P99, "minimize"), Objective(GOOD, "maximize")]
    tests = [(0, P99, 0.001, -0.5), (0, GOOD, 0.001, -1.0)]
    better, worse = judge(tests, 1, objs)
    assert better == [True] and worse == [True]  # not eligible (better and not worse)
    tests = [(0, P99, 0.001, -0.5), (0, GOOD, 0.6, -1.0)]
    assert judge(tests, 1, objs) == ([True], [False])


def test_success_guard() -> None:
    assert success_lower(-0.01, 0.001) is True
    assert success_lower(-0.01, 0.2) is False  # not significant
    assert success_lower(+0.01, 0.001) is False  # higher success
    assert success_lower(None, None) is False
    assert success_lower(-0.01, ALPHA) is False  # p < alpha, strictly


def test_constraints_hold_only_with_confidence() -> None:
    slo = parse_slo("completion_s.p99<=3")
    assert slo.holds({"metrics": {P99: {"mean": 2.0, "ci_low": 1.8, "ci_high": 2.9}}})
    # the mean meets it, the CI's unfavourable end does not
    assert not slo.holds({"metrics": {P99: {"mean": 2.0, "ci_low": 1.0, "ci_high": 3.2}}})
    assert not slo.holds({"metrics": {P99: {"mean": 2.0, "ci_low": None, "ci_high": None}}})
    assert not slo.holds({"metrics": {P99: {"mean": None, "ci_low": None, "ci_high": None}}})
    low = parse_slo("success_rate>=0.99")
    assert low.holds({"metrics": {"success_rate": {"mean": .995, "ci_low": .991,
                                                   "ci_high": .999}}})
    assert not low.holds({"metrics": {"success_rate": {"mean": .995, "ci_low": .985,
                                                       "ci_high": 1.0}}})


def test_non_dominated_keeps_the_pareto_front() -> None:
    objs = [Objective(P99, "minimize"), Objective(GOOD, "maximize")]
    df = pd.DataFrame({P99: [1.0, 2.0, 1.5, 1.0], GOOD: [5.0, 9.0, 4.0, 5.0],
                       "constraints_hold": [True, True, True, True]})
    # row 2 is beaten by row 0 on both; row 3 ties row 0 (the first wins)
    assert _non_dominated(df, objs).tolist() == [True, True, False, False]
    df["constraints_hold"] = [False, True, True, True]
    assert _non_dominated(df, objs).tolist() == [False, True, False, True]
    assert not math.isnan(df[P99].sum())


def test_an_slo_at_its_target_is_met_by_its_operator() -> None:
    """'x <= 1.0' holds at 1.0, '<' does not; '>=' holds at its target, '>' does not."""
    from sim.answers.slo import Slo

    assert Slo("ttfc_s.p99", "<=", 1.0)._meets(1.0)
    assert not Slo("ttfc_s.p99", "<", 1.0)._meets(1.0)
    assert Slo("success_rate", ">=", 0.99)._meets(0.99)
    assert not Slo("success_rate", ">", 0.99)._meets(0.99)


def test_indistinguishable_from_the_best_means_not_significantly_different() -> None:
    from sim.answers.tune import _same_as_best

    best = [1.0, 1.1, 0.9, 1.05, 0.95]
    assert _same_as_best(best, [1.02, 1.08, 0.92, 1.0, 0.97], minimize=True)
    assert not _same_as_best(best, [3.0, 3.1, 2.9, 3.05, 2.95], minimize=True)


def _summary(p99: list[float | None]) -> dict:
    """A confirmation summary: per-replication p99 values (None: not measured), success 1."""
    vals = [v for v in p99 if v is not None]
    mean = sum(vals) / len(vals) if vals else None
    return {"metrics": {P99: {"mean": mean, "ci_low": mean, "ci_high": mean, "values": p99},
                        "success_rate": {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0,
                                         "values": [1.0] * len(p99)}}}


def test_an_untestable_candidate_does_not_loosen_the_correction(monkeypatch, tmp_path) -> None:
    """Two candidates confirmed on common seeds: A's paired p is 0.031 (significant alone,
    not after Holm over two hypotheses: 0.031 > 0.05 / 2), B has no paired values (its
    metric was never measured: no test, counted as p = 1 -- a hypothesis that cannot be
    rejected). An untestable candidate counted as p = 0 would shift A to the lenient end of
    Holm's ladder and recommend it."""
    from sim.answers import tune

    current = [2.0, 2.2, 2.1, 2.4, 2.3]
    a = [1.9, 1.95, 2.1, 2.2, 2.15]
    assert 0.025 < paired(current, a).p_value < ALPHA  # type: ignore[union-attr]
    fake = [_summary(a), _summary([None] * 5), _summary(current)]
    monkeypatch.setattr(tune, "run_points", lambda *a, **k: fake)
    df = tune._confirm(None, tmp_path, {}, [{}, {}], ["A", "B"],  # type: ignore[arg-type]
                       [Objective(P99, "minimize")], [], 5, 1, None)
    assert list(df["candidate"]) == ["A", "B", "current"]
    assert df.loc[0, f"{P99}.p"] == pytest.approx(paired(current, a).p_value)  # type: ignore
    assert df.loc[1, f"{P99}.p"] is None or math.isnan(df.loc[1, f"{P99}.p"])
    assert not df["significantly_better"].any() and not df["recommended"].any(), df
    # the same A alone: one hypothesis, significant, recommended
    monkeypatch.setattr(tune, "run_points", lambda *a, **k: [fake[0], fake[2]])
    alone = tune._confirm(None, tmp_path, {}, [{}], ["A"],  # type: ignore[arg-type]
                          [Objective(P99, "minimize")], [], 5, 1, None)
    assert list(alone["recommended"]) == [True, False]
