"""How the answers run scenarios: the sweep engine of DECISIONS D6, plus one run folder per case.

``run_points``, ``make_executor`` and ``point_seed`` are :mod:`sim.sweep`'s when
it exists; until then a private fallback with the same signatures runs the
points (serially or on the executor given) with seeds from a local
``point_seed``.  :func:`run_case` runs one scenario as a normal run folder
(exactly what ``rtalab sim run SCENARIO --seed S --replications R`` writes), its
replications spread over an executor; storms use it because they read each
case's time series back from its folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from sim.config import to_plain
from sim.runner import RunOutput, run_once
from sim.scenario import Scenario, from_dict
from sim.summary import summarize

try:  # the sweep engine (issue 8), when merged
    from sim.sweep import make_executor, point_seed, run_points  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised until the sweeps branch lands
    make_executor = point_seed = run_points = None  # type: ignore[assignment]


class SerialExecutor(Executor):
    """An executor that runs each task at submission, in this process (deterministic, no pool)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:
            f.set_exception(e)
        return f


def _canonical(overrides: Mapping[str, Any]) -> str:
    return json.dumps({str(k): overrides[k] for k in sorted(overrides)}, sort_keys=True,
                      default=str, separators=(",", ":"))


def _point_seed(root_seed: int, overrides: Mapping[str, Any], replication: int) -> int:
    """Seed of replication ``replication`` of a point: a hash of (root seed, point, replication)."""
    text = f"{int(root_seed)}|{_canonical(overrides)}|{int(replication)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


@contextlib.contextmanager
def _make_executor(processes: int | None = None, dask: str | None = None) -> Iterator[Executor]:
    """Local processes (``processes`` > 1), this process (1), or a Dask cluster (``dask``)."""
    if dask:
        from distributed import Client, LocalCluster

        if dask.startswith("local"):
            n = int(dask.split(":", 1)[1]) if ":" in dask else None
            with LocalCluster(n_workers=n, threads_per_worker=1, processes=True) as cl, \
                    Client(cl) as client:
                yield client.get_executor()
        else:
            with Client(dask) as client:
                yield client.get_executor()
        return
    if processes == 1:
        yield SerialExecutor()
        return
    with ProcessPoolExecutor(max_workers=processes) as pool:
        yield pool


def _replicate(scenario: dict[str, Any], seed: int, replication: int) -> RunOutput:
    """One replication of a scenario given as plain data (config objects do not pickle)."""
    return run_once(from_dict(scenario), seed, replication)


def _run_points(scenario: Scenario, points: Sequence[Mapping[str, Any]], *, replications: int,
                root_seed: int, executor: Executor | None = None, out_dir: Path | None = None,
                progress: bool = True) -> list[dict]:
    """Fallback of ``sim.sweep.run_points``: one summary per point (``out_dir`` is ignored)."""
    ex = executor or SerialExecutor()
    futures = []
    for pt in points:
        sc = scenario.with_overrides(dict(pt))
        futures.append([ex.submit(_replicate, to_plain(sc), _point_seed(root_seed, pt, i), i)
                        for i in range(replications)])
    return [summarize([f.result() for f in fs], scenario.run.warmup_s) for fs in futures]


if run_points is None:
    make_executor, point_seed, run_points = _make_executor, _point_seed, _run_points


def _complete(run_dir: Path) -> bool:
    from sim import results

    return (run_dir / "summary.json").exists() and \
        results.read_meta(run_dir).get("status") == "complete"


def run_cases(cases: Mapping[str, tuple[Scenario, Path]], *, seed: int, replications: int,
              executor: Executor | None = None, plots: bool = False) -> dict[str, Path]:
    """Run each case ``name -> (scenario, run_dir)`` as a normal run folder; return the folders.

    Replication ``i`` of a case is ``run_once(scenario, seed, i)``, as in ``rtalab sim run``:
    a folder is the one that command writes for the same scenario (``--set`` overrides),
    seed and replications.  Every replication of every case is submitted to ``executor``
    before any folder is written; a folder already marked ``complete`` is not recomputed.
    """
    from sim import results

    ex = executor or SerialExecutor()
    pending = {}
    for name, (scenario, run_dir) in cases.items():
        run_dir = Path(run_dir)
        if _complete(run_dir):
            continue
        sc = scenario.with_overrides({"run.seed": seed, "run.replications": replications})
        futures = [ex.submit(_replicate, to_plain(sc), seed, i) for i in range(replications)]
        pending[name] = (sc, run_dir, futures)
    for _name, (sc, run_dir, futures) in pending.items():
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = results.collect_meta(kind="sim", scenario=sc, seed=seed,
                                    replications=replications,
                                    argv=["rtalab", "sim", "run", str(run_dir / "scenario.toml"),
                                          "--seed", str(seed), "--replications",
                                          str(replications)])
        results.start_run(run_dir, sc, meta)
        with results.guard(run_dir, meta):
            outputs = [f.result() for f in futures]
            summary = summarize(outputs, sc.run.warmup_s)
            results.write_run(run_dir, sc, outputs, summary, meta, plots=plots)
    return {name: Path(run_dir) for name, (_, run_dir) in cases.items()}
