"""A load run's uncertainty: a bootstrap over its calls.

A load run is one replication, so ``summarize`` gives it no CI.  Its calls are
independent units (open Poisson arrivals; turns of one call are correlated, so
the calls, not the turns, are resampled): draw as many calls as the run had,
with replacement, rebuild the tables from them (every row of a drawn call, ids
made unique per draw), compute every metric with the simulator's
``replication_metrics``, repeat :data:`BOOTSTRAP_RESAMPLES` times.  Each metric gets
``se`` (the bootstrap standard deviation) and a 95 % percentile interval
(``ci_low``/``ci_high``), with ``uncertainty`` naming the method.  The generator
is seeded from the run's seed: the same ledgers give the same numbers.

What it does not cover: run-to-run effects shared by every call of the run (a
slower machine, a warm-up that differs); :func:`sim.shared.agreement.agreement_rows`
adds the simulator's spread between replications on top.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from sim.shared import schema as S
from sim.shared.summary import domain, replication_metrics

BOOTSTRAP_RESAMPLES = 200
METHOD = f"bootstrap over calls ({BOOTSTRAP_RESAMPLES} resamples, 95 % percentile interval)"


def _resample(out: Any, draw: np.ndarray, calls: np.ndarray) -> Any:
    """``out`` with the calls ``calls[draw]`` (each drawn copy gets its own call id)."""
    picked = calls[draw]
    suffix = np.arange(len(draw)).astype(str)
    new_id = pd.Series(np.char.add(np.char.add(picked.astype(str), "#"), suffix))
    keyed = pd.DataFrame({S.CALL_ID: picked, "_new": new_id})
    tables = {}
    for name in ("attempts", "turns", "calls", "side_effects"):
        df = getattr(out, name)
        if len(df) == 0 or S.CALL_ID not in df.columns:
            tables[name] = df
            continue
        merged = keyed.merge(df, on=S.CALL_ID, how="inner", sort=False)
        merged[S.CALL_ID] = merged.pop("_new")
        tables[name] = merged[df.columns]
    return replace(out, **tables)


def bootstrap(out: Any, warmup_s: float, seed: int,
              resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, dict[str, float | None]]:
    """Per metric: ``se``, ``ci_low``, ``ci_high`` of the bootstrap over calls (None where
    fewer than two resamples define the metric)."""
    calls = out.calls[S.CALL_ID].astype(str).to_numpy()
    if len(calls) < 2:
        return {}
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7E1]))
    samples: dict[str, list[float]] = {}
    for _ in range(resamples):
        draw = rng.integers(0, len(calls), size=len(calls))
        for name, v in replication_metrics(_resample(out, draw, calls), warmup_s).items():
            if v is not None and math.isfinite(v):
                samples.setdefault(name, []).append(float(v))
    result: dict[str, dict[str, float | None]] = {}
    for name, xs in samples.items():
        if len(xs) < 2:
            continue
        x = np.asarray(xs)
        lo, hi = domain(name)
        result[name] = {"se": float(x.std(ddof=1)),
                        "ci_low": max(lo, float(np.quantile(x, 0.025))),
                        "ci_high": min(hi, float(np.quantile(x, 0.975)))}
    return result


def add_uncertainty(summary: dict[str, Any], out: Any, warmup_s: float, seed: int) -> None:
    """Put the bootstrap's ``se``/``ci_low``/``ci_high`` on every measured metric of a load
    run's ``summary`` (in place); ``summary["uncertainty"]`` names the method."""
    boot = bootstrap(out, warmup_s, seed)
    for name, m in summary["metrics"].items():
        b = boot.get(name)
        if m.get("mean") is None or b is None:
            continue
        m.update(b)
    summary["uncertainty"] = METHOD
