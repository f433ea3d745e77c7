"""Recovery after a trigger (outage, capacity drop, load spike): goodput per second, the
pre-trigger baseline, and the time until goodput is back within a tolerance of it.

Pure functions over plain arrays and the record tables of :mod:`sim.shared.schema`, usable on a
simulated run or a load run alike:

* :func:`goodput_per_s` — completed turns per 1-s bin ``[k, k + 1)`` (by turn end time);
* :func:`baseline` — mean goodput over a pre-trigger window;
* :func:`recovery_time_s` — seconds after the trigger's end until the goodput, averaged
  over a sliding window of ``window_s`` seconds *and* over the rest of the horizon, is
  back at ``(1 - tolerance) x baseline`` (``None``: never within the horizon);
* :func:`recovery` — all of it for one replication, from its ``turns`` table.

Why windows and a noise allowance: per-second goodput is a count of a few turns (Poisson
noise ~ 1/sqrt(count)); at 8 turns/s a 10-s window still varies by ~11 %, so "within 5 %"
is judged on window means with an allowance of ``noise_z`` Poisson standard errors —
a statement about the system rather than about the noise.  A system that recovers
typically *exceeds* its baseline right after the trigger (the backlog completes), so the
check is one-sided: back to at least ``(1 - tolerance) x baseline``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.shared import schema as S


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
