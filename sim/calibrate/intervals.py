"""The intervals of calibration's fitted figures, each at its stated level (95 %).

- the mean: Student t, ``mean ± t(n − 1) · s / √n``;
- the cv (sd / mean): BCa bootstrap (bias-corrected and accelerated, Efron 1987), the
  resamples drawn in one batch (:data:`CV_RESAMPLES`), the acceleration from the
  jackknife (leave-one-out sums, O(n));
- a percentile (p99): the distribution-free order-statistic interval
  ``[x_(l), x_(u)]`` with ``P(B < l) ≤ 2.5 %`` and ``P(B ≥ u) ≤ 2.5 %`` for
  ``B ~ Binomial(n, q)``: at least 95 % for any continuous law.  It exists only from
  :func:`min_n_for_quantile_ci` values on (368 for the p99: 0.99^n ≤ 0.025); with
  fewer it is ``None`` and the reason says so ("–" in the output).

Every interval contains its estimate (the BCa one is widened to hold it in the rare
case it does not, a degenerate bootstrap distribution).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import stats

from rtalab.sim.shared.summary import PERCENTILE_METHOD, t_quantile_975

CV_RESAMPLES = 200
LEVEL = 0.95


def t_mean_ci(x: np.ndarray) -> tuple[float, float]:
    """95 % Student-t interval of the mean of ``x`` (at least two values)."""
    n = len(x)
    m = float(np.mean(x))
    half = t_quantile_975(n - 1) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return m - half, m + half


def cv(x: np.ndarray) -> np.ndarray | float:
    """sd (ddof 0) / mean along the last axis."""
    out: np.ndarray | float = np.std(x, axis=-1) / np.mean(x, axis=-1)
    return out


def _jackknife_cv(x: np.ndarray) -> np.ndarray:
    """The cv of ``x`` without each value in turn (from sums: O(n))."""
    n = len(x)
    s1, s2 = x.sum(), (x * x).sum()
    m = (s1 - x) / (n - 1)
    var = np.maximum((s2 - x * x) / (n - 1) - m * m, 0.0)
    out: np.ndarray = np.sqrt(var) / m
    return out


def bca_ci(x: np.ndarray, rng: np.random.Generator, resamples: int = CV_RESAMPLES,
           stat: Callable[[np.ndarray], np.ndarray | float] = cv,
           jackknife: Callable[[np.ndarray], np.ndarray] = _jackknife_cv
           ) -> tuple[float, float]:
    """95 % BCa bootstrap interval of ``stat`` (vectorised over the last axis) of ``x``."""
    est = float(stat(x))
    boot = np.asarray(stat(x[rng.integers(len(x), size=(resamples, len(x)))]), dtype=float)
    boot = boot[np.isfinite(boot)]
    if len(boot) < 2 or boot.min() == boot.max():
        return est, est
    # bias correction: the share of resamples below the estimate (ties count half)
    below = (np.sum(boot < est) + 0.5 * np.sum(boot == est)) / len(boot)
    below = min(max(below, 0.5 / len(boot)), 1 - 0.5 / len(boot))
    z0 = float(stats.norm.ppf(below))
    jk = jackknife(x)
    d = jk.mean() - jk
    den = 6.0 * float((d * d).sum()) ** 1.5
    a = float((d ** 3).sum()) / den if den > 0 else 0.0
    z = stats.norm.ppf([(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    adj = stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
    lo, hi = np.quantile(boot, adj)
    return min(float(lo), est), max(float(hi), est)


def min_n_for_quantile_ci(q: float, level: float = LEVEL) -> int:
    """The fewest values with which the equal-tailed order-statistic interval of the
    ``q`` quantile exists: the largest value must exceed the quantile with probability
    ≥ (1 + level) / 2, i.e. ``q^n ≤ (1 − level) / 2``."""
    return math.ceil(math.log((1 - level) / 2) / math.log(q))


def quantile_ci(x: np.ndarray, q: float, level: float = LEVEL
                ) -> tuple[tuple[float, float] | None, str]:
    """(interval or None, reason): the distribution-free order-statistic interval of the
    ``q`` quantile of ``x``, or None with the reason when there are too few values."""
    n = len(x)
    need = min_n_for_quantile_ci(q, level)
    if n < need:
        return None, (f"too few values for a distribution-free {level:.0%} interval of the "
                      f"p{q * 100:g} ({n} < {need})")
    tail = (1 - level) / 2
    b = stats.binom(n, q)
    # 1-based ranks: x_(l) <= quantile iff B >= l; x_(u) >= quantile iff B <= u - 1
    lo_rank = max(1, int(b.ppf(tail)))  # P(B <= l - 1) <= tail
    while lo_rank > 1 and b.cdf(lo_rank - 1) > tail:
        lo_rank -= 1
    while b.cdf(lo_rank) <= tail:
        lo_rank += 1
    hi_rank = min(n, int(b.isf(tail)) + 1)  # P(B >= u) <= tail
    while hi_rank < n and b.sf(hi_rank - 1) > tail:
        hi_rank += 1
    while hi_rank > 1 and b.sf(hi_rank - 2) <= tail:
        hi_rank -= 1
    s = np.sort(x)
    est = quantile(x, q)
    return (min(float(s[lo_rank - 1]), est), max(float(s[hi_rank - 1]), est)), ""


def quantile(x: np.ndarray, q: float) -> float:
    """The project's percentile (an observed value, ``inverted_cdf``)."""
    return float(np.quantile(x, q, method=PERCENTILE_METHOD))
