"""Two-sample statistics on replication values: Welch's difference of means and Holm's step-down.

Pure Python (``math`` only), so ``rtalab compare`` needs no SciPy.  The Student t CDF
is computed through the regularised incomplete beta function (continued fraction,
Numerical Recipes §6.4), accurate to ~1e-12.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rtalab.sim.shared.summary import t_quantile_975


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (real, > 0) degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


@dataclass(frozen=True)
class Difference:
    """``b − a`` of two samples' means with Welch's 95 % CI and two-sided p-value."""

    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    df: float

    @property
    def excludes_zero(self) -> bool:
        """True when the 95 % CI lies entirely above or below 0."""
        return self.ci_low > 0.0 or self.ci_high < 0.0


def welch(a: Sequence[float | None], b: Sequence[float | None]) -> Difference | None:
    """Welch's t interval for mean(b) − mean(a); None with fewer than two values on a side.

    Degrees of freedom by Welch–Satterthwaite, rounded down for the quantile (the
    interval is then slightly conservative).  Two samples without spread give a
    zero-width interval (p = 0 if the means differ, 1 if not).
    """
    xa = [float(v) for v in a if v is not None and math.isfinite(v)]
    xb = [float(v) for v in b if v is not None and math.isfinite(v)]
    na, nb = len(xa), len(xb)
    if na < 2 or nb < 2:
        return None
    ma, mb = math.fsum(xa) / na, math.fsum(xb) / nb
    va = math.fsum((x - ma) ** 2 for x in xa) / (na - 1)
    vb = math.fsum((x - mb) ** 2 for x in xb) / (nb - 1)
    d = mb - ma
    se2 = va / na + vb / nb
    if se2 <= 0.0:
        return Difference(d, d, d, 0.0 if d != 0.0 else 1.0, float(na + nb - 2))
    se = math.sqrt(se2)
    den = (va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)
    df = se2 * se2 / den if den > 0 else float(na + nb - 2)
    half = t_quantile_975(max(1, math.floor(df))) * se
    return Difference(d, d - half, d + half, t_two_sided_p(d / se, df), df)


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson 95 % interval of a binomial proportion k/n ((0, 1) when n = 0); it always
    holds k/n (k = 0 and k = n end at 0 and 1 exactly, not 0.9999999999999999)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (0.0 if k <= 0 else max(0.0, min(p, mid - half)),
            1.0 if k >= n else min(1.0, max(p, mid + half)))


def poisson_rate_ci(k: int, t: float, level: float = 0.95) -> tuple[float, float]:
    """The exact (Garwood) ``level`` interval of a Poisson rate from ``k`` events in ``t``
    seconds: ``[chi2(a/2, 2k) / 2t, chi2(1 - a/2, 2k + 2) / 2t]`` -- never below 0, at least
    ``level`` for every rate (the normal approximation's lower end goes negative for small
    ``k``)."""
    # lazy: +1.23 s (scipy) off importing stats
    from scipy.stats import chi2

    a = 1 - level
    lo = float(chi2.ppf(a / 2, 2 * k)) / (2 * t) if k > 0 else 0.0
    return lo, float(chi2.ppf(1 - a / 2, 2 * k + 2)) / (2 * t)


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected with family-wise error <= ``alpha``."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m = len(p_values)
    rejected = [False] * m
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def sign_test_p(pos: int, neg: int) -> float:
    """Exact two-sided sign test: P(a split at least as uneven as ``pos``/``neg``) under
    p = 1/2 (ties left out before)."""
    n = pos + neg
    if n == 0:
        return 1.0
    k = min(pos, neg)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def paired(a: Sequence[float | None], b: Sequence[float | None]) -> Difference | None:
    """mean(b − a) over pairs run with the same seeds (common random numbers): a paired
    t interval and two-sided p; None with fewer than two pairs.

    Values may be ``+inf`` (a caller-perceived percentile when too many turns were not
    served): ``inf`` vs ``inf`` is a tie (difference 0); with any infinite difference the
    p-value is the exact sign test's over the non-zero differences, the difference is
    ``±inf`` (or 0) by the majority sign, and the CI reaches ``−inf`` / ``+inf`` on the sides
    where differences lie.
    """
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True)
             if x is not None and y is not None and not math.isnan(x) and not math.isnan(y)]
    n = len(pairs)
    if n < 2:
        return None
    d = [0.0 if x == y else y - x for x, y in pairs]
    if any(math.isinf(v) for v in d):
        pos, neg = sum(v > 0 for v in d), sum(v < 0 for v in d)
        diff = math.inf if pos > neg else -math.inf if neg > pos else 0.0
        return Difference(diff, -math.inf if neg else 0.0, math.inf if pos else 0.0,
                          sign_test_p(pos, neg), float(n - 1))
    m = math.fsum(d) / n
    var = math.fsum((v - m) ** 2 for v in d) / (n - 1)
    if var <= 0.0:
        return Difference(m, m, m, 0.0 if m != 0.0 else 1.0, float(n - 1))
    se = math.sqrt(var / n)
    half = t_quantile_975(n - 1) * se
    return Difference(m, m - half, m + half, t_two_sided_p(m / se, n - 1), float(n - 1))


def f_upper_p(f: float, d1: float, d2: float) -> float:
    """P(F >= f) for Fisher's F with (``d1``, ``d2``) degrees of freedom."""
    if f <= 0.0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def welch_anova(groups: Sequence[Sequence[float]]) -> float | None:
    """p-value of Welch's heteroscedastic one-way ANOVA: do the groups' means differ?

    Groups with fewer than two finite values are left out; None when fewer than two
    groups remain.  Groups without spread: if none has any, p = 0 when their means
    differ and 1 when not; otherwise a group's zero variance is raised to the smallest
    positive variance of the others (it cannot claim infinite precision).
    """
    data = [[float(v) for v in g if v is not None and math.isfinite(v)] for g in groups]
    data = [g for g in data if len(g) >= 2]
    k = len(data)
    if k < 2:
        return None
    n = [len(g) for g in data]
    m = [math.fsum(g) / len(g) for g in data]
    var = [math.fsum((x - mi) ** 2 for x in g) / (len(g) - 1) for g, mi in zip(data, m,
                                                                                strict=True)]
    positive = [v for v in var if v > 0.0]
    if not positive:
        return 0.0 if max(m) != min(m) else 1.0
    floor = min(positive)
    w = [ni / max(v, floor) for ni, v in zip(n, var, strict=True)]
    sw = math.fsum(w)
    mw = math.fsum(wi * mi for wi, mi in zip(w, m, strict=True)) / sw
    a = math.fsum(wi * (mi - mw) ** 2 for wi, mi in zip(w, m, strict=True)) / (k - 1)
    tmp = math.fsum((1 - wi / sw) ** 2 / (ni - 1) for wi, ni in zip(w, n, strict=True))
    if tmp <= 0.0:
        return 1.0 if a == 0.0 else 0.0
    b = 1 + 2 * (k - 2) / (k * k - 1) * tmp
    return f_upper_p(a / b, k - 1, (k * k - 1) / (3 * tmp))


def benjamini_hochberg(p_values: Sequence[float], q: float = 0.05) -> list[bool]:
    """Benjamini–Hochberg step-up: which hypotheses are rejected with false discovery rate
    <= ``q`` (the expected share of false alarms among the metrics flagged)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    cut = 0
    for rank, i in enumerate(order, start=1):
        if p_values[i] <= q * rank / m:
            cut = rank
    rejected = [False] * m
    for i in order[:cut]:
        rejected[i] = True
    return rejected
