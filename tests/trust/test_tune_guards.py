"""Tune's recommendation, expected values written out: the direction of a paired
difference, the success guard, the second objective, constraints with confidence."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.answers.tune import ALPHA, Objective, _non_dominated, judge, success_lower
from rtalab.sim.shared.stats import paired

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
    from rtalab.sim.answers.slo import Slo

    assert Slo("ttfc_s.p99", "<=", 1.0)._meets(1.0)
    assert not Slo("ttfc_s.p99", "<", 1.0)._meets(1.0)
    assert Slo("success_rate", ">=", 0.99)._meets(0.99)
    assert not Slo("success_rate", ">", 0.99)._meets(0.99)


def test_indistinguishable_from_the_best_means_not_significantly_different() -> None:
    from rtalab.sim.answers.tune import _same_as_best

    best = [1.0, 1.1, 0.9, 1.05, 0.95]
    assert _same_as_best(best, [1.02, 1.08, 0.92, 1.0, 0.97], minimize=True)
    assert not _same_as_best(best, [3.0, 3.1, 2.9, 3.05, 2.95], minimize=True)
    # an infinite replication value (a latency never reached) is distinguishable from a finite
    # best when minimising, whichever of the two holds it
    inf = float("inf")
    assert not _same_as_best(best, [1.0, inf, 0.9, 1.05, 0.95], minimize=True)
    assert not _same_as_best([1.0, inf, 0.9], best, minimize=True)
    assert _same_as_best([1.0, inf, 0.9], [inf, 1.0, 1.1], minimize=True)


def _metric(values: list[float | None]) -> dict:
    vals = [v for v in values if v is not None]
    mean = sum(vals) / len(vals) if vals else None
    return {"mean": mean, "ci_low": mean, "ci_high": mean, "values": values}


def _summary(p99: list[float | None], success: list[float] | None = None,
             goodput: list[float] | None = None) -> dict:
    """A confirmation summary: per-replication p99 values (None: not measured), success
    rates (default 1) and, if given, goodput."""
    m = {P99: _metric(p99), "success_rate": _metric(success or [1.0] * len(p99))}
    if goodput is not None:
        m[GOOD] = _metric(goodput)  # type: ignore[arg-type]
    return {"metrics": m}


CURRENT = [2.0, 2.2, 2.1, 2.4, 2.3]
MUCH_LOWER = [1.0, 1.15, 1.05, 1.3, 1.2]  # every pair 0.9-1.1 lower: p far below ALPHA


def _confirm_of(monkeypatch, tmp_path, summaries: list[dict], objectives: list[Objective],
                seen: dict | None = None) -> pd.DataFrame:
    """``tune._confirm`` of candidates A, B, ... over ``summaries`` (the current settings'
    last), its confirmation runs replaced by them (``seen``: the run's keyword arguments)."""
    from rtalab.sim.answers import tune

    def fake(*a, **k):
        if seen is not None:
            seen.update(k)
        return summaries
    monkeypatch.setattr(tune, "run_points", fake)
    names = [chr(ord("A") + i) for i in range(len(summaries) - 1)]
    return tune._confirm(None, tmp_path, {}, [{}] * len(names), names,  # type: ignore[arg-type]
                         objectives, [], 5, 1, None)


def test_a_candidate_worse_on_another_objective_is_not_recommended(monkeypatch,
                                                                   tmp_path) -> None:
    """A: p99 much lower (better) and goodput much lower (worse, maximized): significantly
    better and significantly worse, not recommended; B: the same p99 gain, goodput equal:
    recommended."""
    objs = [Objective(P99, "minimize"), Objective(GOOD, "maximize")]
    good = [10.0, 10.1, 9.9, 10.2, 10.0]
    df = _confirm_of(monkeypatch, tmp_path, [
        _summary(MUCH_LOWER, goodput=[g - 3.0 + 0.01 * i for i, g in enumerate(good)]),
        _summary(MUCH_LOWER, goodput=good), _summary(CURRENT, goodput=good)], objs)
    assert list(df["significantly_better"]) == [True, True, False]
    assert list(df["significantly_worse"]) == [True, False, False]
    assert list(df["recommended"]) == [False, True, False]
    # A alone (no B to dominate it on the front): still not recommended
    alone = _confirm_of(monkeypatch, tmp_path, [
        _summary(MUCH_LOWER, goodput=[g - 3.0 + 0.01 * i for i, g in enumerate(good)]),
        _summary(CURRENT, goodput=good)], objs)
    assert list(alone["recommended"]) == [False, False]


def test_a_candidate_with_a_lower_success_rate_is_not_recommended(monkeypatch,
                                                                  tmp_path) -> None:
    """A: p99 much better, success rate lower in every pair (the guard); B: the same p99
    gain at the current success rate: only B is recommended."""
    lower = [0.90, 0.91, 0.89, 0.92, 0.90]
    df = _confirm_of(monkeypatch, tmp_path, [_summary(MUCH_LOWER, success=lower),
                                             _summary(MUCH_LOWER), _summary(CURRENT)],
                     [Objective(P99, "minimize")])
    assert list(df["success_lower"]) == [True, False, False]
    assert list(df["recommended"]) == [False, True, False]


def test_confirmation_runs_share_their_seeds(monkeypatch, tmp_path) -> None:
    """The paired test is only valid on common random numbers: the confirmation asks for
    them."""
    seen: dict = {}
    _confirm_of(monkeypatch, tmp_path, [_summary(MUCH_LOWER), _summary(CURRENT)],
                [Objective(P99, "minimize")], seen)
    assert seen["common_seeds"] is True


def test_an_unmeasured_objective_is_the_worst_value() -> None:
    """A row without a value for a minimized objective (None) never dominates a measured
    one: it reads as +inf."""
    df = pd.DataFrame({P99: [None, 2.0], "constraints_hold": [True, True]})
    assert list(_non_dominated(df, [Objective(P99, "minimize")])) == [False, True]
    df = pd.DataFrame({GOOD: [None, 2.0], "constraints_hold": [True, True]})
    assert list(_non_dominated(df, [Objective(GOOD, "maximize")])) == [False, True]


def test_an_untestable_candidate_does_not_loosen_the_correction(monkeypatch, tmp_path) -> None:
    """Two candidates confirmed on common seeds: A's paired p is 0.031 (significant alone,
    not after Holm over two hypotheses: 0.031 > 0.05 / 2), B has no paired values (its
    metric was never measured: no test, counted as p = 1 -- a hypothesis that cannot be
    rejected). An untestable candidate counted as p = 0 would shift A to the lenient end of
    Holm's ladder and recommend it."""
    from rtalab.sim.answers import tune

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
