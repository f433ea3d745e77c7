"""The coverage of every interval family the project prints, measured from a known truth
(seeded, :data:`DRAWS` draws each).  Used by tests/trust/test_interval_coverage.py (each
family within its band) and printed by ``tests/oneoff/interval_coverage.py`` (the table
of docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from rtalab.sim.calibrate.estimate import _wilson
from rtalab.sim.calibrate.intervals import bca_ci, quantile, quantile_ci, t_mean_ci
from rtalab.sim.shared.agreement import _test, prediction_interval, run_interval
from rtalab.sim.shared.stats import paired, welch
from rtalab.sim.shared.summary import mean_ci

DRAWS = 1000


@dataclass(frozen=True)
class Family:
    name: str
    where: str
    truth: str
    measure: Callable[[], float]
    band: tuple[float, float]  # the share of draws covering the truth the test accepts


def replication_ci() -> float:
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(DRAWS):
        m = mean_ci(list(rng.normal(3.0, 2.0, 5)))
        hits += m["ci_low"] <= 3.0 <= m["ci_high"]
    return hits / DRAWS


def calibration_mean() -> float:
    rng = np.random.default_rng(12)
    return sum(lo <= 4.0 <= hi for lo, hi in (t_mean_ci(rng.gamma(4.0, size=20))
                                              for _ in range(DRAWS))) / DRAWS


def _cv(draw: Callable[[np.random.Generator], np.ndarray], truth: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(DRAWS):
        x = draw(rng)
        lo, hi = bca_ci(x, rng)
        assert lo <= float(np.std(x) / np.mean(x)) <= hi
        hits += lo <= truth <= hi
    return hits / DRAWS


def cv_gamma() -> float:
    return _cv(lambda r: r.gamma(4.0, size=300), 0.5, 1)


def cv_lognormal() -> float:
    return _cv(lambda r: r.lognormal(0.0, 0.5, size=300), float(np.sqrt(np.exp(0.25) - 1)), 2)


def p99_exact(n: int = 1000) -> float:
    """The exact coverage of the order-statistic interval at n (binomial sum)."""
    (lo, hi), _ = quantile_ci(np.arange(1, n + 1, dtype=float), 0.99)
    b = stats.binom(n, 0.99)
    return float(b.cdf(hi - 1) - b.cdf(lo - 1))


def p99_order_statistic() -> float:
    rng = np.random.default_rng(3)
    truth = stats.expon.ppf(0.99)
    hits = 0
    for _ in range(DRAWS):
        x = rng.exponential(size=1000)
        ci, _ = quantile_ci(x, 0.99)
        assert ci is not None and ci[0] <= quantile(x, 0.99) <= ci[1]
        hits += ci[0] <= truth <= ci[1]
    return hits / DRAWS


def wilson(p: float = 0.1, n: int = 200) -> float:
    """Exact (a sum over the binomial, no simulation)."""
    return float(sum(stats.binom.pmf(k, n, p) for k in range(n + 1)
                     if _wilson(k, n)[0] <= p <= _wilson(k, n)[1]))


def welch_ci() -> float:
    rng = np.random.default_rng(21)
    hits = 0
    for _ in range(DRAWS):
        d = welch(rng.normal(1.0, 1.0, 8), rng.normal(1.5, 2.0, 6))
        hits += d.ci_low <= 0.5 <= d.ci_high
    return hits / DRAWS


def paired_ci() -> float:
    rng = np.random.default_rng(22)
    hits = 0
    for _ in range(DRAWS):
        base = rng.normal(0, 3, 10)
        e = paired(base + rng.normal(0, 0.5, 10), base + 0.2 + rng.normal(0, 0.5, 10))
        hits += e.ci_low <= 0.2 <= e.ci_high
    return hits / DRAWS


def prediction() -> float:
    rng = np.random.default_rng(31)
    hits = 0
    for _ in range(DRAWS):
        lo, hi = prediction_interval(list(rng.normal(0, 1, 6)))
        hits += lo <= rng.normal(0, 1) <= hi
    return hits / DRAWS


def _one_run(n: int, seed: int) -> float:
    """predict's 90 % one-run interval (``run_interval``) from ``n`` simulated replications
    of a lognormal figure (a p95 in seconds) against one new run from the same law: t on the
    log scale below 19 replications, order statistics from 19 on."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(DRAWS):
        iv = run_interval(list(rng.lognormal(0.0, 0.6, n)), 0.90, metric="completion_s.p95",
                          bounds=(0.0, np.inf))
        assert iv is not None and iv.low <= iv.centre <= iv.high
        hits += iv.contains(float(rng.lognormal(0.0, 0.6)))
    return hits / DRAWS


def _agreement(se: float | None, seed: int) -> float:
    """The share of single load values drawn from the truth judged 'agrees' (1 − false
    alarms) by sim-vs-load agreement, per metric before Holm."""
    rng = np.random.default_rng(seed)
    ok = 0
    for _ in range(DRAWS):
        sims = list(rng.normal(10, 2, 8))
        load = float(rng.normal(10, 2 if se is None else se))
        ok += _test("x", sims, load, se)[3] >= 0.05
    return ok / DRAWS


FAMILIES: tuple[Family, ...] = (
    Family("replication CI of a mean (summary.json)", "rtalab.sim.shared.summary.mean_ci",
           "normal, 5 replications", replication_ci, (0.93, 0.97)),
    Family("calibration: mean (Student t)", "rtalab.sim.calibrate.intervals.t_mean_ci",
           "gamma(4), n = 20", calibration_mean, (0.93, 0.97)),
    Family("calibration: cv (BCa, 200 resamples)", "rtalab.sim.calibrate.intervals.bca_ci",
           "gamma(4) (cv 0.5), n = 300", cv_gamma, (0.92, 0.97)),
    Family("calibration: cv, heavy tail", "rtalab.sim.calibrate.intervals.bca_ci",
           "lognormal sigma 0.5, n = 300", cv_lognormal, (0.84, 0.97)),
    Family("calibration: p99 (order statistics)", "rtalab.sim.calibrate.intervals.quantile_ci",
           "exponential, n = 1,000", p99_order_statistic, (0.955, 0.99)),
    Family("calibration: p99, exact", "rtalab.sim.calibrate.intervals.quantile_ci",
           "any continuous law, n = 1,000", p99_exact, (0.95, 0.98)),
    Family("Wilson (error rates, metastability)", "rtalab.sim.shared.stats.wilson",
           "p = 0.1, n = 200 (exact)", wilson, (0.93, 0.97)),
    Family("Welch difference (compare)", "rtalab.sim.shared.stats.welch",
           "normal, n = 8 and 6, unequal sd", welch_ci, (0.93, 0.98)),
    Family("paired difference (tune)", "rtalab.sim.shared.stats.paired",
           "normal pairs, n = 10", paired_ci, (0.93, 0.97)),
    Family("prediction interval (twin, validate)",
           "rtalab.sim.shared.agreement.prediction_interval", "normal, 6 runs, a new run",
           prediction, (0.93, 0.97)),
    Family("one-run interval, t on the log scale (predict, 90 %)",
           "rtalab.sim.shared.agreement.run_interval", "lognormal sigma 0.6, 8 runs, a new run",
           lambda: _one_run(8, 51), (0.88, 0.92)),
    Family("one-run interval, order statistics (predict, 90 %)",
           "rtalab.sim.shared.agreement.run_interval", "lognormal sigma 0.6, 39 runs, a new run",
           lambda: _one_run(39, 52), (0.88, 0.92)),
    Family("agreement, load without se", "rtalab.sim.shared.agreement (prediction spread)",
           "load value ~ simulated law, 8 reps", lambda: _agreement(None, 41), (0.93, 0.97)),
    Family("agreement, load with bootstrap se", "rtalab.sim.shared.agreement (se)",
           "load value ~ N(mean, se), 8 reps", lambda: _agreement(0.5, 42), (0.93, 0.97)),
)


def bootstrap_se_ratio(resamples: int = 80, boot: dict | None = None) -> tuple[float, float]:
    """(the load bootstrap's ``se`` of attempts per turn, the truth): the linearised
    (cluster-robust) standard error of a ratio over calls, sqrt(sum (y_c - r m_c)^2) /
    sum m_c, on a simulated load-like run (tests.trust.loadlike); ``boot``: its bootstrap
    already made (seed 3)."""
    import math

    from rtalab.loadtests.loadrun import uncertainty as U
    from rtalab.loadtests.loadrun.tables import timeseries
    from rtalab.sim.shared import schema as S
    from tests.trust.loadlike import WARMUP_S, loadlike

    rec = loadlike()
    if boot is None:
        boot = U.bootstrap(rec, WARMUP_S, 3, timeseries, resamples=resamples)
    t = rec.turns[rec.turns[S.START_S].to_numpy() >= WARMUP_S]
    by_call = t.groupby(t[S.CALL_ID].astype(str))
    m = by_call.size().to_numpy(dtype=float)
    y = by_call[S.ATTEMPTS].sum().to_numpy(dtype=float)
    r = y.sum() / m.sum()
    return boot[S.M_ATTEMPTS_PER_TURN]["se"], math.sqrt(((y - r * m) ** 2).sum()) / m.sum()
