"""``rtalab load run`` as a release gate (issue 15): one verdict everywhere, refused auth on
both bindings, a server that never asks for input, SLO gates, clean stops on signals.

Real subprocesses and servers on 127.0.0.1; runs of 2 s each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtalab.loadtests.common.procs import free_port, start_process, start_reasoner, start_witness
from tests.load.conftest import FAST, jsonl, load_run
from tests.signals import python_sigint


def _verdict(run: Path) -> dict:
    return json.loads((run / "verdict.json").read_text(encoding="utf-8"))


def test_a_target_refusing_auth_fails_with_the_auth_rule_on_both_bindings(tmp_path: Path):
    """Every request answered 401 (SSE) or refused at the upgrade (WebSocket): no retry
    (errors.md: auth is never retried), every turn failed, the run fails naming auth."""
    sc = tmp_path / "server.toml"
    sc.write_text(FAST, encoding="utf-8")
    with start_reasoner(scenario=sc, dedup=f"sqlite:///{tmp_path / 'd.sqlite'}",
                        extra_args=["--token", "right=carol"]) as reasoner:
        p, run = load_run(tmp_path, "--target", reasoner.url, "--token", "wrong",
                          "--binding", "both", "--duration", "1.5")
    assert p.returncode == 1, p.stderr
    assert run is not None
    v = _verdict(run)
    assert v["verdict"] == "FAIL" and {"auth", "availability"} <= set(v["failed"])
    assert "retried-non-retryable" not in v["failed"]
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert {a["binding"] for a in attempts} == {"sse", "ws"}
    assert {(a["http_status"], a["error_code"], a["outcome"]) for a in attempts} == {
        (401, "auth", "failed")}
    turns = jsonl(run / "ledger" / "turns.jsonl")
    assert {(t["outcome"], t["attempts"]) for t in turns} == {("failed", 1)}
    # the same verdict on the terminal, in meta.json and verdict.txt
    assert f"verdict: FAIL ({', '.join(v['failed'])})" in p.stdout
    assert "FAILED auth [errors.md §2 auth" in p.stdout
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    assert meta["status"] == "complete" and meta["verdict_ok"] is False
    assert meta["verdict"] == "FAIL" and meta["failed_rules"] == v["failed"]
    assert (run / "verdict.txt").read_text().startswith(f"verdict: FAIL ({', '.join(v['failed'])})")
    html = (run / "report.html").read_text(encoding="utf-8")
    assert (f"FAIL: {len(v['failed'])} rule(s) broken: " + ", ".join(v["failed"])) in html
    again = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "check", str(run)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 1
    assert again.stdout.startswith(f"verdict: FAIL ({', '.join(v['failed'])})")
    assert _verdict(run)["failed"] == v["failed"]


def test_a_server_that_never_asks_for_input_warns_and_slo_gates_decide(tmp_path: Path):
    """The canned server answers every request COMPLETED: handoff turns record that no
    INPUT_REQUIRED came and that no side effect was sent; the verdict warns, never ``lost``.
    The --slo gates are rules (replacing availability): one fails, the other passes."""
    http, ws = free_port(), free_port()
    with start_process([sys.executable, "-m", "rtalab.loadtests.loadrun.canned", str(http),
                        str(ws)],
                       ready_port=http, port=http, name="canned"):
        target = f"http://127.0.0.1:{http}"
        p, run = load_run(tmp_path, "--target", target, "--duration", "2",
                          "--set", "workload.handoff_share=0.5",
                          "--slo", "turn_completion_p99_s<=0.000001", "--slo", "success_rate>=0.9")
    assert p.returncode == 1, p.stderr + p.stdout
    assert run is not None
    turns = jsonl(run / "ledger" / "turns.jsonl")
    hand = [t for t in turns if t["handoff"]]
    assert hand and all(t["input_required"] is False and t["side_effect"] is False
                        for t in hand)
    assert any(t["side_effect_planned"] for t in hand)
    v = _verdict(run)
    assert v["failed"] == ["slo turn_completion_p99_s<=0.000001"]
    rules = {r["name"]: r for r in v["rules"]}
    assert rules["slo success_rate>=0.9"]["status"] == "pass"
    assert rules["availability"]["status"] == "not-checked"
    assert rules["slo turn_completion_p99_s<=0.000001"]["detail"].startswith(
            "caller_completion_s.p99 = ")
    assert v["warnings"] == [f"{len(hand)} of {len(hand)} handoff turns were answered COMPLETED "
                             "without INPUT_REQUIRED: the server never asked for input (its "
                             "continuation and side effect were not sent; handoff not "
                             "exercised)"]
    assert "warning: " in p.stdout
    assert "FAILED slo turn_completion_p99_s<=0.000001 [release gate (--slo)]" in p.stdout


def test_a_bad_slo_is_one_line_exit_2():
    bad = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "run", "baseline",
                          "--slo", "nonsense<=1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "unknown metric 'nonsense'" in bad.stderr


def _ours(run_dir: Path) -> list[int]:
    """Pids of live processes whose command line or environment names the run folder."""
    me, found = os.getpid(), []
    needle = str(run_dir).encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if needle in (d / "cmdline").read_bytes() or needle in (d / "environ").read_bytes():
                stat = (d / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_sighup_and_sigint_interrupt_like_ctrl_c(sig: int):
    """Within a load run, SIGHUP and SIGINT raise KeyboardInterrupt (SIGTERM: the test
    below), so the run's cleanup and ``interrupted`` status follow; handlers are restored."""
    from rtalab.sim.shared.results import signals_interrupt

    before = signal.getsignal(signal.SIGHUP)
    with python_sigint(), pytest.raises(KeyboardInterrupt), signals_interrupt():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # never reached: the handler raises at once
    assert signal.getsignal(signal.SIGHUP) is before


def test_sigterm_stops_every_process_and_marks_the_run_interrupted(tmp_path: Path):
    """SIGTERM (``kill``, ``timeout``, a cancelled CI job) on a run with a Locust master and
    two workers: within seconds nothing it started is left, meta.json says interrupted, and
    ``load summarize`` judges the partial ledger and says so."""
    sig, processes = signal.SIGTERM, "2"
    sc = tmp_path / "scenario.toml"
    sc.write_text(FAST, encoding="utf-8")
    out = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "rtalab.sim.cli", "load", "run", str(sc),
                             "--out", str(out), "--quiet", "--no-plots", "--duration", "60",
                             "--processes", processes], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60

        def started() -> bool:
            return any(p.stat().st_size > 0 for p in out.glob("*/ledger/attempts.jsonl"))

        while not started() and time.time() < deadline:
            time.sleep(0.2)  # polling a subprocess with a bounded deadline
        run = next(out.glob("*-load-*"))
        assert _ours(run), "the run's processes should be running"
        t_sig = time.time()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        took = time.time() - t_sig
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 10.0
    assert _ours(run) == []  # nothing the run started is left
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    assert meta["status"] == "interrupted"
    assert (run / "ledger" / "witness.jsonl").exists()  # this run's executions so far
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "summarize", str(run)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "was interrupted" in p.stdout and "verdict: INTERRUPTED" in p.stdout
    v = _verdict(run)
    assert v["verdict"] == "INTERRUPTED" and "incomplete" not in v["failed"]


def test_a_witness_reused_across_runs_gives_no_false_unexpected(tmp_path: Path):
    """Two runs against one deployment and one witness: the second run's checker reads only
    its own part of the witness ledger."""
    sc = tmp_path / "server.toml"
    sc.write_text(FAST, encoding="utf-8")
    runs = []
    with start_witness(tmp_path / "w.sqlite") as witness, start_reasoner(
            scenario=sc, witness=witness.url, dedup=f"sqlite:///{tmp_path / 'd.sqlite'}",
            extra_args=["--token", "tok=carol"]) as reasoner:
        for i in range(2):
            (tmp_path / f"r{i}").mkdir()
            p, run = load_run(tmp_path / f"r{i}", "--target", reasoner.url, "--token", "tok",
                              "--witness", witness.url, "--duration", "1.5")
            assert p.returncode == 0, p.stdout + p.stderr
            runs.append(run)
    first, second = (json.loads((r / "ledger" / "counts.json").read_text()) for r in runs)
    assert first["witness_since"] == 0 and first["witness_rows"] > 0
    assert second["witness_since"] == first["witness_rows"]  # ids 1..n belong to the first run
    rows = jsonl(runs[1] / "ledger" / "witness.jsonl")
    assert len(rows) == second["witness_rows"]
    assert min(r["id"] for r in rows) > first["witness_rows"]
    v = _verdict(runs[1])
    assert v["verdict"] == "PASS"
    # the server's counter, too, is this run's share (the difference over the run)
    assert {r["name"]: r["status"] for r in v["rules"]}["server-ledger-agree"] == "pass"
