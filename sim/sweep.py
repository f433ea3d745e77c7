"""Sweeps: run many scenario variants ("points") on any ``concurrent.futures.Executor``.

The engine is pure Python data in, pure data out, so the same code path runs in
one process, on local worker processes or on a Dask cluster, and the tables come
out identical bit for bit:

* :func:`expand_grid` turns factorial axes (and zipped axes, which vary together)
  into a list of points, each a ``{dotted.key: value}`` override mapping;
* :func:`point_seed` derives the seed of replication ``r`` of a point from the root
  seed and the point's canonical override text only — never from its position in
  the sweep, the executor or the other points;
* :func:`run_points` validates every point up front (:class:`SweepError`, nothing
  runs), skips points already complete in ``out_dir``, runs the rest (each a normal
  run folder ``out_dir/points/pNNNN``, written by the worker, marked ``complete``
  by the coordinator) and returns one ``summary.json`` dict per point, in order;
* :func:`tidy_table` makes the long table (one row per point × metric, grid values
  as columns) written as ``sweep.csv`` / ``sweep.parquet`` by :func:`write_tables`;
* :func:`make_executor` opens a local process pool, a Dask ``LocalCluster`` or a
  client of an existing Dask scheduler.

Nothing that crosses a process boundary holds SimPy objects: a task is the resolved
scenario as plain data, the overrides, the (seed, replication) plan and a folder path.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import copy
import datetime as dt
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import shutil
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rtalab.sim.config import ConfigError, to_plain
from rtalab.sim.scenario import Scenario, _parse_value, from_dict
from rtalab.sim.shared.progress import progress_bar, should_show
from rtalab.sim.shared.results import (
    RunLifecycle,
    collect_meta,
    write_json,
    write_scenario,
    write_summary,
)
from rtalab.sim.stream import run_streaming, seeds_meta

if TYPE_CHECKING:
    import pandas as pd

SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
SWEEP_PARQUET = "sweep.parquet"
POINTS_DIR = "points"
TABLE_COLUMNS = ("point", "metric", "mean", "ci_low", "ci_high", "n", "unit")
_SEED_DOMAIN = "rtalab-sweep-v1"
_PRELOAD = ["rtalab.sim.sweep", "rtalab.sim.stream", "rtalab.sim.runner",
            "rtalab.sim.shared.summary", "rtalab.sim.shared.results", "rtalab.sim.shared.plots"]

Point = Mapping[str, Any]
ProgressFn = Callable[[float], None]


class SweepError(ValueError):
    """A sweep that cannot run as asked (bad grid, foreign folder, dead cluster); one line."""


class PointFailed(RuntimeError):
    """A point raised while running (the other points still ran; rerun to retry it)."""


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """``key.path=v1,v2,...`` → (key, values); values are TOML (``4``, ``0.5``, ``true``,
    ``"x"``, inline tables ``{dist = "exp", mean = 1}``) or bare words (``none``)."""
    key, sep, rhs = text.partition("=")
    key = key.strip()
    if not sep or not key or not rhs.strip():
        raise SweepError(f"grid axis must look like key.path=v1,v2,... got {text!r}")
    try:
        values = tomllib.loads(f"v = [{rhs}]")["v"]
    except tomllib.TOMLDecodeError:
        values = [_parse_value(v.strip()) for v in rhs.split(",")]
    if any(v == "" for v in values):
        raise SweepError(f"grid axis {key!r} has an empty value in {rhs!r}")
    return key, list(values)


def parse_axes(texts: Sequence[str]) -> dict[str, list[Any]]:
    """Several ``--grid``/``--zip`` arguments → {key: values} (a key given twice is an error)."""
    axes: dict[str, list[Any]] = {}
    for text in texts:
        key, values = parse_axis(text)
        if key in axes:
            raise SweepError(f"grid key {key!r} given twice")
        axes[key] = values
    return axes


# --------------------------------------------------------------------------- grid


def expand_grid(grid: Mapping[str, Sequence[Any]],
                zipped: Mapping[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
    """Every combination of the ``grid`` axes (the last axis varying fastest), each crossed
    with the rows of ``zipped`` (axes of equal length that vary together, innermost).

    ``expand_grid({"a": [1, 2]}, {"b": [3, 4], "c": [5, 6]})`` gives
    ``[{a:1,b:3,c:5}, {a:1,b:4,c:6}, {a:2,b:3,c:5}, {a:2,b:4,c:6}]``.  No axes: one
    point with no overrides (the scenario itself).
    """
    zipped = dict(zipped or {})
    for key, values in (*grid.items(), *zipped.items()):
        if len(values) == 0:
            raise SweepError(f"grid axis {key!r} has no values")
    dup = set(grid) & set(zipped)
    if dup:
        raise SweepError(f"key {sorted(dup)[0]!r} is both a grid and a zip axis")
    lengths = {k: len(v) for k, v in zipped.items()}
    if len(set(lengths.values())) > 1:
        text = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise SweepError(f"zipped axes must have the same number of values ({text})")
    zrows: list[dict[str, Any]] = (
        [dict(zip(zipped, row, strict=True)) for row in zip(*zipped.values(), strict=True)]
        if zipped else [{}])
    points: list[dict[str, Any]] = []
    for combo in itertools.product(*grid.values()):
        base = dict(zip(grid, combo, strict=True))
        points.extend({**base, **z} for z in zrows)
    return points


def _normal(value: Any) -> Any:
    """Canonical plain form of an override value: integral floats as ints, tuples as lists."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        return int(value) if value.is_integer() else value
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return str(value)


def canonical(overrides: Point) -> str:
    """The canonical text of a point: sorted keys, compact JSON, ``4.0`` written ``4``."""
    return json.dumps({str(k): _normal(v) for k, v in overrides.items()}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)


def point_seed(root_seed: int, overrides: Point, replication: int) -> int:
    """The seed of replication ``replication`` of the point ``overrides`` (a 63-bit int).

    SHA-256 of (root seed, :func:`canonical` overrides, replication): stable whatever
    executes it and whatever other points the sweep holds.
    """
    text = f"{_SEED_DOMAIN}|{int(root_seed)}|{canonical(overrides)}|{int(replication)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def point_plan(root_seed: int, overrides: Point, replications: int) -> list[tuple[int, int]]:
    """(seed, replication) of each replication of a point."""
    if replications < 1:
        raise SweepError(f"replications must be >= 1, got {replications}")
    return [(point_seed(root_seed, overrides, r), r) for r in range(replications)]


def label(overrides: Point) -> str:
    """``key=value key=value`` (canonical values), or ``(scenario as is)``."""
    if not overrides:
        return "(scenario as is)"
    return " ".join(f"{k}={json.dumps(_normal(v), sort_keys=True)}" for k, v in overrides.items())


def resolve_points(scenario: Scenario, points: Sequence[Point],
                   replications: int) -> list[Scenario]:
    """Each point's scenario (with ``run.replications``), validated before anything runs.

    Raises :class:`SweepError` naming the first bad point, key and problem.
    """
    if replications < 1:
        raise SweepError(f"replications must be >= 1, got {replications}")
    resolved = []
    for i, ov in enumerate(points):
        try:
            resolved.append(scenario.with_overrides({**ov, "run.replications": replications}))
        except ConfigError as e:
            raise SweepError(f"grid point {i} ({label(ov)}): {e}") from None
    return resolved


# --------------------------------------------------------------------------- one point


@dataclass(frozen=True)
class PointTask:
    """What a worker needs to run one point (plain, picklable data)."""

    index: int
    scenario: dict[str, Any]  # resolved scenario as plain data (to_plain)
    plan: tuple[tuple[int, int], ...]
    point_dir: str | None
    plots: bool = True


def run_point(task: PointTask) -> dict[str, Any]:
    """Worker side: simulate one point; with a folder, stream its records and plots there.

    Returns the point's ``summary.json`` content.  ``meta.json`` and the summary files
    are written by the coordinator once this returns, so a point whose worker died or
    was interrupted is never ``complete``.
    """
    scenario = from_dict(task.scenario)
    run_dir = None
    if task.point_dir is not None:
        run_dir = Path(task.point_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
    return run_streaming(scenario, task.plan, run_dir, plots=task.plots)


def point_dir_name(index: int) -> str:
    """``pNNNN``: the folder of point ``index`` below ``<sweep>/points``."""
    return f"p{index:04d}"


def _point_identity(ov: Point, root_seed: int, replications: int,
                    scenario: Scenario) -> dict[str, Any]:
    return {"overrides": canonical(ov), "root_seed": int(root_seed),
            "replications": int(replications), "scenario": to_plain(scenario)}


def _finished(point_dir: Path, identity: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of a point folder that is complete and holds this very point, else None."""
    try:
        meta = json.loads((point_dir / "meta.json").read_text(encoding="utf-8"))
        if meta.get("status") != "complete":
            return None
        if meta.get("sweep_point", {}).get("identity_sha256") != _sha(identity):
            return None
        text = (point_dir / "summary.json").read_text(encoding="utf-8")
        return cast("dict[str, Any]", json.loads(text))
    except (OSError, ValueError):
        return None


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


# --------------------------------------------------------------------------- many points


def run_points(scenario: Scenario, points: Sequence[Point], *, replications: int,
               root_seed: int, executor: cf.Executor | None = None,
               out_dir: Path | None = None, progress: bool | ProgressFn = True,
               plots: bool = True, argv: Sequence[str] | None = None,
               common_seeds: bool = False) -> list[dict[str, Any]]:
    """Run every point (``replications`` replications each) and return their summaries in order.

    ``common_seeds``: every point runs replication r with the same seed (common random
    numbers, for paired comparisons), instead of seeds drawn per point.

    ``executor`` None runs in this process.  With ``out_dir`` each point is a run folder
    ``out_dir/points/pNNNN`` (kind ``sim``, ``meta.json`` naming the point), points already
    complete there are read back instead of rerun, ``sweep.json`` records the sweep
    (a folder holding a different sweep is refused) and ``sweep.csv`` / ``sweep.parquet``
    are written at the end.  ``progress`` True shows a bar with
    ETA on an interactive stderr; a callable receives the finished fraction instead.
    Ctrl-C stops the workers; finished points stay complete on disk.
    """
    points = [dict(p) for p in points]
    resolved = resolve_points(scenario, points, replications)
    plans = [point_plan(root_seed, {} if common_seeds else ov, replications) for ov in points]
    identities = [_point_identity(ov, root_seed, replications, sc)
                  for ov, sc in zip(points, resolved, strict=True)]
    if common_seeds:
        for ident in identities:
            ident["common_seeds"] = True
    summaries: list[dict[str, Any] | None] = [None] * len(points)
    dirs: list[Path | None] = [None] * len(points)
    if out_dir is not None:
        out_dir = Path(out_dir)
        _claim_sweep_dir(out_dir, scenario, points, root_seed, replications)
        for i in range(len(points)):
            d = dirs[i] = out_dir / POINTS_DIR / point_dir_name(i)
            summaries[i] = _finished(d, identities[i])
    todo = [i for i, s in enumerate(summaries) if s is None]
    desc = f"sweep {scenario.name}: {len(points)} points × {replications}"
    with _progress(progress, desc) as bar:
        done = len(points) - len(todo)
        bar(done / max(1, len(points)))

        def finished(i: int, summary: dict[str, Any]) -> None:
            nonlocal done
            if i in folders:
                _complete_point(folders[i], summary, plans[i])
            summaries[i] = summary
            done += 1
            bar(done / len(points))

        base_meta = None
        folders: dict[int, RunLifecycle] = {}
        for i in todo:
            if (pdir := dirs[i]) is not None:
                if base_meta is None:  # host, versions, git: once per sweep, not per point
                    base_meta = collect_meta(kind="sim", scenario=scenario, seed=int(root_seed),
                                             replications=replications, argv=argv)
                folders[i] = _start_point(pdir, resolved[i], points[i], identities[i],
                                          base_meta, i)
        tasks = {i: PointTask(i, to_plain(resolved[i]), tuple(plans[i]),
                              None if dirs[i] is None else str(dirs[i]), plots) for i in todo}
        _run_tasks(executor, tasks, finished, folders)
    result = [s for s in summaries if s is not None]
    if out_dir is not None:
        write_tables(out_dir, points, result)
    return result


def _progress(progress: bool | ProgressFn, desc: str
              ) -> contextlib.AbstractContextManager[ProgressFn]:
    """The sweep's progress: the caller's callable, or a bar (``progress`` True) with ETA on
    an interactive stderr."""
    if callable(progress):
        return contextlib.nullcontext(progress)

    return progress_bar(desc, enabled=bool(progress) and should_show(False), delay_s=0.5)


def _run_tasks(executor: cf.Executor | None, tasks: dict[int, PointTask],
               finished: Callable[[int, dict[str, Any]], None],
               folders: dict[int, RunLifecycle]) -> None:
    """Run the tasks here or on ``executor``; on an error or an interrupt, stop the workers
    and mark every point folder not complete ``interrupted``/``failed`` (then re-raise)."""
    try:
        if executor is None:
            _run_here(tasks, finished)
        else:
            _run_on(executor, tasks, finished)
    except BaseException as e:
        _stop(executor)
        for folder in folders.values():
            with contextlib.suppress(OSError, ValueError):
                folder.abandon(e)
        raise


def _run_here(tasks: dict[int, PointTask],
              finished: Callable[[int, dict[str, Any]], None]) -> None:
    """Run every task in this process, in order; failures are raised after the others ran."""
    failures = []
    for i, task in tasks.items():
        try:
            summary = run_point(task)
        except Exception as e:
            failures.append((i, e))
            continue
        finished(i, summary)
    _raise_failures(failures)


def _run_on(executor: cf.Executor, tasks: dict[int, PointTask],
            finished: Callable[[int, dict[str, Any]], None]) -> None:
    """Submit every task and hand each result to ``finished`` as it arrives."""
    futures = {executor.submit(run_point, t): i for i, t in tasks.items()}
    failures = []
    for fut in cf.as_completed(futures):
        i = futures[fut]
        try:
            summary = fut.result()
        except Exception as e:
            failures.append((i, e))
            continue
        finished(i, summary)
    _raise_failures(failures)


def _raise_failures(failures: list[tuple[int, Exception]]) -> None:
    """:class:`PointFailed` naming the first failed point (by index) and how many more."""
    if not failures:
        return
    i, e = min(failures, key=lambda f: f[0])
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    first = f"{type(e).__name__}: {e}".splitlines()[0]
    raise PointFailed(f"point {i} failed: {first}{more}") from e


def _stop(executor: cf.Executor | None) -> None:
    """Cancel queued points and end running ones (local pools: terminate the workers)."""
    if executor is None:
        return
    if isinstance(executor, cf.ProcessPoolExecutor):
        procs = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            with contextlib.suppress(Exception):
                p.terminate()
        for p in procs:
            with contextlib.suppress(Exception):
                p.join(5)
    else:  # a Dask ClientExecutor knows no cancel_futures; closing the client cancels
        try:
            executor.shutdown(wait=False, cancel_futures=True)
        except TypeError:
            with contextlib.suppress(Exception):
                executor.shutdown(wait=False)
        except Exception:
            pass


def _claim_sweep_dir(out_dir: Path, scenario: Scenario, points: Sequence[Mapping[str, Any]],
                     root_seed: int, replications: int) -> None:
    """Create ``out_dir`` with ``sweep.json``, or check that the one there is this sweep."""
    spec = {"scenario": to_plain(scenario), "root_seed": int(root_seed),
            "replications": int(replications),
            "points": [{"point": i, "dir": f"{POINTS_DIR}/{point_dir_name(i)}",
                        "overrides": json.loads(canonical(p))} for i, p in enumerate(points)]}
    path = out_dir / SWEEP_JSON
    try:
        if path.exists():
            old = json.loads(path.read_text(encoding="utf-8"))
            if _sha(old) != _sha(json.loads(json.dumps(spec))):
                raise SweepError(f"{out_dir} holds a different sweep (other scenario, grid, "
                                 "seed or replications); choose another --out")
            return
        (out_dir / POINTS_DIR).mkdir(parents=True, exist_ok=True)
        write_scenario(out_dir, scenario)
        write_json(path, spec)
    except OSError as e:
        raise SweepError(f"cannot write the sweep folder {out_dir}: {e.strerror or e}") from None


def _start_point(point_dir: Path, scenario: Scenario, ov: Point, identity: dict[str, Any],
                 base_meta: dict[str, Any], index: int) -> RunLifecycle:
    """Empty a stale point folder and write its scenario and ``meta.json`` (running)."""
    if point_dir.exists():
        shutil.rmtree(point_dir)
    point_dir.mkdir(parents=True)
    meta = copy.deepcopy(base_meta)
    meta.update(scenario=scenario.name, _t0=time.perf_counter(),
                started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                .replace("+00:00", "Z"),
                sweep_point={"index": index, "overrides": json.loads(canonical(ov)),
                             "identity_sha256": _sha(identity)})
    return RunLifecycle(point_dir).start(scenario, meta)


def _complete_point(folder: RunLifecycle, summary: dict[str, Any],
                    plan: Sequence[tuple[int, int]]) -> None:
    """Write the point's summary files and mark its ``meta.json`` complete."""
    assert folder.meta is not None
    folder.meta["replication_seeds"] = seeds_meta(plan)
    write_summary(folder.path, summary)
    folder.finish()


# --------------------------------------------------------------------------- tables


def _column(values: list[Any]) -> list[Any]:
    """Grid values of one key as a table column: scalars kept, anything else as JSON text."""
    norm = [_normal(v) for v in values]
    kinds = {type(v) for v in norm if v is not None}
    if kinds <= {int, float} or kinds <= {bool} or kinds <= {str}:
        if kinds == {int, float}:
            return [None if v is None else float(v) for v in norm]
        return norm
    return [json.dumps(v, sort_keys=True) for v in norm]


def tidy_table(points: Sequence[Point], summaries: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per point × metric: ``point``, one column per grid key, ``metric``, ``mean``,
    ``ci_low``, ``ci_high``, ``n`` (defined replication values) and ``unit``."""
    # lazy: +570 ms (pandas, pyarrow) off importing rtalab.sim.sweep
    import pandas as pd

    from rtalab.sim.shared.summary import metric_rows

    if len(points) != len(summaries):
        raise ValueError("one summary per point is needed")
    keys: list[str] = []
    for p in points:
        keys.extend(k for k in p if k not in keys)
    rows: list[dict[str, Any]] = []
    grid_cols = {k: _column([p.get(k) for p in points]) for k in keys}
    for i, summary in enumerate(summaries):
        for row in metric_rows(dict(summary)):
            rows.append({"point": i, **{k: grid_cols[k][i] for k in keys}, **row})
    columns = ["point", *keys, *TABLE_COLUMNS[1:]]
    df = pd.DataFrame(rows, columns=columns)
    for c in ("mean", "ci_low", "ci_high"):
        df[c] = df[c].astype("float64")
    df["n"] = df["n"].astype("int64")
    return df


def write_tables(out_dir: Path, points: Sequence[Point],
                 summaries: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Write ``sweep.csv`` and ``sweep.parquet`` (the :func:`tidy_table`) atomically."""
    df = tidy_table(points, summaries)
    out_dir = Path(out_dir)
    writers: tuple[tuple[str, Callable[[Path], object]], ...] = (
        (SWEEP_CSV, lambda p: df.to_csv(p, index=False, lineterminator="\n")),
        (SWEEP_PARQUET, lambda p: df.to_parquet(p, engine="pyarrow", index=False)))
    for name, write in writers:
        tmp = out_dir / f".{name}.tmp"
        write(tmp)
        os.replace(tmp, out_dir / name)
    return df


# --------------------------------------------------------------------------- executors


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_dask(address: str) -> tuple[str, int | None]:
    """``"local"``/``"local:N"`` → ("local", N or None); otherwise ("remote", None)."""
    if address == "local" or address.startswith("local:"):
        n_text = address.partition(":")[2]
        if n_text == "":
            return "local", None
        if not n_text.isdigit() or int(n_text) < 1:
            raise SweepError(f"--dask local:N needs a worker count >= 1, got {address!r}")
        return "local", int(n_text)
    if "://" not in address and ":" not in address:
        raise SweepError(f"--dask expects tcp://HOST:PORT or local[:N], got {address!r}")
    return "remote", None


@contextlib.contextmanager
def make_executor(processes: int | None = None, dask: str | None = None,
                  connect_timeout_s: float = 10.0) -> Iterator[cf.Executor]:
    """An executor for :func:`run_points`, closed on exit.

    * default: a local ``ProcessPoolExecutor`` with ``processes`` workers (default: every
      usable CPU), started through a fork server that has the simulator preloaded;
    * ``dask="local"`` or ``"local:N"``: a Dask ``LocalCluster(n_workers=N,
      threads_per_worker=1, processes=True)`` (N default: every usable CPU), the simulator
      preloaded in each worker;
    * ``dask="tcp://host:8786"``: a client of that existing scheduler (its workers
      must have rtalab installed, see README), given ``connect_timeout_s`` to answer.
    """
    if dask is not None and processes is not None:
        raise SweepError("choose either processes or a Dask cluster, not both")
    if dask is None:
        n = usable_cpus() if processes is None else processes
        if n < 1:
            raise SweepError(f"processes must be >= 1, got {n}")
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        ex = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx)
        try:
            yield ex
        except BaseException:
            _stop(ex)
            raise
        else:
            ex.shutdown(wait=True)
        return
    kind, n_workers = parse_dask(dask)
    try:
        # lazy: the optional sweep extra (dask); +540 ms (distributed, dask, jinja2)
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError("--dask needs the sweep extra: pip install -e '.[sweep]'") from None
    with contextlib.ExitStack() as stack:
        try:
            if kind == "local":
                cluster = stack.enter_context(LocalCluster(
                    n_workers=n_workers or usable_cpus(), threads_per_worker=1, processes=True,
                    dashboard_address=None, silence_logs=40, preload=_PRELOAD))
                client = stack.enter_context(Client(cluster))
            else:
                client = stack.enter_context(Client(dask, timeout=f"{connect_timeout_s}s"))
        except (OSError, TimeoutError) as e:
            raise SweepError(f"cannot reach the Dask scheduler at {dask}: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        yield client.get_executor(pure=False)
