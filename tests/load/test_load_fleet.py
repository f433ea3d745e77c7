"""Issue 27 point 2 on the load side: a scenario's ``[fleet]`` drives the embedded deployment.

Two Reasoner processes behind the chaos proxy as balancer.  With ``state = "per-replica"``
(each its own in-memory dedup store) and a random balancer, a client resend that lands on the
other replica runs its side effect again: the checker's ``duplicated`` rule reports it, and
the summary counts it as the simulator does, ``fleet.dup_request_guid_cross_replica`` (every
binding, gRPC included).
With ``state = "shared"`` (one SQLite store) the same resends are absorbed, also through a
replica killed and restarted by ``[[fleet.failures]]``.  Requests reach both replicas: the
per-replica shares are in ``summary.json`` under the simulator's metric names.
"""

from __future__ import annotations

import collections

from tests.load.conftest import jsonl, load_run
from tests.load.test_load_negative import DUPS

# the negative controls' duplicates (client resends, concurrent copies) on two replicas
FLEET = DUPS + """
[fleet]
replicas = 2
"""


def _scenario(fleet: str, duration_s: float = 3) -> str:
    return FLEET.replace("duration_s = 3", f"duration_s = {duration_s:g}") + fleet + "\n"


def _rules(read_json, run):
    return {r["name"]: r for r in read_json(run / "verdict.json")["rules"]}


def _replicas(run) -> collections.Counter:
    """Attempts per replica, from the ``r<i>/`` the proxy put on X-RTA-Worker."""
    return collections.Counter(_replica(a) for a in jsonl(run / "ledger" / "attempts.jsonl")
                               if a.get("server_worker"))


def test_per_replica_state_duplicates_a_resend_on_the_other_replica(tmp_path, read_json):
    sc = _scenario('balancer = "random"\nstate = "per-replica"')
    p, run = load_run(tmp_path, "--binding", "all", scenario=sc)
    assert p.returncode == 1, p.stderr
    dup = _rules(read_json, run)["duplicated"]
    assert dup["status"] == "fail" and dup["count"] > 0, dup
    seen = _replicas(run)
    assert set(seen) == {"r0", "r1"} and min(seen.values()) > 5, seen
    # every binding is balanced: each one's answers name a replica (gRPC per call too)
    named = {a["binding"] for a in jsonl(run / "ledger" / "attempts.jsonl")
             if _replica(a) in ("r0", "r1")}
    assert named == {"sse", "rest", "ws", "grpc"}, named
    m = read_json(run / "summary.json")["metrics"]
    shares = [m[f"fleet.replica_requests_share.r{i}"]["mean"] for i in range(2)]
    assert abs(sum(shares) - 1) < 1e-9 and min(shares) > 0.2, shares
    assert m["fleet.requests_imbalance"]["mean"] >= 1.0
    # the hazard by cause, as the simulator splits it: every extra run was on the other replica
    assert m["fleet.dup_request_guid_cross_replica_per_1k_turns"]["mean"] > 0
    assert m["fleet.dup_request_guid_same_replica_per_1k_turns"]["mean"] == 0
    assert m["fleet.dup_request_guid_after_restart_per_1k_turns"]["mean"] == 0
    assert {w["server"] for w in jsonl(run / "ledger" / "witness.jsonl")} == {"r0", "r1"}
    meta = read_json(run / "meta.json")
    assert meta["fleet"]["state"] == "per-replica" and meta["network"] == "chaos-proxy"
    assert (run / "logs" / "reasoner-r1.log").exists()


def test_shared_state_absorbs_them_through_a_replica_failure(tmp_path, read_json):
    sc = _scenario('balancer = "round_robin"\nstate = "shared"\nhealth_check_s = 0.2\n'
                   "[[fleet.failures]]\nreplica = 1\nstart_s = 1.0\nduration_s = 0.8", 5)
    # over mutual TLS: the proxy verifies every replica, the replicas the witness
    p, run = load_run(tmp_path, "--tls", scenario=sc)
    assert p.returncode == 0, p.stderr + _text(run, "verdict.txt")
    rules = _rules(read_json, run)
    assert rules["duplicated"]["status"] == "pass" and rules["duplicated"]["count"] == 0
    assert "https://" in _text(run, "logs/chaos.log")  # balanced over TLS
    led = run / "ledger"
    witness = jsonl(led / "witness.jsonl")
    assert witness and max(collections.Counter(w["requestGuid"] for w in witness).values()) == 1
    m = read_json(run / "summary.json")["metrics"]  # no requestGuid ran twice, by any cause
    assert [m[f"fleet.dup_request_guid_{c}_per_1k_turns"]["mean"] for c in (
        "cross_replica", "after_restart", "same_replica")] == [0, 0, 0]
    # the failure: killed at 1 s, out of the rotation, restarted at 1.8 s, back in
    (row,) = jsonl(led / "restarts.jsonl")
    assert row["how"] == "replica" and row["replica"] == 1 and row["ready"]
    assert row["start_s"] >= 1.0 and row["end_s"] >= 1.8
    lines = [c for c in jsonl(led / "chaos.jsonl") if c.get("replica") == 1]
    assert [c["kind"] for c in lines] == ["replica-out", "replica-in"], lines
    out_t, in_t = lines[0]["t"], lines[1]["t"]
    assert row["start_unix"] < out_t < row["start_unix"] + 1.0, (row, lines)
    assert in_t >= row["end_unix"] - 0.5, (row, lines)
    attempts = jsonl(led / "attempts.jsonl")
    # out of the rotation: every request went to r0, none to the dead replica (no 502); the
    # margins: a request reaches the proxy a little after the client stamped its send
    while_out = [a for a in attempts if out_t + 0.1 < a["send_s"] < in_t - 0.1]
    assert while_out and {_replica(a) for a in while_out} == {"r0"}, while_out
    after = [_replica(a) for a in attempts if a["send_s"] > in_t + 0.1]
    assert set(after) == {"r0", "r1"}, (after, in_t - row["t"])  # back in the rotation


def _text(run, name: str) -> str:
    """A file of the run folder, or "" (for a failure's message)."""
    return (run / name).read_text() if run is not None and (run / name).exists() else ""


def _replica(a: dict) -> str | None:
    """The replica that answered an attempt (None: no answer from any, e.g. a 502)."""
    w = a.get("server_worker")
    return str(w).split("/")[0] if w else None


def test_what_a_fleet_cannot_drive_is_refused_in_one_line(tmp_path):
    per = _scenario('state = "per-replica"')
    for args, sc, said in (
            (["--no-chaos"], per, "the chaos proxy is the fleet's balancer"),
            (["--dedup", "memory"], per, "each replica keeps its own in-memory store"),
            (["--dedup", "memory"], _scenario('state = "shared"'), "a memory store is each "),
            (["--crash-at", "1"], per, "[[fleet.failures]]")):
        p, run = load_run(tmp_path, *args, scenario=sc)
        assert p.returncode == 2 and run is None, (args, p.stderr)
        assert said in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "Traceback" not in p.stderr
    p, _ = load_run(tmp_path, "--target", "http://127.0.0.1:9", scenario=per)
    assert p.returncode == 2
    assert "[fleet] drives only the embedded deployment" in p.stderr, p.stderr
