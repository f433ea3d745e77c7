"""The results-folder writer: naming, never overwriting, meta.json lifecycle, record files."""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.scenario import from_dict, load_scenario
from rtalab.sim.shared import results

NOW = dt.datetime(2026, 11, 30, 3, 15, 0, tzinfo=dt.UTC)


@dataclass
class _Records:
    """Hand-made record tables, to test the writer's table handling in isolation."""

    attempts: pd.DataFrame
    turns: pd.DataFrame
    timeseries: pd.DataFrame
    replication: int
    seed: int = 0


def _records(rep: int, n: int = 3) -> _Records:
    """Tables of ``n`` rows without a replication column (the writer adds it)."""
    return _Records(
        attempts=pd.DataFrame({"send_s": np.arange(n, dtype=float)}),
        turns=pd.DataFrame({"start_s": np.arange(n, dtype=float), "ttfc_s": np.nan}),
        timeseries=pd.DataFrame({"t_s": np.arange(n, dtype=float)}),
        replication=rep,
        seed=100 + rep,
    )


def _meta(tmp_path: Path) -> tuple[Path, dict, object]:
    """A fresh run folder with start_run done."""
    scenario = load_scenario("baseline")
    run_dir = results.new_run_dir(tmp_path, "sim", scenario_name=scenario.name, seed=1)
    meta = results.collect_meta(kind="sim", scenario=scenario, seed=1, replications=2,
                                argv=["rtalab", "sim", "run", "baseline"])
    results.start_run(run_dir, scenario, meta)
    return run_dir, meta, scenario


# --------------------------------------------------------------------------- naming


def test_run_dir_name_has_timestamp_kind_scenario_and_seed(tmp_path: Path) -> None:
    d = results.new_run_dir(tmp_path, "sim", scenario_name="baseline", seed=7, now=NOW)
    assert d.name == "20261130T031500Z-sim-baseline-s7"
    assert d.is_dir() and not any(d.iterdir())


def test_load_runs_use_the_same_naming(tmp_path: Path) -> None:
    d = results.new_run_dir(tmp_path, "load", scenario_name="baseline", seed=1, now=NOW)
    assert d.name == "20261130T031500Z-load-baseline-s1"


def test_scenario_names_are_made_file_safe(tmp_path: Path) -> None:
    d = results.new_run_dir(tmp_path, scenario_name="my run/../x y", seed=1, now=NOW)
    assert d.parent == tmp_path
    assert re.fullmatch(r"20261130T031500Z-sim-[A-Za-z0-9_.-]+-s1", d.name)


def test_same_second_runs_get_numbered_folders(tmp_path: Path) -> None:
    names = [results.new_run_dir(tmp_path, scenario_name="b", seed=1, now=NOW).name
             for _ in range(3)]
    base = "20261130T031500Z-sim-b-s1"
    assert names == [base, f"{base}-2", f"{base}-3"]


def test_concurrent_runs_never_share_a_folder(tmp_path: Path) -> None:
    def make(_: int) -> Path:
        return results.new_run_dir(tmp_path, scenario_name="b", seed=1, now=NOW)

    with ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(make, range(32)))
    assert len(set(dirs)) == 32


def test_root_is_created(tmp_path: Path) -> None:
    d = results.new_run_dir(tmp_path / "a" / "b", scenario_name="x", seed=0)
    assert d.parent == tmp_path / "a" / "b"


def test_unwritable_root_raises_oserror(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        results.new_run_dir(blocker, scenario_name="x", seed=0)


# --------------------------------------------------------------------------- meta lifecycle


def test_start_run_writes_config_and_running_meta_first(tmp_path: Path) -> None:
    run_dir, _, scenario = _meta(tmp_path)
    assert sorted(p.name for p in run_dir.iterdir()) == ["meta.json", "scenario.toml"]
    text = (run_dir / "scenario.toml").read_text()
    assert from_dict(tomllib.loads(text)) == scenario
    meta = results.read_meta(run_dir)
    assert meta["status"] == "running"
    assert meta["seed"] == 1 and meta["replications"] == 2
    assert meta["command"] == "rtalab sim run baseline"
    assert set(meta["versions"]) >= {"python", "rtalab", "simpy", "numpy", "pandas"}
    assert meta["versions"]["simpy"]
    assert meta["host"]["cpu_count"] >= 1
    assert {"hostname", "platform"} <= set(meta["host"])
    assert "git" in meta  # a dict with the SHA in a checkout, null otherwise
    assert not any(k.startswith("_") for k in meta)


@pytest.mark.parametrize(
    ("exc", "status"),
    [(KeyboardInterrupt, "interrupted"), (RuntimeError, "failed")],
)
def test_guard_marks_failed_or_interrupted_runs(
    tmp_path: Path, exc: type[BaseException], status: str
) -> None:
    run_dir, meta, _ = _meta(tmp_path)
    with pytest.raises(exc), results.RunLifecycle(run_dir, meta).guard():
        raise exc("boom\nsecond line")
    meta = results.read_meta(run_dir)
    assert meta["status"] == status
    assert meta["error"] == f"{exc.__name__}: boom"
    assert meta["wall_time_s"] is not None and meta["finished_at"]
    assert (run_dir / "scenario.toml").exists()


def test_a_finished_folder_keeps_its_status_whatever_follows(tmp_path: Path) -> None:
    run_dir, meta, _ = _meta(tmp_path)
    folder = results.RunLifecycle(run_dir, meta)
    with pytest.raises(RuntimeError), folder.guard():
        folder.finish()
        raise RuntimeError("after the end")
    assert results.read_meta(run_dir)["status"] == "complete" and folder.finished


def test_only_the_named_failures_mark_a_folder_failed(tmp_path: Path) -> None:
    run_dir, meta, _ = _meta(tmp_path)
    folder = results.RunLifecycle(run_dir, meta)
    with pytest.raises(ValueError), folder.guard(failures=(KeyError,)):
        raise ValueError("not this run's failure")  # e.g. --out holds another sweep
    assert results.read_meta(run_dir)["status"] == "running"
    with pytest.raises(KeyboardInterrupt), folder.guard(failures=(KeyError,)):
        raise KeyboardInterrupt  # an interrupt always marks it
    meta = results.read_meta(run_dir)
    assert (meta["status"], meta["error"]) == ("interrupted", "KeyboardInterrupt")


def test_a_guard_with_signals_turns_sigterm_into_an_interrupted_run(tmp_path: Path) -> None:
    import os
    import signal

    run_dir, meta, _ = _meta(tmp_path)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(results.Interrupted), \
            results.RunLifecycle(run_dir, meta).guard(signals=True):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises at the next instruction
        pytest.fail("SIGTERM did not interrupt the block")
    meta = results.read_meta(run_dir)
    assert (meta["status"], meta["error"]) == ("interrupted", "Interrupted: SIGTERM")
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def test_a_folder_is_made_new_or_where_the_user_said(tmp_path: Path) -> None:
    given = results.RunLifecycle.new_or_at(tmp_path / "a" / "b", tmp_path / "r", "sweep",
                                           scenario_name="x", seed=1)
    assert given.path == tmp_path / "a" / "b" and given.path.is_dir()
    fresh = results.RunLifecycle.new_or_at(None, tmp_path / "r", "sweep", scenario_name="x",
                                           seed=1)
    assert fresh.path.parent == tmp_path / "r" and re.search(r"-sweep-x-s1$", fresh.path.name)
    assert fresh.meta is None and not fresh.finished


def test_write_run_writes_every_file_and_marks_complete(tmp_path: Path) -> None:
    run_dir, meta, scenario = _meta(tmp_path)
    outputs = [_records(0), _records(1, n=0)]
    summary = {"metrics": {"x": {"mean": float("nan"), "ci_low": np.float64(1.5)}}}
    results.write_run(run_dir, scenario, outputs, summary, meta, plots=False)
    names = {p.name for p in run_dir.iterdir()}
    assert names == {"scenario.toml", "meta.json", "summary.json", "summary.csv",
                     "attempts.parquet", "turns.parquet", "timeseries.parquet"}
    meta = results.read_meta(run_dir)
    assert meta["status"] == "complete"
    assert meta["replication_seeds"] == [{"replication": 0, "seed": 100, "spawn_key": [0]},
                                         {"replication": 1, "seed": 101, "spawn_key": [1]}]
    assert meta["files"] == sorted(names)
    turns = pd.read_parquet(run_dir / "turns.parquet")
    assert list(turns.columns) == ["replication", "start_s", "ttfc_s"]
    assert turns["replication"].tolist() == [0, 0, 0]
    # strict JSON: NaN became null, numpy scalars became numbers
    loaded = json.loads((run_dir / "summary.json").read_text())
    assert loaded == {"metrics": {"x": {"mean": None, "ci_low": 1.5}}}


def test_extra_tables_are_written_when_present(tmp_path: Path) -> None:
    run_dir, meta, scenario = _meta(tmp_path)
    out = _records(0)
    out.calls = pd.DataFrame({"replication": [0], "call_id": [1]})  # type: ignore[attr-defined]
    results.write_run(run_dir, scenario, [out], {}, meta, plots=False)
    calls = pd.read_parquet(run_dir / "calls.parquet")
    assert calls["call_id"].tolist() == [1]


def test_concat_keeps_an_existing_replication_column() -> None:
    a = _records(0)
    a.turns.insert(0, "replication", 5)
    df = results.concat_records([a], "turns")
    assert df["replication"].tolist() == [5, 5, 5]


def test_jsonable_makes_strict_json() -> None:
    data = {"a": np.int64(3), "b": (1.0, float("inf")), "c": np.array([1, 2]), 4: Path("p")}
    assert results.jsonable(data) == {"a": 3, "b": [1.0, None], "c": [1, 2], "4": "p"}


def test_git_info_is_none_outside_a_checkout(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "_PROJECT_ROOT", tmp_path)
    assert results.git_info() is None


def test_versions_fall_back_to_pyproject_when_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> str:
        raise results.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(results.metadata, "version", missing)
    assert results._package_version("rtalab").startswith("0.")
    assert results._package_version("simpy") is None


def test_finish_lists_the_visible_files_and_the_wall_time_in_seconds(tmp_path: Path) -> None:
    """meta.json's ``files`` names what a reader can open (not a writer's hidden
    ``.<name>.tmp``), and ``wall_time_s`` is seconds since the start."""
    import time

    run_dir, meta, _ = _meta(tmp_path)
    (run_dir / ".summary.json.tmp").write_text("{}", encoding="utf-8")  # a write in progress
    (run_dir / "summary.json").write_text("{}", encoding="utf-8")
    meta["_t0"] = time.perf_counter() - 2.0  # started two seconds ago
    results.RunLifecycle(run_dir, meta).finish()
    back = results.read_meta(run_dir)
    assert back["files"] == ["meta.json", "scenario.toml", "summary.json"]
    assert 2.0 <= back["wall_time_s"] < 60.0
