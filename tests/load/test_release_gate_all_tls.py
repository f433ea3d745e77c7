"""Issue 25's done-when, on real servers: ``rtalab load run release_gate --binding all --tls``
passes against the embedded Reasoner over mutual TLS (a throwaway CA: the witness, the
Reasoner and the chaos proxy require client certificates; every client presents one and
verifies the servers), with every binding's calls -- gRPC included -- through the chaos
proxy; and each planted bug (``--unsafe-bug``) fails its rule in the same setting, its
violations found here in the ledgers on the attempts of every binding where the bug gives
many (late-claim, turn-key), on at least one where a short run gives a handful (volatile:
resends across the one restart; continuation-twice: paused turns).  These are the suite's
only runs of the planted dedup bugs: one run per bug covers every binding (issue 32's ten
minutes); the correct Reasoner and the auth and no-input controls per binding are
tests/load/test_gate_triggers.py (sse, ws) and test_load_grpc.py (grpc).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from loadtests.live.bindings import parse_bindings
from tests.load.conftest import jsonl
from tests.load.test_gate_triggers import (
    BOTH_BINDINGS,
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


@needs_chaos
def test_release_gate_on_every_binding_over_mutual_tls(tmp_path) -> None:
    every = set(parse_bindings("all"))
    variants = {"correct": [], **{bug: ["--unsafe-bug", bug] for bug in CONTROLS}}
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
        assert found == every if bug in BOTH_BINDINGS else found, (bug, found)
    # the volatile store's duplicates come from the restart: copies sent after it
    assert _copies_across_restart(done["volatile"][1]) > 0
