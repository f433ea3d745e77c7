"""Every interval family at its stated level: seeded draws from a known truth, the share
of 95 % intervals that cover it written out (docs/metrics.md lists the figures).

An interval that is really 90 %, or sqrt(n) too narrow, falls out of the band; the
bands are ±2 points around 95 % (1,000 draws: the binomial sd is 0.7 point), wider
only where the method itself is known to be approximate (written at the test)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rtalab.loadtests.reasoner.metrics import TIMING_BUCKETS
from rtalab.sim.calibrate.censored import SUPPORT_AIC, _moments, fit_buckets
from rtalab.sim.calibrate.estimate import _wilson
from rtalab.sim.calibrate.fit import fit_duration
from rtalab.sim.calibrate.intervals import min_n_for_quantile_ci, quantile, quantile_ci
from tests.oneoff.bucket_coverage import CV, draw
from tests.trust.coverage import DRAWS, FAMILIES, Family


def _share(hits: int) -> float:
    return hits / DRAWS


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_each_interval_family_covers_at_its_level(family: Family) -> None:
    """The share of 1,000 seeded draws whose interval covers the truth, in the family's
    band (docs/metrics.md lists the measured figures: tests/oneoff/interval_coverage.py)."""
    share = family.measure()
    assert family.band[0] <= share <= family.band[1], (family.name, share)


def test_order_statistic_interval_of_the_p99_has_its_exact_coverage() -> None:
    """Distribution-free: coverage = P(l <= B <= u - 1), B ~ Bin(n, 0.99), >= 95 % by
    construction; measured within 1.5 points of the exact figure."""
    n = 1000
    b = stats.binom(n, 0.99)
    s = np.arange(1, n + 1, dtype=float)
    (lo, hi), _ = quantile_ci(s, 0.99)  # on 1..n the interval's ends are its ranks
    exact = b.cdf(hi - 1) - b.cdf(lo - 1)
    assert 0.95 <= exact <= 0.98
    rng = np.random.default_rng(3)
    truth = stats.expon.ppf(0.99)
    hits = 0
    for _ in range(DRAWS):
        x = rng.exponential(size=n)
        ci, _ = quantile_ci(x, 0.99)
        assert ci[0] <= quantile(x, 0.99) <= ci[1]
        hits += ci[0] <= truth <= ci[1]
    assert abs(_share(hits) - exact) <= 0.015, (_share(hits), exact)


def test_p99_interval_needs_368_values_and_says_why() -> None:
    assert min_n_for_quantile_ci(0.99) == 368  # 0.99^367 = 0.0250..., 0.99^368 = 0.0248
    assert 0.99 ** 367 > 0.025 >= 0.99 ** 368
    x = np.random.default_rng(0).exponential(size=400)
    ci, note = quantile_ci(x[:367], 0.99)
    assert ci is None and "367 < 368" in note
    ci, note = quantile_ci(x[:368], 0.99)
    assert ci is not None and note == "" and ci[1] == x[:368].max()


def test_fit_prints_dash_with_the_reason_for_a_p99_of_too_few_values() -> None:
    rng = np.random.default_rng(5)
    small = fit_duration("x", rng.gamma(4.0, 0.1, size=200))
    assert small is not None and small.p99_ci is None and "200 < 368" in small.p99_ci_note
    assert "[–: too few values" in small.comment()
    assert small.summary()["p99_ci"] is None
    big = fit_duration("x", rng.gamma(4.0, 0.1, size=2000))
    assert big is not None and big.p99_ci is not None
    for est, ci in ((big.mean, big.mean_ci), (big.cv, big.cv_ci), (big.p99, big.p99_ci)):
        assert ci[0] <= est <= ci[1] and ci[0] < ci[1]
    const = fit_duration("x", np.full(50, 0.2))
    assert const is not None and const.chosen == "constant"
    assert const.cv_ci is None and const.cv_ci_note  # never [0, 0] around a cv


def test_fit_mean_interval_uses_student_t_on_a_small_sample() -> None:
    x = np.array([0.1, 0.2, 0.15, 0.3, 0.25, 0.12, 0.22, 0.18, 0.28, 0.35])
    f = fit_duration("x", x)
    half = 2.262157 * x.std(ddof=1) / math.sqrt(10)  # t(0.975, 9), not 1.96
    assert f is not None and f.mean_ci == pytest.approx((x.mean() - half, x.mean() + half))


@pytest.mark.parametrize(("p", "n"), [(0.02, 500), (0.1, 200), (0.3, 100)])
def test_wilson_interval_covers_about_95(p: float, n: int) -> None:
    """Exact coverage (a sum over the binomial, no simulation): Wilson's oscillates around
    95 %, within 93-97 % at these (p, n)."""
    cover = sum(stats.binom.pmf(k, n, p) for k in range(n + 1)
                if _wilson(k, n)[0] <= p <= _wilson(k, n)[1])
    assert 0.93 <= cover <= 0.97, cover
    for k in (0, 1, n // 2, n):
        lo, hi = _wilson(k, n)
        assert lo <= k / n <= hi


def test_a_large_samples_cv_interval_is_scaled_to_its_size_and_holds_its_estimate() -> None:
    """The cv's BCa runs on a 5,000-value subsample; for 20,000 values its width is scaled
    by sqrt(5,000 / 20,000) = 1/2 around the full sample's cv."""
    rng = np.random.default_rng(9)
    x = rng.gamma(4.0, 0.1, size=20_000)
    big = fit_duration("x", x, seed=1)
    sub = fit_duration("x", x[:5_000], seed=1)
    assert big is not None and sub is not None
    assert big.cv_ci[0] <= big.cv <= big.cv_ci[1]
    ratio = (big.cv_ci[1] - big.cv_ci[0]) / (sub.cv_ci[1] - sub.cv_ci[0])
    assert 0.35 < ratio < 0.7, ratio


def test_fit_needs_ten_values() -> None:
    x = np.random.default_rng(4).gamma(4.0, 0.1, size=10)
    assert fit_duration("x", x[:9]) is None
    f = fit_duration("x", x)
    assert f is not None and f.n == 10


def test_a_large_sample_keeps_a_close_family_below_the_3_point_floor() -> None:
    """20,000 values of gamma(4) with 2 % replaced by U(0, 0.15): the best family's KS
    distance (~0.02) is above the 1 % critical value (1.63 / sqrt(n) = 0.0115) but below
    the 3-point floor, so the family is kept, not the empirical law."""
    rng = np.random.default_rng(0)
    x = rng.gamma(4.0, 0.1, 20_000)
    x[:400] = rng.uniform(0.0, 0.15, 400)
    f = fit_duration("x", x, seed=1)
    assert f is not None and f.chosen in ("gamma", "weibull", "lognormal")
    assert f.ks_critical < f.ks < 0.03


@pytest.mark.parametrize(("rate", "seconds"), [(2.0, 10.0), (30.0, 10.0), (0.5, 1.0)])
def test_the_poisson_rate_interval_covers_and_never_goes_below_zero(rate: float,
                                                                   seconds: float) -> None:
    """calibrate's observed turn rate: the exact (Garwood) interval, >= 95 % for every rate
    (conservative: 99.5 % at a mean of 0.5 events), never below 0, holding k / t; the
    normal approximation it replaced went negative below ~4 events."""
    from rtalab.sim.shared.stats import poisson_rate_ci

    rng = np.random.default_rng(17)
    hits = 0
    for k in rng.poisson(rate * seconds, DRAWS):
        lo, hi = poisson_rate_ci(int(k), seconds)
        assert 0.0 <= lo <= k / seconds <= hi
        hits += lo <= rate <= hi
    assert 0.94 <= _share(hits) <= 0.999, _share(hits)


def test_the_paired_interval_uses_n_minus_one_degrees_of_freedom() -> None:
    """Differences 1, 2, 3, 4: mean 2.5, sd sqrt(5/3), half-width t(0.975, 3) x sd / 2 =
    3.1824 x 1.2910 / 2 = 2.0542 (with n = 4 degrees of freedom it would be 1.7923)."""
    from rtalab.sim.shared.stats import paired

    d = paired([0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0])
    assert d is not None and d.diff == pytest.approx(2.5) and d.df == 3.0
    assert d.ci_high - d.diff == pytest.approx(2.0542, abs=1e-3)


@pytest.mark.parametrize("seed", [18, 8])
def test_a_bucket_fits_cv_interval_spans_every_law_the_buckets_allow(seed: int) -> None:
    """185 gamma(cv 0.6) values in the Reasoner's timing buckets.  Seed 18's buckets choose
    the lognormal (cv 0.78) by 0.3 AIC points over the gamma (cv 0.65): an interval of the
    lognormal alone -- what the fit gave before it kept every law within 4 AIC points --
    missed the truth, as the clean-clone CI saw once.  Seed 8 chooses the gamma with the
    lognormal 2.7 points behind.  The coverage itself, measured over draws, is in
    tests/oneoff/bucket_coverage.py and docs/benchmarks.md."""
    x = draw("gamma", 185, np.random.default_rng(seed))
    cum = (*(float((x <= b).sum()) for b in TIMING_BUCKETS), 185.0)
    f = fit_buckets("x", (*TIMING_BUCKETS, math.inf), cum, seed=1)
    assert f is not None and f.chosen == ("lognormal" if seed == 18 else "gamma")
    best = min(g["aic"] for g in f.families)
    near = [g for g in f.families if g["aic"] - best <= SUPPORT_AIC]
    assert {g["family"] for g in near} == set(f.supported) == {"gamma", "lognormal"}
    for g in near:
        cv = _moments(g["family"], np.log(g["params"]))[1]
        assert f.cv_ci[0] <= cv <= f.cv_ci[1], (g, f.cv_ci)
    assert f.cv_ci[0] <= CV <= f.cv_ci[1], f.summary()
    assert f.mean_ci[0] <= f.mean <= f.mean_ci[1] and f.cv_ci[0] <= f.cv <= f.cv_ci[1]
