"""Does a measured run agree with the simulator's prediction of the same scenario?

Two questions, two data functions (no I/O, no formatting: ``compare`` renders them):

* :func:`prediction_interval` — where one more run of the same length as the
  simulator's replications falls, from the replications' values: Student's
  ``mean ± t(1 − a/2, R − 1) · s · sqrt(1 + 1/R)`` (one metric, normal values).
* :func:`run_interval` — the ``level`` (90 %) one-run prediction interval of a metric: where
  ONE measured run of the same length and load as the replications falls (not the CI of
  their mean).  Distribution-free order statistics ``[x_(j), x_(n+1-j)]`` when there are
  enough replications for them (``n >= 2 / (1 - level) - 1``: 19 for 90 %); with fewer,
  Student's ``mean ± t((1 + level)/2, n − 1) · s · sqrt(1 + 1/n)`` on the metric's scale
  (:func:`interval_scale`: log for times, ``sqrt(1 − x)`` for the success rate), which
  widens the interval as replications get fewer.  ``method`` says which was used.
* :func:`simultaneous_prediction` — the twin tests' check (``tests/twin``): several
  metrics of one more run at once, distribution-free.  Each metric is put on a
  scale where it is roughly symmetric (:func:`twin_scale`), standardised by the
  replications' mean and spread, and the run's worst metric ``T = max |z|`` is
  compared with the same statistic of every replication against the others and
  the run.  If the run is one more draw of the simulated experiment (the
  twin hypothesis), all ``R + 1`` statistics are exchangeable, so the run is the
  most extreme of them with probability <= ``1 / (R + 1)``: that is the false
  failure rate, whatever the distributions and correlations of the metrics.  Each
  metric's interval is ``mean ± T* · sd`` on its scale with ``T*`` the largest
  replication statistic (a simultaneous prediction interval).
* :func:`agreement_rows` — for every metric both runs define, "agrees" or
  "differs" for a simulation (R >= 2 replications) and a load run (one
  replication, ``se`` from its bootstrap over calls, :mod:`rtalab.loadtests.loadrun.uncertainty`):
  ``z = (load − mean_sim) / sqrt(s²/R + se²)`` on Student's t with
  Welch–Satterthwaite degrees of freedom, two-sided p-values, Holm's step-down over
  all compared metrics (family-wise false "differs" <= 5 % when the worlds are twins).
  A load run without ``se`` is compared with the prediction interval's spread
  (``s²(1 + 1/R)``), which assumes the replications are as long as the load run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rtalab.sim.shared.stats import holm, t_two_sided_p
from rtalab.sim.shared.summary import INF_PREFIXES, domain

AGREES, DIFFERS = "agrees", "differs"
INSIDE, OUTSIDE = "inside", "outside"
LEVEL = 0.90  # the one-run prediction interval a prediction's verdict uses
# the accuracy targets: |measured - predicted mean| / predicted mean per percentile, a second
# criterion judged only on runs at least ACCURACY_MIN_RUN_S long (a shorter run's percentile
# scatters by more than the target even when the prediction is exact)
TOLERANCES = {"p50": 0.20, "p95": 0.30, "p99": 0.35}
ACCURACY_MIN_RUN_S = 300.0
# counts that grow with the run's length (a 90-s load run against 300-s replications):
# not properties of the system, so not compared
EXTENSIVE = frozenset({"turns", "calls"})


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    target = 2.0 * (1.0 - p)  # two-sided tail
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


SCALES: dict[str, tuple[Any, Any]] = {
    "identity": ((lambda x: x), (lambda y: y)),
    "log": ((lambda x: math.log(max(x, 1e-9))), math.exp),
    "sqrt(1 - x)": ((lambda x: math.sqrt(max(0.0, 1.0 - x))), (lambda y: 1.0 - y * abs(y))),
}


def twin_scale(name: str) -> tuple[Any, Any]:
    """(transform, inverse) putting metric ``name`` on a scale where its run-to-run spread
    is roughly symmetric (measured on baseline and the twin tests' overloaded scenario,
    300 replications of 30 s): ``log`` for times (skewness 0.3-0.8; ``−1/x`` is more
    symmetric but caps the upper side of the interval, hiding slow runs), ``sqrt(1 − x)``
    for the success rate, ``log(x − 1 + 0.01)`` for attempts per turn (0.01 keeps a run
    without retries finite).  Any monotone transform keeps the false failure bound; a
    symmetric one gives the check its power."""
    if name == "success_rate":
        return SCALES["sqrt(1 - x)"]
    if name == "attempts_per_turn":
        return (lambda x: math.log(max(x - 1.0, 0.0) + 0.01)), (lambda y: math.exp(y) + 0.99)
    return SCALES["log"]


@dataclass(frozen=True)
class TwinMetric:
    """One metric of a simultaneous prediction: interval, the run's value and its score."""

    metric: str
    sim_centre: float  # the replications' mean on the metric's scale, back-transformed
    low: float
    high: float
    value: float | None
    z: float  # the run's standardised distance on the metric's scale (inf: undefined)

    @property
    def inside(self) -> bool:
        """The run's value lies inside the interval."""
        return self.value is not None and self.low <= self.value <= self.high


@dataclass(frozen=True)
class TwinCheck:
    """:func:`simultaneous_prediction`: the run's worst score against the replications'."""

    rows: tuple[TwinMetric, ...]
    t_run: float
    t_star: float
    replications: int

    @property
    def ok(self) -> bool:
        """The run is not more extreme than every replication (false failure <= 1/(R+1))."""
        return self.t_run <= self.t_star

    @property
    def false_failure_rate(self) -> float:
        """The bound ``1 / (R + 1)`` of failing a run that is a twin."""
        return 1.0 / (self.replications + 1)


def simultaneous_prediction(sim_runs: Sequence[dict[str, float | None]],
                            run: dict[str, float | None], metrics: Sequence[str]) -> TwinCheck:
    """Is ``run`` (metric values) one more draw of the replications ``sim_runs``?  See the
    module docstring: each of the R + 1 runs is scored against the R others, so under the
    twin hypothesis the run is the most extreme with probability 1/(R+1) (ties pass).  A
    metric undefined in a replication makes that replication's score infinite (it never
    narrows the check), undefined in ``run`` fails it."""
    r = len(sim_runs)
    if r < 3:
        raise ValueError(f"need at least 3 replications, got {r}")
    t_rep = [0.0] * r
    t_run = 0.0
    cols = []
    for name in metrics:
        g, inv = twin_scale(name)
        ys = [None if (v := m.get(name)) is None or not math.isfinite(v) else g(float(v))
              for m in sim_runs]
        ok = [y for y in ys if y is not None]
        if len(ok) < 3:
            raise ValueError(f"{name}: fewer than 3 replications define it")
        n, s1, s2 = len(ok), math.fsum(ok), math.fsum(y * y for y in ok)
        mean = s1 / n
        floor = _sd_floor(name, sim_runs)
        sd = max(floor, math.sqrt(max(0.0, (s2 - n * mean * mean) / (n - 1))))
        x = run.get(name)
        y_run = None if x is None or not math.isfinite(x) else g(float(x))
        z = math.inf if y_run is None else _score(y_run, mean, sd)
        for j, y in enumerate(ys):  # scored against the others and the run, as the run is
            if y is None or y_run is None:
                t_rep[j] = math.inf
                continue
            a1, a2 = s1 - y + y_run, s2 - y * y + y_run * y_run
            m_j = a1 / n
            v_j = max(0.0, (a2 - n * m_j * m_j) / (n - 1))
            t_rep[j] = max(t_rep[j], _score(y, m_j, max(floor, math.sqrt(v_j))))
        t_run = max(t_run, z)
        cols.append((name, inv, mean, sd, x, z))
    t_star = max(t_rep)
    rows = []
    for name, inv, mean, sd, x, z in cols:
        lo, hi = (-math.inf, math.inf) if math.isinf(t_star) else (
            inv(mean - t_star * sd), inv(mean + t_star * sd))
        rows.append(TwinMetric(name, inv(mean), min(lo, hi), max(lo, hi), x, z))
    return TwinCheck(tuple(rows), t_run, t_star, r)


def _sd_floor(name: str, sim_runs: Sequence[dict[str, float | None]]) -> float:
    """The smallest spread a metric is standardised by: the success rate moves in steps of
    one turn, and when (nearly) every replication succeeds completely its spread is ~0, so
    one failed turn would look infinitely far; its floor is half a failed turn of an average
    run on the ``sqrt(1 − x)`` scale (the same for every run scored: exchangeability holds)."""
    if name != "success_rate":
        return 0.0
    turns = [v for m in sim_runs if (v := m.get("turns")) is not None and v > 0]
    return 0.5 / math.sqrt(sum(turns) / len(turns)) if turns else 0.0


def _score(y: float, mean: float, sd: float) -> float:
    if sd > 0.0:
        return abs(y - mean) / sd
    return 0.0 if y == mean else math.inf


def interval_scale(metric: str | None) -> str:
    """The :data:`SCALES` entry :func:`run_interval`'s t interval is computed on: ``log`` for
    times (``*_s`` metrics and their percentiles: positive, right-skewed run to run),
    ``sqrt(1 - x)`` for the success rate (bounded by 1, skewed near it), ``identity`` for the
    rest (counts and ratios that may be 0)."""
    base = (metric or "").split(".", 1)[0]
    if base == "success_rate":
        return "sqrt(1 - x)"
    return "log" if base.endswith("_s") else "identity"


@dataclass(frozen=True)
class RunInterval:
    """:func:`run_interval`: where one more run's value of a metric falls, at ``level``."""

    low: float
    high: float
    centre: float  # the replications' median (order statistics) or back-transformed mean
    n: int  # replications that define the metric
    level: float
    method: str  # "order statistics j..n+1-j of n" | "t (scale), n = N"

    def contains(self, value: float | None) -> bool:
        """The value lies inside the interval (an undefined value never does)."""
        return (value is not None and math.isfinite(value)
                and self.low <= float(value) <= self.high)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for summary.json / prediction.json."""
        return {"low": self.low, "high": self.high, "centre": self.centre, "n": self.n,
                "level": self.level, "method": self.method}


def run_interval(values: Sequence[float | None], level: float = 0.90,
                 metric: str | None = None, resolution: float = 0.0,
                 bounds: tuple[float, float] = (-math.inf, math.inf)) -> RunInterval | None:
    """The ``level`` prediction interval of ONE run's value of ``metric``, from the
    per-replication values of simulated runs of the same length and load (module docstring).

    ``resolution``: the smallest step the metric moves in one run (the success rate: one
    turn, ``1 / turns``); the interval is one step wider on each side, so replications that
    all agree (every turn succeeded) do not exclude a run one step off.
    ``bounds``: the metric's possible range (the interval is clipped to it).  None with fewer
    than two defined values."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = sorted(_clean(values))
    n = len(x)
    if n < 2:
        return None
    j = math.floor((n + 1) * (1.0 - level) / 2.0 + 1e-9)
    if j >= 1:  # P(x_(j) <= X <= x_(n+1-j)) = (n + 1 - 2j) / (n + 1) >= level, any law
        lo, hi = x[j - 1], x[n - j]
        centre = _median(x)
        method = f"order statistics {j}..{n + 1 - j} of {n}"
    else:
        scale = interval_scale(metric)
        g, inv = SCALES[scale]
        y = [g(v) for v in x]
        m = math.fsum(y) / n
        s = math.sqrt(math.fsum((v - m) ** 2 for v in y) / (n - 1))
        half = t_quantile((1.0 + level) / 2.0, n - 1) * s * math.sqrt(1.0 + 1.0 / n)
        a, b = inv(m - half), inv(m + half)
        lo, hi, centre = min(a, b), max(a, b), inv(m)
        method = f"t on the {scale} scale, n = {n}"
    lo, hi = lo - resolution, hi + resolution
    lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return RunInterval(lo, hi, centre, n, level, method)


def accuracy(metric: str, error: float, run_s: float) -> str:
    """The accuracy criterion of one metric: ``within`` / ``beyond`` its :data:`TOLERANCES`
    target (relative ``error``), ``not judged (run < 300 s)`` on a shorter run, ``–`` for a
    metric without a target or an undefined error."""
    tol = TOLERANCES.get(metric.rsplit(".", 1)[-1])
    if tol is None or not math.isfinite(error):
        return "–"
    if run_s < ACCURACY_MIN_RUN_S:
        return f"not judged (run < {ACCURACY_MIN_RUN_S:g} s)"
    return "within" if abs(error) <= tol else "beyond"


def one_run_intervals(summary: dict[str, Any], level: float = 0.90) -> dict[str, Any]:
    """``summary.json``'s ``one_run_interval``: :func:`run_interval` of every metric two or
    more replications define (a caller-perceived percentile that is infinite in any
    replication has none), as plain data; ``{}`` with one replication."""
    out: dict[str, Any] = {}
    for name, m in summary.get("metrics", {}).items():
        values = m.get("values") if isinstance(m, dict) else None
        if not values or (name.startswith(INF_PREFIXES) and any(v is None for v in values)):
            continue
        iv = run_interval(values, level, metric=name, bounds=domain(name))
        if iv is not None:
            out[name] = iv.as_dict()
    return out


def _median(x: list[float]) -> float:
    n = len(x)
    return x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2.0


def _clean(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def prediction_interval(values: Sequence[float | None], alpha: float = 0.05
                        ) -> tuple[float, float] | None:
    """The ``1 − alpha`` prediction interval of one more value (None below two values)."""
    x = _clean(values)
    n = len(x)
    if n < 2:
        return None
    m = math.fsum(x) / n
    s = math.sqrt(math.fsum((v - m) ** 2 for v in x) / (n - 1))
    half = t_quantile(1.0 - alpha / 2.0, n - 1) * s * math.sqrt(1.0 + 1.0 / n)
    return m - half, m + half


@dataclass(frozen=True)
class Agreement:
    """One metric of a simulation (run 0) against a load run."""

    metric: str
    sim_mean: float
    sim_n: int
    load_value: float
    load_se: float | None  # None: the load run reported none (prediction spread used)
    diff: float  # load − sim
    diff_ci_low: float
    diff_ci_high: float
    p_value: float
    verdict: str  # AGREES or DIFFERS (after Holm)


def _test(metric: str, sim_values: list[float], load: float, se: float | None
          ) -> tuple[float, float, float, float]:
    """(diff, ci_low, ci_high, p) of ``load − mean(sim)``."""
    n = len(sim_values)
    m = math.fsum(sim_values) / n
    var_s = math.fsum((v - m) ** 2 for v in sim_values) / (n - 1)
    d = load - m
    var = var_s / n + se * se if se is not None else var_s * (1.0 + 1.0 / n)
    if var <= 0.0:
        return d, d, d, 0.0 if d != 0.0 else 1.0
    sim_part = var_s / n if se is not None else var_s * (1.0 + 1.0 / n)
    df = var * var / (sim_part * sim_part / (n - 1)) if sim_part > 0 else 1e9
    half = t_quantile(0.975, df) * math.sqrt(var)
    return d, d - half, d + half, t_two_sided_p(d / math.sqrt(var), df)


def agreement_rows(sim_summary: dict[str, Any], load_summary: dict[str, Any],
                   alpha: float = 0.05) -> list[Agreement]:
    """Every metric defined in both summaries (at least two simulated replications, a load
    value; not the :data:`EXTENSIVE` counts), "agrees" or "differs" with Holm's correction
    over all of them."""
    sim_m, load_m = sim_summary.get("metrics", {}), load_summary.get("metrics", {})
    tested: list[tuple[str, list[float], float, float | None,
                       tuple[float, float, float, float]]] = []
    for name, lm in load_m.items():
        if name in EXTENSIVE:
            continue
        sm = sim_m.get(name)
        if not isinstance(sm, dict) or not isinstance(lm, dict) or lm.get("mean") is None:
            continue
        xs = _clean(sm.get("values") or [])
        if len(xs) < 2:
            continue
        se = lm.get("se")
        load = float(lm["mean"])
        tested.append((name, xs, load, None if se is None else float(se),
                       _test(name, xs, load, None if se is None else float(se))))
    rejected = holm([t[4][3] for t in tested], alpha)
    return [Agreement(name, math.fsum(xs) / len(xs), len(xs), load, se, *res,
                      verdict=DIFFERS if r else AGREES)
            for (name, xs, load, se, res), r in zip(tested, rejected, strict=True)]


def is_load(summary: dict[str, Any]) -> bool:
    """True for a load run's summary."""
    return summary.get("kind") == "load"
