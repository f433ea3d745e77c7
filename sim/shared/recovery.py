"""Recovery after a trigger (outage, capacity drop, load spike): goodput per second, the
pre-trigger baseline, and the time until goodput is back within a tolerance of it.

Pure functions over plain arrays and the record tables of :mod:`rtalab.sim.shared.schema`, usable on
a simulated run or a load run alike:

* :func:`goodput_per_s` — completed turns per 1-s bin ``[k, k + 1)`` (by turn end time);
* :func:`baseline` — mean goodput over a pre-trigger window;
* :func:`recovery_time_s` — seconds after the trigger's end until the goodput, averaged
  over a sliding window of ``window_s`` seconds *and* over the rest of the horizon, is
  back at ``(1 - tolerance) x baseline`` (``None``: never within the horizon);
* :func:`recovery` — all of it for one replication, from its ``turns`` table;
* :func:`trigger_span` — the scenario's trigger (outages, capacity drops, load spikes);
* :func:`run_recovery_s` — the ``recovery_s`` metric of a run's summary: seconds from the
  trigger's end until goodput is back to 90 % of the offered load (``None``: never, i.e.
  infinite), judged like ``rtalab sim storm`` judges it.

Why windows and a noise allowance: per-second goodput is a count of a few turns (Poisson
noise ~ 1/sqrt(count)); at 8 turns/s a 10-s window still varies by ~11 %, so "within 5 %"
is judged on window means with an allowance of ``noise_z`` Poisson standard errors —
a statement about the system rather than about the noise.  A system that recovers
typically *exceeds* its baseline right after the trigger (the backlog completes), so the
check is one-sided: back to at least ``(1 - tolerance) x baseline``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rtalab.sim.shared import schema as S


def goodput_per_s(turns: pd.DataFrame, n_bins: int) -> np.ndarray:
    """Completed turns per 1-s bin ``[k, k + 1)``, ``k < n_bins``, by their end time."""
    completed = (turns[S.OUTCOME] == "completed").to_numpy()
    end = turns[S.END_S].to_numpy()[completed]
    end = end[np.isfinite(end)]
    k = np.floor(end).astype(np.int64)
    k = k[(k >= 0) & (k < n_bins)]
    return np.bincount(k, minlength=n_bins).astype(np.float64)


def baseline(goodput: np.ndarray, start_s: float, end_s: float) -> float:
    """Mean goodput over the bins in ``[start_s, end_s)`` (the pre-trigger reference)."""
    lo, hi = int(np.ceil(start_s)), int(np.floor(end_s))
    if hi <= lo or lo < 0 or hi > len(goodput):
        raise ValueError(f"baseline window [{start_s}, {end_s}) is empty or outside the "
                         f"{len(goodput)} s series")
    return float(goodput[lo:hi].mean())


def recovery_time_s(goodput: np.ndarray, trigger_end_s: float, reference: float,
                    tolerance: float = 0.05, window_s: int = 10,
                    horizon_s: float | None = None, noise_z: float = 3.0) -> float | None:
    """Seconds from ``trigger_end_s`` to the first bin ``t`` from which goodput is back.

    Back at ``t`` means both: the window ``[t, t + window_s)`` and the whole rest
    ``[t, horizon_s)`` average at least ``(1 - tolerance) * reference`` minus a Poisson noise
    allowance ``noise_z * sqrt(reference / length)`` (``length`` = seconds averaged; set
    ``noise_z = 0`` for the bare threshold).  The second condition rejects a short burst
    of completions (a backlog finishing) followed by a relapse.  Windows end by
    ``horizon_s`` (default: the series' end), e.g. the end of arrivals, after which goodput
    falls for reasons unrelated to the trigger.  ``None``: never back; ``0.0``: back as
    soon as the trigger ended.
    """
    if window_s < 1:
        raise ValueError(f"window_s must be >= 1, got {window_s}")
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    first = int(np.ceil(trigger_end_s))
    stop = len(goodput) if horizon_s is None else min(len(goodput), int(np.floor(horizon_s)))
    n = stop - first - window_s + 1
    if n <= 0:
        return None
    c = np.concatenate(([0.0], np.cumsum(goodput[first:stop], dtype=np.float64)))
    level = (1.0 - tolerance) * reference
    window = (c[window_s:window_s + n] - c[:n]) / window_s
    tail_len = (stop - first) - np.arange(n)
    tail = (c[-1] - c[:n]) / tail_len
    ok = ((window >= level - noise_z * np.sqrt(reference / window_s))
          & (tail >= level - noise_z * np.sqrt(reference / tail_len)))
    hit = np.flatnonzero(ok)
    return None if len(hit) == 0 else float(first + hit[0] - trigger_end_s)


@dataclass(frozen=True)
class Recovery:
    """One replication's recovery from one trigger."""

    baseline_per_s: float  # mean goodput before the trigger
    time_s: float | None  # seconds after the trigger's end until back (None: never)

    def within(self, limit_s: float) -> bool:
        """Recovered no later than ``limit_s`` seconds after the trigger's end."""
        return self.time_s is not None and self.time_s <= limit_s


def recovery(turns: pd.DataFrame, *, trigger_start_s: float, trigger_end_s: float,
             baseline_from_s: float, horizon_s: float, tolerance: float = 0.05,
             window_s: int = 10, noise_z: float = 3.0) -> Recovery:
    """Recovery of one replication (its ``turns`` table) from a trigger in
    ``[trigger_start_s, trigger_end_s)``; the baseline is ``[baseline_from_s, trigger_start_s)``
    (e.g. from the end of the warm-up), windows end by ``horizon_s`` (e.g. ``run.duration_s``)."""
    g = goodput_per_s(turns, int(np.ceil(horizon_s)))
    ref = baseline(g, baseline_from_s, trigger_start_s)
    return Recovery(ref, recovery_time_s(g, trigger_end_s, ref, tolerance, window_s, horizon_s,
                                                   noise_z))


def trigger_span(scenario: Any) -> tuple[float, float] | None:
    """(start_s, end_s) spanning the scenario's network outages, capacity drops and load
    spikes (``schedule`` phases above the first phase's rate); None when it has none."""
    spans = [(o.start_s, o.start_s + o.duration_s) for o in scenario.network.outages]
    spans += [(d.start_s, d.start_s + d.duration_s) for d in scenario.reasoner.capacity_drops]
    w = scenario.workload
    if w.arrival == "schedule" and len(w.schedule) > 1:
        base = w.schedule[0].calls_per_s
        phases = list(w.schedule)
        for i, p in enumerate(phases):
            if p.calls_per_s > base:
                end = phases[i + 1].start_s if i + 1 < len(phases) else scenario.run.duration_s
                spans.append((p.start_s, end))
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


#: the ``recovery_s`` metric's judgement (the storm detector's defaults)
RECOVERY_FRACTION, RECOVERY_WINDOW_S, RECOVERY_NOISE_Z = 0.9, 10, 3.0


def run_recovery_s(timeseries: pd.DataFrame, trigger: tuple[float, float], warmup_s: float,
                   horizon_s: float) -> tuple[bool, float | None]:
    """(defined, seconds): the ``recovery_s`` metric of one replication.  Goodput
    (``completed_turns_per_s``) must be back to ``RECOVERY_FRACTION`` × the offered load
    (mean ``offered_turns_per_s`` over ``[warmup_s, trigger start)``) over a
    ``RECOVERY_WINDOW_S`` window and the rest of the horizon (:func:`recovery_time_s`).
    Not defined (False) when there is no pre-trigger window or no offered load in it;
    ``None`` seconds: not back within the horizon (infinite)."""
    t = timeseries[S.T_S].to_numpy()
    order = np.argsort(t, kind="stable")
    offered = timeseries[S.OFFERED_TURNS_PER_S].to_numpy(dtype=float)[order]
    good = timeseries[S.COMPLETED_TURNS_PER_S].to_numpy(dtype=float)[order]
    try:
        ref = baseline(offered, warmup_s, trigger[0])
    except ValueError:
        return False, None
    if not ref > 0:
        return False, None
    return True, recovery_time_s(good, trigger[1], ref, tolerance=1.0 - RECOVERY_FRACTION,
                                 window_s=RECOVERY_WINDOW_S, horizon_s=horizon_s,
                                 noise_z=RECOVERY_NOISE_Z)


def turns_recovery_s(turns: pd.DataFrame, trigger: tuple[float, float], warmup_s: float,
                     horizon_s: float) -> tuple[bool, float | None]:
    """:func:`run_recovery_s` from a ``turns`` table alone (offered = turns started per
    second, goodput = turns completed per second): what ``rtalab predict`` has of a
    simulated replication and of the measured load run alike."""
    n = int(np.ceil(horizon_s))
    start = turns[S.START_S].to_numpy(dtype=float)
    start = start[np.isfinite(start)]
    k = np.floor(start).astype(np.int64)
    offered = np.bincount(k[(k >= 0) & (k < n)], minlength=n).astype(np.float64)
    ts = pd.DataFrame({S.T_S: np.arange(n), S.OFFERED_TURNS_PER_S: offered,
                       S.COMPLETED_TURNS_PER_S: goodput_per_s(turns, n)})
    return run_recovery_s(ts, trigger, warmup_s, horizon_s)


@dataclass(frozen=True)
class RecoveryPrediction:
    """Predicted recovery times (one per simulated replication; ``None`` = never) against
    one measured run, judged by the prediction interval [min, max] of the predictions: for a
    new run exchangeable with them it holds with probability (R - 1) / (R + 1)."""

    predicted: tuple[float | None, ...]
    measured: float | None
    low: float  # inf when every prediction never recovers
    high: float
    coverage: float
    inside: bool

    def sentence(self) -> str:
        """One line for the terminal and the report."""
        def f(v: float | None) -> str:
            return "never" if v is None or not np.isfinite(v) else f"{v:.0f} s"

        never = sum(1 for p in self.predicted if p is None)
        return (f"recovery_s: predicted {f(self.low)}–{f(self.high)} ({len(self.predicted)} "
                f"replications, {never} never back; a {self.coverage:.0%} prediction "
                f"interval), measured {f(self.measured)}: "
                + ("inside" if self.inside else "OUTSIDE the interval"))


def predict_recovery(predicted: list[float | None], measured: float | None,
                     ) -> RecoveryPrediction:
    """Judge one measured recovery time against the simulated replications' (see
    :class:`RecoveryPrediction`)."""
    if len(predicted) < 2:
        raise ValueError("a prediction interval needs >= 2 predicted replications")
    vals = [np.inf if p is None else float(p) for p in predicted]
    m = np.inf if measured is None else float(measured)
    lo, hi = min(vals), max(vals)
    r = len(vals)
    return RecoveryPrediction(tuple(predicted), measured, lo, hi, (r - 1) / (r + 1),
                              bool(lo <= m <= hi))
