"""Capacity planning: the smallest value of a knob whose SLOs hold with confidence, per load.

For each load level (a value of ``load_key``, e.g. ``workload.calls_per_s``) the
search finds the smallest value of ``knob`` (e.g. ``reasoner.workers``; any integer
or float scenario key) at which every SLO holds *with confidence* (the 95 % CI end
on the unfavourable side meets the target, :meth:`rtalab.sim.answers.slo.Slo.holds`).

Search (assumes the SLOs get easier as the knob grows and harder as load grows):

1. **Bracket.** Start at the previous load level's answer (the scenario's own value
   for the first level), clipped to ``[lo, hi]``.  While nothing passes, double
   (``x -> 2x``, at least ``+step``) up to ``hi``; while nothing fails, halve down
   to ``lo``.  At a higher load, everything below the previous answer is known to
   fail (monotonicity in load) and is not re-run.
2. **Bisect** between the largest failing and the smallest passing value until they
   are one ``step`` apart (integers: adjacent).

Every probe is one sweep point (``replications`` replications with seeds from
``rtalab.sim.sweep.point_seed(root_seed, point, i)``) run by ``rtalab.sim.sweep.run_points``, so
results do not depend on which executor ran them; with ``out_dir`` probe ``k`` is the one-point
sweep folder ``out_dir/probes/probeNNN``.  The answer at each level is therefore a value that
passes with the value one step below it failing ("headroom to the next value down").

**A fleet.** With knob ``fleet.replicas`` the search sizes the replica count (each replica
``[reasoner]``'s workers); on a scenario with ``[fleet] replicas`` > 1 a ``reasoner.*`` knob
(e.g. ``reasoner.workers``) is sized *per replica*.  The SLO metrics are the fleet's (all
replicas' turns, ``worker_utilisation`` over every worker); the sentence names the fleet and
the table adds the replicas, workers per replica, their product and the utilisation
imbalance (max / mean over replicas) at the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rtalab.sim.answers.figure import new_figure, save_figure
from rtalab.sim.answers.slo import Slo
from rtalab.sim.config import ConfigError, to_plain
from rtalab.sim.scenario import FleetConfig, Scenario
from rtalab.sim.sweep import run_points


@dataclass(frozen=True)
class Knob:
    """The scenario key being sized, its search range and resolution."""

    key: str
    lo: float
    hi: float
    integer: bool = True
    step: float = 1.0  # integer: 1; float: the resolution the bisection stops at

    def snap(self, x: float) -> float:
        """``x`` clipped to ``[lo, hi]`` (and rounded for an integer knob)."""
        x = min(max(x, self.lo), self.hi)
        return round(x) if self.integer else float(x)

    def values(self) -> int:
        """How many values a full sweep of the range at resolution ``step`` evaluates."""
        return math.floor((self.hi - self.lo) / self.step + 1e-9) + 1


def scenario_value(scenario: Scenario, key: str) -> Any:
    """The value at dotted ``key`` of ``scenario`` (:class:`ConfigError` if there is none)."""
    node: Any = to_plain(scenario)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(key, "no such scenario key")
        node = node[part]
    return node


def make_knob(scenario: Scenario, key: str, lo: float | None = None, hi: float | None = None,
              step: float | None = None) -> Knob:
    """A :class:`Knob` for numeric key ``key``: integer if the scenario's value is an integer.

    Defaults: ``lo`` 1 (integer) or current/64 (float), ``hi`` 64 × the current value
    (at least 64), ``step`` 1 (integer) or (hi − lo)/256 (float).  Raises
    :class:`ConfigError` when the key is missing, not numeric, or the range is invalid.
    """
    current = scenario_value(scenario, key)
    if isinstance(current, bool) or not isinstance(current, int | float):
        raise ConfigError(key, f"cannot size a non-numeric key (value {current!r})")
    integer = isinstance(current, int)
    lo = (1 if integer else current / 64) if lo is None else lo
    hi = max(64 * current, 64) if hi is None else hi
    if not lo < hi:
        raise ConfigError(key, f"search range must have lo < hi, got [{lo:g}, {hi:g}]")
    step = (1 if integer else (hi - lo) / 256) if step is None else step
    if integer and (lo != int(lo) or hi != int(hi)):
        raise ConfigError(key, "integer knob needs an integer range")
    for v in (lo, hi):  # validated up front: both ends must be acceptable values
        scenario.with_overrides({key: int(v) if integer else float(v)})
    return Knob(key, lo, hi, integer, step)


@dataclass
class Probe:
    """One evaluated (load, knob value): its summary and whether every SLO held."""

    load: float
    value: float
    summary: dict[str, Any]
    holds: bool
    failing: tuple[str, ...] = ()  # "metric (CI bound)" of each SLO that does not hold


@dataclass
class CapacityResult:
    """Answer of :func:`find_capacity`: per load level, the required value and the probes."""

    scenario: str
    load_key: str
    knob: Knob
    slos: tuple[Slo, ...]
    replications: int
    root_seed: int
    required: dict[float, float | None] = field(default_factory=dict)  # None: > knob.hi
    probes: list[Probe] = field(default_factory=list)
    fleet: FleetConfig | None = None  # the scenario's [fleet]
    workers: int = 0  # the scenario's reasoner.workers (per replica on a fleet)

    @property
    def on_fleet(self) -> bool:
        """True when the answer is about a fleet: the knob is the replica count, or the
        scenario has several replicas (then the knob is sized per replica)."""
        return self.knob.key == "fleet.replicas" or (self.fleet is not None
                                                     and self.fleet.is_fleet)

    def fleet_at(self, value: float | None) -> tuple[int, int] | None:
        """(replicas, workers per replica) of the fleet at knob ``value`` (None: no fleet)."""
        if not self.on_fleet or value is None or self.fleet is None:
            return None
        replicas = int(value) if self.knob.key == "fleet.replicas" else self.fleet.replicas
        workers = int(value) if self.knob.key == "reasoner.workers" else self.workers
        return replicas, workers

    @property
    def evaluations(self) -> int:
        """Number of points evaluated (each ``replications`` replications)."""
        return len(self.probes)

    @property
    def full_sweep_evaluations(self) -> int:
        """Points a full sweep of the knob's range at every load level would evaluate."""
        return self.knob.values() * len(self.required)

    def probe(self, load: float, value: float | None) -> Probe | None:
        """The probe at (load, value), if it was evaluated."""
        return next((p for p in self.probes if p.load == load and p.value == value), None)

    def table(self) -> pd.DataFrame:
        """One row per load: required value, utilisation, each SLO metric (mean, CI), the next
        value down and which SLOs fail there (the headroom)."""
        rows = []
        for load, req in self.required.items():
            row: dict[str, Any] = {"load": load, "required": req,
                                   "evaluations": sum(p.load == load for p in self.probes)}
            p = self.probe(load, req)
            m = p.summary["metrics"] if p else {}
            for name, label in [("worker_utilisation", "utilisation"),
                                *[(s.metric, s.metric) for s in self.slos]]:
                mm = m.get(name) or {}
                row[label] = mm.get("mean")
                row[f"{label}.ci_low"] = mm.get("ci_low")
                row[f"{label}.ci_high"] = mm.get("ci_high")
            down = None if req is None else self.knob.snap(req - self.knob.step)
            below = None if down is None or down == req else self.probe(load, down)
            row["next_down"] = down if below else None
            row["next_down_fails"] = ", ".join(below.failing) if below else ""
            size = self.fleet_at(req)
            if self.on_fleet:  # the fleet at the answer and how evenly it is loaded
                row["replicas"], row["workers_per_replica"] = size or (None, None)
                row["fleet_workers"] = size[0] * size[1] if size else None
                mm = m.get("fleet.utilisation_imbalance") or {}
                row["utilisation_imbalance"] = mm.get("mean")
                row["utilisation_imbalance.ci_low"] = mm.get("ci_low")
                row["utilisation_imbalance.ci_high"] = mm.get("ci_high")
            rows.append(row)
        return pd.DataFrame(rows)

    def sentence(self) -> str:
        """A paste-able one-sentence answer."""
        slo_text = " and ".join(str(s) for s in self.slos)
        parts = []
        for load, req in self.required.items():
            value = f"more than {_fmt(self.knob.hi)}" if req is None else _fmt(req)
            size = self.fleet_at(req)
            if size and self.knob.key in ("fleet.replicas", "reasoner.workers"):
                value += f" ({size[0]} × {size[1]} = {size[0] * size[1]} workers)"
            parts.append(f"{value} at {self.load_key} = {_fmt(load)}")
        util = [r for r in self.table()["utilisation"] if r is not None and r == r]
        util_text = (f"; utilisation at the answer {min(util):.2f}–{max(util):.2f}"
                     if util else "")
        return (f"Scenario '{self.scenario}': the smallest {self.knob.key}{self._fleet_text()} "
                f"for which "
                f"{slo_text} holds with 95 % confidence (CI bound on the unfavourable side) is "
                f"{', '.join(parts)} ({self.replications} replications per point, root seed "
                f"{self.root_seed}{util_text}).")


    def _fleet_text(self) -> str:
        """What the knob is of, on a fleet ("" for one pool)."""
        f = self.fleet
        if not self.on_fleet or f is None:
            return ""
        how = f"{f.balancer} balancer, {f.state} state"
        if self.knob.key == "fleet.replicas":
            return f" (replicas of {self.workers} workers each, {how})"
        per = " per replica" if self.knob.key.startswith("reasoner.") else ""
        return f"{per} of a fleet of {f.replicas} replicas ({how})"


def _fmt(x: float) -> str:
    return f"{x:g}"


def _failing(slos: Sequence[Slo], summary: dict[str, Any]) -> tuple[str, ...]:
    out = []
    for s in slos:
        if not s.holds(summary):
            b = s.bound(summary)
            out.append(f"{s.metric} ({'undefined' if b is None else f'{b:.4g}'})")
    return tuple(out)


def find_capacity(scenario: Scenario, *, load_key: str, loads: Sequence[float], knob: Knob,
                  slos: Sequence[Slo], replications: int = 3, root_seed: int = 1,
                  executor: Executor | None = None, out_dir: Path | None = None,
                  progress: bool = False) -> CapacityResult:
    """For each of ``loads`` (ascending), the smallest ``knob`` value where all ``slos`` hold
    with confidence; see the module docstring for the search and its assumptions."""
    if not slos:
        raise ValueError("find_capacity needs at least one SLO")
    if replications < 2:
        raise ValueError("SLOs hold with confidence only with >= 2 replications (a CI)")
    for load in loads:
        scenario.with_overrides({load_key: load})  # bad load values fail before anything runs
    res = CapacityResult(scenario.name, load_key, knob, tuple(slos), replications, root_seed,
                         fleet=scenario.fleet, workers=scenario.reasoner.workers)

    def evaluate(load: float, value: float) -> bool:
        point = {load_key: load, knob.key: value}
        probe_dir = (None if out_dir is None
                     else Path(out_dir) / "probes" / f"probe{len(res.probes):03d}")
        [summary] = run_points(scenario, [point], replications=replications,
                               root_seed=root_seed, executor=executor, out_dir=probe_dir,
                               progress=progress, plots=False)
        failing = _failing(slos, summary)
        res.probes.append(Probe(load, value, summary, not failing, failing))
        return not failing

    start = knob.snap(scenario_value(scenario, knob.key))
    known_fail: float | None = None  # fails at the previous (lower) load, so fails here too
    for load in sorted(loads):
        ok: float | None = None  # smallest passing value
        bad = known_fail  # largest failing value
        x = start
        while True:  # bracket
            if evaluate(load, x):
                ok = x
                if bad is not None or x <= knob.lo:
                    break
                x = knob.snap(min(x / 2, x - knob.step))
            else:
                bad = x
                if ok is not None or x >= knob.hi:
                    break
                x = knob.snap(max(2 * x, x + knob.step))
        if ok is None:
            res.required[load] = None
            continue
        while bad is not None and ok - bad > knob.step * (1 + 1e-9):  # bisect
            mid = int((ok + bad) // 2) if knob.integer else knob.snap((ok + bad) / 2)
            if evaluate(load, mid):
                ok = mid
            else:
                bad = mid
        res.required[load] = ok
        start, known_fail = ok, bad
    return res


def plot_capacity(result: CapacityResult, path: Path) -> Path:
    """Required knob value against load (with every probe marked pass/fail); PNG at ``path``."""
    fig = new_figure(6, 4)
    ax = fig.subplots()
    ok = [p for p in result.probes if p.holds]
    bad = [p for p in result.probes if not p.holds]
    ax.scatter([p.load for p in ok], [p.value for p in ok], marker="o", facecolors="none",
               edgecolors="tab:green", label="probe: SLOs hold")
    ax.scatter([p.load for p in bad], [p.value for p in bad], marker="x", color="tab:red",
               label="probe: an SLO fails")
    pts = [(k, v) for k, v in result.required.items() if v is not None]
    if pts:
        ax.plot([k for k, _ in pts], [v for _, v in pts], "-", color="tab:blue", lw=2,
                label="required")
    ax.set_xlabel(result.load_key)
    ax.set_ylabel(result.knob.key)
    ax.set_title("; ".join(str(s) for s in result.slos), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
