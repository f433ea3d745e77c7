"""Run replications one at a time, keeping only their metrics: a run's memory does not grow
with its number of replications.

Each replication is simulated (:func:`rtalab.sim.runner.run_once`), its metrics are computed at
once (:func:`rtalab.sim.shared.summary.replication_metrics`), its records are appended to the run
folder's Parquet tables (:class:`rtalab.sim.shared.results.RecordWriter`) and its DataFrames are
dropped; the summary is built from the per-replication metric values
(:func:`rtalab.sim.shared.summary.summarize_metrics`).  The plots keep only what they draw: the
plotted columns of the turns after the warm-up (~33 bytes a turn) and the per-second
time series — reading them back from Parquet costs more memory than holding them.
Used by ``rtalab sim run`` and by every point of a sweep.
"""

from __future__ import annotations

import concurrent.futures as cf
import gc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rtalab.sim.config import to_plain
from rtalab.sim.scenario import Scenario, from_dict
from rtalab.sim.shared import interrupt
from rtalab.sim.shared.results import RecordWriter
from rtalab.sim.shared.schema import PERCENTILES

Progress = Callable[[float], None]

# columns the plots read back from a run folder (see rtalab.sim.shared.plots)
PLOT_TURN_COLUMNS = ("replication", "start_s", "outcome", "ttfc_s", "completion_s")


def replication_plan(seed: int, replications: int) -> list[tuple[int, int]]:
    """(seed, replication) of each replication of a plain run: one root seed, replication
    ``i`` drawing from ``SeedSequence(seed).spawn(i + 1)[i]`` (see :mod:`rtalab.sim.model.rand`)."""
    if replications < 1:
        raise ValueError(f"replications must be >= 1, got {replications}")
    return [(seed, i) for i in range(replications)]


def run_streaming(scenario: Scenario, plan: Sequence[tuple[int, int]],
                  run_dir: Path | None = None, *, plots: bool = True,
                  progress: Progress | None = None,
                  executor: cf.Executor | None = None,
                  scenarios: Sequence[Scenario] | None = None,
                  split: str = "replications") -> dict[str, Any]:
    """Simulate every (seed, replication) of ``plan`` in order and return ``summary.json``.

    ``scenarios``: one per plan entry, replication ``k`` running ``scenarios[k]`` (parameters
    drawn per replication, :mod:`rtalab.sim.calibrate.uncertainty`); ``scenario`` then names the run
    (its warm-up and plots).

    With ``executor`` (``rtalab.sim.sweep.make_executor``: processes or a Dask cluster) the
    replications run there as independent parts, at most ``2 x`` its workers ahead of
    the one being written; their outputs are taken in plan order, so the summary and the
    folder are the same bit for bit whichever executor ran them.  With ``[run] records``
    other than "all", ``summary["pooled"]`` holds the percentiles of all replications'
    turns together, from their merged sketches (an exact merge: the same whatever the split).

    With ``run_dir``, each replication's records are appended to ``<table>.parquet``
    there and, with ``plots``, the PNGs are drawn from the written tables; the caller
    owns ``meta.json`` and ``summary.json`` (see :func:`rtalab.sim.shared.results.write_summary`).
    Without ``run_dir`` nothing is written (metrics only, e.g. for an optimiser).

    ``split = "replicas"``: a fleet whose replicas are independent (:mod:`rtalab.sim.fleetsplit`:
    random routing, one request per call, ...) runs each replication as one one-pool part per
    replica (here or on ``executor``), merged in part order; any other fleet raises
    :class:`rtalab.sim.fleetsplit.SplitError` (one line: why) before anything runs.
    """
    # lazy: +593 ms (pandas, pyarrow) off importing rtalab.sim.stream
    from rtalab.sim.shared.summary import summarize_metrics
    _check_plan(scenario, plan, scenarios, split)
    warmup_s = scenario.run.warmup_s
    writer = RecordWriter(run_dir) if run_dir is not None else None
    folded = _Folded(warmup_s, plots and run_dir is not None)
    # Freeze what the process held before the run (a notebook's or pytest's heap): the
    # per-replication collection below then scans only this run's objects, ~ms instead of
    # a full-heap pass that costs more than a small replication in a large process.
    gc.freeze()
    try:
        each = list(scenarios) if scenarios is not None else [scenario] * len(plan)
        outputs = (_replica_outputs(scenario, plan, progress, executor) if split == "replicas"
                   else _outputs(each, plan, progress, executor))
        for k, out in enumerate(outputs):
            interrupt.check()  # a Ctrl-C that other code swallowed (rtalab.sim.shared.interrupt)
            if progress is not None and executor is not None:
                progress((k + 1) / len(plan))
            folded.add(out)
            if writer is not None:
                writer.append(out)
            folded.add_plot(out)
            del out
            gc.collect()
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        gc.unfreeze()
    if folded.plots and run_dir is not None:  # (plots implies a run_dir)
        _plot(Path(run_dir), scenario, folded.plot_turns, folded.plot_ts)
    summary = summarize_metrics(folded.per_rep, warmup_s, [s for s, _ in plan],
                                [r for _, r in plan])
    if folded.pooled:
        summary["pooled"] = folded.pooled_percentiles()
    return summary


def _check_plan(scenario: Scenario, plan: Sequence[tuple[int, int]],
                scenarios: Sequence[Scenario] | None, split: str) -> None:
    """ValueError on a plan :func:`run_streaming` cannot run; SplitError on a fleet that does
    not split by replica (``split = "replicas"``)."""
    if not plan:
        raise ValueError("a run needs at least one replication")
    if scenarios is not None and len(scenarios) != len(plan):
        raise ValueError(f"{len(scenarios)} scenarios for {len(plan)} replications")
    if split not in ("replications", "replicas"):
        raise ValueError(f"split must be 'replications' or 'replicas', got {split!r}")
    if split == "replicas":
        # lazy: +590 ms (pandas, pyarrow) off importing rtalab.sim.stream
        from rtalab.sim.fleetsplit import check_split

        if scenarios is not None:
            raise ValueError("split = 'replicas' takes one scenario for every replication")
        check_split(scenario)
class _Folded:
    """What a streamed run keeps of its replications: each one's metrics, the merged
    sketches (``[run] records`` other than "all") and, with ``plots``, the plotted columns."""

    def __init__(self, warmup_s: float, plots: bool) -> None:
        self.warmup_s = warmup_s
        self.plots = plots
        self.per_rep: list[dict[str, float | None]] = []
        self.pooled: dict[str, Any] = {}
        self.plot_turns: list[Any] = []
        self.plot_ts: list[Any] = []

    def add(self, out: Any) -> None:
        """Fold one replication's metrics and sketches in."""
        # lazy: +593 ms (pandas, pyarrow) off importing rtalab.sim.stream
        from rtalab.sim.shared.summary import metrics_of

        self.per_rep.append(metrics_of(out, self.warmup_s))
        for prefix, sk in (getattr(out, "sketches", None) or {}).items():
            if prefix in self.pooled:
                self.pooled[prefix].merge(sk)
            else:
                self.pooled[prefix] = sk

    def add_plot(self, out: Any) -> None:
        """Keep what the plots draw of one replication (with ``plots``)."""
        if self.plots:
            t, ts = plot_columns(out, self.warmup_s)
            self.plot_turns.append(t)
            self.plot_ts.append(ts)

    def pooled_percentiles(self) -> dict[str, Any]:
        """``summary["pooled"]``: the percentiles of all replications' turns together."""

        return {f"{prefix}p{q}": sk.percentile(q)
                for prefix, sk in self.pooled.items() for q in PERCENTILES
                if not (prefix.startswith("queue") and q not in (50, 99))}


def run_part(plain: dict[str, Any], seed: int, replication: int) -> Any:
    """Worker side: one replication of the scenario given as plain data (its RunOutput)."""
    # lazy: +722 ms (pandas, pyarrow, simpy) off importing rtalab.sim.stream
    from rtalab.sim.runner import run_once

    return run_once(from_dict(plain), seed, replication)


def _outputs(scenarios: Sequence[Scenario], plan: Sequence[tuple[int, int]],
             progress: Progress | None, executor: cf.Executor | None) -> Iterator[Any]:
    """Each replication's RunOutput, in plan order (here, or as parts on ``executor``);
    replication ``k`` runs ``scenarios[k]``."""
    # lazy: +664 ms (pandas, pyarrow, simpy) off importing rtalab.sim.stream
    from rtalab.sim.runner import run_once

    if executor is None:
        for k, (seed, rep) in enumerate(plan):
            sub = None if progress is None else _scaled(progress, k, len(plan))
            yield run_once(scenarios[k], seed, rep, sub)
        return

    # picklable (a Scenario holds mapping proxies); converted once when they are all one
    plains = ([to_plain(scenarios[0])] * len(plan) if all(s is scenarios[0] for s in scenarios)
              else [to_plain(s) for s in scenarios])
    yield from _submitted(plains, plan, executor)


def _replica_outputs(scenario: Scenario, plan: Sequence[tuple[int, int]],
                     progress: Progress | None, executor: cf.Executor | None) -> Iterator[Any]:
    """Each replication of a splittable fleet, merged from its parts (one per replica, run
    here or as independent parts on ``executor``), in plan order."""
    # lazy: +601 ms (pandas, pyarrow) off importing rtalab.sim.stream
    from rtalab.sim.fleetsplit import merge_parts, part_plan, part_scenario

    part = part_scenario(scenario)
    plans = [part_plan(scenario, seed, rep) for seed, rep in plan]
    parts = [(k, p) for k in range(len(plan)) for p in plans[k]]
    n = scenario.fleet.replicas

    def merged(k: int, outs: list[Any]) -> Any:
        return merge_parts(scenario, outs, *plan[k])

    if executor is None:
        # lazy: +664 ms (pandas, pyarrow, simpy) off importing rtalab.sim.stream
        from rtalab.sim.runner import run_once

        for k in range(len(plan)):
            outs = []
            for i, (seed, rep) in enumerate(plans[k]):
                sub = None if progress is None else _scaled(progress, k * n + i, len(parts))
                outs.append(run_once(part, seed, rep, sub))
            yield merged(k, outs)
        return

    futures = _submitted([to_plain(part)] * len(parts), [p for _, p in parts], executor)
    for k in range(len(plan)):
        yield merged(k, [next(futures) for _ in range(n)])


def _submitted(plains: Sequence[dict[str, Any]], plan: Sequence[tuple[int, int]],
               executor: cf.Executor) -> Iterator[Any]:
    """``run_part(plains[k], *plan[k])`` of every plan entry on ``executor``, at most ``2 x``
    its workers ahead, results in plan order."""
    ahead = 2 * max(1, getattr(executor, "_max_workers", 2))
    futures: deque[cf.Future[Any]] = deque()
    todo = iter(enumerate(plan))
    try:
        for k, (seed, rep) in todo:
            futures.append(executor.submit(run_part, plains[k], seed, rep))
            if len(futures) >= ahead:
                break
        while futures:
            out = futures.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                k, (seed, rep) = nxt
                futures.append(executor.submit(run_part, plains[k], seed, rep))
            yield out
    finally:
        for f in futures:
            f.cancel()


def plot_columns(out: Any, warmup_s: float) -> tuple[Any, Any]:
    """What the plots need of one replication: its turns after the warm-up (the plotted
    columns only, ~33 bytes a turn) and its time series (one row a second)."""
    turns = out.turns
    keep = turns["start_s"].to_numpy() >= warmup_s
    cols = [c for c in PLOT_TURN_COLUMNS if c != "replication"]
    small = turns.loc[keep, cols].reset_index(drop=True)
    small.insert(0, "replication", out.replication)
    return small, out.timeseries


def _plot(run_dir: Path, scenario: Scenario, turns: list[Any], timeseries: list[Any]) -> None:
    # lazy: +1.31 s (matplotlib, pandas, pyarrow) off importing rtalab.sim.stream
    import pandas as pd

    from rtalab.sim.shared.plots import plot_run

    plot_run(run_dir, scenario, pd.concat(turns, ignore_index=True),
             pd.concat(timeseries, ignore_index=True))


def seeds_meta(plan: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """``meta.json``'s ``replication_seeds``: replication ``i`` of seed ``s`` draws from
    ``SeedSequence(entropy=s, spawn_key=(i,))``."""
    return [{"replication": rep, "seed": seed, "spawn_key": [rep]} for seed, rep in plan]


def _scaled(progress: Progress, i: int, n: int) -> Progress:
    return lambda f: progress((i + f) / n)
