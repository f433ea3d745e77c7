"""Put results folders side by side: any run folder (sim run, sweep point, load run).

A run folder is read through its ``summary.json`` (metric values per replication),
``scenario.toml`` and ``meta.json``; the plots read ``turns.parquet`` and
``timeseries.parquet`` when present.  Every run after the first is compared with
the first (the reference): the difference of means with Welch's 95 % CI on the
replication values (:func:`rtalab.sim.shared.stats.welch`), whether that CI excludes 0, and
``differs`` — the difference is significant after Holm's correction over all the
metrics of that pair (family-wise error ≤ 5 %), so comparing ~60 metrics of two
runs of the same scenario does not raise a few false alarms by chance.  A load
run (one replication) against a simulation is compared by :mod:`rtalab.sim.shared.agreement`
instead: the load run's bootstrap ``se`` and the simulator's spread between
replications, Holm over the shared metrics.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from rtalab.sim.shared.agreement import (
    AGREES,
    DIFFERS,
    INSIDE,
    LEVEL,
    OUTSIDE,
    accuracy,
    agreement_rows,
    is_load,
    run_interval,
)
from rtalab.sim.shared.stats import Difference, holm, welch
from rtalab.sim.shared.summary import INF_PREFIXES, unit

if TYPE_CHECKING:
    import pandas as pd

COMPARE_COLUMNS = ("metric", "unit", "run", "label", "mean", "ci_low", "ci_high", "n",
                   "diff", "diff_ci_low", "diff_ci_high", "p_value", "ci_excludes_0", "differs")


class RunFolderError(ValueError):
    """A path that is not a usable results folder (one line for the CLI)."""


@dataclass(frozen=True)
class RunFolder:
    """What compare and report read from one run folder."""

    path: Path
    label: str
    summary: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    scenario_toml: str = ""

    @property
    def warmup_s(self) -> float:
        """The warm-up the summary removed (0 if unknown)."""
        return float(self.summary.get("warmup_s") or 0.0)

    def metric_values(self, name: str) -> list[float | None]:
        """Per-replication values of metric ``name`` ([] if absent)."""
        m = self.summary.get("metrics", {}).get(name)
        return list(m.get("values") or []) if isinstance(m, dict) else []


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return cast("dict[str, Any]", json.loads(path.read_text(encoding="utf-8")))
    except OSError as e:
        raise RunFolderError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise RunFolderError(f"{path}: not valid JSON: {e}") from None


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A Parquet table; a damaged or truncated file raises :class:`RunFolderError`."""
    try:
        return pd.read_parquet(path, columns=list(columns) if columns else None)
    except Exception as e:  # pyarrow raises many types for a damaged file
        raise RunFolderError(f"{path}: not a readable Parquet file "
                             f"({type(e).__name__})") from None


def is_sweep(path: Path) -> bool:
    """True for a sweep folder (it holds ``sweep.json``)."""
    return (Path(path) / "sweep.json").is_file()


KINDS = ("run", "load", "sweep", "capacity", "tune", "storm")  # what folder_kind answers


def folder_kind(path: str | Path) -> str:
    """Which rtalab folder ``path`` is: one of :data:`KINDS`; raises RunFolderError if none."""
    p = Path(path)
    if not p.is_dir():
        raise RunFolderError(f"{p}: no such folder")
    if (p / "storm.csv").is_file():
        return "storm"
    if (p / "capacity.csv").is_file():
        return "capacity"
    if (p / "candidates.csv").is_file() or (p / "trials.csv").is_file():
        return "tune"
    if (p / "sweep.json").is_file():
        return "sweep"
    if (p / "summary.json").is_file():
        meta = _read_json(p / "meta.json") if (p / "meta.json").is_file() else {}
        return "load" if meta.get("kind") == "load" else "run"
    raise RunFolderError(f"{p}: not an rtalab results folder (no summary.json, sweep.json, "
                         "capacity.csv, candidates.csv or storm.csv; an unfinished run?)")


def load_run(path: str | Path) -> RunFolder:
    """Read a run folder; raise :class:`RunFolderError` if it is not one."""
    p = Path(path)
    if not p.is_dir():
        raise RunFolderError(f"{p}: no such folder")
    if is_sweep(p):
        raise RunFolderError(f"{p} is a sweep; compare its points, e.g. {p}/points/p0000 "
                             f"{p}/points/p0001")
    if not (p / "summary.json").is_file():
        raise RunFolderError(f"{p}: not a finished run folder (no summary.json)")
    summary = _read_json(p / "summary.json")
    if not isinstance(summary.get("metrics"), dict):
        raise RunFolderError(f"{p}/summary.json: no metrics")
    meta = _read_json(p / "meta.json") if (p / "meta.json").is_file() else {}
    toml = (p / "scenario.toml").read_text(encoding="utf-8") if (p / "scenario.toml").is_file() \
        else ""
    name = p.name
    point = meta.get("sweep_point")
    if isinstance(point, dict):
        ov = " ".join(f"{k}={json.dumps(v)}" for k, v in (point.get("overrides") or {}).items())
        name = f"{p.parent.parent.name}/{p.name}" + (f" ({ov})" if ov else "")
    return RunFolder(p, name, summary, meta, toml)


def _metric_names(runs: Sequence[RunFolder]) -> list[str]:
    names: list[str] = []
    for r in runs:
        names.extend(k for k in r.summary["metrics"] if k not in names)
    return names


def compare_table(runs: Sequence[RunFolder]) -> pd.DataFrame:
    """The long comparison table: one row per metric × run (columns :data:`COMPARE_COLUMNS`);
    the ``diff*``/``p_value``/``differs`` cells of run ``k > 0`` compare it with run 0."""
    if len(runs) < 2:
        raise RunFolderError("compare needs at least two run folders")
    names = _metric_names(runs)
    rows: list[dict[str, Any]] = []
    flags: dict[int, dict[str, bool]] = {}
    diffs: dict[tuple[int, str], Any] = {}
    for k in range(1, len(runs)):
        if _sim_and_load(runs[0], runs[k]):  # one replication against many:
                                             # rtalab.sim.shared.agreement
            flags[k] = _agreement_cells(runs[0], runs[k], diffs, k)
            continue
        tested = []
        for name in names:
            d = welch(runs[0].metric_values(name), runs[k].metric_values(name))
            diffs[(k, name)] = d
            if d is not None and not math.isnan(d.p_value):
                tested.append((name, d.p_value))
        rejected = holm([p for _, p in tested])
        flags[k] = {name: r for (name, _), r in zip(tested, rejected, strict=True)}
    for name in names:
        for k, run in enumerate(runs):
            m = run.summary["metrics"].get(name) or {}
            values = m.get("values") or []
            row: dict[str, Any] = {
                "metric": name, "unit": unit(name), "run": k, "label": run.label,
                "mean": m.get("mean"), "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high"),
                "n": sum(v is not None for v in values),
                "diff": None, "diff_ci_low": None, "diff_ci_high": None, "p_value": None,
                "ci_excludes_0": None, "differs": None}
            d = diffs.get((k, name))
            if d is not None:
                row.update(diff=d.diff, diff_ci_low=d.ci_low, diff_ci_high=d.ci_high,
                           p_value=d.p_value, ci_excludes_0=d.excludes_zero,
                           differs=flags[k].get(name, False))
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    for c in ("mean", "ci_low", "ci_high", "diff", "diff_ci_low", "diff_ci_high", "p_value"):
        df[c] = df[c].astype("float64")
    return df


def _sim_and_load(a: RunFolder, b: RunFolder) -> bool:
    """One is a load run, the other has replications to compare it with."""
    return is_load(a.summary) != is_load(b.summary)


def _agreement_cells(ref: RunFolder, other: RunFolder, diffs: dict[tuple[int, str], Any],
                     k: int) -> dict[str, bool]:
    """Fill ``diffs[(k, metric)]`` with ``other − ref`` from
    :func:`rtalab.sim.shared.agreement.agreement_rows`
    (the simulation against the load run's bootstrap); return which metrics differ."""
    sim, load, sign = (ref, other, 1.0) if is_load(other.summary) else (other, ref, -1.0)
    flags: dict[str, bool] = {}
    for a in agreement_rows(sim.summary, load.summary):
        lo, hi = sorted((sign * a.diff_ci_low, sign * a.diff_ci_high))
        diffs[(k, a.metric)] = Difference(sign * a.diff, lo, hi, a.p_value, math.nan)
        flags[a.metric] = a.verdict == DIFFERS
    return flags


# what a prediction (a simulation) is judged on against a measurement (a load run)
PREDICTION_METRICS = ("ttfc_s.p50", "ttfc_s.p99", "completion_s.p50", "completion_s.p99",
                      "caller_ttfc_s.p99", "caller_completion_s.p99", "success_rate",
                      "attempts_per_turn")


def run_length_s(run: RunFolder) -> float | None:
    """``run.duration_s`` of the folder's scenario (None when unknown)."""
    try:
        v = tomllib.loads(run.scenario_toml).get("run", {}).get("duration_s")
    except tomllib.TOMLDecodeError:
        return None
    return float(v) if isinstance(v, int | float) else None


def _inf(name: str, v: float | None) -> float | None:
    """A caller-perceived percentile's None is +inf (more turns not served than the tail)."""
    return math.inf if v is None and name.startswith(INF_PREFIXES) else v


def prediction_rows(a: RunFolder, b: RunFolder) -> list[dict[str, Any]]:
    """A simulation (the prediction) against a load run (the measurement), whichever order:
    per :data:`PREDICTION_METRICS`, the replications' mean, the 90 % one-run interval
    (:func:`rtalab.sim.shared.agreement.run_interval`), the measured value, ``inside``/``outside``,
    and the accuracy target (judged on runs >= 300 s).  A caller-perceived percentile that is
    infinite (too many turns not served) is ``inf`` on both sides: an infinite measurement
    is inside when some replication is infinite too, and a replication's infinity makes the
    interval open above."""
    sim, load = (b, a) if is_load(a.summary) else (a, b)
    run_s = run_length_s(load) or 0.0
    out = []
    for name in PREDICTION_METRICS:
        if name not in load.summary["metrics"] or name not in sim.summary["metrics"]:
            continue
        values = [_inf(name, v) for v in sim.metric_values(name)]
        measured = _inf(name, (load.summary["metrics"][name] or {}).get("mean"))
        finite = [v for v in values if v is not None and math.isfinite(v)]
        n_inf = sum(v == math.inf for v in values)
        iv = run_interval(finite, LEVEL, metric=name)
        if (iv is None and not n_inf) or measured is None:
            continue
        low = iv.low if iv is not None else (min(finite) if finite else math.inf)
        high = math.inf if n_inf else (iv.high if iv is not None else math.inf)
        inside = low <= measured <= high
        mean = math.fsum(finite) / len(finite) if finite and not n_inf else math.inf
        err = (measured - mean) / mean if mean and math.isfinite(mean) and math.isfinite(
            measured) else math.nan
        out.append({"metric": name, "predicted": mean, "low": low, "high": high,
                    "measured": measured, "verdict": INSIDE if inside else OUTSIDE,
                    "error": err, "accuracy": accuracy(name, err, run_s),
                    "infinite_replications": n_inf, "replications": len(values),
                    "run_s": run_s, "sim_run_s": run_length_s(sim)})
    return out


def agreement_verdicts(table: pd.DataFrame, run: int = 1) -> dict[str, str]:
    """``{metric: "agrees" | "differs"}`` for run ``run`` against run 0, every metric tested."""
    rows = table[(table["run"] == run) & table["differs"].notna()]
    return {m: DIFFERS if d else AGREES for m, d in zip(rows["metric"], rows["differs"],
                                                         strict=True)}


def differing(table: pd.DataFrame, run: int = 1) -> list[str]:
    """Metrics whose difference (run ``run`` vs run 0) is flagged ``differs``."""
    rows = table[(table["run"] == run) & (table["differs"] == True)]  # noqa: E712
    return list(rows["metric"])


# --------------------------------------------------------------------------- plot

TS_PANELS = (("offered_turns_per_s", "offered turns/s"),
             ("completed_turns_per_s", "completed turns/s (goodput)"),
             ("attempts_per_s", "attempts sent/s"), ("queue_length", "Reasoner queue length"))


def plot_compare(runs: Sequence[RunFolder], path: Path) -> Path:
    """One PNG: overlaid latency CDFs (time to first chunk, completion; completed turns after
    warm-up, all replications pooled) and time series (mean over replications, 5-s smoothed)."""
    # lazy: +326 ms (matplotlib) off importing compare
    import matplotlib

    matplotlib.use("Agg")
    # lazy: +1.01 s (matplotlib) off importing compare
    import matplotlib.pyplot as plt

    from rtalab.sim.shared.plots import DPI, SMOOTH_S, _ax_seconds_log, _quantile_curve

    fig, axes = plt.subplots(3, 2, figsize=(13, 12), constrained_layout=True)
    cmap = plt.get_cmap("tab10")
    cdf_axes = {"ttfc_s": axes[0][0], "completion_s": axes[0][1]}
    _ax_seconds_log(axes[0][0], "Time to first chunk (completed turns)")
    _ax_seconds_log(axes[0][1], "Turn completion time (completed turns)")
    ts_axes = [axes[1][0], axes[1][1], axes[2][0], axes[2][1]]
    for ax, (_, title) in zip(ts_axes, TS_PANELS, strict=True):
        ax.set_title(title)
        ax.set_xlabel("time (s)")
        ax.grid(True, alpha=0.3)
    for i, run in enumerate(runs):
        color = cmap(i % 10)
        turns_path, ts_path = run.path / "turns.parquet", run.path / "timeseries.parquet"
        if turns_path.is_file():
            t = read_parquet(turns_path, ["start_s", "outcome", "ttfc_s", "completion_s"])
            done = t[(t["start_s"] >= run.warmup_s)
                     & (t["outcome"].astype(str).to_numpy() == "completed")]
            for col, ax in cdf_axes.items():
                v = done[col].to_numpy(dtype=float)
                v = v[np.isfinite(v) & (v > 0)]
                if len(v):
                    x, p = _quantile_curve(v)
                    ax.step(x, p, where="post", color=color, lw=1.4,
                            label=f"{run.label} (n={len(v):,})")
        if ts_path.is_file():
            ts = read_parquet(ts_path)
            mean = ts.groupby("t_s").mean(numeric_only=True)
            for ax, (col, _) in zip(ts_axes, TS_PANELS, strict=True):
                if col in mean:
                    y = mean[col].rolling(SMOOTH_S, center=True, min_periods=1).mean()
                    ax.plot(mean.index.to_numpy(dtype=float), y.to_numpy(), color=color,
                            lw=1.3, label=run.label)
    for ax in (*cdf_axes.values(), *ts_axes):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    fig.suptitle("compare: " + "  vs  ".join(r.label for r in runs), fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
