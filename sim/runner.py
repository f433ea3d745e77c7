"""Run a scenario: one replication (:func:`run_once`), several (:func:`run_replications`),
or one replication straight to its summary (:func:`simulate`, cheap and picklable for sweeps).

Replication ``i`` of seed ``s`` draws from ``numpy.random.SeedSequence(s).spawn(R)[i]``
(see :mod:`rtalab.sim.model.rand`), so replications are independent and every run is
reproducible bit for bit.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rtalab.sim.model.recorder import Table
from rtalab.sim.model.witness import per_turn
from rtalab.sim.model.world import World, WorldResult
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import summarize

Progress = Callable[[float], None]


@dataclass(frozen=True, eq=False)
class RunOutput(S.RunRecords):
    """The records of one replication (:class:`rtalab.sim.shared.schema.RunRecords`) and the run's
    warm-up, workers and wall-clock time; picklable, no SimPy.

    ``wall_s`` (the run's wall-clock time) is the only field that varies between
    runs of the same scenario and seed; compare runs table by table.
    """

    warmup_s: float = 0.0
    workers: int = 0
    wall_s: float = 0.0
    #: ``[run] records`` other than "all": the metrics, computed as the rows came (the tables
    #: then hold the sampled calls' rows only, or none); None: compute them from the tables
    metrics: dict[str, float | None] | None = None
    #: with ``metrics``: the latency sketches they came from (``rtalab.sim.shared.sketch.Sketch``,
    #: mergeable across replications: ``pooled`` percentiles of a run)
    sketches: dict[str, Any] | None = None


def run_once(scenario: Scenario, seed: int, replication: int = 0,
             progress: Progress | None = None) -> RunOutput:
    """Simulate replication ``replication`` of ``scenario`` with ``seed``."""
    t0 = time.perf_counter()
    raw = World(scenario, seed, replication, progress).run()
    was_enabled = gc.isenabled()
    gc.disable()  # see World.run: no cycles here either, and millions of row tuples to free
    try:
        out = _assemble(raw, scenario, seed, replication)
    finally:
        if was_enabled:
            gc.enable()
    return _with_wall(out, time.perf_counter() - t0)


def run_replications(scenario: Scenario, seed: int | None = None,
                     replications: int | None = None,
                     progress: Progress | None = None) -> list[RunOutput]:
    """Run ``replications`` replications (default ``run.replications``) seeded ``seed``."""
    seed = scenario.run.seed if seed is None else seed
    n = scenario.run.replications if replications is None else replications
    if n < 1:
        raise ValueError(f"replications must be >= 1, got {n}")
    outs = []
    for i in range(n):
        sub = None if progress is None else _scaled(progress, i, n)
        outs.append(run_once(scenario, seed, i, sub))
    return outs


def simulate(scenario: Scenario, seed: int) -> dict[str, Any]:
    """One replication's summary (``summarize([run_once(...)], run.warmup_s)``); for sweeps."""
    return summarize([run_once(scenario, seed)], scenario.run.warmup_s)


# --------------------------------------------------------------------------- assembly


def _scaled(progress: Progress, i: int, n: int) -> Progress:
    return lambda f: progress((i + f) / n)


def _with_wall(out: RunOutput, wall_s: float) -> RunOutput:
    object.__setattr__(out, "wall_s", wall_s)
    return out


def _assemble(raw: WorldResult, scenario: Scenario, seed: int, replication: int) -> RunOutput:
    rep = replication
    attempts = raw.attempts.frame(rep, [S.INTERACTION_ID, S.PHASE, S.ATTEMPT])
    side_effects = raw.side_effects.frame(rep, [S.EXECUTED_S])
    turns = raw.turns.frame(rep, [S.INTERACTION_ID])
    witness = per_turn(side_effects).droplevel(0)
    for col in (S.SIDE_EFFECT_EXECUTIONS, S.SIDE_EFFECT_REQUEST_GUIDS):
        turns[col] = (turns[S.INTERACTION_ID].map(witness[col]).fillna(0).astype(np.int64)
                      if len(witness) else np.zeros(len(turns), dtype=np.int64))
    calls = raw.calls.frame(rep, [S.CALL_ID])
    sessions = pd.Series(dict(raw.sessions_opened.items()) if len(calls) else {}, dtype=np.int64)
    calls[S.SESSIONS_OPENED] = (calls[S.CALL_ID].map(sessions).fillna(0).astype(np.int64)
                                if len(sessions) else np.zeros(len(calls), dtype=np.int64))
    executions = raw.executions.frame(rep, [S.ARRIVAL_S])
    metrics = sketches = None
    if raw.tally is None:
        timeseries = _timeseries(raw, rep, attempts, turns, executions)
    else:
        timeseries = _timeseries_of(raw, rep, raw.tally.rates)
        metrics = raw.tally.metrics(raw.sessions_opened, timeseries, raw.counters)
        sketches = raw.tally.sketches()
    return RunOutput(attempts=attempts, turns=turns, calls=calls, executions=executions,
                     side_effects=side_effects, timeseries=timeseries, counters=raw.counters,
                     seed=seed, replication=rep, warmup_s=scenario.run.warmup_s,
                     duration_s=scenario.run.duration_s, workers=scenario.reasoner.workers,
                     metrics=metrics, sketches=sketches)


def _per_second(times: np.ndarray, n_bins: int) -> np.ndarray:
    """Counts of ``times`` per 1-s bin [k, k+1), k < n_bins (NaN and out-of-range ignored)."""
    t = times[np.isfinite(times)]
    k = np.floor(t).astype(np.int64)
    k = k[(k >= 0) & (k < n_bins)]
    return np.bincount(k, minlength=n_bins).astype(np.int64)


def _timeseries(raw: WorldResult, rep: int, attempts: pd.DataFrame, turns: pd.DataFrame,
                executions: pd.DataFrame) -> pd.DataFrame:
    n = len(raw.gauges)
    send = attempts[S.SEND_S].to_numpy()
    end = turns[S.END_S].to_numpy()
    outcome = turns[S.OUTCOME].to_numpy()
    ex_start = executions[S.SERVICE_START_S].to_numpy()
    rates = {
        S.OFFERED_TURNS_PER_S: _per_second(turns[S.START_S].to_numpy(), n),
        S.ATTEMPTS_PER_S: _per_second(send, n),
        S.RETRIES_PER_S: _per_second(send[attempts[S.ATTEMPT].to_numpy() > 1], n),
        S.COMPLETED_TURNS_PER_S: _per_second(end[outcome == "completed"], n),
        S.FAILED_TURNS_PER_S: _per_second(end[outcome == "failed"], n),
        S.SERVER_REQUESTS_PER_S: _per_second(executions[S.ARRIVAL_S].to_numpy(), n),
        S.SERVER_EXECUTIONS_PER_S: _per_second(ex_start, n),
    }
    return _timeseries_of(raw, rep, rates)


def _timeseries_of(raw: WorldResult, rep: int, rates: dict[str, np.ndarray]) -> pd.DataFrame:
    """The time series from its per-second counts ``rates`` and the sampled gauges."""
    n = len(raw.gauges)
    g = np.asarray(raw.gauges, dtype=np.int64).reshape(n, len(S.SAMPLED_GAUGES))
    gauges = {name: g[:, j] for j, name in enumerate(S.SAMPLED_GAUGES)}
    data = {
        S.REPLICATION: np.full(n, rep, dtype=np.int64),
        S.T_S: np.arange(n, dtype=np.float64),
        **{name: rates[name][:n] for name in S.TIMESERIES_RATES},
        **gauges,
        S.DEDUP_BYTES: gauges[S.DEDUP_ENTRIES] * raw.dedup_entry_bytes,
    }
    return pd.DataFrame(data, columns=list(S.TIMESERIES_COLUMNS))


def empty_output(scenario: Scenario, seed: int = 0, replication: int = 0) -> RunOutput:
    """A RunOutput with no rows (schema reference for tests and load-run writers)."""
    frames = {name: Table(spec).frame(replication) for name, spec in S.TABLES.items()}
    ts = pd.DataFrame({c: np.empty(0) for c in S.TIMESERIES_COLUMNS})
    return RunOutput(timeseries=ts, counters={}, seed=seed, replication=replication,
                     warmup_s=scenario.run.warmup_s, duration_s=scenario.run.duration_s,
                     workers=scenario.reasoner.workers, **frames)  # type: ignore[arg-type]  # one DataFrame per S.TABLES
