"""``rtalab load run --binding grpc``: the Live users over the A2A gRPC binding, end to end.

Real subprocesses on 127.0.0.1: the embedded witness and Reasoner (serving gRPC on the
port its agent card advertises), Locust with grpcio in gevent mode.  A run passes with
ledger == server counts, over plaintext and over mutual TLS (``--tls``); a target whose
card advertises no gRPC interface is one line, exit 2; duplicates reach a Reasoner that
does not deduplicate and the run fails ``duplicated``; and the release gate on gRPC alone
passes the correct Reasoner and fails one that refuses every credential (its planted dedup
bugs on gRPC: tests/load/test_release_gate_all_tls.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rtalab.loadtests.common.procs import start_reasoner
from tests.load.conftest import FAST, jsonl, load_run
from tests.load.parallel import load_runs
from tests.load.test_gate_triggers import (
    EVIDENCE,
    SHORT,
    _json,
    needs_chaos,
    rtalab_load,
)

COPIES = FAST.replace("[live.timeouts]", "[load]\nresend_share = 0.5\n"
                      "concurrent_duplicate_share = 0.5\n[live.timeouts]")


def _check_clean(p, run: Path | None, read_json) -> None:
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert run is not None
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert attempts and {a["binding"] for a in attempts} == {"grpc"}
    answered = [a for a in attempts if a["events"]]
    assert answered and all(a["echo"] and a["http_status"] == 200 for a in answered)
    assert all(a["order_violations"] == 0 for a in attempts)
    rules = {r["name"]: r for r in read_json(run / "verdict.json")["rules"]}
    for name in ("server-ledger-agree", "witness-ledger-agree", "ledger-gathered", "lost",
                 "duplicated", "ordering", "extension-echo"):
        assert rules[name]["status"] == "pass", rules[name]
    counts = read_json(run / "ledger" / "counts.json")
    assert counts["server_turns_answered"] == counts["attempts_answered"] > 0
    assert counts["witness_rows"] > 0
    assert read_json(run / "meta.json")["binding"] == "grpc"


@pytest.fixture(scope="module")
def grpc_runs(tmp_path_factory: pytest.TempPathFactory):
    """The module's three short gRPC runs, at once: plaintext, mutual TLS, and duplicates
    against a Reasoner without dedup."""
    return load_runs(tmp_path_factory.mktemp("grpc-runs"), {
        "plain": ["--binding", "grpc", "--duration", "3"],
        "mtls": ["--tls", "--binding", "grpc", "--duration", "3"],
        "no-dedup": ["--binding", "grpc", "--dedup-mode", "none", "--duration", "3"],
    }, scenarios={"no-dedup": COPIES})


def test_a_grpc_run_passes_with_ledger_equal_to_server_counts(grpc_runs, read_json) -> None:
    _check_clean(*grpc_runs["plain"], read_json)


def test_a_grpc_run_over_mutual_tls(grpc_runs, read_json) -> None:
    p, run = grpc_runs["mtls"]
    _check_clean(p, run, read_json)
    assert run is not None and read_json(run / "meta.json")["tls"].startswith("mutual TLS")


def test_duplicates_over_grpc_fail_a_reasoner_without_dedup(grpc_runs) -> None:
    p, run = grpc_runs["no-dedup"]
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "duplicated" in p.stdout
    assert run is not None and EVIDENCE["late-claim"](run) == {"grpc"}


# the chaos proxy's faults on the gRPC calls: every message-sending call duplicated (the
# copy first for half of them), stream messages reordered, a few streams cut
PROXY_FAULTS = ["--chaos", "--set", "network.uplink.duplication=0.5",
                "--set", "network.downlink.reorder=0.3",
                "--set", "network.downlink.reorder_delay_s=0.05",
                "--set", "network.downlink.loss=0.01"]


@needs_chaos
def test_proxy_duplicates_on_grpc_reach_the_reasoner_and_are_deduplicated(tmp_path: Path,
                                                                          read_json) -> None:
    """The same run against the correct Reasoner (PASS: the witness counts one execution per
    requestGuid) and one that does not deduplicate (FAIL ``duplicated``: the proxy's copies
    reached it and ran)."""
    for name in ("ok", "bad"):
        (tmp_path / name).mkdir()
    with ThreadPoolExecutor(2) as pool:
        ok_f = pool.submit(load_run, tmp_path / "ok", "--binding", "grpc", *PROXY_FAULTS,
                           "--duration", "4")
        bad_f = pool.submit(load_run, tmp_path / "bad", "--binding", "grpc", *PROXY_FAULTS,
                            "--dedup-mode", "none", "--duration", "4")
        (p, run), (bad_p, bad_run) = ok_f.result(), bad_f.result()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert run is not None and bad_run is not None
    dups = [r for r in jsonl(run / "ledger" / "chaos.jsonl") if r["kind"] == "duplicate"]
    assert dups and {d["binding"] for d in dups} == {"grpc"}
    assert {d["copy_status"] for d in dups} == {"OK"} and {d["first"] for d in dups} == {
        True, False}
    rules = {r["name"]: r for r in read_json(run / "verdict.json")["rules"]}
    for name in ("duplicated", "lost", "witness-ledger-agree", "ordering"):
        assert rules[name]["status"] == "pass", rules[name]
    assert read_json(run / "ledger" / "counts.json")["witness_rows"] > 0
    assert bad_p.returncode == 1, bad_p.stdout[-3000:] + bad_p.stderr[-3000:]
    assert "duplicated" in read_json(bad_run / "verdict.json")["failed"]
    assert {r["binding"] for r in jsonl(bad_run / "ledger" / "chaos.jsonl")
            if r["kind"] == "duplicate"} == {"grpc"}


def test_a_target_without_a_grpc_interface_is_one_line_exit_2(tmp_path: Path) -> None:
    sc = tmp_path / "server.toml"
    sc.write_text(FAST, encoding="utf-8")
    with start_reasoner(scenario=sc, dedup="memory", extra_args=["--token", "t=alice"]) as r:
        p, _ = load_run(tmp_path, "--target", r.url, "--token", "t", "--binding", "grpc",
                        "--duration", "1")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and "advertises no GRPC interface" in lines[0], lines


@needs_chaos
def test_the_release_gate_on_grpc_passes_the_correct_reasoner_and_fails_a_refusing_one(tmp_path):
    """gRPC alone through the chaos proxy: the correct Reasoner passes with the bug classes
    exercised, one that refuses every credential fails ``auth``.  The planted dedup bugs on
    gRPC: tests/load/test_release_gate_all_tls.py (every binding in one run per bug)."""
    args = [a if a != "both" else "grpc" for a in SHORT]
    variants = {"correct": [], "refuse-auth": ["--unsafe-bug", "refuse-auth"]}
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(rtalab_load, tmp_path / name, *args, *extra,
                                     timeout_s=400.0)
                   for name, extra in variants.items()}
        done = {name: f.result() for name, f in futures.items()}

    p, run = done["correct"]
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    verdict = _json(run / "verdict.json")
    assert verdict["ok"] and verdict["failed"] == []
    cover = {c["name"]: c["status"] for c in verdict["coverage"]}
    # the gRPC calls go through the chaos proxy's gRPC side: its reordering and outage
    # count, as on the other bindings (docs/chaos.md: what they mean on HTTP/2)
    for name in ("duplicate-while-running", "resend-after-completion", "resend-across-restart",
                 "turn-id-reused", "continuation-twice", "restart", "reordering", "outage"):
        assert cover[name] == "exercised", (name, cover)
    assert {a["binding"] for a in jsonl(run / "ledger" / "attempts.jsonl")} == {"grpc"}
    faults = {(r["kind"], r["binding"]) for r in jsonl(run / "ledger" / "chaos.jsonl")}
    assert {("duplicate", "grpc"), ("reorder", "grpc")} <= faults, faults
    assert _json(run / "meta.json")["grpc_proxy"]  # the users dialled the proxy

    p, run = done["refuse-auth"]
    assert p.returncode == 1
    verdict = _json(run / "verdict.json")
    assert "auth" in verdict["failed"] and set(verdict["failed"]) <= {"auth", "availability"}
    # every answer is the refusal (UNAUTHENTICATED = 401, auth); attempts while the server
    # restarted got no answer at all
    answered = {(a["binding"], a["http_status"], a["error_code"], a["outcome"])
                for a in jsonl(run / "ledger" / "attempts.jsonl") if a["http_status"]}
    assert answered == {("grpc", 401, "auth", "failed")}, answered
