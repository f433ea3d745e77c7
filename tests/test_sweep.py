"""Sweeps (issue 8): grid expansion, seeds, identical tables on every executor, Ctrl-C and
resume, grid errors before anything runs, streamed replications and ``summary.csv``."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from rtalab.sim import sweep
from rtalab.sim.runner import run_replications
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import results
from rtalab.sim.shared.summary import summarize, unit
from rtalab.sim.stream import replication_plan, run_streaming
from tests.signals import default_sigint

REPO = Path(__file__).resolve().parents[1]
# a small, quick scenario: ~40 turns per replication
TINY = ["run.duration_s=20", "run.warmup_s=2", "run.drain_s=10", "workload.calls_per_s=0.5"]


def tiny():
    return load_scenario("baseline", TINY)


def rtalab(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "rtalab.sim.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- grid and seeds


def test_expand_grid_crosses_axes_and_zips_rows() -> None:
    pts = sweep.expand_grid({"a": [1, 2], "b": ["x", "y"]}, {"c": [3, 4], "d": [5, 6]})
    assert len(pts) == 8
    assert pts[0] == {"a": 1, "b": "x", "c": 3, "d": 5}
    assert pts[1] == {"a": 1, "b": "x", "c": 4, "d": 6}  # zipped rows innermost
    assert pts[2] == {"a": 1, "b": "y", "c": 3, "d": 5}
    assert pts[-1] == {"a": 2, "b": "y", "c": 4, "d": 6}
    assert sweep.expand_grid({}) == [{}]
    with pytest.raises(sweep.SweepError, match="same number of values"):
        sweep.expand_grid({}, {"c": [1, 2], "d": [1]})
    with pytest.raises(sweep.SweepError, match="no values"):
        sweep.expand_grid({"a": []})


def test_parse_axis_reads_toml_values_and_bare_words() -> None:
    assert sweep.parse_axis("reasoner.workers=2,4,8") == ("reasoner.workers", [2, 4, 8])
    assert sweep.parse_axis("reasoner.dedup=request-guid,none") == (
        "reasoner.dedup", ["request-guid", "none"])
    _, values = sweep.parse_axis('reasoner.reasoning_time_s={dist="exp", mean=1.0},0.5')
    assert values == [{"dist": "exp", "mean": 1.0}, 0.5]
    for bad in ("reasoner.workers", "=1,2", "reasoner.workers=", "reasoner.workers=1,,2"):
        with pytest.raises(sweep.SweepError):
            sweep.parse_axis(bad)


def test_point_seed_depends_only_on_root_point_and_replication() -> None:
    a = sweep.point_seed(1, {"x": 4, "y": 0.5}, 0)
    assert a == sweep.point_seed(1, {"y": 0.5, "x": 4.0}, 0)  # key order, 4 == 4.0
    assert 0 <= a < 2**63
    others = {sweep.point_seed(2, {"x": 4, "y": 0.5}, 0),
              sweep.point_seed(1, {"x": 5, "y": 0.5}, 0),
              sweep.point_seed(1, {"x": 4, "y": 0.5}, 1), sweep.point_seed(1, {}, 0)}
    assert a not in others and len(others) == 4
    # a known value: changing the derivation silently would change every sweep's numbers
    assert sweep.point_seed(1, {"reasoner.workers": 4}, 0) == sweep.point_seed(
        1, {"reasoner.workers": 4.0}, 0)
    assert sweep.canonical({"b": 1.0, "a": [1.5, 2.0]}) == '{"a":[1.5,2],"b":1}'


def test_points_are_identical_whatever_else_the_sweep_holds() -> None:
    sc = tiny()
    alone = sweep.run_points(sc, [{"reasoner.workers": 4}], replications=2, root_seed=3,
                             progress=False)
    among = sweep.run_points(sc, [{"reasoner.workers": 2}, {"reasoner.workers": 4}],
                             replications=2, root_seed=3, progress=False)
    assert alone[0] == among[1]
    assert alone[0]["seeds"] == sorted(sweep.point_seed(3, {"reasoner.workers": 4}, r)
                                       for r in range(2))


# --------------------------------------------------------------------------- acceptance 1


def test_one_process_two_processes_and_dask_give_byte_identical_tables(tmp_path: Path) -> None:
    sc = tiny()
    points = sweep.expand_grid({"reasoner.workers": [2, 6]}, {"live.retry.max_attempts": [1, 3]})
    digests = []
    for name, kw in (("p1", {"processes": 1}), ("p2", {"processes": 2}),
                     ("dask", {"dask": "local:2"})):
        with sweep.make_executor(**kw) as ex:
            out = tmp_path / name
            sweep.run_points(sc, points, replications=2, root_seed=7, executor=ex, out_dir=out,
                             progress=False, plots=False)
        digests.append((digest(out / "sweep.csv"), digest(out / "sweep.parquet")))
        assert len(list((out / "points").iterdir())) == len(points)
    assert digests[0] == digests[1] == digests[2]
    table = pd.read_csv(tmp_path / "p1" / "sweep.csv")
    assert list(table.columns) == ["point", "reasoner.workers", "live.retry.max_attempts",
                                   "metric", "mean", "ci_low", "ci_high", "n", "unit"]
    assert set(table["point"]) == set(range(len(points)))
    p3 = table[(table["point"] == 3) & (table["metric"] == "turns")].iloc[0]
    assert (p3["reasoner.workers"], p3["live.retry.max_attempts"]) == (6, 3)
    # the table's numbers are those of the point folders
    s3 = json.loads((tmp_path / "p1" / "points" / "p0003" / "summary.json").read_text())
    assert p3["mean"] == s3["metrics"]["turns"]["mean"]
    assert pd.read_parquet(tmp_path / "dask" / "sweep.parquet").equals(
        pd.read_parquet(tmp_path / "p1" / "sweep.parquet"))


# --------------------------------------------------------------------------- acceptance 2

# points long enough (~0.4 s each) that the remaining ones cannot all finish in the instant
# between the first completion and the workers' suspension below
SWEEP_ARGS = ["sim", "sweep", "baseline", "--set", "run.duration_s=1200", "run.warmup_s=5",
              "run.drain_s=10", "--grid", "reasoner.workers=3,4,5,6,7,8,9,10",
              "--replications", "2", "--no-plots", "--quiet"]


def _complete(out: Path) -> list[Path]:
    done = []
    for meta in sorted(out.glob("points/p*/meta.json")):
        try:
            if json.loads(meta.read_text())["status"] == "complete":
                done.append(meta.parent)
        except (OSError, ValueError):
            continue  # being replaced right now
    return done


def _asked_to_end(worker: psutil.Process) -> bool:
    """A stopped worker holds the SIGTERM it was sent as pending (``ShdPnd`` in /proc)."""
    try:
        status = Path(f"/proc/{worker.pid}/status").read_text()
    except OSError:
        return True  # gone
    pending = int(next(ln.split()[1] for ln in status.splitlines()
                       if ln.startswith("ShdPnd:")), 16)
    return bool(pending & (1 << (signal.SIGTERM - 1))) or not worker.is_running()


def _stamp(point: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, digest(p)) for p in sorted(point.iterdir())}


def test_sigint_mid_sweep_then_rerun_finishes_without_recomputing(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "rtalab.sim.cli", *SWEEP_ARGS, "--processes",
                             "2", "--out", str(out)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 120
    while not _complete(out):  # synchronise on the files: one point is finished
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no point completed"
        time.sleep(0.005)
    coordinator = psutil.Process(proc.pid)
    workers = [c for c in coordinator.children(recursive=True)
               if c not in coordinator.children()]  # forkserver's children: the pool
    assert workers
    # hold the pool where it is (no point can finish while its worker is stopped), then
    # interrupt; the workers go on only once the coordinator has asked them to end
    for w in workers:
        w.suspend()
    try:
        held = len(_complete(out))
        proc.send_signal(signal.SIGINT)
        while not all(_asked_to_end(w) for w in workers):
            assert time.monotonic() < deadline, "the coordinator never stopped its workers"
            time.sleep(0.005)
    finally:
        for w in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                w.resume()
    assert held < 8
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "rerun the same command" in err and "Traceback" not in err
    finished = _complete(out)
    assert 1 <= len(finished) < 8
    stamps = {p.name: _stamp(p) for p in finished}
    statuses = {json.loads(m.read_text())["status"] for m in out.glob("points/p*/meta.json")}
    assert statuses <= {"complete", "interrupted"}  # no point left "running"
    for w in workers:  # the workers were stopped, not left running their points
        assert not w.is_running() or w.status() == psutil.STATUS_ZOMBIE, w

    again = rtalab(*SWEEP_ARGS, "--processes", "2", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert len(_complete(out)) == 8
    for name, before in stamps.items():
        assert _stamp(out / "points" / name) == before, f"{name} was recomputed"

    ref = tmp_path / "ref"
    whole = rtalab(*SWEEP_ARGS, "--processes", "1", "--out", str(ref))
    assert whole.returncode == 0, whole.stderr
    assert digest(out / "sweep.csv") == digest(ref / "sweep.csv")
    assert digest(out / "sweep.parquet") == digest(ref / "sweep.parquet")


def test_rerun_of_a_finished_sweep_runs_nothing_and_another_sweep_is_refused(
        tmp_path: Path) -> None:
    sc = tiny()
    pts = [{"reasoner.workers": 2}, {"reasoner.workers": 4}]
    first = sweep.run_points(sc, pts, replications=2, root_seed=1, out_dir=tmp_path,
                             progress=False, plots=False)
    stamps = {p.name: _stamp(p) for p in (tmp_path / "points").iterdir()}
    seen: list[float] = []
    second = sweep.run_points(sc, pts, replications=2, root_seed=1, out_dir=tmp_path,
                              progress=seen.append, plots=False)
    assert second == first
    assert seen == [1.0]  # everything was already done
    assert {p.name: _stamp(p) for p in (tmp_path / "points").iterdir()} == stamps
    with pytest.raises(sweep.SweepError, match="different sweep"):
        sweep.run_points(sc, pts, replications=3, root_seed=1, out_dir=tmp_path, progress=False)


def test_broken_grid_exits_2_with_one_line_before_anything_runs(tmp_path: Path) -> None:
    cases = (("--grid", "reasoner.workerz=1,2", "unknown key"),
             ("--grid", "reasoner.workers=4,0", "grid point 1 (reasoner.workers=0): "
                                                "reasoner.workers: must be >= 1"),
             ("--grid", "reasoner.workers", "key.path=v1,v2"),
             ("--zip", "reasoner.workers=1,2", None))
    for i, (flag, axis, message) in enumerate(cases):
        out = tmp_path / f"s{i}"
        extra = ["--zip", "workload.calls_per_s=1,2,3"] if message is None else []
        r = rtalab("sim", "sweep", "baseline", flag, axis, *extra, "--out", str(out))
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rtalab: "), r.stderr
        assert (message or "same number of values") in lines[0]
        assert not out.exists()  # nothing ran, nothing was written
    r = rtalab("sim", "sweep", "baseline", "--grid", "reasoner.workers=1", "--dask", "local:x")
    assert r.returncode == 2 and "local:N" in r.stderr


def test_unreachable_dask_scheduler_is_one_line() -> None:
    """(The CLI waits its default 10 s for a scheduler; 1 s says the same here.)"""
    with pytest.raises(sweep.SweepError, match="cannot reach the Dask scheduler"), \
            sweep.make_executor(dask="tcp://127.0.0.1:9", connect_timeout_s=1.0):
        pass


# --------------------------------------------------------------------------- streaming


def test_streamed_run_writes_the_same_tables_and_summary_as_holding_every_replication(
        tmp_path: Path) -> None:
    sc = tiny()
    summary = run_streaming(sc, replication_plan(5, 3), tmp_path, plots=False)
    outputs = run_replications(sc, seed=5, replications=3)
    assert summary == summarize(outputs, sc.run.warmup_s)
    for table in ("attempts", "turns", "calls", "executions", "side_effects", "timeseries"):
        streamed = pd.read_parquet(tmp_path / f"{table}.parquet")
        held = results.concat_records(outputs, table)
        pd.testing.assert_frame_equal(streamed, held, check_categorical=False)
        assert streamed[results.REPLICATION_COLUMN].nunique() == 3
    assert not list(tmp_path.glob(".*"))  # no temporaries left


def test_every_run_folder_has_a_summary_csv_with_units(tmp_path: Path) -> None:
    from rtalab.sim import cli

    rc = cli.main(["sim", "run", "baseline", "--set", *TINY,
                   "--replications", "2", "--no-plots", "--quiet", "--out", str(tmp_path)])
    assert rc == 0
    run = next(tmp_path.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    csv = pd.read_csv(run / "summary.csv", keep_default_na=False, na_values=[""])
    assert list(csv.columns) == ["metric", "mean", "ci_low", "ci_high", "n", "unit"]
    assert list(csv["metric"]) == list(summary["metrics"])
    row = csv.set_index("metric").loc["success_rate"]
    m = summary["metrics"]["success_rate"]
    assert (row["mean"], row["ci_low"], row["n"]) == (m["mean"], m["ci_low"], 2)
    assert csv.set_index("metric")["unit"].to_dict() | {} == {
        k: unit(k) for k in summary["metrics"]}
    assert unit("completion_s.p99") == unit("queue.mean_wait_s") == "s"
    assert unit("goodput_turns_per_s") == "1/s"
    assert unit("hazard.ghost_successes_per_1k_turns") == "per 1k turns"
    assert unit("dedup.peak_bytes") == "bytes" and unit("failure_rate.internal") == "share"
    meta = results.read_meta(run)
    assert meta["status"] == "complete" and len(meta["replication_seeds"]) == 2
    assert "summary.csv" in meta["files"]


def test_tidy_table_has_one_row_per_point_and_metric() -> None:
    pts = [{"k": 1, "d": {"dist": "exp", "mean": 1.0}}, {"k": 2.5, "d": 0.5}]
    summaries = [{"metrics": {"a_s": {"mean": 1.0, "ci_low": 0.5, "ci_high": 1.5,
                                      "values": [1.0, None]}}},
                 {"metrics": {"a_s": {"mean": None, "ci_low": None, "ci_high": None,
                                      "values": [None, None]}}}]
    df = sweep.tidy_table(pts, summaries)
    assert list(df.columns) == ["point", "k", "d", *sweep.TABLE_COLUMNS[1:]]
    assert list(df["k"]) == [1.0, 2.5] and list(df["n"]) == [1, 0]
    assert df["d"][0] == '{"dist": "exp", "mean": 1}' and df["unit"][0] == "s"
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    assert len(pd.read_csv(io.StringIO(buf.getvalue()))) == 2


def test_a_failing_point_is_reported_and_the_others_are_kept(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    real = sweep.run_point

    def flaky(task: sweep.PointTask) -> dict:
        if task.index == 1:
            raise RuntimeError("worker lost")
        return real(task)

    monkeypatch.setattr(sweep, "run_point", flaky)
    pts = [{"reasoner.workers": w} for w in (2, 3, 4)]
    with pytest.raises(sweep.PointFailed, match="point 1 failed: RuntimeError: worker lost"):
        sweep.run_points(tiny(), pts, replications=1, root_seed=1, out_dir=tmp_path,
                         progress=False, plots=False)
    status = {d.name: results.read_meta(d)["status"] for d in (tmp_path / "points").iterdir()}
    assert status == {"p0000": "complete", "p0001": "failed", "p0002": "complete"}
    monkeypatch.setattr(sweep, "run_point", real)
    sweep.run_points(tiny(), pts, replications=1, root_seed=1, out_dir=tmp_path,
                     progress=False, plots=False)
    assert {results.read_meta(d)["status"] for d in (tmp_path / "points").iterdir()} == {
        "complete"}
