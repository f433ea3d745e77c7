"""Paired comparisons under common random numbers (tune's confirmation), values written out."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from rtalab.sim.shared.stats import paired, sign_test_p, welch


def test_paired_t_matches_scipy() -> None:
    a = [3.1, 2.9, 3.4, 3.0, 3.3]
    b = [2.8, 2.7, 3.0, 2.9, 2.9]
    d = paired(a, b)
    assert d is not None
    assert d.diff == pytest.approx(-0.28)
    ref = stats.ttest_rel(b, a)
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-6)
    ci = stats.t.interval(0.95, 4, loc=-0.28, scale=stats.sem([b[i] - a[i] for i in range(5)]))
    assert (d.ci_low, d.ci_high) == pytest.approx(ci, rel=1e-5)


def test_paired_removes_the_common_noise_welch_keeps() -> None:
    """Same seeds: the candidate is 0.25-0.5 s faster in every replication although
    replications differ by seconds — paired, that is significant (t = -5, 3 df); unpaired
    it is lost in the spread."""
    a = [1.0, 5.0, 9.0, 3.0]
    b = [0.75, 4.75, 8.75, 2.5]
    d = paired(a, b)
    assert d is not None and d.diff == -0.3125
    assert d.p_value == pytest.approx(0.015392, rel=1e-3)
    w = welch(a, b)
    assert w is not None and w.p_value > 0.8


@pytest.mark.parametrize(("pos", "neg", "p"), [
    (0, 0, 1.0), (3, 0, 0.25), (5, 0, 0.0625), (6, 0, 0.03125), (4, 1, 0.375), (2, 2, 1.0)])
def test_sign_test_exact(pos: int, neg: int, p: float) -> None:
    assert sign_test_p(pos, neg) == pytest.approx(p)


def test_paired_with_infinite_values_uses_the_sign_test() -> None:
    inf = math.inf
    # today not served in 4 of 6 replications (p99 = inf), the candidate always served
    d = paired([inf, inf, 3.0, inf, 2.0, inf], [2.0, 2.5, 3.0, 2.2, 2.1, 2.4])
    assert d is not None
    assert (d.diff, d.ci_low, d.ci_high) == (-inf, -inf, inf)  # 4 better, 1 worse, 1 tie
    assert d.p_value == 0.375  # exact sign test, 1 of 5
    # inf on both sides is a tie (difference 0): the rest is an ordinary paired t
    d = paired([inf, inf, 2.0], [inf, inf, 1.0])
    assert d is not None and d.diff == pytest.approx(-1 / 3)
    assert d.p_value == pytest.approx(0.42265, rel=1e-4)  # t = -1, 2 df
    assert paired([1.0], [2.0]) is None
