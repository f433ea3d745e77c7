"""Maximum-likelihood fits of a positive duration: lognormal, gamma, Weibull, empirical.

The criterion (stated in every output): the parametric family with the lowest AIC
(2 k − 2 log L, k = 2 for each, location fixed at 0) is the candidate; its goodness of fit
is the Kolmogorov–Smirnov distance D between the sample and the fitted CDF.  If
D > max(1.63 / √n, ``KS_TOLERANCE``) — rejected at the 1 % level *and* off by more than 3
points of probability somewhere — no family describes the data and the empirical
distribution (the observed values) is used.  The 3-point floor keeps a good parametric law
for large samples, where the KS test rejects differences nobody could act on.

Fits and KS distances use at most :data:`MAX_FIT_SAMPLES` values (a seeded random subset:
MLE on 200,000 values is as good as on a million for two parameters, and the subset's KS
distance is within ~0.003 of the full sample's); means use every value. An empirical law keeps
at most 10,000 values: the sample's quantiles at (i + 0.5) / 10,000 (tails beyond them are cut).
CIs (:mod:`rtalab.sim.calibrate.intervals`): the mean's Student t, the cv's BCa bootstrap (200
resamples of at most 5,000 values), the p99's distribution-free order-statistic interval
(none, with the reason, below 368 values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from rtalab.sim.calibrate.intervals import bca_ci, quantile, quantile_ci, t_mean_ci
from rtalab.sim.dist import Const, Dist, Empirical, Gamma, LogNormal, Weibull

if TYPE_CHECKING:
    from scipy.stats._distn_infrastructure import rv_continuous_frozen

FAMILIES = ("lognormal", "gamma", "weibull")
KS_TOLERANCE = 0.03
MAX_FIT_SAMPLES = 200_000
BOOTSTRAP_SAMPLES, BOOTSTRAP_ROUNDS = 5_000, 200
MAX_EMPIRICAL_VALUES = 10_000  # an empirical law keeps its quantiles at (i + 0.5) / 10,000
MIN_POSITIVE_S = 1e-6  # values at or below this are "zero"
NEGLIGIBLE_MEAN_S = 1e-3  # a step averaging under 1 ms is a constant 0 (event-loop noise)
CONSTANT_CV = 0.01  # a spread below 1 % of the mean is a constant


@dataclass
class FamilyFit:
    """One family's MLE: parameters, the Dist, AIC, KS distance."""

    family: str
    params: dict[str, float]
    dist: Dist
    aic: float
    ks: float


@dataclass
class Fit:
    """The fits of one quantity and the choice among them."""

    name: str
    n: int
    chosen: str  # a family, "empirical" or "constant"
    dist: Dist
    ks: float  # KS distance of the chosen law (0 for the empirical one)
    ks_critical: float
    mean: float
    mean_ci: tuple[float, float]
    cv: float
    cv_ci: tuple[float, float] | None  # None: see cv_ci_note
    p99: float
    p99_ci: tuple[float, float] | None  # None: see p99_ci_note
    families: list[FamilyFit] = field(default_factory=list)
    sample: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    cv_ci_note: str = ""
    p99_ci_note: str = ""

    def summary(self) -> dict[str, Any]:
        """Plain data for calibration.json."""
        return {"n": self.n, "chosen": self.chosen, "ks": self.ks, "ks_critical": self.ks_critical,
                "mean": self.mean, "mean_ci": list(self.mean_ci), "cv": self.cv,
                "cv_ci": _ci_list(self.cv_ci), "cv_ci_note": self.cv_ci_note,
                "p99": self.p99, "p99_ci": _ci_list(self.p99_ci),
                "p99_ci_note": self.p99_ci_note,
                "families": [{"family": f.family, "params": f.params, "aic": f.aic, "ks": f.ks}
                             for f in self.families]}

    def comment(self) -> str:
        """One line for the TOML: the choice, the fit quality and the CIs."""
        if self.chosen == "constant":
            return (f"constant (n = {self.n}; spread {self.cv:.2%} of the mean): median "
                    f"{self.dist.mean:.4g} s, mean {self.mean:.4g} s")
        alt = ", ".join(f"{f.family} AIC {f.aic:.0f} KS {f.ks:.3f}" for f in self.families)
        return (f"{self.chosen} (n = {self.n}; KS {self.ks:.3f}, reject above "
                f"{max(self.ks_critical, KS_TOLERANCE):.3f}): mean {self.mean:.4g} s "
                f"[{self.mean_ci[0]:.4g}, {self.mean_ci[1]:.4g}], cv {self.cv:.3g} "
                f"{_ci_text(self.cv_ci, self.cv_ci_note, '.3g')}, p99 {self.p99:.4g} s "
                f"{_ci_text(self.p99_ci, self.p99_ci_note, '.4g')}; candidates: {alt}")


def _ci_list(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else list(ci)


def _ci_text(ci: tuple[float, float] | None, note: str, spec: str) -> str:
    """``[lo, hi]``, or ``[–: reason]`` for an interval that does not exist."""
    return f"[{ci[0]:{spec}}, {ci[1]:{spec}}]" if ci is not None else f"[–: {note}]"


def _family(name: str, x: np.ndarray, full: int) -> FamilyFit:
    if name == "lognormal":
        s, _, scale = stats.lognorm.fit(x, floc=0)
        frozen: rv_continuous_frozen = stats.lognorm(s, 0, scale)
        mean, var = frozen.mean(), frozen.var()
        dist: Dist = LogNormal(float(mean), float(math.sqrt(var) / mean))
        params = {"sigma": float(s), "mu": float(math.log(scale))}
    elif name == "gamma":
        a, _, scale = stats.gamma.fit(x, floc=0)
        frozen = stats.gamma(a, 0, scale)
        dist = Gamma(float(a * scale), float(1 / math.sqrt(a)))
        params = {"shape": float(a), "scale": float(scale)}
    else:
        c, _, scale = stats.weibull_min.fit(x, floc=0)
        frozen = stats.weibull_min(c, 0, scale)
        dist = Weibull(float(c), float(scale))
        params = {"shape": float(c), "scale": float(scale)}
    loglik = float(np.sum(frozen.logpdf(x))) * (full / len(x))
    ks = float(stats.kstest(x, frozen.cdf).statistic)  # type: ignore[arg-type]  # scipy-stubs: no overloaded cdf
    return FamilyFit(name, params, dist, 2 * 2 - 2 * loglik, ks)


def _intervals(x: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    """The cv's BCa interval (on a subsample of at most :data:`BOOTSTRAP_SAMPLES` values,
    its width scaled to the full sample's) and the p99's order-statistic interval."""
    sub = x if len(x) <= BOOTSTRAP_SAMPLES else rng.choice(x, BOOTSTRAP_SAMPLES, replace=False)
    scale = math.sqrt(len(sub) / len(x))  # narrow a subsample's spread to the full sample's
    cv0 = float(x.std() / x.mean())
    lo, hi = bca_ci(sub, rng, BOOTSTRAP_ROUNDS)
    c0 = float(sub.std() / sub.mean())
    cv_ci = (min(cv0, cv0 - (c0 - lo) * scale), max(cv0, cv0 + (hi - c0) * scale))
    p99_ci, note = quantile_ci(x, 0.99)
    return {"cv": cv0, "cv_ci": cv_ci, "p99": quantile(x, 0.99), "p99_ci": p99_ci,
            "p99_ci_note": note}


def fit_duration(name: str, values: np.ndarray, seed: int = 0) -> Fit | None:
    """Fit the families to positive durations ``values``; None if there are fewer than 10."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x) & (x >= 0)]
    n = len(x)
    if n < 10:
        return None
    rng = np.random.default_rng(seed)
    mean = float(x.mean())
    mean_ci = t_mean_ci(x)
    zero = np.mean(x <= MIN_POSITIVE_S) > 0.5 or mean < NEGLIGIBLE_MEAN_S  # constant 0
    if zero or x.std() <= CONSTANT_CV * mean:  # (nearly) no spread: a constant
        v = 0.0 if zero else float(np.median(x))
        p99_ci, note = quantile_ci(x, 0.99)
        return Fit(name, n, "constant", Const(v), 0.0, 0.0, mean, mean_ci,
                   float(x.std() / mean) if mean > 0 else 0.0, None, quantile(x, 0.99), p99_ci,
                   sample=x, cv_ci_note="a constant: no spread to resample", p99_ci_note=note)
    pos = np.maximum(x, MIN_POSITIVE_S)
    fit_x = pos if n <= MAX_FIT_SAMPLES else rng.choice(pos, MAX_FIT_SAMPLES, replace=False)
    fams = []
    for fam in FAMILIES:
        try:
            fams.append(_family(fam, fit_x, n))
        except (ValueError, FloatingPointError, RuntimeError):  # this family cannot fit
            continue
    if not fams:
        fams = [FamilyFit("none", {}, Empirical((0.0,)), math.inf, 1.0)]
    best = min(fams, key=lambda f: f.aic)
    crit = 1.63 / math.sqrt(n)
    common = dict(ks_critical=crit, mean=mean, mean_ci=mean_ci, families=fams, sample=x,
                  **_intervals(x, rng))
    if best.ks > max(crit, KS_TOLERANCE):
        kept = np.sort(x) if n <= MAX_EMPIRICAL_VALUES else np.quantile(
            x, (np.arange(MAX_EMPIRICAL_VALUES) + 0.5) / MAX_EMPIRICAL_VALUES)
        return Fit(name, n, "empirical", Empirical(tuple(kept.tolist())), 0.0, **common)
    return Fit(name, n, best.family, best.dist, best.ks, **common)


def qq_plot(fits: list[Fit], path: Any) -> None:
    """One QQ panel per fit: sample quantiles against each family's, on one PNG."""
    # lazy: +158 ms (matplotlib) off importing fit
    import matplotlib

    matplotlib.use("Agg")
    # lazy: +1.53 s (matplotlib) off importing fit
    import matplotlib.pyplot as plt

    fits = [f for f in fits if f.chosen != "constant"]
    if not fits:
        return
    fig, axes = plt.subplots(1, len(fits), figsize=(4.2 * len(fits), 4.0), squeeze=False)
    q = (np.arange(1, 200) - 0.5) / 199
    q = np.concatenate([q, [0.995, 0.999]])
    for ax, f in zip(axes[0], fits, strict=True):
        obs = np.quantile(f.sample, q)
        for fam in f.families:
            p = fam.params
            if fam.family == "lognormal":
                theo = stats.lognorm(p["sigma"], 0, math.exp(p["mu"])).ppf(q)
            elif fam.family == "gamma":
                theo = stats.gamma(p["shape"], 0, p["scale"]).ppf(q)
            else:
                theo = stats.weibull_min(p["shape"], 0, p["scale"]).ppf(q)
            mark = " (chosen)" if fam.family == f.chosen else ""
            ax.plot(theo, obs, ".", ms=3, label=f"{fam.family}{mark} KS {fam.ks:.3f}")
        hi = float(obs.max())
        ax.plot([0, hi], [0, hi], "k-", lw=0.8)
        ax.set_title(f"{f.name} (n = {f.n}; chosen: {f.chosen})", fontsize=9)
        ax.set_xlabel("fitted quantile (s)")
        ax.set_ylabel("observed quantile (s)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
