"""Beyond one machine (issue 15 point 11): a master and two workers as separate process trees.

``rtalab load run ... --workers-expected 2 --master-bind 127.0.0.1:PORT`` and two
``rtalab load worker --master 127.0.0.1:PORT``, each a subprocess in its own session
with its own results folder (as on three hosts, here on loopback): one gathered ledger
on the master with nothing lost, and the workers never needed the settings or scenario
file (they got both from the master).
"""

from __future__ import annotations

import subprocess
import sys

from rtalab.loadtests.common.procs import free_port
from tests.load.conftest import FAST, jsonl


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rtalab.sim.cli", "load", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def test_master_and_two_remote_workers_gather_one_complete_ledger(tmp_path, read_json):
    sc = tmp_path / "master-only" / "scenario.toml"
    sc.parent.mkdir()
    sc.write_text(FAST, encoding="utf-8")
    port = free_port()
    master = _start(["run", str(sc), "--out", str(tmp_path / "master"), "--quiet", "--no-plots",
                     "--binding", "both", "--duration", "3", "--workers-expected", "2",
                     "--master-bind", f"127.0.0.1:{port}"])
    workers = [_start(["worker", "--master", f"127.0.0.1:{port}", "--out",
                       str(tmp_path / f"host{i}"), "--timeout", "150"]) for i in (1, 2)]
    try:
        _out, err = master.communicate(timeout=180)
        results = [w.communicate(timeout=60) for w in workers]
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert master.returncode == 0, err
    assert [w.returncode for w in workers] == [0, 0], results
    run = next((tmp_path / "master").glob("*-load-*"))
    gather = read_json(run / "ledger" / "gather.json")
    assert gather["complete"] and gather["expected_processes"] == 2
    assert len(gather["processes"]) == 2
    for proc in gather["processes"].values():
        assert proc["rows_received"] == proc["announced"]["rows"]
        assert proc["rows_received"]["attempts"] > 0
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert len({a["process"] for a in attempts}) == 2
    assert {a["binding"] for a in attempts} == {"sse", "ws"}
    counts = read_json(run / "ledger" / "counts.json")
    assert counts["server_turns_answered"] == counts["attempts"] == len(attempts)
    assert counts["witness_rows"] == counts["completed_side_effect_request_guids"] > 0
    assert read_json(run / "verdict.json")["ok"]
    for i in (1, 2):  # each worker host: its own folder, the scenario it was sent, its log
        folder = next((tmp_path / f"host{i}").glob("*-load-worker-*"))
        assert (folder / "scenario.toml").read_bytes() == (run / "scenario.toml").read_bytes()
        assert read_json(folder / "ledger" / "settings.json")["processes"] == 2
        assert (folder / "logs" / "locust-worker.log").exists()
        assert not (folder / "ledger" / "attempts.jsonl").exists()  # rows went to the master


def test_multihost_flags_are_checked(tmp_path):
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "run", "release_gate",
                        "--master-bind", "127.0.0.1:5557", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--master-bind needs --workers-expected" in p.stderr
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "worker", "--master",
                        "nohost"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "expected HOST:PORT" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
