"""Issue 25's done-when, on real servers: ``rtalab load run release_gate --binding all --tls``
passes against the embedded Reasoner over mutual TLS (a throwaway CA: the witness, the
Reasoner and the chaos proxy require client certificates; every client presents one and
verifies the servers), with every binding's calls -- gRPC included -- through the chaos
proxy; and each planted bug (``--unsafe-bug``) fails its rule in the same setting, its
violations found here in the ledgers on the attempts of EVERY binding: late-claim and
turn-key give many anyway; continuation-twice gives 5-9 per binding (paused turns, measured
2026-12-04); volatile's come only from resends across the one restart, so its run resends
every side-effect request and restarts later (``VOLATILE``: 7-17 per binding measured, 1-2
without -- a binding could show none).  These are the suite's
only runs of the planted dedup bugs: one run per bug covers every binding (issue 32's ten
minutes); the correct Reasoner and the auth and no-input controls per binding are
tests/load/test_gate_triggers.py (sse, ws) and test_load_grpc.py (grpc).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rtalab.loadtests.live.bindings import parse_bindings
from tests.load.conftest import jsonl
from tests.load.test_gate_triggers import (
    CONSEQUENCES,
    CONTROLS,
    EVIDENCE,
    SHORT,
    _copies_across_restart,
    _json,
    needs_chaos,
    rtalab_load,
)

ALL_TLS = [*(a if a != "both" else "all" for a in SHORT), "--tls"]
# the volatile store's run: every turn a side effect, every request resent 14 s later, the
# restart at 9 s -- resends across the restart on every binding (see the module docstring)
VOLATILE = ["--set", "workload.side_effect_share=1.0", "--set", "load.resend_share=1.0",
            "--set", "load.restart_at_s=[9.0]"]


@needs_chaos
def test_release_gate_on_every_binding_over_mutual_tls(tmp_path) -> None:
    every = set(parse_bindings("all"))
    variants = {"correct": [], **{bug: ["--unsafe-bug", bug] for bug in CONTROLS}}
    variants["volatile"] += VOLATILE
    # three at once: more starve a busy 2-core machine (tests/load/test_gate_triggers.py)
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(rtalab_load, tmp_path / name, *ALL_TLS, *extra,
                                     timeout_s=400.0)
                   for name, extra in variants.items()}
        done = {name: f.result() for name, f in futures.items()}

    p, run = done["correct"]
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    verdict = _json(run / "verdict.json")
    assert verdict["ok"] and verdict["failed"] == [], verdict["failed"]
    meta = _json(run / "meta.json")
    assert meta["tls"].startswith("mutual TLS") and meta["tls_insecure"] is False
    assert meta["grpc_target"].startswith("grpcs://") and meta["grpc_proxy"]
    assert (run / "tls" / "ca.pem").is_file()
    assert {a["binding"] for a in jsonl(run / "ledger" / "attempts.jsonl")} == every
    rules = {r["name"]: r["status"] for r in verdict["rules"]}
    assert rules["transport-equivalence"] == "pass"
    # the proxy faulted every binding's requests (WS/SSE/REST on HTTP, gRPC on HTTP/2)
    faulted = {r["binding"] for r in jsonl(run / "ledger" / "chaos.jsonl")
               if r["kind"] in ("duplicate", "reorder")}
    assert every <= faulted, faulted
    cover = {c["name"]: c["status"] for c in verdict["coverage"]}
    assert all(s == "exercised" for s in cover.values()), cover

    for bug, rule in CONTROLS.items():
        p, run = done[bug]
        assert p.returncode == 1, (bug, p.stdout[-2000:], p.stderr[-2000:])
        verdict = _json(run / "verdict.json")
        assert rule in verdict["failed"], (bug, verdict["failed"])
        allowed = {rule, *CONSEQUENCES.get(bug, ()), "transport-equivalence"}
        assert set(verdict["failed"]) <= allowed, (bug, verdict["failed"])
        assert _json(run / "meta.json")["unsafe_bugs"] == [bug]
        assert "TEST ONLY" in p.stderr and bug in p.stderr
        found = EVIDENCE[bug](run)
        assert found == every, (bug, found)  # the bug fails on every binding
    # the volatile store's duplicates come from the restart: copies sent after it
    assert _copies_across_restart(done["volatile"][1]) > 0
