"""Parameter uncertainty: scenarios drawn from what a calibration does not know.

A calibration states its figures with 95 % intervals: the mean of each fitted law (Student t,
or the censored fit's, widened for the buckets) and each injected error rate (Wilson).  A
prediction whose replications all run the point estimates has intervals for the randomness of
one run only: it ignores that the deployment's mean service time is known to +-5 % from a
25-s scrape, which near saturation moves the queue by +-20 % -- and judges a right model
wrong.  :func:`parameter_draws` gives each replication its own parameters instead (a
posterior-predictive simulation):

- a fitted law's mean: ``mean x exp(N(0, s))``, ``s`` the log-scale half-width of its 95 %
  interval / 1.96 (a scale change: the cv and the family stay; :func:`rtalab.sim.dist.scaled`);
- an injected error rate seen ``k`` times in ``n`` executions: ``Beta(k + 1/2, n - k + 1/2)``,
  the Jeffreys posterior (a code never seen stays at 0: nothing says it exists);
- what was identified exactly (``reasoner.workers`` from the gauges) and what the scenario
  sets (the rate) do not move.

Draw ``i`` is replication ``i``'s, from its own seeded stream: the same calibration and seed
give the same draws, bit for bit, and adding replications does not change the first ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtalab.sim.dist import parse_dist, scaled

# the fitted laws a draw rescales: scenario key -> the name of its Fit in Calibration.fits
LAWS = {"reasoner.reasoning_time_s": "reasoning_time_s",
        "reasoner.first_chunk_s": "first_chunk_s",
        "network.uplink.latency_s": "uplink_latency_s"}
Z95 = 1.959963984540054
MIN_LOG_SD = 1e-3  # a law known to better than 0.1 % (a constant's jitter) is not drawn
STREAM = 0x0CA1_1B2A  # the draws' stream, apart from the replications' own


@dataclass(frozen=True)
class Spread:
    """What one uncertain parameter's draws come from."""

    key: str
    kind: str  # "scale" (a law's mean, log-normal factor) or "rate" (an error rate, Beta)
    estimate: float
    a: float  # scale: the log sd; rate: Beta alpha
    b: float = 0.0  # rate: Beta beta
    code: str = ""  # rate: the error code

    def text(self) -> str:
        if self.kind == "scale":
            return f"{self.key}: mean {self.estimate:.4g} s x exp(N(0, {self.a:.3f}))"
        return (f"{self.key}.{self.code}: Beta({self.a:g}, {self.b:g}) "
                f"(seen {self.a - 0.5:g} in {self.a + self.b - 1:g})")


def _mean_ci(cal: Any, key: str) -> tuple[float, float, float] | None:
    fit = cal.fits.get(LAWS[key])
    if fit is not None:
        return fit.mean, *fit.mean_ci
    summary = cal.figures.get("bucket_fits", {}).get(key)
    if summary is not None:
        return summary["mean"], *summary["mean_ci"]
    return None


def spreads(cal: Any) -> list[Spread]:
    """The calibration's uncertain parameters (those identified with a stated interval)."""
    identified = {v.key: v.value for v in cal.values}
    out = []
    for key in LAWS:
        if key not in identified or (m := _mean_ci(cal, key)) is None:
            continue
        mean, lo, hi = m
        if not (0 < lo <= mean <= hi) or not math.isfinite(hi):
            continue  # a constant law or a degenerate interval: nothing to spread
        s = (math.log(hi) - math.log(lo)) / (2 * Z95)
        if s >= MIN_LOG_SD:
            out.append(Spread(key, "scale", mean, s))
    n = cal.figures.get("executions", 0)
    rates = identified.get("reasoner.errors")
    if isinstance(rates, dict) and n:
        for code, r in sorted(cal.figures.get("errors", {}).items()):
            if code in rates and not r.get("emergent"):
                k = r["count"]
                out.append(Spread("reasoner.errors", "rate", k / n, k + 0.5, n - k + 0.5, code))
    return out


def parameter_draws(cal: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` scenario overrides (dotted key -> value), one per replication, each drawn from
    the calibration's uncertainty (module docstring); ``{}`` for every replication when the
    calibration states no interval."""
    identified = {v.key: v.value for v in cal.values}
    sp = spreads(cal)
    out = []
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence([seed, STREAM, i]))
        over: dict[str, Any] = {}
        for s in sp:
            if s.kind == "scale":
                factor = math.exp(float(rng.normal(0.0, s.a)))
                over[s.key] = scaled(parse_dist(identified[s.key]), factor).to_toml()
            else:
                rates = over.setdefault(s.key, dict(identified[s.key]))
                rates[s.code] = round(float(rng.beta(s.a, s.b)), 6)
        if (total := sum(over.get("reasoner.errors", {}).values())) > 1:  # shares of one
            over["reasoner.errors"] = {c: r / total for c, r in over["reasoner.errors"].items()}
        out.append(over)
    return out
