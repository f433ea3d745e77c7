"""PNG plots of one run folder: latency CDFs and a time-series panel (matplotlib, Agg backend).

Plots read only the record tables (columns of :mod:`rtalab.sim.shared.schema`) and the
resolved scenario, so a load run's folder is plotted the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from rtalab.sim.shared import schema as S
from rtalab.sim.shared.schema import LATENCY_CDF_PNG, TIMESERIES_PNG
from rtalab.sim.shared.summary import PERCENTILE_METHOD, percentile

if TYPE_CHECKING:
    from rtalab.sim.scenario import Scenario

DPI = 110
SMOOTH_S = 5  # rolling window of the bold line over per-second rates
CDF_POINTS = 600  # quantiles drawn per line (keeps plots of 1M turns light)
PERCENTILE_STYLE = {50: ":", 95: "--", 99: "-."}
# replications drawn as individual faint lines (pooled lines and means use every one), so
# a plot's memory and ink do not grow with the number of replications
MAX_REPLICATION_LINES = 10

COLORS = {
    S.OFFERED_TURNS_PER_S: "tab:blue", S.ATTEMPTS_PER_S: "tab:orange",
    S.SERVER_EXECUTIONS_PER_S: "tab:green", S.TURNS_IN_PROGRESS: "tab:purple",
    S.SERVER_IN_FLIGHT: "tab:red", S.BUSY_WORKERS: "tab:cyan", S.WORKER_CAPACITY: "0.25",
    S.QUEUE_LENGTH: "tab:brown", S.RETRIES_PER_S: "tab:orange", S.FAILED_TURNS_PER_S: "tab:red",
    S.COMPLETED_TURNS_PER_S: "tab:green", S.DEDUP_ENTRIES: "tab:blue",
}
WARMUP_COLOR = "0.85"
OUTAGE_COLOR = "tab:red"
DROP_COLOR = "tab:orange"


# --------------------------------------------------------------------------- helpers


def _quantile_curve(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x)) of an empirical CDF, subsampled at quantiles dense in the upper tail."""
    values = np.sort(values[np.isfinite(values)])
    n = len(values)
    if n <= CDF_POINTS:
        return values, np.arange(1, n + 1) / n
    tail = 1.0 - np.logspace(0, -4, CDF_POINTS // 2)  # 0 .. 0.9999, dense near 1
    p = np.unique(np.clip(np.concatenate([np.linspace(0, 1, CDF_POINTS // 2), tail, [1.0]]),
                          0, 1))
    return np.quantile(values, p, method=PERCENTILE_METHOD), p


def _ax_seconds_log(ax: Axes, title: str) -> None:
    """Common styling of a latency CDF axis."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_title(title)
    ax.set_xlabel("seconds (log scale)")
    ax.set_ylabel("fraction of turns ≤ x")
    ax.set_ylim(0, 1.005)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.12)


def _warm(turns: pd.DataFrame, warmup_s: float) -> pd.DataFrame:
    """Turns that started after the warm-up."""
    return turns[turns[S.START_S] >= warmup_s]


# --------------------------------------------------------------------------- latency CDF


def plot_latency_cdf(turns: pd.DataFrame, scenario: Scenario, path: Path) -> Path:
    """Time-to-first-chunk and completion-time CDFs of completed turns, per replication, log-x.

    The population is the one ``summary.json`` uses for its percentiles: completed
    turns that started after the warm-up.  The share of turns left out (failed,
    abandoned, unfinished) is given in the legend.
    """
    warmup_s = scenario.run.warmup_s
    turns = _warm(turns, warmup_s)
    n_all = len(turns)
    done = turns[turns[S.OUTCOME].astype(str).to_numpy() == "completed"] if n_all else turns
    reps = sorted(turns[S.REPLICATION].unique()) if n_all else []
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6), constrained_layout=True)
    panels = [(S.TTFC_S, "Time to first chunk"), (S.COMPLETION_S, "Turn completion time")]
    cmap = plt.get_cmap("tab10")
    for ax, (col, title) in zip(axes, panels, strict=True):
        _ax_seconds_log(ax, f"{title} (completed turns)")
        pooled = done[col].to_numpy(dtype=float)
        pooled = pooled[np.isfinite(pooled) & (pooled > 0)]
        if not len(pooled):
            ax.text(0.5, 0.5, "no completed turns", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_xlim(1e-2, 10)
            continue
        for i, rep in enumerate(reps[:MAX_REPLICATION_LINES]):
            v = done.loc[done[S.REPLICATION] == rep, col].to_numpy(dtype=float)
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                x, p = _quantile_curve(v)
                ax.step(x, p, where="post", color=cmap(i % 10), lw=1.1, alpha=0.8,
                        label=f"replication {rep} (n={len(v):,})" if len(reps) <= 8 else None)
        for q, ls in PERCENTILE_STYLE.items():
            # the figure of summary.json: the mean over replications of each one's percentile
            per_rep = [percentile(done.loc[done[S.REPLICATION] == rep, col]
                                  .to_numpy(dtype=float), q) for rep in reps]
            xq = float(np.mean([v for v in per_rep if v is not None]))
            ax.axvline(xq, color="0.25", ls=ls, lw=0.9,
                       label=f"p{q} (mean over replications) = {_fmt_s(xq)}")
        if col == S.TTFC_S and scenario.live.timeouts.turn_response_s > 0:
            t = scenario.live.timeouts.turn_response_s
            ax.axvline(t, color=OUTAGE_COLOR, lw=1.2, alpha=0.7,
                       label=f"turn-response timeout (per attempt) = {_fmt_s(t)}")
        missing = 1.0 - len(done) / n_all
        ax.plot([], [], color="none",
                label=f"left out: {missing:.1%} of turns (failed, abandoned or unfinished)")
        lo, hi = np.percentile(pooled, 0.05), pooled.max()
        ax.set_xlim(max(lo / 1.5, 1e-4), hi * 1.5)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8,
                  frameon=False)
    shown = (f"; lines of the first {MAX_REPLICATION_LINES}"
             if len(reps) > MAX_REPLICATION_LINES else "")
    fig.suptitle(f"{scenario.name}: latency CDFs ({n_all:,} turns after the "
                 f"{warmup_s:g} s warm-up, {len(reps)} replication{'s' * (len(reps) != 1)}"
                 f"{shown})")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _fmt_s(x: float) -> str:
    """Seconds as a short human string (ms below one second)."""
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


# --------------------------------------------------------------------------- time series


def _shade_schedule(ax: Axes, scenario: Scenario) -> None:
    """Shade the warm-up, scheduled outages and capacity drops; mark the end of arrivals."""
    ax.axvspan(0, scenario.run.warmup_s, color=WARMUP_COLOR, alpha=0.6, lw=0, zorder=0)
    for o in scenario.network.outages:
        ax.axvspan(o.start_s, o.start_s + o.duration_s, color=OUTAGE_COLOR, alpha=0.15, lw=0,
                   zorder=0)
    for d in scenario.reasoner.capacity_drops:
        ax.axvspan(d.start_s, d.start_s + d.duration_s, color=DROP_COLOR, alpha=0.18, lw=0,
                   zorder=0)
    ax.axvline(scenario.run.duration_s, color="0.4", ls=":", lw=1.0, zorder=1)


def _schedule_legend(scenario: Scenario, t_max: float | None = None) -> list[Any]:
    """Legend handles for the shaded spans present in this scenario (the end of arrivals
    only when it lies inside the plotted time, ``t_max``)."""
    handles: list[Any] = [Patch(color=WARMUP_COLOR, alpha=0.6,
                                label=f"warm-up ({scenario.run.warmup_s:g} s, excluded)")]
    for o in scenario.network.outages:
        handles.append(Patch(color=OUTAGE_COLOR, alpha=0.3,
                             label=f"network outage ({o.direction}, {o.duration_s:g} s)"))
    for d in scenario.reasoner.capacity_drops:
        handles.append(Patch(color=DROP_COLOR, alpha=0.35,
                             label=f"capacity drop to {d.workers} worker{'s' * (d.workers != 1)} "
                                   f"({d.duration_s:g} s)"))
    if t_max is None or scenario.run.duration_s < t_max:
        handles.append(Line2D([], [], color="0.4", ls=":", label="arrivals stop"))
    return handles


def _series(ax: Axes, ts: pd.DataFrame, col: str, label: str, color: Any,
            smooth: bool, step: bool = False) -> None:
    """Plot one column: faint per-replication lines and a bold mean over replications."""
    if col not in ts.columns:
        return
    wide = ts.pivot_table(index=S.T_S, columns=S.REPLICATION, values=col, aggfunc="mean",
                          observed=True).sort_index()
    if wide.empty:
        return
    # rates count events in [t_s, t_s + 1): drawn at the bin centre; gauges are sampled at t_s + 1
    x = wide.index.to_numpy(dtype=float) + (0.5 if col in S.TIMESERIES_RATES else 1.0)
    if wide.shape[1] > 1:
        for rep in list(wide.columns)[:MAX_REPLICATION_LINES]:
            ax.plot(x, wide[rep].to_numpy(dtype=float), color=color, lw=0.5, alpha=0.25)
    mean = wide.mean(axis=1)
    if smooth:
        mean = mean.rolling(SMOOTH_S, center=True, min_periods=1).mean()
        label = f"{label} ({SMOOTH_S} s mean)"
    y = mean.to_numpy(dtype=float)
    if step:
        ax.step(x, y, color=color, lw=1.6, label=label, where="post")
    else:
        ax.plot(x, y, color=color, lw=1.6, label=label)


CLOCK_LABELS = {"simulated": "simulated time (s)",
                "real": "real (wall-clock) time since the load started (s)"}
CRASH_COLOR = "black"
INTEGER_UNITS = ("count", "workers", "waiting turns", "entries")
BARGE_IN_COLOR = "tab:purple"


def barge_in_spikes(turns: pd.DataFrame | None, z: float = 3.0, min_count: int = 3
                    ) -> list[float]:
    """Seconds (bin starts) in which cancelled (barged-in) turns spike: at least ``min_count``
    per second (pooled over replications) and more than mean + ``z`` standard deviations of
    the per-second counts.  Empty when no turn was cancelled."""
    if turns is None or not len(turns) or S.OUTCOME not in turns:
        return []
    cancelled = turns[turns[S.OUTCOME].astype(str).to_numpy() == "cancelled"]
    if not len(cancelled):
        return []
    starts = cancelled[S.START_S].to_numpy(dtype=float)  # the turns' start: where they pile up
    starts = starts[np.isfinite(starts)]
    horizon = int(np.nanmax(turns[S.START_S].to_numpy(dtype=float))) + 1
    counts = np.bincount(np.floor(starts).astype(int).clip(0), minlength=horizon)
    limit = max(float(min_count), counts.mean() + z * counts.std())
    return [float(t) for t in np.flatnonzero(counts >= limit)]


def _has_data(ts: pd.DataFrame, cols: Sequence[str]) -> bool:
    """True when any of ``cols`` has a finite value in the time series."""
    return any(c in ts.columns and bool(np.isfinite(ts[c].to_numpy(dtype=float)).any())
               for c in cols)


# (title, y unit, ((column, label), ...)) of the time-series panels; a rate
# (S.TIMESERIES_RATES) is drawn as a moving mean, a gauge as sampled, these gauges as steps
TIMESERIES_PANELS: Sequence[tuple[str, str, Sequence[tuple[str, str]]]] = (
    ("Offered load and server work", "per second",
     ((S.OFFERED_TURNS_PER_S, "offered turns/s"), (S.ATTEMPTS_PER_S, "attempts sent/s"),
      (S.SERVER_EXECUTIONS_PER_S, "server executions/s"))),
    ("In flight", "count",
     ((S.TURNS_IN_PROGRESS, "turns in progress (Live)"),
      (S.SERVER_IN_FLIGHT, "requests in the Reasoner"))),
    ("Reasoner workers", "workers",
     ((S.BUSY_WORKERS, "busy workers"), (S.WORKER_CAPACITY, "worker capacity"))),
    ("Reasoner queue length", "waiting turns", ((S.QUEUE_LENGTH, "queue length"),)),
    ("Retries", "per second",
     ((S.RETRIES_PER_S, "retries/s"), (S.FAILED_TURNS_PER_S, "failed turns/s"))),
    ("Goodput", "turns per second",
     ((S.COMPLETED_TURNS_PER_S, "completed turns/s"), (S.OFFERED_TURNS_PER_S, "offered turns/s"))),
    ("Dedup store size", "entries", ((S.DEDUP_ENTRIES, "entries"),)),
)
STEP_COLUMNS = frozenset({S.WORKER_CAPACITY})


def timeseries_panels(ts: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Titles of the time-series panels with data in ``ts`` and of those without any."""
    shown: list[str] = []
    empty: list[str] = []
    for title, _, lines in TIMESERIES_PANELS:
        (shown if _has_data(ts, [c for c, _ in lines]) else empty).append(title)
    return shown, empty


def plot_timeseries(ts: pd.DataFrame, scenario: Scenario, path: Path, *,
                    clock: str = "simulated", crashes: Sequence[float] = (),
                    barge_in: Sequence[float] = ()) -> Path:
    """Stacked panels over time: load, in flight, workers, queue, retries, goodput, dedup store.

    ``clock`` names the time axis ("simulated" or "real" for a load run); ``crashes`` are
    Reasoner crash-and-restart times and ``barge_in`` the seconds with a spike of barged-in
    turns (:func:`barge_in_spikes`), drawn as vertical lines.  Panels without any data
    (a load run sees no Reasoner workers, queue or dedup store) are left out, and the figure
    says which.
    """
    shown, empty = timeseries_panels(ts)
    panels = [p for p in TIMESERIES_PANELS if p[0] in shown] or list(TIMESERIES_PANELS[:1])
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 1.9 * len(panels) + 1.6),
                             sharex=True, constrained_layout=True, squeeze=False)
    axes = axes[:, 0]
    for ax, (title, unit, lines) in zip(axes, panels, strict=True):
        _shade_schedule(ax, scenario)
        for t in crashes:
            ax.axvline(t, color=CRASH_COLOR, lw=1.4, ls="--", zorder=3)
        for t in barge_in:
            ax.axvline(t + 0.5, color=BARGE_IN_COLOR, lw=1.0, ls=":", zorder=3)
        for col, label in lines:
            _series(ax, ts, col, label, COLORS.get(col, "0.3"),
                    smooth=col in S.TIMESERIES_RATES, step=col in STEP_COLUMNS)
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_ylabel(unit)
        if unit in INTEGER_UNITS:  # counts: no 0.5 ticks
            ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        top = ax.get_ylim()[1]
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
        ax.grid(True, alpha=0.3)
        if len(lines) > 1 and ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                      frameon=False, borderaxespad=0)
    dedup_ax = axes[-1]
    if "Dedup store size" not in empty and S.DEDUP_BYTES in ts.columns and len(ts):
        per_entry = scenario.reasoner.dedup_entry_bytes
        if per_entry > 0:
            sec = dedup_ax.secondary_yaxis(
                "right", functions=(lambda e: e * per_entry / 2**20,
                                    lambda m: m * 2**20 / per_entry))
            sec.set_ylabel("MiB")
    axes[-1].set_xlabel(CLOCK_LABELS.get(clock, clock))
    t_max = (float(ts[S.T_S].max()) + 1 if len(ts)
             else scenario.run.duration_s + scenario.run.drain_s)
    axes[-1].set_xlim(0, t_max)
    reps = ts[S.REPLICATION].nunique() if len(ts) else 0
    many = (f"{reps} replications; faint = each replication, bold = mean" if reps > 1
            else "one run")
    fig.suptitle(f"{scenario.name}: time series (seed {scenario.run.seed}, {many})")
    handles = _schedule_legend(scenario, t_max)
    if crashes:
        handles.append(Line2D([], [], color=CRASH_COLOR, ls="--",
                                  label=f"Reasoner crash + restart ({len(crashes)})"))
    if barge_in:
        handles.append(Line2D([], [], color=BARGE_IN_COLOR, ls=":",
                                  label=f"barge-in spike ({len(barge_in)} s)"))
    if empty:
        handles.append(Patch(color="none", label="not shown, no data in this run: "
                                                 + ", ".join(empty)))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)),
               fontsize=9, frameon=False)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- entry point


def plot_run(run_dir: Path, scenario: Scenario, turns: pd.DataFrame,
             timeseries: pd.DataFrame, *, clock: str = "simulated",
             crashes: Sequence[float] = ()) -> list[Path]:
    """Write every PNG of a run folder; return their paths."""
    run_dir = Path(run_dir)
    return [
        plot_latency_cdf(turns, scenario, run_dir / LATENCY_CDF_PNG),
        plot_timeseries(timeseries, scenario, run_dir / TIMESERIES_PNG, clock=clock,
                        crashes=crashes, barge_in=barge_in_spikes(turns)),
    ]
