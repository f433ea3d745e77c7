"""``rtalab load run`` end to end: embedded Reasoner + witness, Locust subprocesses, ledgers."""

from __future__ import annotations

import csv

import pandas as pd

from sim import schema as S
from tests.load.conftest import jsonl, load_run


def test_sse_run_ledger_matches_server_and_witness(tmp_path, read_json):
    p, run = load_run(tmp_path, "--binding", "sse")
    assert p.returncode == 0, p.stderr
    led = run / "ledger"
    counts = read_json(led / "counts.json")
    assert counts["ledger_complete"] and counts["attempts"] > 20
    # every request the Live users sent was answered and counted by the Reasoner, and every
    # completed side-effect request ran exactly once at the witness
    assert counts["server_turns_answered"] == counts["attempts_answered"] == counts["attempts"]
    assert counts["witness_rows"] == counts["completed_side_effect_request_guids"] > 0
    turns = jsonl(led / "turns.jsonl")
    calls = jsonl(led / "calls.jsonl")
    assert len(turns) == 3 * len(calls)  # turns_per_call = 3, nothing left open
    assert {t["outcome"] for t in turns} == {"completed"}
    assert any(t["handoff"] for t in turns)
    # Locust stats rows: the stream requests, time to first chunk and turn completion
    with open(run / "locust" / "locust_stats.csv", encoding="utf-8") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    assert int(rows[("POST", "SendStreamingMessage")]["Request Count"]) == counts["attempts"]
    assert int(rows[("TURN", "sse")]["Request Count"]) == len(turns)
    assert int(rows[("TTFC", "sse")]["Request Count"]) == len(turns)
    # the simulator's schema and summary
    t = pd.read_parquet(run / "turns.parquet")
    assert list(t.columns) == list(S.columns("turns"))
    assert list(pd.read_parquet(run / "attempts.parquet").columns) == list(S.columns("attempts"))
    summary = read_json(run / "summary.json")
    m = summary["metrics"]
    assert m["success_rate"]["mean"] == 1.0
    assert 0 < m["ttfc_s.p50"]["mean"] < m["completion_s.p50"]["mean"] < 1.0
    assert m["load_amplification"]["mean"] is None  # not visible to a client: never invented
    assert read_json(run / "meta.json")["status"] == "complete"


def test_two_processes_both_bindings_complete_ledger(tmp_path, read_json):
    p, run = load_run(tmp_path, "--binding", "both", "--processes", "2")
    assert p.returncode == 0, p.stderr
    gather = read_json(run / "ledger" / "gather.json")
    assert gather["complete"] and set(gather["processes"]) == {"w0", "w1"}
    for proc in gather["processes"].values():
        assert proc["rows_received"] == proc["announced"]["rows"]
        assert proc["rows_received"]["attempts"] > 0
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert {a["binding"] for a in attempts} == {"sse", "ws"}
    assert {a["process"] for a in attempts} == {"w0", "w1"}
    counts = read_json(run / "ledger" / "counts.json")
    assert counts["server_turns_answered"] == counts["attempts"] == len(attempts)
    assert counts["witness_rows"] == counts["completed_side_effect_request_guids"]


def test_bad_input_one_line_exit_2(tmp_path):
    p, run = load_run(tmp_path, "--binding", "carrier-pigeon")
    assert p.returncode == 2 and run is None
    assert len(p.stderr.strip().splitlines()) == 1
    p, _ = load_run(tmp_path, scenario="[workload]\ncalls_per_s = -1\n")
    assert p.returncode == 2 and "scenario error" in p.stderr
    p, _ = load_run(tmp_path, "--target", "http://127.0.0.1:9")
    assert p.returncode == 2 and "does not answer" in p.stderr
    p, _ = load_run(tmp_path, "--unsafe-test-retry-code", "internal")
    assert p.returncode == 2 and "already retryable" in p.stderr
