"""Retry-storm analysis: every retry strategy through one trigger, and whether each recovers.

A *trigger* is the scenario's disturbance: a network outage, a capacity drop or a
load spike (a ``schedule`` phase above the first phase's rate); :func:`trigger_window`
finds it.  A *strategy* is data: a named set of scenario overrides in
:data:`STRATEGIES` (validated before anything runs; a strategy whose keys this
build of the simulator does not have yet is skipped with a note).  The strategies
run as the points of one sweep (:func:`rtalab.sim.sweep.run_points`: every point a normal run
folder, seeds from the root seed and the point's overrides, so ``rtalab sim sweep``
reproduces them) and each is judged from its folder's per-second time series:

- **peak load amplification**: max over the run (after warm-up, until ``hold_s`` after
  the trigger) of server executions in a sliding ``window_s`` window ÷ the offered load
  of normal operation in that window (mean offered turns/s between warm-up and the
  trigger; ``peak_request_amplification``: the same with requests arriving at the
  Reasoner, executed or refused, instead of executions);
- **goodput dip**: 1 − (lowest windowed goodput from the trigger's start to
  ``hold_s`` after its end) ÷ (mean goodput between warm-up and the trigger);
- **time to recover** (:func:`recovery_time`, :func:`rtalab.sim.shared.recovery.recovery_time_s`):
  seconds from the trigger's end until goodput is back to ``fraction`` of the offered
  load (mean offered turns/s between warm-up and the trigger), over a ``window_s`` window
  and over the rest of the run, with ``noise_z`` Poisson standard errors of allowance
  (None if it never is);
- **metastable** (:func:`detect_metastable`): goodput stays below ``fraction`` of
  offered load for ``hold_s`` seconds after the trigger ends (no recovery within
  ``hold_s``);
- hazards: ghost successes per 1,000 turns (``summary.json``, when the simulator
  has the metric) and duplicate side effects per 1,000 turns (side-effect
  executions beyond the first of each turn, from ``turns.parquet``).

On a fleet (``[fleet] replicas`` > 1, :mod:`rtalab.sim.model.fleet`) the storm runs the simulator's
fleet (a capacity drop hits every replica, an outage the whole network) and the table adds
the fleet's figures from each point's ``summary.json`` (:data:`FLEET_COLUMNS`): utilisation
and requests imbalance (max / mean over replicas, over the measurement window), duplicate
side effects across replicas and requests lost to a down replica per 1,000 turns;
:meth:`StormResult.fleet_sentence` says which fleet it was.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from rtalab.sim.answers.figure import new_figure, save_figure
from rtalab.sim.config import ConfigError
from rtalab.sim.scenario import FleetConfig, Scenario
from rtalab.sim.shared import recovery
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.results import read_meta
from rtalab.sim.shared.summary import mean_ci
from rtalab.sim.sweep import POINTS_DIR, point_dir_name, run_points

# name -> (what it is, overrides).  One line per strategy; keys that do not exist in this
# build are skipped with a note (see validate_strategies).
STRATEGIES: dict[str, tuple[str, dict[str, Any]]] = {
    "no_backoff": ("retry at once", {"live.backoff.strategy": "none"}),
    "exponential": ("exponential backoff, no jitter", {"live.backoff.strategy": "exponential"}),
    "full_jitter": ("exponential backoff, full jitter",
                    {"live.backoff.strategy": "full_jitter"}),
    "decorrelated": ("decorrelated jitter", {"live.backoff.strategy": "decorrelated_jitter"}),
    "grpc_throttling": ("gRPC retry throttling (token bucket)",
                        {"live.budget.token_bucket.enabled": True}),
    "finagle": ("Finagle retry budget", {"live.budget.finagle.enabled": True}),
    "adaptive": ("SRE adaptive throttling", {"live.budget.adaptive.enabled": True}),
    "breaker": ("consecutive-failure circuit breaker",
                {"live.budget.circuit_breaker.enabled": True}),
    "aws_quota": ("AWS SDK standard retry quota", {"live.budget.aws_quota.enabled": True}),
    "envoy": ("Envoy retry budget", {"live.budget.envoy.enabled": True}),
    "call_bucket": ("Brooker's bucket: +0.1 per call started, a retry costs 1",
                    {"live.budget.call_bucket.enabled": True}),
    "retry_breaker": ("Brooker's breaker on retries only (failure ratio > 10 %)",
                      {"live.budget.retry_breaker.enabled": True}),
    "cancel_on_timeout": ("CancelTask for abandoned attempts", {"live.cancel_on_timeout": True}),
    "queue_deadline": ("Reasoner refuses work queued > 1 s (below client timeouts)",
                       {"reasoner.queue_timeout_s": 1.0}),
    "lifo": ("Reasoner serves the newest request first", {"reasoner.queue_discipline": "lifo"}),
}


class StormError(ValueError):
    """Bad storm input: unknown strategy, no trigger, a run too short to judge recovery."""


@dataclass(frozen=True)
class Detector:
    """Parameters of the recovery judgement (see :func:`detect_metastable`)."""

    fraction: float = 0.9  # goodput must get back to this share of offered load
    hold_s: float = 60.0  # ... within this long after the trigger ends, else metastable
    window_s: float = 10.0  # sliding window of the rates
    noise_z: float = 3.0  # Poisson noise allowance of rtalab.sim.shared.recovery (0: bare
                          # threshold)


# --------------------------------------------------------------------------- strategies


def validate_strategies(scenario: Scenario, names: Sequence[str] | None = None,
                        table: Mapping[str, tuple[str, dict[str, Any]]] | None = None,
                        ) -> tuple[dict[str, Scenario], dict[str, str]]:
    """(runnable {name: scenario with the strategy applied}, skipped {name: reason}).

    Unknown names raise :class:`StormError`; a bad value raises :class:`ConfigError`; a
    strategy using a key this build does not know is skipped with the reason.
    """
    table = STRATEGIES if table is None else table
    names = list(table) if not names else list(names)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise StormError(f"unknown strategy {unknown[0]!r} (known: {', '.join(table)})")
    runnable, skipped = {}, {}
    for name in names:
        try:
            runnable[name] = scenario.with_overrides(dict(table[name][1]))
        except ConfigError as e:
            if "unknown key" not in e.problem:
                raise
            skipped[name] = f"not in this build ({e.key}: unknown key)"
    return runnable, skipped


def trigger_window(scenario: Scenario) -> tuple[float, float]:
    """(start_s, end_s) spanning the scenario's outages, capacity drops and load spikes
    (:func:`rtalab.sim.shared.recovery.trigger_span`); StormError when it has none."""
    span = recovery.trigger_span(scenario)
    if span is None:
        raise StormError(f"scenario {scenario.name!r} has no trigger (outage, capacity drop or "
                         "load spike in workload.schedule)")
    return span


# --------------------------------------------------------------------------- detector


def _windowed(x: np.ndarray, window_s: float) -> np.ndarray:
    """Trailing sums over ``window_s`` one-second bins (shorter at the start)."""
    k = max(round(window_s), 1)
    c = np.concatenate([[0.0], np.cumsum(x, dtype=float)])
    idx = np.arange(1, len(x) + 1)
    return cast("np.ndarray", c[idx] - c[np.maximum(idx - k, 0)])


def offered_reference(ts: pd.DataFrame, trigger_start_s: float, from_s: float = 0.0) -> float:
    """The offered load the system must serve again: mean offered turns/s over
    ``[from_s, trigger_start_s)`` (the workload's arrivals do not depend on the trigger)."""
    return recovery.baseline(ts[S.OFFERED_TURNS_PER_S].to_numpy(dtype=float), from_s,
                             trigger_start_s)


def recovery_time(ts: pd.DataFrame, trigger: tuple[float, float], det: Detector = Detector(),
                  *, from_s: float = 0.0, horizon_s: float | None = None) -> float | None:
    """Seconds after the trigger's end until goodput is back to ``fraction`` × the offered
    load (:func:`offered_reference`), judged by :func:`rtalab.sim.shared.recovery.recovery_time_s`:
    the ``window_s`` window from then on and the rest of the horizon both average at least
    that level, less ``noise_z`` Poisson standard errors.  None: never within the horizon
    (default: the series' end; the run's ``duration_s`` in :func:`case_figures`)."""
    ref = offered_reference(ts, trigger[0], from_s)
    return recovery.recovery_time_s(
        ts[S.COMPLETED_TURNS_PER_S].to_numpy(dtype=float), trigger[1], ref,
        tolerance=1.0 - det.fraction, window_s=round(det.window_s), horizon_s=horizon_s,
        noise_z=det.noise_z)


def detect_metastable(ts: pd.DataFrame, trigger: tuple[float, float],
                      det: Detector = Detector(), *, from_s: float = 0.0,
                      horizon_s: float | None = None) -> bool:
    """True when the system did not recover: goodput stays below ``fraction`` of the offered
    load for ``hold_s`` seconds after the trigger ends (:func:`recovery_time` is None or
    later than ``hold_s``).

    ``ts`` is one replication's per-second time series (``timeseries.parquet`` rows of one
    replication, ``t_s`` = 0, 1, ...); it must extend ``hold_s`` plus one window past the
    trigger's end (else StormError).
    """
    t = ts[S.T_S].to_numpy()
    end = len(t) if horizon_s is None else min(len(t), horizon_s)
    if end < trigger[1] + det.hold_s + det.window_s:
        raise StormError(f"time series ends before trigger end + hold + window "
                         f"({trigger[1]:g} + {det.hold_s:g} + {det.window_s:g} s)")
    t_rec = recovery_time(ts, trigger, det, from_s=from_s, horizon_s=horizon_s)
    return t_rec is None or t_rec > det.hold_s


# --------------------------------------------------------------------------- one case


def _amplification(ts: pd.DataFrame, start_s: float, end_s: float, window_s: float,
                   reference: float, column: str = S.SERVER_EXECUTIONS_PER_S) -> float:
    """Max over windows ending in ``[start_s, end_s)`` of ``column`` summed over the window ÷
    the offered load of normal operation (``reference`` turns/s × window).  Dividing by the
    normal offered load, not the window's own, keeps the figure finite when callers stop
    offering turns (a closed population waiting on a stalled system)."""
    ex = _windowed(ts[column].to_numpy(), window_s)
    t = ts[S.T_S].to_numpy()
    keep = (t >= start_s) & (t < end_s)
    if not keep.any() or reference <= 0:
        return math.nan
    return float(ex[keep].max() / (reference * min(window_s, len(t))))


def case_figures(run_dir: Path, trigger: tuple[float, float], det: Detector = Detector(),
                 ) -> list[dict[str, Any]]:
    """Per replication: the storm figures of one run folder (see the module docstring)."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    seeds = {int(r["replication"]): r["seed"] for r in meta.get("replication_seeds") or []}
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    warmup = float(summary["warmup_s"])
    all_ts = pd.read_parquet(run_dir / "timeseries.parquet")
    turns = pd.read_parquet(run_dir / "turns.parquet",
                            columns=[S.REPLICATION, S.START_S, S.SIDE_EFFECT_EXECUTIONS])
    ghost = (summary["metrics"].get("hazard.ghost_successes_per_1k_turns") or {}).get("values")
    start, end = trigger
    duration = float(all_ts[S.T_S].max()) + 1.0
    horizon = float(tomllib.loads((run_dir / "scenario.toml").read_text(encoding="utf-8"))
                    ["run"]["duration_s"])  # arrivals stop here: judge recovery before it
    rows = []
    for i, rep in enumerate(sorted(all_ts[S.REPLICATION].unique())):
        ts = all_ts[all_ts[S.REPLICATION] == rep].sort_values(S.T_S)
        t = ts[S.T_S].to_numpy()
        good = _windowed(ts[S.COMPLETED_TURNS_PER_S].to_numpy(), det.window_s) / det.window_s
        pre = ts[S.COMPLETED_TURNS_PER_S].to_numpy()[(t >= warmup) & (t < start)]
        dip_span = (t >= start) & (t < end + det.hold_s)
        pre_mean = float(pre.mean()) if len(pre) else math.nan
        dip = (1.0 - float(good[dip_span].min()) / pre_mean
               if pre_mean > 0 and dip_span.any() else math.nan)
        tr = turns[(turns[S.REPLICATION] == rep) & (turns[S.START_S] >= warmup)]
        extra = np.clip(tr[S.SIDE_EFFECT_EXECUTIONS].to_numpy() - 1, 0, None).sum()
        ref = offered_reference(ts, start, warmup)
        span = (warmup + det.window_s, min(duration, end + det.hold_s))
        rows.append({
            "replication": int(rep),
            "peak_amplification": _amplification(ts, *span, det.window_s, ref),
            "peak_request_amplification": _amplification(ts, *span, det.window_s, ref,
                                                         S.SERVER_REQUESTS_PER_S),
            "goodput_dip": dip,
            "recover_s": recovery_time(ts, trigger, det, from_s=warmup, horizon_s=horizon),
            "metastable": detect_metastable(ts, trigger, det, from_s=warmup,
                                            horizon_s=horizon),
            "ghost_per_1k": None if ghost is None else ghost[i],
            "duplicate_side_effects_per_1k": 1000.0 * extra / len(tr) if len(tr) else None,
            "seed": seeds.get(int(rep)),
            **{col: _value(summary, name, i) for col, name in FLEET_COLUMNS.items()
               if name in summary["metrics"]},
        })
    return rows


# a fleet's load figures ([fleet], rtalab.sim.model.fleet), from the point's summary.json: only
# present for a fleet (a one-pool storm's table is unchanged)
FLEET_COLUMNS = {"utilisation_imbalance": "fleet.utilisation_imbalance",
                 "requests_imbalance": "fleet.requests_imbalance",
                 "dup_cross_replica_per_1k": "fleet.dup_request_guid_cross_replica_per_1k_turns",
                 "lost_to_down_replica_per_1k": "fleet.requests_lost_to_down_replica_per_1k_turns"}


def _value(summary: dict[str, Any], name: str, i: int) -> float | None:
    values = (summary["metrics"].get(name) or {}).get("values") or []
    return values[i] if i < len(values) else None


# --------------------------------------------------------------------------- the storm


@dataclass
class StormResult:
    """Per strategy: its run folder and per-replication figures; ``skipped``: name -> reason."""

    scenario: str
    trigger: tuple[float, float]
    detector: Detector
    duration_s: float = math.inf  # arrivals stop here (the plots end here)
    warmup_s: float = 0.0
    runs: dict[str, Path] = field(default_factory=dict)
    figures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    fleet: FleetConfig | None = None  # the scenario's [fleet]

    def fleet_sentence(self) -> str:
        """One line naming the fleet the storm ran on ("" for one pool)."""
        f = self.fleet
        if f is None or not f.is_fleet:
            return ""
        fails = f" and {len(f.failures)} replica failure(s)" if f.failures else ""
        return (f"fleet: {f.replicas} replicas behind a {f.balancer} balancer, {f.state} "
                f"state{fails}; a capacity drop hits every replica; imbalance = max / mean "
                f"over replicas in the measurement window")

    def verdict(self, name: str) -> str:
        """``recovered`` (every replication), ``metastable`` (every one) or ``mixed k/R``."""
        flags = [r["metastable"] for r in self.figures[name]]
        k = sum(flags)
        return "recovered" if k == 0 else "metastable" if k == len(flags) else \
            f"mixed {k}/{len(flags)} metastable"

    def table(self) -> pd.DataFrame:
        """One row per strategy: each figure's mean over replications and its 95 % CI."""
        rows = []
        for name, reps in self.figures.items():
            row: dict[str, Any] = {"strategy": name, "description": STRATEGIES.get(
                name, ("", {}))[0]}
            for col in ("peak_amplification", "peak_request_amplification", "goodput_dip",
                        "recover_s", "ghost_per_1k", "duplicate_side_effects_per_1k",
                        *[c for c in FLEET_COLUMNS if reps and c in reps[0]]):
                vals = [r[col] for r in reps]
                stats = mean_ci([math.nan if v is None else float(v) for v in vals],
                                (-math.inf, 1.0) if col == "goodput_dip" else (0.0, math.inf))
                row[col] = stats["mean"]
                row[f"{col}.ci_low"], row[f"{col}.ci_high"] = stats["ci_low"], stats["ci_high"]
            row["verdict"] = self.verdict(name)
            row["run"] = str(self.runs[name])
            rows.append(row)
        return pd.DataFrame(rows)


def run_storm(scenario: Scenario, out_dir: Path, *, strategies: Sequence[str] | None = None,
              replications: int | None = None, seed: int | None = None,
              detector: Detector = Detector(), executor: Executor | None = None,
              table: Mapping[str, tuple[str, dict[str, Any]]] | None = None,
              progress: bool = False) -> StormResult:
    """Run each strategy (validated first) through the trigger as one point of a sweep in
    ``out_dir`` (``rtalab.sim.sweep.run_points``: strategy ``k`` of those runnable is the run folder
    ``out_dir/points/pNNNN``, finished ones are reused on rerun); then judge each folder."""
    table_ = STRATEGIES if table is None else table
    runnable, skipped = validate_strategies(scenario, strategies, table_)
    trigger = trigger_window(scenario)
    if scenario.run.duration_s < trigger[1] + detector.hold_s + detector.window_s:
        raise StormError(f"run.duration_s ({scenario.run.duration_s:g}) must reach "
                         f"{detector.hold_s:g} s + one {detector.window_s:g} s window past the "
                         f"trigger's end ({trigger[1]:g})")
    seed = scenario.run.seed if seed is None else seed
    reps = scenario.run.replications if replications is None else replications
    res = StormResult(scenario.name, trigger, detector, scenario.run.duration_s,
                      scenario.run.warmup_s, skipped=skipped, fleet=scenario.fleet)
    out_dir = Path(out_dir)
    names = list(runnable)
    run_points(scenario, [dict(table_[n][1]) for n in names], replications=reps,
               root_seed=seed, executor=executor, out_dir=out_dir, progress=progress,
               plots=False)
    res.runs = {n: out_dir / POINTS_DIR / point_dir_name(i) for i, n in enumerate(names)}
    for name, run_dir in res.runs.items():
        res.figures[name] = case_figures(run_dir, trigger, detector)
    return res


def plot_storm(result: StormResult, path: Path) -> Path:
    """Small multiples, one panel per strategy: goodput and offered load (turns/s, left) and
    load amplification (executions ÷ normal offered load, right) over time, mean over
    replications, ``window_s`` windows; the trigger shaded."""
    # lazy: +486 ms (matplotlib) off importing storm
    from matplotlib.lines import Line2D

    names = list(result.runs)
    # readable when the report shows it at 1280 px: at most 3 panels a row, text >= 10 pt
    cols = min(3, max(1, len(names)))
    rows = math.ceil(len(names) / cols)
    fig = new_figure(4.2 * cols, 3.0 * rows + 0.8)
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False)
    w = result.detector.window_s
    for ax, name in zip(axes.flat, names, strict=False):
        ts = pd.read_parquet(result.runs[name] / "timeseries.parquet")
        g = ts.groupby(S.T_S)[[S.COMPLETED_TURNS_PER_S, S.OFFERED_TURNS_PER_S,
                               S.SERVER_EXECUTIONS_PER_S]].mean()
        g = g[g.index < result.duration_s]
        t = g.index.to_numpy()
        good = _windowed(g[S.COMPLETED_TURNS_PER_S].to_numpy(), w) / w
        off = _windowed(g[S.OFFERED_TURNS_PER_S].to_numpy(), w) / w
        ex = _windowed(g[S.SERVER_EXECUTIONS_PER_S].to_numpy(), w) / w
        ax.axvspan(*result.trigger, color="0.85")
        ax.plot(t, off, color="0.4", lw=0.8, label="offered")
        ax.plot(t, good, color="tab:green", lw=1.2, label="goodput")
        ref = float(g[S.OFFERED_TURNS_PER_S][(t >= result.warmup_s)
                                             & (t < result.trigger[0])].mean())
        ax2 = ax.twinx()
        if ref > 0:  # executions per normal offered load, as in the table
            ax2.plot(t, ex / ref, color="tab:red", lw=0.8, label="amplification")
        ax2.tick_params(labelsize=10, colors="tab:red")
        ax.tick_params(labelsize=10)
        ax.set_title(f"{name}: {result.verdict(name)}", fontsize=11)
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (s)", fontsize=10)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles = [Line2D([], [], color=c, label=lab) for c, lab in
               (("0.4", "offered turns/s"), ("tab:green", "goodput turns/s"),
                ("tab:red", "amplification (right)"))]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=10)
    fig.suptitle(f"{result.scenario}: trigger {result.trigger[0]:g}–{result.trigger[1]:g} s "
                 f"(shaded), {w:g} s windows", fontsize=12)
    return save_figure(fig, path, rect=(0, 0.8 / (3.0 * rows + 0.8), 1, 0.96))
