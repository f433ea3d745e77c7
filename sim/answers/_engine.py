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

from sim.runner import RunOutput, run_once
from sim.scenario import Scenario
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


def _replicate(scenario: Scenario, seed: int, replication: int) -> RunOutput:
    return run_once(scenario, seed, replication)


def _run_points(scenario: Scenario, points: Sequence[Mapping[str, Any]], *, replications: int,
                root_seed: int, executor: Executor | None = None, out_dir: Path | None = None,
                progress: bool = True) -> list[dict]:
    """Fallback of ``sim.sweep.run_points``: one summary per point (``out_dir`` is ignored)."""
    ex = executor or SerialExecutor()
    futures = []
    for pt in points:
        sc = scenario.with_overrides(dict(pt))
        futures.append([ex.submit(_replicate, sc, _point_seed(root_seed, pt, i), i)
                        for i in range(replications)])
    return [summarize([f.result() for f in fs], scenario.run.warmup_s) for fs in futures]


if run_points is None:
    make_executor, point_seed, run_points = _make_executor, _point_seed, _run_points


def run_case(scenario: Scenario, run_dir: Path, *, seed: int, replications: int,
             executor: Executor | None = None, argv: Sequence[str] = (),
             plots: bool = False) -> dict[str, Any]:
    """Run ``scenario`` as a normal run folder at ``run_dir`` and return its summary.

    Replication ``i`` is ``run_once(scenario, seed, i)``, as in ``rtalab sim run``: the
    folder is the one that command writes for the same scenario, seed and replications.
    A folder whose ``meta.json`` says ``complete`` is not recomputed (its summary is read).
    """
    from sim import results

    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if summary_path.exists() and results.read_meta(run_dir).get("status") == "complete":
        return json.loads(summary_path.read_text(encoding="utf-8"))
    scenario = scenario.with_overrides({"run.seed": seed, "run.replications": replications})
    run_dir.mkdir(parents=True, exist_ok=True)
    meta = results.collect_meta(kind="sim", scenario=scenario, seed=seed,
                                replications=replications, argv=list(argv))
    results.start_run(run_dir, scenario, meta)
    with results.guard(run_dir, meta):
        ex = executor or SerialExecutor()
        futures = [ex.submit(_replicate, scenario, seed, i) for i in range(replications)]
        outputs = [f.result() for f in futures]
        summary = summarize(outputs, scenario.run.warmup_s)
        results.write_run(run_dir, scenario, outputs, summary, meta, plots=plots)
    return summary
