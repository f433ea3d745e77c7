"""Interval-censored fits of a duration known only through histogram buckets.

A Prometheus histogram says how many observations fell in each bucket ``(le[i-1], le[i]]``,
not their values.  :func:`fit_buckets` fits lognormal, gamma and Weibull by maximum
likelihood on those counts (``log L = sum n_i log(F(le_i) - F(le_{i-1}))``, location 0),
keeps the family with the lowest AIC, and judges it by the largest gap between the fitted
and the observed cumulative share at the bucket bounds (the KS distance a histogram allows)
with the same rule as :mod:`rtalab.sim.calibrate.fit`: rejected when above max(1.63/sqrt(n),
0.03); then the histogram itself (``dist = "histogram"``) is kept.

Uncertainty, by a parametric bootstrap of the chosen law (:data:`ROUNDS` rounds): each
round draws ``n`` values (at most :data:`MAX_DRAW`, the spread scaled to ``n``), once
*bucketed* (the counts refitted as above) and once *exact* (the same family's MLE on the
values).  The 2.5-97.5 % range of the bucketed rounds is the CI of the
mean and of the cv; the ratio of its width to the exact rounds' width is what the buckets
cost (``widening``: 1.0 = as good as exact values; 2.0 = twice as wide) and is printed
with the value.  When one bucket holds :data:`CONCENTRATED` of the observations no family is
fitted (the law inside the bucket is not identified): the histogram is kept and the mean's
interval is that bucket; likewise when fewer than :data:`MIN_BUCKETS` buckets hold any.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from scipy import optimize, stats

from rtalab.sim.calibrate.fit import FAMILIES, KS_TOLERANCE
from rtalab.sim.dist import Dist, Gamma, Histogram, LogNormal, Weibull

ROUNDS = 60
MAX_DRAW = 20_000  # values per bootstrap draw (a larger count's spread is scaled down)
MIN_COUNT = 10  # observations needed for a fit
CONCENTRATED = 0.9  # this share of the observations in one bucket: no family is fitted
MIN_BUCKETS = 3  # ... nor with fewer buckets holding observations (2 parameters)


class _FamilyFit(TypedDict):
    """One family's maximum-likelihood fit to the bucket counts."""

    family: str
    params: np.ndarray
    loglik: float
    aic: float
    ks: float


@dataclass
class BucketFit:
    """The censored fit of one quantity (see the module docstring)."""

    name: str
    n: int
    buckets: int  # finite bounds
    chosen: str  # a family, or "histogram"
    dist: Dist
    ks: float
    ks_critical: float
    mean: float
    mean_ci: tuple[float, float]
    cv: float
    cv_ci: tuple[float, float]
    widening: dict[str, float]  # "mean", "cv": bucketed CI width / exact-value CI width
    families: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def summary(self) -> dict[str, Any]:
        """Plain data for calibration.json."""
        return {"n": self.n, "buckets": self.buckets, "chosen": self.chosen, "ks": self.ks,
                "ks_critical": self.ks_critical, "mean": self.mean,
                "mean_ci": list(self.mean_ci), "cv": self.cv, "cv_ci": list(self.cv_ci),
                "widening": self.widening, "families": self.families, "note": self.note}

    def comment(self) -> str:
        """One line for the TOML and the terminal: the choice, CIs, and the buckets' cost."""
        if self.note:
            return (f"histogram ({self.n:g} observations in {self.buckets + 1} buckets): "
                    f"{self.note}; mean {self.mean:.4g} s in [{self.mean_ci[0]:.4g}, "
                    f"{self.mean_ci[1]:.4g}]")
        alt = ", ".join(f"{f['family']} AIC {f['aic']:.0f} KS {f['ks']:.3f}"
                        for f in self.families)
        return (f"{self.chosen} (interval-censored fit of {self.n:g} observations in "
                f"{self.buckets + 1} buckets; KS at the bounds {self.ks:.3f}, reject above "
                f"{max(self.ks_critical, KS_TOLERANCE):.3f}): mean {self.mean:.4g} s "
                f"[{self.mean_ci[0]:.4g}, {self.mean_ci[1]:.4g}], cv {self.cv:.3g} "
                f"[{self.cv_ci[0]:.3g}, {self.cv_ci[1]:.3g}]; {self.widening_text()}; "
                f"candidates: {alt}")

    def widening_text(self) -> str:
        """How much wider the CIs are than exact values would give."""
        return (f"the buckets widen the CI of the mean x{self.widening['mean']:.2f} and of the "
                f"cv x{self.widening['cv']:.2f} (vs exact values)")


def _frozen(family: str, p: np.ndarray) -> Any:
    a, b = float(np.exp(p[0])), float(np.exp(p[1]))
    if family == "lognormal":  # p: log sigma, log scale
        return stats.lognorm(a, 0, b)
    if family == "gamma":
        return stats.gamma(a, 0, b)
    return stats.weibull_min(a, 0, b)


def _start(family: str, mean: float, cv: float) -> np.ndarray:
    cv = min(max(cv, 0.05), 5.0)
    if family == "lognormal":
        s = math.sqrt(math.log1p(cv * cv))
        return np.log([s, mean / math.exp(s * s / 2)])
    if family == "gamma":
        k = 1 / (cv * cv)
        return np.log([k, mean / k])
    k = max(cv ** -1.086, 0.1)  # Weibull's shape from the cv (Justus' approximation)
    return np.log([k, mean / math.gamma(1 + 1 / k)])


def _loglik(family: str, p: np.ndarray, bounds: np.ndarray, n: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        cdf = _frozen(family, p).cdf(bounds)
    prob = np.diff(np.concatenate(([0.0], cdf, [1.0])))
    prob = np.maximum(prob, 1e-300)
    return float(np.sum(n * np.log(prob)))


def _fit_family(family: str, bounds: np.ndarray, n: np.ndarray,
                start: np.ndarray) -> tuple[np.ndarray, float]:
    """(parameters, log L) of ``family`` on bucket counts ``n`` (len(bounds) + 1 of them)."""
    res = optimize.minimize(lambda p: -_loglik(family, p, bounds, n), start,  # type: ignore[call-overload]  # scipy-stubs: fun must take *args, **kwargs
                            method="Nelder-Mead", options={"xatol": 1e-5, "fatol": 1e-7,
                                                           "maxiter": 1000})
    return res.x, -float(res.fun)


def _dist(family: str, p: np.ndarray) -> Dist:
    f = _frozen(family, p)
    m, v = float(f.mean()), float(f.var())
    if family == "lognormal":
        return LogNormal(m, math.sqrt(v) / m)
    if family == "gamma":
        return Gamma(m, math.sqrt(v) / m)
    return Weibull(float(np.exp(p[0])), float(np.exp(p[1])))


def _ks(family: str, p: np.ndarray, bounds: np.ndarray, n: np.ndarray) -> float:
    emp = np.cumsum(n)[:-1] / n.sum()
    return float(np.max(np.abs(_frozen(family, p).cdf(bounds) - emp)))


def _exact_fit(family: str, x: np.ndarray) -> tuple[float, float]:
    """(mean, cv) of ``family``'s MLE on exact values (what the buckets are compared with)."""
    if family == "lognormal":
        lx = np.log(x)
        s2 = float(lx.var())
        return float(math.exp(lx.mean() + s2 / 2)), math.sqrt(math.expm1(s2))
    fitter = stats.gamma if family == "gamma" else stats.weibull_min
    f = fitter(*fitter.fit(x, floc=0))
    return float(f.mean()), float(f.std() / f.mean())


def _bootstrap(family: str, p: np.ndarray, bounds: np.ndarray, total: int,
               rng: np.random.Generator) -> dict[str, Any]:
    """CIs of mean and cv from bucketed draws of the fitted law (refitted on their counts),
    and their width against the same family's MLE on the exact draws."""
    law = _frozen(family, p)
    size = int(min(total, MAX_DRAW))
    shrink = math.sqrt(size / total)  # a capped draw's spread, narrowed to the full count's
    bucketed, exact = [], []
    for _ in range(ROUNDS):
        x = np.maximum(law.rvs(size=size, random_state=rng), 1e-9)
        exact.append(_exact_fit(family, x))
        counts = np.bincount(np.searchsorted(bounds, x, side="left"), minlength=len(bounds) + 1)
        q, _ = _fit_family(family, bounds, counts.astype(float), start=p)
        f = _frozen(family, q)
        bucketed.append((float(f.mean()), float(f.std() / f.mean())))
    b, e = np.asarray(bucketed), np.asarray(exact)
    out: dict[str, Any] = {"widening": {}}
    centre = (float(law.mean()), float(law.std() / law.mean()))
    for i, key in enumerate(("mean", "cv")):
        lo, hi = np.quantile(b[:, i], [0.025, 0.975])
        elo, ehi = np.quantile(e[:, i], [0.025, 0.975])
        c = centre[i]
        out[f"{key}_ci"] = (c - (c - lo) * shrink, c + (hi - c) * shrink)
        out["widening"][key] = float((hi - lo) / (ehi - elo)) if ehi > elo else math.inf
    return out


def fit_buckets(name: str, le: tuple[float, ...], counts: tuple[float, ...],
                seed: int = 0) -> BucketFit | None:
    """Fit a cumulative histogram (``le`` ending in inf, cumulative ``counts``); None with
    fewer than :data:`MIN_COUNT` observations or no finite bound."""
    bounds = np.asarray(le[:-1], dtype=float)
    cum = np.asarray(counts, dtype=float)
    total = float(cum[-1]) if len(cum) else 0.0
    if total < MIN_COUNT or len(bounds) == 0:
        return None
    n = np.diff(np.concatenate(([0.0], cum)))
    n = np.maximum(n, 0.0)
    h = Histogram(tuple(le), tuple(counts))
    mean0 = h.mean if h.mean > 0 else float(bounds[0])
    cv0 = math.sqrt(h.variance) / mean0 if mean0 > 0 else 1.0
    top, used = int(np.argmax(n)), np.flatnonzero(n > 0)
    if n[top] >= CONCENTRATED * total or len(used) < MIN_BUCKETS:
        # a two-parameter law is not identified from so few buckets: the histogram is kept
        edges = np.concatenate(([0.0], bounds, [math.inf]))
        lo, hi = float(edges[used[0]]), float(edges[used[-1] + 1])
        return BucketFit(name, int(total), len(bounds), "histogram", h, 0.0, 0.0, h.mean,
                         (lo, hi), math.sqrt(h.variance) / h.mean if h.mean > 0 else 0.0,
                         (0.0, math.inf), {"mean": math.inf, "cv": math.inf},
                         note=f"the observations fill {len(used)} bucket(s) ({n[top] / total:.0%}"
                              f" in one): no law is identified within ({lo:g}, {hi:g}] s, so the "
                              "histogram is kept and the mean is only known to lie there")
    fams: list[_FamilyFit] = []
    for fam in FAMILIES:
        try:
            p, ll = _fit_family(fam, bounds, n, _start(fam, mean0, cv0))
        except (ValueError, FloatingPointError, RuntimeError):
            continue
        if math.isfinite(ll):
            fams.append({"family": fam, "params": p, "loglik": ll, "aic": 4 - 2 * ll,
                         "ks": _ks(fam, p, bounds, n)})
    if not fams:
        return None
    best = min(fams, key=lambda f: f["aic"])
    crit = 1.63 / math.sqrt(total)
    rng = np.random.default_rng(seed)
    boot = _bootstrap(best["family"], best["params"], bounds, int(total), rng)
    law = _frozen(best["family"], best["params"])
    mean, cv = float(law.mean()), float(law.std() / law.mean())
    shown = [{"family": f["family"], "aic": f["aic"], "ks": f["ks"],
              "params": [float(np.exp(x)) for x in f["params"]]} for f in fams]
    chosen, dist = best["family"], _dist(best["family"], best["params"])
    if best["ks"] > max(crit, KS_TOLERANCE):  # no family describes the buckets
        chosen, dist = "histogram", h
        mean, cv = h.mean, math.sqrt(h.variance) / h.mean
    return BucketFit(name, int(total), len(bounds), chosen, dist, best["ks"], crit, mean,
                     boot["mean_ci"], cv, boot["cv_ci"], boot["widening"], shown)
