"""The metastability map: over offered load × trigger size, does the system come back?

For one scenario with a trigger (outage, capacity drop or load spike, as in
:func:`rtalab.sim.answers.storm.trigger_window`) and one or several retry strategies
(:data:`rtalab.sim.answers.storm.STRATEGIES`), each **cell** of the grid is the scenario with its
load scaled (:func:`cell_scenario`: call rate, schedule and ``max_calls`` × ``load``) and its
trigger scaled (``length``: every outage, drop and spike phase lasts ``size`` × as long;
``depth``: a capacity drop removes ``size`` × as many workers, a spike adds ``size`` × as
much rate).  Per cell:

- **recovery probability**: the share of replications whose goodput is back to
  ``fraction`` × the offered load within ``hold_s`` after the trigger ends
  (:func:`rtalab.sim.answers.storm.recovery_time`), with a Wilson 95 % interval;
- **recovery time** distribution from the trigger's end, censored at ``hold_s`` (a
  replication not back by then is censored: its time is only known to exceed it) —
  median and 90th percentile of that censored sample, ``None`` when censored there;
- **region**: ``overloaded`` (goodput below ``fraction`` × offered already before the
  trigger), ``stable`` (back within one window of the trigger's end in most replications:
  the trigger was absorbed), ``recovers`` (probability >= 0.5), ``metastable`` (< 0.5);
- **what sustains the storm** (:func:`work_shares`): of the worker time spent from the
  trigger's start to the horizon, the shares that served retries, stale work (the caller
  had stopped waiting before the answer) and duplicates (a second execution of a turn
  already executed), and the goodput lost in turns.

The **tipping threshold** of a load row is the trigger size where the recovery probability,
made non-increasing in size (pool-adjacent violators), crosses 0.5 (linear interpolation
between the cells around the crossing); its 95 % interval comes from redrawing each simulated
cell's probability from its Jeffreys posterior Beta(k + ½, n − k + ½) (fixed seed).

**The fast model guides the simulator** (:func:`plan_cells`, ``adaptive=True``): the fluid
model (:mod:`rtalab.sim.fastmodel.fluid`) gives every cell a verdict in well under a second; the
full replications go to the cells on its boundary (a neighbour has the other verdict), a
few one-replication spot checks go to the cells far from it, and further rounds add cells
where the simulator's crossing is not bracketed or a spot check disagrees, within
``budget`` (share of cells with full replications).  The other cells keep the model's
verdict (reported as such).  :attr:`MapResult.disagreements` lists the simulated cells whose
interval excludes the model's verdict.  The CTMC (:mod:`rtalab.sim.fastmodel.ctmc`) adds, per load,
the expected times healthy → overloaded and overloaded → healthy under the normal inputs.

**On a fleet** (``[fleet] replicas`` > 1) the simulated cells run the whole fleet
(:mod:`rtalab.sim.model.fleet`); the fast model sees one replica fed ``1/N`` of the calls (random,
round robin, sticky, power of two at N >= 3: the Poisson split, exact for first attempts and
for re-routed retries in the mean) or one pooled queue of ``N`` × the workers (least
outstanding, power of two at N = 2), per :func:`rtalab.sim.fastmodel.params.replica_params`; the
CTMC's hitting times are then one replica's (or the pool's).  :attr:`MapResult.fleet` says
which, and the sentence ends with it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from rtalab.sim.answers.figure import new_figure, save_figure
from rtalab.sim.answers.storm import (
    STRATEGIES,
    Detector,
    StormError,
    case_figures,
    trigger_window,
    validate_strategies,
)
from rtalab.sim.fastmodel.params import replica_params
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import recovery
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.stats import wilson
from rtalab.sim.sweep import POINTS_DIR, point_dir_name, run_points
from rtalab.sim.vocab import AttemptOutcome as A

KINDS = ("length", "depth")
REGIONS = ("overloaded", "stable", "recovers", "metastable")
_NUMERIC = ("recovered", "p_recover.ci_low", "p_recover.ci_high", "recovery_s.median",
            "recovery_s.p90", "censored", "peak_amplification", "model_recovery_s",
            "retry_work_share", "stale_work_share", "duplicate_work_share",
            "goodput_lost_turns", "goodput_lost_share")


class MapError(StormError):
    """Bad map input (a grid that cannot be built, a trigger that cannot be scaled)."""


# --------------------------------------------------------------------------- cells


def load_overrides(scenario: Scenario, load: float) -> dict[str, Any]:
    """Overrides scaling the offered load by ``load``: the call rate, every schedule phase's
    rate and ``max_calls`` (a closed population: rounded, at least 1)."""
    if load <= 0:
        raise MapError(f"load factors must be > 0, got {load:g}")
    w = scenario.workload
    out: dict[str, Any] = {"workload.calls_per_s": w.calls_per_s * load}
    if w.schedule:
        out["workload.schedule"] = [{"start_s": p.start_s, "calls_per_s": p.calls_per_s * load}
                                    for p in w.schedule]
    if w.max_calls > 0:
        out["workload.max_calls"] = max(1, round(w.max_calls * load))
    return out


def trigger_overrides(scenario: Scenario, size: float, kind: str = "length") -> dict[str, Any]:
    """Overrides scaling the scenario's trigger by ``size`` (see the module docstring)."""
    if kind not in KINDS:
        raise MapError(f"trigger kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if size <= 0:
        raise MapError(f"trigger sizes must be > 0, got {size:g}")
    trigger_window(scenario)  # raises when there is none
    r, net, w = scenario.reasoner, scenario.network, scenario.workload
    out: dict[str, Any] = {}
    if kind == "depth" and net.outages:
        raise MapError("an outage has no depth: use --trigger length")
    if net.outages:
        out["network.outages"] = [
            {"start_s": o.start_s, "duration_s": max(o.duration_s * size, 1e-3),
             "direction": o.direction, "kind": o.kind, "loss": o.loss} for o in net.outages]
    if r.capacity_drops:
        drops = []
        for d in r.capacity_drops:
            if kind == "length":
                drops.append({"start_s": d.start_s, "duration_s": max(d.duration_s * size, 1e-3),
                              "workers": d.workers})
            else:
                lost = (r.workers - d.workers) * size
                drops.append({"start_s": d.start_s, "duration_s": d.duration_s,
                              "workers": int(max(0, min(r.workers, round(r.workers - lost))))})
        out["reasoner.capacity_drops"] = drops
    if w.arrival == "schedule" and len(w.schedule) > 1:
        base = w.schedule[0].calls_per_s
        phases = [{"start_s": p.start_s, "calls_per_s": p.calls_per_s} for p in w.schedule]
        spikes = [i for i, p in enumerate(w.schedule) if p.calls_per_s > base]
        if kind == "depth":
            for i in spikes:
                phases[i]["calls_per_s"] = base + (phases[i]["calls_per_s"] - base) * size
        else:
            for i in spikes:
                end = (w.schedule[i + 1].start_s if i + 1 < len(w.schedule)
                       else scenario.run.duration_s)
                new_end = w.schedule[i].start_s + (end - w.schedule[i].start_s) * size
                if i + 1 < len(w.schedule):
                    later = [p["start_s"] for p in phases[i + 2:]]
                    if later and new_end >= min(later):
                        raise MapError(f"a spike {size:g} x as long overlaps the next phase")
                    phases[i + 1]["start_s"] = new_end
        out["workload.schedule"] = phases
    return out


def cell_overrides(scenario: Scenario, load: float, size: float, kind: str,
                   strategy: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides of one cell: the strategy's, the load's, the trigger's."""
    out = dict(strategy)
    lo = load_overrides(scenario, load)
    tr = trigger_overrides(scenario, size, kind)
    if "workload.schedule" in lo and "workload.schedule" in tr:  # a spike under a scaled load
        tr["workload.schedule"] = [{**p, "calls_per_s": p["calls_per_s"] * load}
                                   for p in tr["workload.schedule"]]
        lo.pop("workload.schedule")
    out.update(lo)
    out.update(tr)
    return out


def cell_scenario(scenario: Scenario, load: float, size: float, kind: str = "length",
                  strategy: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario of one cell."""
    return scenario.with_overrides(cell_overrides(scenario, load, size, kind, strategy or {}))


def run_length(scenario: Scenario, sizes: Sequence[float], kind: str, det: Detector) -> float:
    """Run length that judges every cell: the largest trigger's end + ``hold_s`` + a window
    (never longer than the scenario's own run)."""
    ends = [trigger_window(scenario.with_overrides(trigger_overrides(scenario, s, kind)))[1]
            for s in sizes]
    return float(math.ceil(max(ends) + det.hold_s + det.window_s + 1.0))


# --------------------------------------------------------------------------- statistics


def censored_quantile(times: Sequence[float | None], q: float, limit_s: float) -> float | None:
    """The ``q`` quantile of recovery times censored at ``limit_s`` (``None`` or a time above
    it: not back by then); ``None`` when the quantile falls among the censored ones."""
    x = np.sort([math.inf if t is None or t > limit_s else float(t) for t in times])
    if len(x) == 0:
        return None
    v = float(np.quantile(x, q, method="inverted_cdf"))
    return None if not math.isfinite(v) else v


def _non_increasing(p: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pool-adjacent violators: the weighted least-squares non-increasing fit of ``p``."""
    blocks: list[list[float]] = []  # [value, weight, count]
    for v, wt in zip(p, w, strict=True):
        blocks.append([float(v), float(wt), 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            b = blocks[-1]
            tot = b[1] + w2
            b[0] = (b[0] * b[1] + v2 * w2) / tot if tot > 0 else (b[0] + v2) / 2
            b[1], b[2] = tot, b[2] + c2
    return np.concatenate([[b[0]] * int(b[2]) for b in blocks]) if blocks else np.array([])


def crossing(sizes: npt.ArrayLike, p: npt.ArrayLike, w: npt.ArrayLike | None = None,
             ) -> float:
    """Trigger size where the (made non-increasing) recovery probability crosses 0.5:
    ``0`` when it is below 0.5 already at the smallest size, ``inf`` when it never is."""
    s = np.asarray(sizes, dtype=float)
    fit = _non_increasing(np.asarray(p, dtype=float),
                          np.ones(len(s)) if w is None else np.asarray(w, dtype=float))
    below = np.flatnonzero(fit < 0.5)
    if len(below) == 0:
        return math.inf
    j = int(below[0])
    if j == 0:
        return 0.0
    p0, p1 = fit[j - 1], fit[j]
    frac = (p0 - 0.5) / (p0 - p1) if p0 > p1 else 0.5
    return float(s[j - 1] + frac * (s[j] - s[j - 1]))


# --------------------------------------------------------------------------- fast model


@dataclass(frozen=True)
class ModelCell:
    """The fluid model's view of one cell."""

    recovered: bool  # goodput back within hold_s after the trigger
    overloaded: bool  # unhealthy before the trigger
    recovery_s: float | None  # fluid recovery time (None: not within the horizon)
    seconds: float  # wall time of the computation


def model_cell(scenario: Scenario, det: Detector) -> ModelCell:
    """The fluid trajectory of ``scenario`` judged like a replication (``noise_z`` = 0: the
    fluid goodput has no noise)."""
    # lazy: +282 ms (scipy) off importing metastability
    from rtalab.sim.fastmodel.fluid import trajectory

    t0 = time.perf_counter()
    params = replica_params(scenario)  # a fleet: one replica's share (or the pooled queue)
    tr = trajectory(params)
    start, end = trigger_window(scenario)
    warm = scenario.run.warmup_s
    horizon = scenario.run.duration_s
    good = np.nan_to_num(tr["goodput_per_s"].to_numpy(dtype=float))
    offered = np.nan_to_num(tr["offered_turns_per_s"].to_numpy(dtype=float))
    ref = recovery.baseline(offered, warm, start)
    pre = recovery.baseline(good, warm, start)
    over = pre < det.fraction * ref
    rec = recovery.recovery_time_s(good, end, ref, tolerance=1.0 - det.fraction,
                                   window_s=round(det.window_s), horizon_s=horizon, noise_z=0.0)
    ok = rec is not None and rec <= det.hold_s and not over
    return ModelCell(bool(ok), bool(over), rec, time.perf_counter() - t0)


def model_hitting_times(scenario: Scenario, max_orbit: int = 60) -> tuple[float, float]:
    """CTMC expected times (s) healthy → overloaded and overloaded → healthy under the
    scenario's normal (first-phase) inputs."""
    # lazy: +416 ms (scipy) off importing metastability
    from rtalab.sim.fastmodel import ctmc

    h = ctmc.hitting_times(replica_params(scenario), max_orbit=max_orbit)
    return h.healthy_to_overloaded_s, h.overloaded_to_healthy_s


# --------------------------------------------------------------------------- what sustains it


def work_shares(run_dir: Path, trigger: tuple[float, float], horizon_s: float,
                baseline_from_s: float) -> list[dict[str, float | None]]:
    """Per replication of a run folder: of the worker time from the trigger's start to
    ``horizon_s``, the share that served retries (attempt > 1), stale work (the caller's
    attempt had ended without an answer before the service ended, or a network duplicate
    whose answer goes nowhere) and duplicates (an execution of a turn's phase after its
    first); goodput lost = baseline goodput × span − completed turns in the span, in turns
    and as a share of the baseline's."""
    run_dir = Path(run_dir)
    ex = pd.read_parquet(run_dir / "executions.parquet",
                         columns=[S.REPLICATION, S.INTERACTION_ID, S.REQUEST_GUID, "phase",
                                  "network_duplicate", S.DISPOSITION, "service_start_s",
                                  "service_end_s", "arrival_s"])
    at = pd.read_parquet(run_dir / "attempts.parquet",
                         columns=[S.REPLICATION, S.REQUEST_GUID, "attempt", S.END_S, S.OUTCOME])
    turns = pd.read_parquet(run_dir / "turns.parquet",
                            columns=[S.REPLICATION, S.OUTCOME, S.END_S])
    start = trigger[0]
    out = []
    for rep in sorted(turns[S.REPLICATION].unique()):
        e = ex[(ex[S.REPLICATION] == rep) & (ex[S.DISPOSITION].astype(str) == "executed")]
        e = e.sort_values("arrival_s")
        first = ~e.duplicated([S.INTERACTION_ID, "phase"], keep="first").to_numpy()
        a = at[at[S.REPLICATION] == rep].drop_duplicates(S.REQUEST_GUID, keep="first")
        m = e.merge(a[[S.REQUEST_GUID, "attempt", S.END_S, S.OUTCOME]], on=S.REQUEST_GUID,
                    how="left")
        lo = np.maximum(m["service_start_s"].to_numpy(dtype=float), start)
        hi = np.minimum(np.nan_to_num(m["service_end_s"].to_numpy(dtype=float), nan=horizon_s),
                        horizon_s)
        busy = np.clip(hi - lo, 0.0, None)
        total = float(busy.sum())
        outcome = m[S.OUTCOME].astype(str).to_numpy()
        answered = np.isin(outcome, (A.COMPLETED.value, A.INPUT_REQUIRED.value))
        att_end = m[S.END_S].to_numpy(dtype=float)
        dup_net = m["network_duplicate"].to_numpy(dtype=bool)
        stale = dup_net | (~answered & (np.nan_to_num(att_end, nan=np.inf)
                                        < m["service_end_s"].to_numpy(dtype=float)))
        retry = np.nan_to_num(m["attempt"].to_numpy(dtype=float), nan=1.0) > 1
        tr = turns[turns[S.REPLICATION] == rep]
        g = recovery.goodput_per_s(tr, math.ceil(horizon_s))
        base = recovery.baseline(g, baseline_from_s, start)
        span = horizon_s - start
        done = float(g[math.ceil(start):math.floor(horizon_s)].sum())
        lost = base * span - done

        def share(mask: np.ndarray, busy: np.ndarray = busy, total: float = total
                  ) -> float | None:
            return float(busy[mask].sum() / total) if total > 0 else None

        out.append({"retry_work_share": share(retry), "stale_work_share": share(stale),
                    "duplicate_work_share": share(~first),
                    "goodput_lost_turns": float(max(lost, 0.0)),
                    "goodput_lost_share": float(max(lost, 0.0) / (base * span))
                    if base > 0 else None})
    return out


# --------------------------------------------------------------------------- the map


@dataclass(frozen=True)
class MapSpec:
    """The grid and how it is judged."""

    loads: tuple[float, ...]
    sizes: tuple[float, ...]
    kind: str = "length"
    replications: int = 4
    detector: Detector = Detector()
    adaptive: bool = True
    budget: float = 0.3  # share of cells that may get full replications (adaptive)
    spot_every: int = 2  # spot checks on the end cells of every n-th load row (adaptive)
    max_rounds: int = 3

    def __post_init__(self) -> None:
        if len(self.loads) < 1 or len(self.sizes) < 2:
            raise MapError("a map needs at least one load and two trigger sizes")
        if sorted(self.sizes) != list(self.sizes) or len(set(self.sizes)) != len(self.sizes):
            raise MapError(f"trigger sizes must increase, got {list(self.sizes)}")
        if sorted(self.loads) != list(self.loads) or len(set(self.loads)) != len(self.loads):
            raise MapError(f"loads must increase, got {list(self.loads)}")
        if self.replications < 2:
            raise MapError("a cell's recovery probability needs >= 2 replications")
        if not 0 < self.budget <= 1:
            raise MapError(f"budget must be in (0, 1], got {self.budget:g}")


@dataclass
class StrategyMap:
    """One strategy's map: the cells table and the tipping thresholds per load."""

    strategy: str
    cells: pd.DataFrame
    thresholds: pd.DataFrame
    model_seconds: float = 0.0
    sim_runs: int = 0  # replications simulated
    runs: dict[tuple[float, float], Path] = field(default_factory=dict)  # (load, size) -> run

    @property
    def full_share(self) -> float:
        """Share of cells that got full replications."""
        return float((self.cells["source"] == "simulated").mean())

    def disagreements(self) -> pd.DataFrame:
        """Simulated cells whose recovery-probability interval excludes the model's verdict."""
        c = self.cells
        sim = c["source"] == "simulated"
        model = c["model_recovered"].astype(float)
        lo = pd.to_numeric(c["p_recover.ci_low"], errors="coerce")
        hi = pd.to_numeric(c["p_recover.ci_high"], errors="coerce")
        bad = sim & ((model < lo) | (model > hi))
        return c[bad]

    def regions(self) -> dict[str, list[tuple[float, float]]]:
        """(load, size) of the cells in each region."""
        return {r: list(zip(self.cells.loc[self.cells.region == r, "load"],
                            self.cells.loc[self.cells.region == r, "size"], strict=True))
                for r in REGIONS}


@dataclass
class MapResult:
    """A map per strategy plus what it was made of."""

    scenario: str
    spec: MapSpec
    trigger: tuple[float, float]
    base_trigger_s: float  # the trigger's length (or depth) at size 1
    duration_s: float
    maps: dict[str, StrategyMap] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    hitting: pd.DataFrame | None = None  # per load: CTMC expected times
    unexpressed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fleet: str = ""  # on a fleet: how the fast model sees it (:func:`fleet_note`)

    def cells(self) -> pd.DataFrame:
        """Every strategy's cells in one table."""
        return pd.concat([m.cells for m in self.maps.values()], ignore_index=True)

    def thresholds(self) -> pd.DataFrame:
        """Every strategy's tipping thresholds in one table."""
        return pd.concat([m.thresholds for m in self.maps.values()], ignore_index=True)

    def sentence(self) -> str:
        """A sentence for a design doc."""
        unit = "× the trigger" if self.spec.kind == "length" else "× the trigger's depth"
        parts = []
        for name, m in self.maps.items():
            th = m.thresholds
            fin = th[np.isfinite(th["threshold"]) & (th["threshold"] > 0)]
            never = th[~np.isfinite(th["threshold"])]
            if len(fin):
                row = fin.iloc[len(fin) // 2]
                parts.append(f"{name} tips at {row['threshold']:.2g} {unit} "
                             f"[95 % {row['threshold.ci_low']:.2g}–"
                             f"{_fmt_hi(row['threshold.ci_high'])}] at load "
                             f"{row['load']:g}× (recovery within {self.spec.detector.hold_s:g} s "
                             f"less likely than not beyond it)")
            elif len(never) == len(th):
                parts.append(f"{name} recovers from every trigger up to "
                             f"{self.spec.sizes[-1]:g} {unit} at every load mapped")
            else:
                parts.append(f"{name} does not recover even from the smallest trigger "
                             f"({self.spec.sizes[0]:g} {unit}) at loads "
                             f"{', '.join(f'{v:g}' for v in th[th['threshold'] == 0]['load'])}×")
        return (f"{self.scenario} (trigger {self.trigger[0]:g}–{self.trigger[1]:g} s = 1×): "
                + "; ".join(parts) + "." + (f" {self.fleet}" if self.fleet else ""))


def fleet_note(scenario: Scenario) -> str:
    """How the map treats ``scenario``'s fleet ("" for one pool): the simulator runs the whole
    fleet, the fast model one replica's share
    (:func:`rtalab.sim.fastmodel.params.replica_params`)."""
    f = scenario.fleet
    if not f.is_fleet:
        return ""
    p = replica_params(scenario)
    pooled = p.phases[0].workers > scenario.reasoner.workers
    model = (f"one pooled queue of {p.phases[0].workers} workers" if pooled else
             f"one replica at 1/{f.replicas} of the load")
    return (f"Fleet: {f.replicas} replicas behind a {f.balancer} balancer ({f.state} state); "
            f"the simulated cells run the whole fleet, the fast model that places them is "
            f"{model}.")


def _fmt_hi(v: float) -> str:
    return "∞" if not math.isfinite(v) else f"{v:.2g}"


def _neighbours_differ(grid: np.ndarray) -> np.ndarray:
    """Cells with a 4-neighbour of the other value."""
    b = np.zeros_like(grid, dtype=bool)
    b[:, :-1] |= grid[:, :-1] != grid[:, 1:]
    b[:, 1:] |= grid[:, :-1] != grid[:, 1:]
    b[:-1, :] |= grid[:-1, :] != grid[1:, :]
    b[1:, :] |= grid[:-1, :] != grid[1:, :]
    return b


def plan_cells(model_ok: np.ndarray, spec: MapSpec) -> tuple[np.ndarray, np.ndarray]:
    """(full, spot) masks of the first round: full replications on the model's boundary
    (the cells with a neighbour of the other verdict, nearest the crossing first, within the
    budget), one-replication spot checks at both ends of every ``spot_every``-th row."""
    n_l, n_s = model_ok.shape
    full = _neighbours_differ(model_ok)
    cap = max(1, math.floor(spec.budget * model_ok.size))
    if full.sum() > cap:  # keep the cells right at each row's crossing first
        keep = np.zeros_like(full)
        order = []
        for i in range(n_l):
            for j in range(n_s - 1):
                if model_ok[i, j] != model_ok[i, j + 1]:
                    order += [(i, j), (i, j + 1)]
        order += [tuple(x) for x in np.argwhere(full)]
        for i, j in order:
            if keep.sum() >= cap:
                break
            keep[i, j] = True
        full = keep
    spot = np.zeros_like(full)
    for i in range(0, n_l, max(1, spec.spot_every)):
        for j in (0, n_s - 1):
            if not full[i, j]:
                spot[i, j] = True
    return full, spot


def _refine(full: np.ndarray, p_sim: np.ndarray, model_ok: np.ndarray, spot_p: np.ndarray,
            cap: int) -> np.ndarray:
    """Cells to add: in each row, the next cell beyond the simulated ones when the simulated
    probabilities do not bracket 0.5 (all above: a larger size; all below: a smaller one),
    and every spot-checked cell whose one replication contradicts the model."""
    add = np.zeros_like(full)
    n_l, n_s = full.shape
    for i in range(n_l):
        js = np.flatnonzero(full[i])
        if len(js):
            ps = p_sim[i, js]
            if (ps >= 0.5).all() and js.max() + 1 < n_s and not full[i, js.max() + 1]:
                add[i, js.max() + 1] = True
            if (ps < 0.5).all() and js.min() > 0 and not full[i, js.min() - 1]:
                add[i, js.min() - 1] = True
        for j in range(n_s):
            if not np.isnan(spot_p[i, j]) and bool(spot_p[i, j] >= 0.5) != bool(model_ok[i, j]) \
                    and not full[i, j]:
                add[i, j] = True
    room = cap - int(full.sum())
    if add.sum() > room:
        idx = np.argwhere(add)[:max(room, 0)]
        add = np.zeros_like(add)
        for i, j in idx:
            add[i, j] = True
    return add


def _simulate(scenario: Scenario, cells: list[tuple[int, int]], spec: MapSpec,
              strategy: Mapping[str, Any], out_dir: Path, reps: int, seed: int,
              executor: Executor | None, progress: Callable[[float], None],
              trigger_of: Callable[[int], tuple[float, float]], duration: float,
              ) -> dict[tuple[int, int], tuple[Path, list[dict[str, Any]]]]:
    """Run ``cells`` (``reps`` replications each) as one sweep in ``out_dir``."""
    if not cells:
        return {}
    base = scenario.with_overrides({"run.duration_s": duration})
    points = [cell_overrides(base, spec.loads[i], spec.sizes[j], spec.kind, strategy)
              for i, j in cells]
    run_points(base, points, replications=reps, root_seed=seed, executor=executor,
               out_dir=out_dir, progress=progress, plots=False)
    out = {}
    for k, (i, j) in enumerate(cells):
        d = out_dir / POINTS_DIR / point_dir_name(k)
        out[(i, j)] = (d, case_figures(d, trigger_of(j), spec.detector))
    return out


def _cell_row(load: float, size: float, reps: list[dict[str, Any]] | None,
              shares: list[dict[str, float | None]] | None, model: ModelCell,
              det: Detector, source: str, spot: list[dict[str, Any]] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"load": load, "size": size, "source": source,
                           "model_recovered": model.recovered,
                           "model_overloaded": model.overloaded,
                           "model_recovery_s": model.recovery_s}
    use = reps if reps is not None else None
    if use:
        times = [r["recover_s"] for r in use]
        k = sum(1 for r in use if not r["metastable"])
        n = len(use)
        lo, hi = wilson(k, n)
        row.update({"replications": n, "recovered": k, "p_recover": k / n,
                    "p_recover.ci_low": lo, "p_recover.ci_high": hi,
                    "recovery_s.median": censored_quantile(times, 0.5, det.hold_s),
                    "recovery_s.p90": censored_quantile(times, 0.9, det.hold_s),
                    "censored": sum(1 for t in times if t is None or t > det.hold_s),
                    "recovery_times_s": ";".join("inf" if t is None else f"{t:g}"
                                                 for t in times),
                    "peak_amplification": float(np.nanmean([r["peak_amplification"]
                                                            for r in use]))})
        absorbed = sum(1 for t in times if t is not None and t <= det.window_s)
        pre_over = False
    else:
        p = 1.0 if model.recovered else 0.0
        row.update({"replications": 0, "recovered": None, "p_recover": p,
                    "p_recover.ci_low": None, "p_recover.ci_high": None,
                    "recovery_s.median": model.recovery_s if model.recovered else None,
                    "recovery_s.p90": None, "censored": None, "recovery_times_s": "",
                    "peak_amplification": None})
        absorbed = (1 if model.recovered and model.recovery_s is not None
                    and model.recovery_s <= det.window_s else 0)
        n = 1
        pre_over = model.overloaded
    if spot:
        row["spot_recovered"] = not spot[0]["metastable"]
    else:
        row["spot_recovered"] = None
    for key in ("retry_work_share", "stale_work_share", "duplicate_work_share",
                "goodput_lost_turns", "goodput_lost_share"):
        vals = [v for s in shares or [] if (v := s[key]) is not None]
        row[key] = float(np.mean(vals)) if vals else None
    if pre_over:
        region = "overloaded"
    elif absorbed * 2 > n:
        region = "stable"
    elif row["p_recover"] >= 0.5:
        region = "recovers"
    else:
        region = "metastable"
    row["region"] = region
    return row


def _thresholds(name: str, cells: pd.DataFrame, spec: MapSpec, seed: int,
                draws: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    sizes = np.array(spec.sizes, dtype=float)
    for load in spec.loads:
        c = cells[cells.load == load].sort_values("size")
        p = c["p_recover"].to_numpy(dtype=float)
        n = c["replications"].to_numpy(dtype=float)
        sim = n > 0
        k = np.nan_to_num(c["recovered"].to_numpy(dtype=float))
        w = np.where(sim, n, 1.0)
        est = crossing(sizes, p, w)
        boots = []
        for _ in range(draws):
            pb = p.copy()
            pb[sim] = rng.beta(k[sim] + 0.5, n[sim] - k[sim] + 0.5)
            boots.append(crossing(sizes, pb, w))
        b = np.array(boots)
        lo = float(np.quantile(b, 0.025, method="inverted_cdf"))
        hi = float(np.quantile(b, 0.975, method="inverted_cdf"))
        model_p = c["model_recovered"].to_numpy(dtype=float)
        mth = crossing(sizes, model_p)
        rows.append({"strategy": name, "load": load, "threshold": est,
                     "threshold.ci_low": float(min(lo, est)),
                     "threshold.ci_high": float(max(hi, est)),
                     "model_threshold": mth,
                     "simulated_cells": int(sim.sum())})
    return pd.DataFrame(rows)


_Sims = dict[tuple[int, int], tuple[Path, list[dict[str, Any]]]]


class _MapProgress:
    """The map's progress: steps done out of ``total`` (a fast-model cell is one step, a
    simulated replication one), reported as the finished fraction."""

    def __init__(self, total: int, report: Callable[[float], None] | None) -> None:
        self.total = total
        self.done = 0.0
        self._report = report or (lambda _f: None)

    def advance(self, units: float) -> None:
        """``units`` more steps are done."""
        self.done += units
        self.show()

    def show(self) -> None:
        """Report the fraction done."""
        self._report(self.done / max(self.total, 1))

    def step(self, units: float) -> Callable[[float], None]:
        """A progress callback for a sweep of ``units`` steps starting now (the fraction
        of that sweep in, the map's fraction out)."""
        start = self.done

        def cb(f: float) -> None:
            self._report(min(1.0, (start + f * units) / max(self.total, 1)))
        return cb


@dataclass(frozen=True)
class _MapRun:
    """What every strategy of one map shares: the scenario at the map's length, its spec,
    seed, executor and each size's trigger window."""

    scenario: Scenario
    base: Scenario
    spec: MapSpec
    seed: int
    executor: Executor | None
    triggers: list[tuple[float, float]]
    duration: float

    def simulate(self, cells: list[tuple[int, int]], strat: Mapping[str, Any], out_dir: Path,
                 reps: int, progress: Callable[[float], None]) -> _Sims:
        """:func:`_simulate` of ``cells`` for this map."""
        return _simulate(self.base, cells, self.spec, strat, out_dir, reps, self.seed,
                         self.executor, progress, self.triggers.__getitem__, self.duration)


def run_map(scenario: Scenario, out_dir: Path, spec: MapSpec, *,
            strategies: Sequence[str] | None = None, seed: int | None = None,
            executor: Executor | None = None, progress: Callable[[float], None] | None = None,
            table: Mapping[str, tuple[str, dict[str, Any]]] | None = None,
            hitting: bool = True) -> MapResult:
    """The map of every strategy (module docstring): fast model on every cell, simulator
    where it is needed (``spec.adaptive``) or on every cell; one sweep folder per strategy and
    round under ``out_dir/<strategy>/``."""
    table_ = STRATEGIES if table is None else table
    runnable, skipped = validate_strategies(scenario, strategies, table_)
    trigger = trigger_window(scenario)
    for s in spec.sizes:
        trigger_overrides(scenario, s, spec.kind)
    for v in spec.loads:
        load_overrides(scenario, v)
    duration = run_length(scenario, spec.sizes, spec.kind, spec.detector)
    base = scenario.with_overrides({"run.duration_s": duration})
    run = _MapRun(scenario, base, spec, scenario.run.seed if seed is None else seed, executor,
                  [trigger_window(base.with_overrides(trigger_overrides(base, s, spec.kind)))
                   for s in spec.sizes], duration)
    if spec.kind == "length":
        base_len = trigger[1] - trigger[0]
    else:
        r = scenario.reasoner
        base_len = float(sum(r.workers - d.workers for d in r.capacity_drops)) or 1.0
    res = MapResult(scenario.name, spec, trigger, base_len, duration, skipped=skipped,
                    fleet=fleet_note(scenario))
    names = list(runnable)
    cells_per = len(spec.loads) * len(spec.sizes) * (1 + spec.replications)
    prog = _MapProgress(len(names) * cells_per, progress)
    for k, name in enumerate(names):
        res.unexpressed[name] = _unexpressed(
            runnable[name].with_overrides({"run.duration_s": duration}))
        res.maps[name] = _strategy_map(run, name, dict(table_[name][1]), Path(out_dir) / name,
                                       prog)
        prog.done = (k + 1) * cells_per
        prog.show()
    if hitting:
        res.hitting = pd.DataFrame([
            {"strategy": name, "load": load,
             **dict(zip(("healthy_to_overloaded_s", "overloaded_to_healthy_s"),
                        model_hitting_times(cell_scenario(
                            base, load, 1.0, spec.kind, dict(table_[name][1]))), strict=True))}
            for name in names for load in spec.loads])
    return res


def _strategy_map(run: _MapRun, name: str, strat: dict[str, Any], folder: Path,
                  prog: _MapProgress) -> StrategyMap:
    """One strategy's map: the fast model on every cell, then the simulator where
    ``spec.adaptive`` asks for it (else on every cell)."""
    spec = run.spec
    n_l, n_s = len(spec.loads), len(spec.sizes)
    models: dict[tuple[int, int], ModelCell] = {}
    for i, load in enumerate(spec.loads):
        for j, size in enumerate(spec.sizes):
            models[(i, j)] = model_cell(cell_scenario(run.base, load, size, spec.kind, strat),
                                        spec.detector)
            prog.advance(1)
    spots: _Sims = {}
    if spec.adaptive:
        model_ok = np.array([[models[(i, j)].recovered for j in range(n_s)]
                             for i in range(n_l)])
        sims, spots = _adaptive_sims(run, strat, folder, model_ok, prog)
    else:
        cells = [(i, j) for i in range(n_l) for j in range(n_s)]
        sims = run.simulate(cells, strat, folder / "full", spec.replications,
                            prog.step(len(cells) * spec.replications))
    cells_df = _cells_frame(run, name, models, sims, spots)
    return StrategyMap(
        name, cells_df, _thresholds(name, cells_df, spec, run.seed),
        model_seconds=float(sum(m.seconds for m in models.values())),
        sim_runs=sum(len(r) for _d, r in sims.values()) + len(spots),
        runs={(spec.loads[i], spec.sizes[j]): d for (i, j), (d, _r) in sims.items()})


def _adaptive_sims(run: _MapRun, strat: dict[str, Any], folder: Path, model_ok: np.ndarray,
                   prog: _MapProgress) -> tuple[_Sims, _Sims]:
    """The adaptive plan: one spot replication where the model is unsure, then rounds of
    full cells refined where simulation and model disagree; (simulated cells, spots)."""
    spec = run.spec
    n_l, n_s = len(spec.loads), len(spec.sizes)
    cap = max(1, math.floor(spec.budget * n_l * n_s))
    full, spot = plan_cells(model_ok, spec)
    spot_cells = [tuple(x) for x in np.argwhere(spot)]
    spots = run.simulate(spot_cells, strat, folder / "spot", 1, prog.step(len(spot_cells)))
    prog.done += len(spot_cells)
    spot_p = np.full((n_l, n_s), np.nan)
    for (i, j), (_d, reps) in spots.items():
        spot_p[i, j] = 0.0 if reps[0]["metastable"] else 1.0
    sims: _Sims = {}
    todo = full.copy()
    for rnd in range(spec.max_rounds):
        cells = [tuple(x) for x in np.argwhere(todo) if tuple(x) not in sims]
        units = len(cells) * spec.replications
        sims.update(run.simulate(cells, strat, folder / f"round{rnd + 1}", spec.replications,
                                 prog.step(units)))
        prog.done += units
        simmed = np.zeros((n_l, n_s), dtype=bool)
        p_sim = np.full((n_l, n_s), np.nan)
        for (i, j), (_d, reps) in sims.items():
            simmed[i, j] = True
            p_sim[i, j] = np.mean([not r["metastable"] for r in reps])
        todo = _refine(simmed, p_sim, model_ok, spot_p, cap)
        if not todo.any():
            break
    return sims, spots


def _cells_frame(run: _MapRun, name: str, models: dict[tuple[int, int], ModelCell],
                 sims: _Sims, spots: _Sims) -> pd.DataFrame:
    """One row per cell: simulated, model and spot, or model alone."""
    spec, det = run.spec, run.spec.detector
    warmup = run.scenario.run.warmup_s
    rows = []
    for i, load in enumerate(spec.loads):
        for j, size in enumerate(spec.sizes):
            m = models[(i, j)]
            if (i, j) in sims:
                d, reps = sims[(i, j)]
                shares: list[dict[str, float | None]] | None = work_shares(
                    d, run.triggers[j], run.duration, warmup)
                rows.append(_cell_row(load, size, reps, shares, m, det, "simulated",
                                      spots.get((i, j), (None, None))[1]))
            else:
                sp = spots.get((i, j))
                shares = (work_shares(sp[0], run.triggers[j], run.duration, warmup)
                          if sp else None)
                rows.append(_cell_row(load, size, None, shares, m, det,
                                      "model+spot" if sp else "model",
                                      sp[1] if sp else None))
    cells_df = pd.DataFrame(rows)
    for col in _NUMERIC:
        cells_df[col] = pd.to_numeric(cells_df[col], errors="coerce").astype(float)
    cells_df.insert(0, "strategy", name)
    return cells_df


def _unexpressed(s: Scenario) -> tuple[str, ...]:
    return replica_params(s).unexpressed


def write_map(res: MapResult, out: Path) -> list[Path]:
    """cells.csv, thresholds.csv, hitting.csv (when computed), disagreements.csv, map.png,
    answer.txt in ``out``."""
    out = Path(out)
    paths = [out / "cells.csv", out / "thresholds.csv", out / "disagreements.csv"]
    res.cells().to_csv(paths[0], index=False)
    res.thresholds().to_csv(paths[1], index=False)
    dis = [m.disagreements() for m in res.maps.values()]
    (pd.concat(dis, ignore_index=True) if dis else pd.DataFrame()).to_csv(paths[2], index=False)
    if res.hitting is not None:
        paths.append(out / "hitting.csv")
        res.hitting.to_csv(paths[-1], index=False)
    paths.append(plot_map(res, out / "map.png"))
    paths.append(out / "answer.txt")
    paths[-1].write_text(res.sentence() + "\n", encoding="utf-8")
    return paths


_COLOURS = {"overloaded": "#7f7f7f", "stable": "#2ca02c", "recovers": "#bcd96a",
            "metastable": "#d62728"}


def plot_map(res: MapResult, path: Path) -> Path:
    """One panel per strategy: the cells coloured by region (hatched: the model's verdict,
    not simulated), recovery probability written in simulated cells, the tipping threshold
    per load with its interval (black), the model's threshold (dashed)."""
    # lazy: +420 ms (matplotlib) off importing metastability
    from matplotlib.patches import Patch, Rectangle

    names = list(res.maps)
    cols = min(3, max(1, len(names)))
    rows = math.ceil(len(names) / cols)
    fig = new_figure(4.6 * cols, 3.8 * rows + 0.9)
    axes = fig.subplots(rows, cols, squeeze=False)
    sizes, loads = res.spec.sizes, res.spec.loads
    for ax, name in zip(axes.flat, names, strict=False):
        m = res.maps[name]
        for _, c in m.cells.iterrows():
            j, i = sizes.index(c["size"]), loads.index(c["load"])
            sim = c["source"] == "simulated"
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color=_COLOURS[c["region"]],
                                   alpha=1.0 if sim else 0.45, hatch=None if sim else "//",
                                   lw=0))
            if sim:
                ax.text(j, i, f"{c['p_recover']:.2g}", ha="center", va="center", fontsize=7)
        th = m.thresholds

        def pos(v: float) -> float:
            if not math.isfinite(v):
                return len(sizes) - 0.5
            return float(np.interp(v, sizes, np.arange(len(sizes)), left=-0.5))

        y = np.arange(len(loads))
        x = [pos(v) for v in th["threshold"]]
        xl = [pos(v) for v in th["threshold.ci_low"]]
        xh = [pos(v) for v in th["threshold.ci_high"]]
        ax.errorbar(x, y, xerr=[np.subtract(x, xl), np.subtract(xh, x)], fmt="o", color="k",
                    ms=3, lw=1, capsize=2)
        ax.plot([pos(v) for v in th["model_threshold"]], y, "k--", lw=1)
        ax.set_xlim(-0.5, len(sizes) - 0.5)
        ax.set_ylim(-0.5, len(loads) - 0.5)
        ax.set_xticks(range(len(sizes)), [f"{s:g}" for s in sizes], fontsize=8)
        ax.set_yticks(range(len(loads)), [f"{v:g}" for v in loads], fontsize=8)
        ax.set_xlabel(f"trigger size (× {res.base_trigger_s:g} "
                      f"{'s' if res.spec.kind == 'length' else 'workers'})", fontsize=10)
        ax.set_ylabel("offered load (× scenario)", fontsize=10)
        ax.set_title(f"{name} ({m.full_share:.0%} of cells simulated)", fontsize=11)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles = [Patch(color=v, label=k) for k, v in _COLOURS.items()]
    handles.append(Patch(facecolor="white", hatch="//", label="model only"))
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=9)
    fig.suptitle(f"{res.scenario}: recovery within {res.spec.detector.hold_s:g} s; "
                 "threshold (●, 95 %) and model's (--)", fontsize=12)
    return save_figure(fig, path, rect=(0, 0.9 / (3.8 * rows + 0.9), 1, 0.95))


__all__ = ["KINDS", "REGIONS", "MapError", "MapResult", "MapSpec", "ModelCell", "StrategyMap",
           "cell_overrides", "cell_scenario", "censored_quantile", "crossing", "load_overrides",
           "model_cell", "model_hitting_times", "plan_cells", "plot_map", "run_length",
           "run_map", "trigger_overrides", "wilson", "work_shares", "write_map"]
