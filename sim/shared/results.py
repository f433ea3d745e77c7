"""The ``results/`` folder writer, shared by simulated (``kind="sim"``) and load runs (``"load"``).

A run folder is created by :func:`new_run_dir` (never reusing a name), opened
with :func:`start_run` (``scenario.toml`` and ``meta.json`` with status
``running`` written first, so a run that fails or is interrupted still leaves
its configuration, desmod style), filled by :func:`write_run` (records,
``summary.json``, plots, then ``meta.json`` with status ``complete``) and, if
anything goes wrong in between, closed by :func:`finish_run` with status
``failed`` or ``interrupted``.  :class:`RunLifecycle` is that lifecycle as one object (made,
started, guarded, finished), used by every command that writes a folder.  ``results/README.md``
describes the layout.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import math
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from rtalab.sim.vocab import RunState, values

if TYPE_CHECKING:
    import pandas as pd

    from rtalab.sim.scenario import Scenario

RECORD_TABLES = ("attempts", "turns", "timeseries")  # always written
EXTRA_TABLES = ("calls", "executions", "side_effects")  # written when the output has them
REPLICATION_COLUMN = "replication"
STATUSES = values(RunState)
VERSIONED_PACKAGES = ("rtalab", "simpy", "numpy", "pandas", "pyarrow", "matplotlib")
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Records(Protocol):
    """What :func:`write_run` needs from one replication's output (a runner ``RunOutput``
    or a load run's ``RunRecords``); read-only, as their frozen dataclasses are."""

    @property
    def attempts(self) -> pd.DataFrame: ...
    @property
    def turns(self) -> pd.DataFrame: ...
    @property
    def timeseries(self) -> pd.DataFrame: ...
    @property
    def replication(self) -> int: ...


# --------------------------------------------------------------------------- folder naming


def _slug(name: str) -> str:
    """A file-name-safe version of a scenario name."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-")
    return slug[:60] or "scenario"


def run_dir_name(kind: str, scenario_name: str, seed: int, now: dt.datetime | None = None) -> str:
    """The base folder name ``<UTC timestamp>-<kind>-<scenario>-s<seed>``."""
    now = now or dt.datetime.now(dt.UTC)
    stamp = now.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{_slug(kind)}-{_slug(scenario_name)}-s{seed}"


def new_run_dir(
    root: str | Path = "results",
    kind: str = "sim",
    *,
    scenario_name: str,
    seed: int,
    now: dt.datetime | None = None,
) -> Path:
    """Create and return a new, empty run folder under ``root``; never reuses an existing one.

    The name is ``<UTC timestamp>-<kind>-<scenario>-s<seed>``, with ``-2``, ``-3``
    ... appended when that name is taken (``mkdir`` is the atomic claim, so
    concurrent runs never share a folder).  Raises :class:`OSError` if ``root``
    cannot be created or written.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    base = run_dir_name(kind, scenario_name, seed, now)
    for n in range(1, 10_000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir(exist_ok=False)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{root / base}: too many runs with this name")


# --------------------------------------------------------------------------- metadata


def _package_version(name: str) -> str | None:
    """Installed version of ``name``; for rtalab run from a source tree, pyproject's version."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
    if name == "rtalab":
        pyproject = _PROJECT_ROOT / "pyproject.toml"
        with contextlib.suppress(OSError, ValueError):
            version = tomllib.loads(pyproject.read_text("utf-8"))["project"]["version"]
            return f"{version} (source tree, not installed)"
    return None


def package_versions() -> dict[str, str | None]:
    """Versions of Python and of the packages that shape a run's numbers."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update({name: _package_version(name) for name in VERSIONED_PACKAGES})
    return versions


def _git(*args: str) -> str | None:
    """Output of a read-only git command in the project checkout, or None."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")  # never take the index lock
    try:
        out = subprocess.run(
            ["git", "-C", str(_PROJECT_ROOT), *args],
            capture_output=True, text=True, timeout=5, env=env, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_info() -> dict[str, Any] | None:
    """The checkout's commit SHA and whether tracked files differ; None if not a checkout."""
    if not (_PROJECT_ROOT / ".git").exists():
        return None
    sha = _git("rev-parse", "HEAD")
    if not sha:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def _cpu_model() -> str | None:
    """The CPU model name from /proc/cpuinfo (Linux) or the platform module."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def host_info() -> dict[str, Any]:
    """Host name, OS, CPU model and counts."""
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "python_implementation": platform.python_implementation(),
    }


def _now_iso() -> str:
    """Current UTC time as ISO 8601 with a Z suffix."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def collect_meta(
    *,
    kind: str,
    scenario: Scenario,
    seed: int,
    replications: int,
    argv: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The initial ``meta.json`` content of a run (status ``running``)."""
    argv = list(sys.argv if argv is None else argv)
    meta: dict[str, Any] = {
        "kind": kind,
        "status": "running",
        "scenario": scenario.name,
        "seed": seed,
        "replications": replications,
        "replication_seeds": None,
        "started_at": _now_iso(),
        "finished_at": None,
        "wall_time_s": None,
        "command": shlex.join(argv),
        "argv": argv,
        "cwd": os.getcwd(),
        "versions": package_versions(),
        "git": git_info(),
        "host": host_info(),
        "files": [],
        "error": None,
    }
    meta.update(extra or {})
    meta["_t0"] = time.perf_counter()  # stripped when written
    return meta


# --------------------------------------------------------------------------- writing


def jsonable(obj: Any) -> Any:
    """Plain JSON data: numpy scalars to Python, NaN/inf to null, tuples to lists, paths to str."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalar or array
        return jsonable(obj.tolist())
    if hasattr(obj, "items") and callable(obj.items):  # mapping proxies
        return jsonable(dict(obj.items()))
    return str(obj)


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    """Write strict JSON (no NaN), indented, atomically."""
    _atomic_write(path, json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n")


def write_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    """(Re)write ``meta.json`` atomically."""
    public = {k: v for k, v in meta.items() if not k.startswith("_")}
    write_json(Path(run_dir) / "meta.json", public)


def write_scenario(run_dir: Path, scenario: Scenario) -> None:
    """Write the fully resolved ``scenario.toml``."""
    # lazy: +93 ms (9 modules) off importing results
    from rtalab.sim.scenario import dumps

    _atomic_write(Path(run_dir) / "scenario.toml", dumps(scenario))


def start_run(run_dir: Path, scenario: Scenario, meta: dict[str, Any]) -> None:
    """Write the resolved scenario and ``meta.json`` (status ``running``) before anything runs."""
    meta["status"] = "running"
    write_scenario(run_dir, scenario)
    meta["files"] = ["scenario.toml", "meta.json"]
    write_meta(run_dir, meta)


def finish_run(run_dir: Path, meta: dict[str, Any], status: str, error: str | None = None) -> None:
    """Stamp the end time, wall time and final status into ``meta.json``."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    meta["status"] = status
    meta["error"] = error
    meta["finished_at"] = _now_iso()
    t0 = meta.get("_t0")
    if t0 is not None:
        meta["wall_time_s"] = round(time.perf_counter() - t0, 3)
    files = sorted(p.name for p in Path(run_dir).iterdir() if not p.name.startswith("."))
    meta["files"] = sorted(set(files) | {"meta.json"})
    write_meta(run_dir, meta)


def error_line(e: BaseException) -> str:
    """What ``meta.json``'s ``error`` says of the exception that ended a run: its type and
    the first line of its message (the type alone when it has none)."""
    text = str(e)
    return (f"{type(e).__name__}: {text}" if text else type(e).__name__).splitlines()[0]


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached a run guarded with ``signals=True`` (handled like Ctrl-C)."""


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (SIGINT raises
    KeyboardInterrupt as always), so everything the run started is stopped and the run
    is marked ``interrupted``.  Only in the main thread (signal handlers live there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, raise_interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class RunLifecycle:
    """The lifecycle of one results folder, the same for every command that writes one.

    Made by :meth:`new` (a fresh ``<UTC>-<kind>-<scenario>-s<seed>`` folder,
    :func:`new_run_dir`) or :meth:`at` (a folder the user named, e.g. ``--out``); opened by
    :meth:`start` (``scenario.toml`` and ``meta.json`` with status ``running`` first) or
    given its ``meta`` to write at the end only (:meth:`keep`); guarded by :meth:`guard` (a
    ``with`` block: Ctrl-C — and, with ``signals``, SIGTERM/SIGHUP — marks it
    ``interrupted``, an error of the ``failures`` types marks it ``failed``, then the
    exception goes on); closed by :meth:`finish` (final status, end time, wall time, file
    list).  A folder without ``meta`` (a command that writes none) is only made and
    guarded.
    """

    def __init__(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.meta = meta
        self.status: str | None = None if meta is None else meta.get("status")

    @classmethod
    def new(cls, root: str | Path = "results", kind: str = "sim", *, scenario_name: str,
            seed: int, now: dt.datetime | None = None) -> RunLifecycle:
        """A new, empty folder under ``root`` (:func:`new_run_dir`)."""
        return cls(new_run_dir(root, kind, scenario_name=scenario_name, seed=seed, now=now))

    @classmethod
    def at(cls, path: str | Path) -> RunLifecycle:
        """The folder ``path``, created (with its parents) if it is not there."""
        folder = cls(path)
        folder.path.mkdir(parents=True, exist_ok=True)
        return folder

    @classmethod
    def new_or_at(cls, path: str | Path | None, root: str | Path, kind: str, *,
                  scenario_name: str, seed: int) -> RunLifecycle:
        """:meth:`at` ``path`` when one was given, else :meth:`new` under ``root``."""
        if path is not None:
            return cls.at(path)
        return cls.new(root, kind, scenario_name=scenario_name, seed=seed)

    def start(self, scenario: Scenario, meta: dict[str, Any]) -> RunLifecycle:
        """Write the resolved scenario and ``meta.json`` (status ``running``) before
        anything runs (:func:`start_run`)."""
        self.keep(meta)
        start_run(self.path, scenario, meta)
        self.status = RunState.RUNNING
        return self

    def keep(self, meta: dict[str, Any]) -> RunLifecycle:
        """Hold ``meta``, to be written by :meth:`finish` (or by the guard)."""
        self.meta = meta
        return self

    def finish(self, status: str = RunState.COMPLETE, error: str | None = None) -> None:
        """Stamp the final ``status`` (and ``error``) into ``meta.json`` (:func:`finish_run`)."""
        if self.meta is None:
            raise ValueError(f"{self.path}: no meta.json to finish")
        finish_run(self.path, self.meta, status, error)
        self.status = status

    @property
    def finished(self) -> bool:
        """True once a final status was written."""
        return self.status not in (None, RunState.RUNNING)

    @contextlib.contextmanager
    def guard(self, *, signals: bool = False,
              failures: tuple[type[BaseException], ...] = (BaseException,)
              ) -> Iterator[RunLifecycle]:
        """Within the block, an interrupt (Ctrl-C; with ``signals`` SIGTERM and SIGHUP too,
        :func:`signals_interrupt`) finishes the folder ``interrupted``, an exception of
        ``failures`` finishes it ``failed`` (:func:`error_line`); then it is re-raised.  A
        folder already finished, or without ``meta``, is left as it is."""
        with signals_interrupt() if signals else contextlib.nullcontext():
            try:
                yield self
            except KeyboardInterrupt as e:
                self.abandon(e)
                raise
            except failures as e:
                self.abandon(e)
                raise

    def abandon(self, e: BaseException) -> None:
        """Finish the folder as ``e`` ended it: ``interrupted`` by an interrupt, else
        ``failed`` (:func:`error_line`); nothing if it is finished already or has no meta."""
        if self.meta is not None and not self.finished:
            status = RunState.INTERRUPTED if isinstance(e, KeyboardInterrupt) else RunState.FAILED
            self.finish(status, error_line(e))


def concat_records(outputs: Sequence[Records], table: str) -> pd.DataFrame:
    """One table of all replications, with a leading ``replication`` column."""
    # lazy: +631 ms (pandas, pyarrow) off importing results
    import pandas as pd

    frames = []
    for out in outputs:
        df = getattr(out, table)
        if REPLICATION_COLUMN not in df.columns:
            df = df.copy()
            df.insert(0, REPLICATION_COLUMN, out.replication)
        frames.append(df)
    if not frames:
        return pd.DataFrame({REPLICATION_COLUMN: pd.Series(dtype="int64")})
    non_empty = [f for f in frames if len(f)] or frames[:1]
    return cast("pd.DataFrame", pd.concat(non_empty, ignore_index=True))


def replication_seeds(outputs: Sequence[Any]) -> list[dict[str, Any]]:
    """Per-replication seeds: replication ``i`` of root seed ``s`` draws from
    ``numpy.random.SeedSequence(entropy=s, spawn_key=(i,))`` (= ``SeedSequence(s).spawn(R)[i]``)."""
    rows = []
    for o in outputs:
        seed = getattr(o, "seed", None)
        rows.append({"replication": o.replication, "seed": seed,
                     "spawn_key": None if seed is None else [o.replication]})
    return rows


def write_records(run_dir: Path, outputs: Sequence[Records]) -> dict[str, pd.DataFrame]:
    """Write every record table as ``<table>.parquet``; return the pooled tables.

    ``attempts``, ``turns`` and ``timeseries`` always; ``calls``, ``executions``
    and ``side_effects`` when every output carries them.
    """
    tables = {}
    present = [t for t in EXTRA_TABLES
               if outputs and all(getattr(o, t, None) is not None for o in outputs)]
    for table in (*RECORD_TABLES, *present):
        df = concat_records(outputs, table)
        path = Path(run_dir) / f"{table}.parquet"
        tmp = path.with_name(f".{path.name}.tmp")
        df.to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, path)
        tables[table] = df
    return tables


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write ``summary.json`` and its tidy twin ``summary.csv`` (one row per metric: metric,
    mean, ci_low, ci_high, n, unit; empty cells where undefined)."""
    # lazy: +589 ms (pandas, pyarrow) off importing results
    from rtalab.sim.shared.summary import SUMMARY_CSV_COLUMNS, metric_rows

    run_dir = Path(run_dir)
    write_json(run_dir / "summary.json", summary)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SUMMARY_CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in metric_rows(summary):
        w.writerow({k: _csv_cell(v) for k, v in row.items()})
    _atomic_write(run_dir / "summary.csv", buf.getvalue())


def _csv_cell(value: Any) -> Any:
    """A CSV cell: floats in shortest round-trip form, undefined (None, NaN) empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(float(value)) if math.isfinite(value) else ""
    return value


class RecordWriter:
    """Append one replication's record tables at a time to ``<table>.parquet`` (one Parquet
    row group per replication), so a run never holds more than one replication in memory.

    Files are written as hidden temporaries and renamed into place by :meth:`close`; an
    interrupted run leaves no half-written table under its final name.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._writers: dict[str, Any] = {}
        self._tables: list[str] | None = None

    def append(self, out: Records) -> None:
        """Write the tables of one replication's output."""
        # lazy: +67 ms (pyarrow) off importing results
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._tables is None:
            self._tables = [*RECORD_TABLES,
                            *(t for t in EXTRA_TABLES if getattr(out, t, None) is not None)]
        for table in self._tables:
            df = concat_records([out], table)
            writer = self._writers.get(table)
            if writer is None:
                arrow = pa.Table.from_pandas(df, preserve_index=False)
                tmp = self.run_dir / f".{table}.parquet.tmp"
                writer = self._writers[table] = pq.ParquetWriter(tmp, arrow.schema)
            else:
                arrow = pa.Table.from_pandas(df, schema=writer.schema, preserve_index=False)
            writer.write_table(arrow)

    def close(self) -> list[Path]:
        """Finish every file and move it into place; return the final paths."""
        paths = []
        for table, writer in self._writers.items():
            writer.close()
            path = self.run_dir / f"{table}.parquet"
            os.replace(self.run_dir / f".{table}.parquet.tmp", path)
            paths.append(path)
        self._writers.clear()
        return paths

    def abort(self) -> None:
        """Close and delete the temporary files (after an error or interruption)."""
        for table, writer in self._writers.items():
            with contextlib.suppress(Exception):
                writer.close()
            with contextlib.suppress(OSError):
                (self.run_dir / f".{table}.parquet.tmp").unlink()
        self._writers.clear()


def write_run(
    run_dir: Path,
    scenario: Scenario,
    outputs: Sequence[Records],
    summary: dict[str, Any],
    meta: dict[str, Any],
    *,
    plots: bool = True,
) -> None:
    """Write a finished run's records, summary and plots, then mark ``meta.json`` complete.

    Used as is by simulated runs (one output per replication) and load runs
    (one output holding the measured records, ``kind="load"`` in ``meta``).
    """
    run_dir = Path(run_dir)
    write_scenario(run_dir, scenario)
    meta["replications"] = len(outputs)
    meta["replication_seeds"] = replication_seeds(outputs)
    write_meta(run_dir, meta)
    tables = write_records(run_dir, outputs)
    write_summary(run_dir, summary)
    if plots:
        # lazy: +1.33 s (matplotlib, pandas, pyarrow) off importing results
        from rtalab.sim.shared.plots import plot_run

        plot_run(run_dir, scenario, tables["turns"], tables["timeseries"])
    finish_run(run_dir, meta, "complete")


def read_meta(run_dir: str | Path) -> dict[str, Any]:
    """Load a run folder's ``meta.json``."""
    text = (Path(run_dir) / "meta.json").read_text(encoding="utf-8")
    return cast("dict[str, Any]", json.loads(text))
