"""A load run's uncertainty: a bootstrap over its calls.

A load run is one replication, so ``summarize`` gives it no CI.  Its calls are
independent units (open Poisson arrivals; turns of one call are correlated, so
the calls, not the turns, are resampled): draw as many calls as the run had,
with replacement, rebuild every table from them (every row of a drawn call, each
further copy of a call with identifiers of its own: call, turn, requestGuid, task
and context ids, so a call drawn twice is two calls, never one call whose requests
ran twice; ids coded as integers once, :mod:`rtalab.loadtests.loadrun.resample`), rebuild
the time series from the resampled tables, compute
every metric with the simulator's ``replication_metrics``, repeat
:data:`BOOTSTRAP_RESAMPLES` times.  Each metric gets ``se`` (the bootstrap
standard deviation) and a 95 % percentile interval (``ci_low``/``ci_high``), with
``uncertainty`` naming the method.  The generator is seeded from the run's seed:
the same ledgers give the same numbers.

A figure the bootstrap cannot speak for gets no interval but a ``ci_note`` saying
why (shown as "–"): the number of calls (fixed by the resampling), a peak (the
bootstrap of a maximum is biased and says nothing about its spread), a counter of the
whole run, and a figure every resample gives the same value (e.g. 0 events: a
zero-width interval would read as certainty).  When the percentile interval misses the
estimate (a skewed, discrete statistic), it is widened to hold it and ``ci_note`` says
so: an interval always contains its estimate.

What it does not cover: run-to-run effects shared by every call of the run (a
slower machine, a warm-up that differs); :func:`rtalab.sim.shared.agreement.agreement_rows`
adds the simulator's spread between replications on top.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from rtalab.loadtests.loadrun.resample import CallResampler
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import counter_metrics, domain, replication_metrics

BOOTSTRAP_RESAMPLES = 200
METHOD = f"bootstrap over calls ({BOOTSTRAP_RESAMPLES} resamples, 95 % percentile interval)"

NOTE_FIXED = "fixed by the resampling (each resample draws as many calls as the run had)"
NOTE_PEAK = "a peak: the bootstrap does not estimate the spread of a maximum"
NOTE_COUNTER = "read from the run's counters (not from resampled calls): not resampled"
NOTE_CONSTANT = "every resample gives the same value: no spread to show"
NOTE_WIDENED = "percentile interval widened to hold the estimate (skewed statistic)"
NOTE_TOO_FEW = "defined in fewer than two resamples"
#: figures the bootstrap cannot speak for, and why
NOT_RESAMPLED = {S.M_CALLS: NOTE_FIXED, S.M_CONCURRENT_CALLS_PEAK: NOTE_PEAK}

#: builds a run's time series from its tables (``rtalab.loadtests.loadrun.tables.timeseries``)
Series = Callable[[Any, float], pd.DataFrame]


def resample(out: Any, draw: np.ndarray, calls: np.ndarray, series: Series) -> Any:
    """``out`` with the calls ``calls[draw]`` (indices into ``out.calls``): every row of each
    drawn call, each further copy of a call with identifiers of its own; the time series
    rebuilt from the resampled tables by ``series`` (one draw; :func:`bootstrap` prepares
    the tables once, :class:`rtalab.loadtests.loadrun.resample.CallResampler`)."""
    del calls  # the draw indexes out.calls, in its order
    return CallResampler(out, series).draw(draw)


def bootstrap(out: Any, warmup_s: float, seed: int, series: Series,
              resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, dict[str, Any]]:
    """Per metric: ``se``, ``ci_low``, ``ci_high`` of the bootstrap over calls (the raw
    percentile interval), or ``ci_note`` alone where it has none (see the module doc)."""
    calls = out.calls[S.CALL_ID].astype(str).to_numpy()
    if len(calls) < 2:
        return {}
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7E1]))
    draws = CallResampler(out, series)  # the tables prepared once: each draw is cheap
    samples: dict[str, list[float]] = {}
    for _ in range(resamples):
        draw = rng.integers(0, len(calls), size=len(calls))
        for name, v in replication_metrics(draws.draw(draw), warmup_s).items():
            samples.setdefault(name, [])
            if v is not None and math.isfinite(v):
                samples[name].append(float(v))
    counters = set(counter_metrics(out.counters))
    result: dict[str, dict[str, Any]] = {}
    for name, xs in samples.items():
        note = NOT_RESAMPLED.get(name) or (NOTE_COUNTER if name in counters else None)
        if note is None and len(xs) < 2:
            note = NOTE_TOO_FEW
        if note is None and min(xs) == max(xs):
            note = NOTE_CONSTANT
        if note is not None:
            result[name] = {"ci_note": note}
            continue
        x = np.asarray(xs)
        lo, hi = domain(name)
        result[name] = {"se": float(x.std(ddof=1)),
                        "ci_low": max(lo, float(np.quantile(x, 0.025))),
                        "ci_high": min(hi, float(np.quantile(x, 0.975)))}
    return result


def add_uncertainty(summary: dict[str, Any], out: Any, warmup_s: float, seed: int,
                    series: Series) -> None:
    """Put the bootstrap's ``se``/``ci_low``/``ci_high`` (or its ``ci_note``) on every
    measured metric of a load run's ``summary`` (in place); ``summary["uncertainty"]``
    names the method.  An interval always holds its estimate (widened if it must be)."""
    boot = bootstrap(out, warmup_s, seed, series)
    for name, m in summary["metrics"].items():
        if m.get("mean") is None:
            continue
        b = boot.get(name)
        m["ci_low"] = m["ci_high"] = None
        if b is None:
            m["ci_note"] = NOTE_TOO_FEW
            continue
        m.update(b)
        if "ci_low" in b and not b["ci_low"] <= m["mean"] <= b["ci_high"]:
            m["ci_low"], m["ci_high"] = min(b["ci_low"], m["mean"]), max(b["ci_high"], m["mean"])
            m["ci_note"] = NOTE_WIDENED
    summary["uncertainty"] = METHOD
