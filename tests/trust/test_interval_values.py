"""Intervals computed by hand on tiny samples, the expected values written out (Student t
quantiles from scipy): a wrong degree of freedom, a ddof-0 variance or a load run's ``se``
left out moves an end by more than the tolerance, which coverage bands of 1,000 draws
(tests/trust/test_interval_coverage.py) cannot see."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from rtalab.sim.calibrate.intervals import t_mean_ci
from rtalab.sim.shared.agreement import _test, run_interval
from rtalab.sim.shared.stats import paired, welch


def test_paired_interval_of_three_pairs() -> None:
    """Differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(0.975, 2 df) = 4.303."""
    d = paired([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert d is not None
    half = stats.t.ppf(0.975, 2) / math.sqrt(3)  # 2.484
    assert (d.diff, d.ci_low, d.ci_high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert d.p_value == pytest.approx(2 * stats.t.sf(2.0 * math.sqrt(3), 2))


def test_calibration_mean_interval_uses_the_sample_sd() -> None:
    """1, 2, 3, 4: mean 2.5, sd (ddof 1) 1.291, half = t(0.975, 3) x 1.291 / 2 = 2.054."""
    lo, hi = t_mean_ci([1.0, 2.0, 3.0, 4.0])
    half = stats.t.ppf(0.975, 3) * math.sqrt(5 / 3) / 2
    assert (lo, hi) == pytest.approx((2.5 - half, 2.5 + half))


def test_welch_interval_by_hand() -> None:
    """a = 1, 2, 3 (var 1), b = 2, 4, 6, 8 (var 6.667): se^2 = 1/3 + 5/3 = 2, Welch df =
    4 / ((1/3)^2 / 2 + (5/3)^2 / 3) = 4.08 -> floor 4 for the quantile."""
    d = welch([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    assert d is not None
    df = 4 / ((1 / 3) ** 2 / 2 + (5 / 3) ** 2 / 3)
    assert math.floor(df) == 4
    half = stats.t.ppf(0.975, 4) * math.sqrt(2.0)
    assert (d.diff, d.ci_low, d.ci_high, d.df) == pytest.approx((3.0, 3 - half, 3 + half, df))


def test_agreement_without_and_with_the_load_runs_se() -> None:
    """Simulated 1, 2, 3 (mean 2, var 1), load value 4.  Without an se: a new run's spread,
    var = 1 x (1 + 1/3), df 2.  With se 0.5: var = 1/3 + 0.25, Welch df = var^2 /
    ((1/3)^2 / 2)."""
    d, lo, hi, p = _test("x", [1.0, 2.0, 3.0], 4.0, None)
    half = stats.t.ppf(0.975, 2) * math.sqrt(4 / 3)
    assert (d, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert p == pytest.approx(2 * stats.t.sf(2.0 / math.sqrt(4 / 3), 2))
    var = 1 / 3 + 0.25
    df = var * var / ((1 / 3) ** 2 / 2)
    d, lo, hi, p = _test("x", [1.0, 2.0, 3.0], 4.0, 0.5)
    half = stats.t.ppf(0.975, df) * math.sqrt(var)
    assert (d, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))


def test_one_run_interval_by_hand() -> None:
    """Four replications on the identity scale (a count per turn): mean 2.5, sd 1.291,
    90 % half = t(0.95, 3) x 1.291 x sqrt(1 + 1/4); 19 replications: order statistics 1..19
    at 90 % (j = floor(20 x 0.05) = 1)."""
    iv = run_interval([1.0, 2.0, 3.0, 4.0], 0.90, metric="attempts_per_turn")
    assert iv is not None
    half = stats.t.ppf(0.95, 3) * math.sqrt(5 / 3) * math.sqrt(1.25)
    assert (iv.low, iv.high) == pytest.approx((2.5 - half, 2.5 + half))
    iv = run_interval([float(i) for i in range(1, 20)], 0.90, metric="attempts_per_turn")
    assert iv is not None and (iv.low, iv.high, iv.centre) == (1.0, 19.0, 10.0)
    iv = run_interval([float(i) for i in range(1, 40)], 0.90, metric="attempts_per_turn")
    assert iv is not None and (iv.low, iv.high) == (2.0, 38.0)  # j = floor(40 x 0.05) = 2
