"""The release gate (issue 15 points 5-7): triggers, coverage and negative controls.

One test process runs the short ``release_gate`` variants at once (real witness,
reference Reasoner, chaos proxy and Locust per run, ``--binding both``): the correct
Reasoner passes with every bug class exercised, a server that refuses every credential
fails ``auth`` on both bindings, one that never asks for input warns.  The planted
dedup bugs (``--unsafe-bug``) run once, on every binding at once over mutual TLS
(tests/load/test_release_gate_all_tls.py: each fails its rule, its violations found
there in the ledgers on every binding where the bug gives many): one run per bug, not
one per binding, keeps the suite within its ten minutes (issue 32).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.load.conftest import FAST, jsonl, load_run

HAVE_CHAOS = importlib.util.find_spec("rtalab.loadtests.chaos") is not None
needs_chaos = pytest.mark.skipif(not HAVE_CHAOS, reason="needs rtalab.loadtests.chaos")

SEED = int(os.environ.get("RTALAB_GATE_SEED", "1"))  # the test passes on other seeds too
# release_gate, short: a restart at 5 s, an outage at 14.5 s, arrivals for 16 s; resends 14 s
# after the attempt ended, so those ending in the seconds before the restart reach the
# restarted server (a restart takes 0.7-11 s here while seven runs share two busy cores);
# more injected errors and handoffs so that few turns show them. Turns in flight while the
# Reasoner restarts fail (it is down) and are not judged by the availability gate.
SHORT = ["release_gate", "--chaos", "--binding", "both", "--duration", "16", "--drain", "25",
         "--set", "run.warmup_s=1", "--set", "load.restart_at_s=[5.0]",
         "--set", 'network.outages=[{start_s=14.5,duration_s=0.8,direction="both"}]',
         "--set", "workload.calls_per_s=5", "--set", "workload.think_time_s=0.3",
         "--set", "load.resend_share=0.6", "--set", "load.resend_delay_s=14.0",
         "--set", "workload.handoff_share=0.4",
         "--set", "load.concurrent_duplicate_share=0.4",
         "--set", "reasoner.errors={schema-validation=0.03,rate-limited=0.1}",
         "--set", f"run.seed={SEED}", "--quiet", "--no-plots",
         # 3 % of executions fail schema-validation by design and a handful of turns are
         # judged: the availability this short run declares (the preset keeps 0.9)
         "--set", "load.availability_min=0.75"]
# each planted bug and the one rule that must fail
CONTROLS = {"late-claim": "duplicated", "turn-key": "cross-session-answer",
            "volatile": "duplicated", "continuation-twice": "continuation-answered-twice"}
# what else a planted bug may bring down: turn-key answers one call's t-1 with another call's
# outcome -- a side-effect turn told COMPLETED without running (lost), or every later t-1
# failed by a replayed failure (the success SLO). One scope for every caller couples the
# calls: whose t-1 runs and whose is answered by a replay depends on when each binding's calls
# send it, so the bindings' success and latency can differ (transport-equivalence; seen in CI)
CONSEQUENCES = {"turn-key": {"lost", "availability", "foreign-task-answer",
                             "transport-equivalence"}}
ALL_CLASSES = {"duplicate-while-running", "duplicate-before-original", "resend-after-completion",
               "resend-across-restart", "turn-id-reused", "continuation-twice", "reordering",
               "outage", "restart", "non-retryable", "rate-limited"}


def rtalab_load(tmp: Path, *args: str, timeout_s: float = 150.0
                ) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    """``rtalab load run ARGS --out TMP/results``; the process and its run folder."""
    out = tmp / "results"
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "run", *args, "--out",
                        str(out)],
                       capture_output=True, text=True, timeout=timeout_s)
    runs = sorted(out.glob("*-load-*")) if out.exists() else []
    return p, (runs[-1] if runs else None)


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _bindings_duplicated(run: Path) -> set[str]:
    """Bindings of the requestGuids the witness executed more than once."""
    seen: dict[str, int] = {}
    for w in jsonl(run / "ledger" / "witness.jsonl"):
        seen[w["requestGuid"]] = seen.get(w["requestGuid"], 0) + 1
    dup = {g for g, n in seen.items() if n > 1}
    return {a["binding"] for a in jsonl(run / "ledger" / "attempts.jsonl")
            if a["request_guid"] in dup}


def _bindings_cross_session(run: Path) -> set[str]:
    """Bindings of attempts sent in their call's session and answered in another one."""
    return {a["binding"] for a in jsonl(run / "ledger" / "attempts.jsonl")
            if a["context_id"] and a["context_id_learned"]
            and a["context_id"] != a["context_id_learned"]}


def _bindings_continuation_twice(run: Path) -> set[str]:
    """Bindings of continuations that executed together with their continuation-dup copy."""
    executed = {w["requestGuid"] for w in jsonl(run / "ledger" / "witness.jsonl")}
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    mains = {(a["call_id"], a["turn_index"], a["attempt"]) for a in attempts
             if a["phase"] == "continuation" and not a["injected"]
             and a["request_guid"] in executed}
    return {a["binding"] for a in attempts
            if a["injected"] == "continuation-dup" and a["task_id"]
            and a["request_guid"] in executed
            and (a["call_id"], a["turn_index"], a["attempt"]) in mains}


EVIDENCE = {"late-claim": _bindings_duplicated, "turn-key": _bindings_cross_session,
            "volatile": _bindings_duplicated,
            "continuation-twice": _bindings_continuation_twice}


def _copies_across_restart(run: Path) -> int:
    """Client copies of a duplicated requestGuid sent after a restart, their original
    before it (the volatile store's failure must come from the restart)."""
    restarts = jsonl(run / "ledger" / "restarts.jsonl")
    seen: dict[str, int] = {}
    for w in jsonl(run / "ledger" / "witness.jsonl"):
        seen[w["requestGuid"]] = seen.get(w["requestGuid"], 0) + 1
    by_guid: dict[str, list[dict[str, Any]]] = {}
    for a in jsonl(run / "ledger" / "attempts.jsonl"):
        if seen.get(a["request_guid"], 0) > 1:
            by_guid.setdefault(a["request_guid"], []).append(a)
    n = 0
    for rows in by_guid.values():
        first = min(r["send_s"] for r in rows if not r["injected"])
        for r in rows:
            n += any(first < x["start_unix"] and r["send_s"] > x["end_unix"] for x in restarts)
    return n


@needs_chaos
def test_release_gate_passes_the_correct_reasoner_and_refuses_what_it_must(tmp_path):
    variants = {"correct": [], **{bug: ["--unsafe-bug", bug] for bug in
                                  ["refuse-auth", "no-input-required"]}}
    # three runs at once: seven at once starve a busy 2-core machine, where restarts then
    # take longer than the run and the correct run exercises nothing (seen in CI)
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(rtalab_load, tmp_path / name, *SHORT, *extra)
                   for name, extra in variants.items()}
        done = {name: f.result() for name, f in futures.items()}

    p, run = done["correct"]
    assert p.returncode == 0, p.stderr
    verdict = _json(run / "verdict.json")
    assert verdict["ok"] and verdict["failed"] == []
    cover = {c["name"]: c for c in verdict["coverage"]}
    assert set(cover) == ALL_CLASSES
    assert {n for n, c in cover.items() if c["status"] == "exercised"} == ALL_CLASSES, cover
    assert cover["restart"]["count"] == 1
    assert "coverage (11 of 11 bug classes exercised" in (run / "verdict.txt").read_text()
    # the resends 14 s after completion: the window the gate demanded, said in the verdict
    after = cover["resend-after-completion"]
    assert after["min_dedup_window_s"] >= 13.0, after
    assert "dedup window >=" in (run / "verdict.txt").read_text()
    restarts = jsonl(run / "ledger" / "restarts.jsonl")
    assert [(r["at_s"], r["how"], r["ready"]) for r in restarts] == [(5.0, "crash", True)]
    meta = _json(run / "meta.json")
    assert [e["event"] for e in meta["timeline"]] == ["load-start", "restart (crash)"]
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert {a["binding"] for a in attempts} == {"sse", "ws"}
    # per-call turnIds: t-1, t-2, ... in every call, the same values in many calls
    ids = {a["turn_id"] for a in attempts}
    assert ids <= {f"t-{i}" for i in range(1, 40)} and "t-1" in ids

    # a server that refuses every credential: the auth gate, on both bindings, never retried
    p, run = done["refuse-auth"]
    assert p.returncode == 1, p.stderr
    verdict = _json(run / "verdict.json")
    assert "auth" in verdict["failed"], verdict["failed"]
    assert set(verdict["failed"]) <= {"auth", "availability"}, verdict["failed"]
    refused = {(a["binding"], a["http_status"], a["error_code"])
               for a in jsonl(run / "ledger" / "attempts.jsonl") if a["http_status"] == 401}
    assert refused == {("sse", 401, "auth"), ("ws", 401, "auth")}
    cover = {c["name"]: c["status"] for c in verdict["coverage"]}
    for name in ("duplicate-while-running", "duplicate-before-original",
                 "resend-after-completion", "turn-id-reused",
                 "continuation-twice"):  # nothing was executed: nothing to deduplicate
        assert cover[name] == "not exercised", (name, cover)

    # a server that never asks for input: no false lost, a warning, the class not exercised
    p, run = done["no-input-required"]
    verdict = _json(run / "verdict.json")
    assert p.returncode == 0 and verdict["ok"], (p.stderr, verdict["failed"])
    assert any("never asked for input" in w for w in verdict["warnings"]), verdict["warnings"]
    cover = {c["name"]: c["status"] for c in verdict["coverage"]}
    assert cover["continuation-twice"] == "not exercised"


def test_bad_flags_are_refused_in_one_line(tmp_path):
    cases = [
        (["release_gate", "--crash-at", "50", "--duration", "5"],
         "--crash-at 50 is not before the end of arrivals (--duration 5)"),
        (["release_gate", "--duration", "20"], "load.restart_at_s 30 is not before the end"),
        (["release_gate", "--dedup", "mysql://x"], "unknown scheme 'mysql'"),
        (["release_gate", "--restart-cmd", "true"], "--restart-cmd needs --target"),
        (["release_gate", "--target", "http://127.0.0.1:9", "--restart-at", "5"],
         "--restart-at with --target needs --restart-cmd"),
        (["release_gate", "--target", "http://127.0.0.1:9", "--unsafe-bug", "volatile"],
         "--unsafe-bug need the embedded Reasoner"),
        (["release_gate", "--unsafe-bug", "no-such-bug"], "invalid choice"),
    ]
    for args, message in cases:
        p, run = rtalab_load(tmp_path, *args, timeout_s=60)
        assert p.returncode == 2 and run is None, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, (args, p.stderr)


def test_restart_command_against_a_target_behind_the_chaos_proxy(tmp_path, read_json):
    """--target with --restart-cmd: the user's command runs at --restart-at (here a script
    that leaves a marker), the run waits for the agent card and records the restart;
    --chaos puts the proxy in front of the target; two --token: two principals."""
    from rtalab.loadtests.common.procs import free_port, start_reasoner, start_witness

    scenario = FAST + "[network.downlink]\nreorder = 0.3\n"
    sc = tmp_path / "server.toml"
    sc.write_text(scenario, encoding="utf-8")
    port = free_port()
    marker = tmp_path / "restarted"
    script = tmp_path / "restart.py"
    script.write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('x')\n", encoding="utf-8")
    with start_witness(tmp_path / "w.sqlite") as witness, start_reasoner(
            port=port, scenario=sc, witness=witness.url,
            dedup=f"sqlite:///{tmp_path / 'd.sqlite'}",
            extra_args=["--token", "tok=carol", "--token", "tok2=dave"]) as reasoner:
        p, run = load_run(tmp_path, "--target", reasoner.url, "--token", "tok", "--token",
                          "tok2", "--witness", witness.url, "--duration", "3", "--chaos",
                          "--restart-cmd", f"{sys.executable} {script}", "--restart-at", "1.5",
                          "--set", 'load.turn_ids="per_call"', scenario=scenario)
        assert reasoner.alive()
    assert p.returncode == 0, p.stderr
    assert marker.exists()
    rows = jsonl(run / "ledger" / "restarts.jsonl")
    assert [(r["at_s"], r["how"], r["exit_code"], r["ready"]) for r in rows] == [
        (1.5, "command", 0, True)]
    assert rows[0]["start_s"] >= 1.5
    assert (run / "ledger" / "chaos.jsonl").exists()  # the proxy was in front
    verdict = read_json(run / "verdict.json")
    assert verdict["ok"]
    cover = {c["name"]: c for c in verdict["coverage"]}
    assert cover["restart"]["count"] == 1 and cover["reordering"]["status"] == "exercised"
    assert {w["principal"] for w in jsonl(run / "ledger" / "witness.jsonl")} == {"carol", "dave"}
