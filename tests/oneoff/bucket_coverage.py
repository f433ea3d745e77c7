"""One-off: the coverage of calibration's interval-censored CIs (mean and cv from histogram
buckets, :mod:`rtalab.sim.calibrate.censored`), measured from a known truth.  Not part of
``make test`` (about a second per draw); the figures are in docs/benchmarks.md.

    nice .venv/bin/python -m tests.oneoff.bucket_coverage gamma 185 200

Draws ``n`` values of the law (mean 0.2 s, cv 0.6), counts them in the Reasoner's timing
buckets, fits them with :func:`fit_buckets` and counts how often each 95 % CI holds the
truth; prints the families chosen and the misses.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from scipy import optimize

from rtalab.loadtests.reasoner.metrics import TIMING_BUCKETS
from rtalab.sim.calibrate.censored import fit_buckets

MEAN, CV = 0.2, 0.6


def draw(family: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values of ``family`` with mean :data:`MEAN` and cv :data:`CV`."""
    if family == "gamma":
        k = 1 / CV ** 2
        return rng.gamma(k, MEAN / k, n)
    if family == "lognormal":
        s = math.sqrt(math.log1p(CV * CV))
        return rng.lognormal(math.log(MEAN) - s * s / 2, s, n)
    k = optimize.brentq(lambda k: math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2
                                            - 1) - CV, 0.3, 10.0)
    return rng.weibull(k, n) * MEAN / math.gamma(1 + 1 / k)


def main(family: str, n: int, draws: int) -> int:
    rng = np.random.default_rng(2026)
    le = (*TIMING_BUCKETS, math.inf)
    hits = {"mean": 0, "cv": 0}
    chosen: dict[str, int] = {}
    t0 = time.monotonic()
    for i in range(draws):
        x = draw(family, n, rng)
        f = fit_buckets("x", le, (*(float((x <= b).sum()) for b in TIMING_BUCKETS), float(n)),
                        seed=i)
        assert f is not None
        chosen[f.chosen] = chosen.get(f.chosen, 0) + 1
        for key, truth, ci in (("mean", MEAN, f.mean_ci), ("cv", CV, f.cv_ci)):
            ok = ci[0] <= truth <= ci[1]
            hits[key] += ok
            if not ok:
                print(f"  draw {i}: {f.chosen} {key} {getattr(f, key):.3f} not in "
                      f"[{ci[0]:.3f}, {ci[1]:.3f}] (over {', '.join(f.supported)})", flush=True)
    print(f"{family}, n = {n}, {draws} draws: mean covered {hits['mean'] / draws:.1%}, cv "
          f"covered {hits['cv'] / draws:.1%}; chosen {chosen}; "
          f"{(time.monotonic() - t0) / draws:.2f} s a draw")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
