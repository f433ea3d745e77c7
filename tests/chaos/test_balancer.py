"""The chaos proxy as a fleet's load balancer: each policy (pure), then two real Reasoner
replicas behind a real proxy (routing, the ``r<i>/`` worker prefix, a replica killed and
restarted: out of and back into the rotation)."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

import pytest

from rtalab.loadtests.chaos.balancer import Balancer, context_id
from rtalab.loadtests.chaos.procs import start_chaos
from rtalab.loadtests.common.procs import free_port, start_reasoner
from rtalab.loadtests.wireclient import grpc_request
from tests.serve.conftest import TOKENS, Client, headers, message, stream, uid

UPS = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]


def test_round_robin_splits_evenly() -> None:
    b = Balancer(UPS, "round_robin")
    picks = [b.pick() for _ in range(300)]
    assert collections.Counter(picks) == {0: 100, 1: 100, 2: 100}
    assert picks[:4] == [0, 1, 2, 0]


def test_sticky_keeps_a_context_on_one_replica() -> None:
    b = Balancer(UPS, "sticky")
    for i in range(30):
        key = b.key_of({"params": {"message": {"contextId": f"ctx-{i}"}}}, f"guid-{i}")
        assert {b.pick(key) for _ in range(5)} == {b.pick(key)}
    # contexts spread over the replicas; the same key in another process: the same replica
    assert len({b.pick(f"ctx-{i}") for i in range(30)}) == 3
    assert Balancer(UPS, "sticky").pick("ctx-7") == b.pick("ctx-7")
    # REST bodies carry it as message.contextId; no contextId: the fallback key
    assert b.key_of({"message": {"contextId": "c"}}, "g") == "c" == context_id(
        {"params": {"message": {"contextId": "c"}}})
    assert b.key_of({"message": {}}, "g") == "g" and b.key_of(None, "g") == "g"


def test_least_outstanding_prefers_the_idle_replica() -> None:
    b = Balancer(UPS, "least_outstanding")
    with b.using(0), b.using(0), b.using(1):
        assert [b.pick() for _ in range(4)] == [2, 2, 2, 2]
    with b.using(1), b.using(2):
        assert b.pick() == 0
    assert b.outstanding == [0, 0, 0]


def test_power_of_two_picks_the_less_loaded_of_two() -> None:
    b = Balancer(UPS, "power_of_two", seed=5)
    with b.using(0), b.using(0), b.using(0), b.using(1):
        picks = collections.Counter(b.pick() for _ in range(300))
    assert picks[0] == 0  # never the busiest: it loses every pair it is drawn into
    assert picks[2] > picks[1] > 0  # 2 wins both of its pairs, 1 only the one against 0


def test_seeded_random_is_reproducible_and_uniform() -> None:
    a = [Balancer(UPS, "random", seed=3).pick() for _ in range(1)]
    one, two = Balancer(UPS, "random", seed=3), Balancer(UPS, "random", seed=3)
    seq = [one.pick() for _ in range(600)]
    assert seq == [two.pick() for _ in range(600)] and seq[:1] == a
    assert seq != [Balancer(UPS, "random", seed=4).pick() for _ in range(600)]
    assert min(collections.Counter(seq).values()) > 150


def test_a_failing_replica_leaves_the_rotation_after_the_health_check() -> None:
    b = Balancer(UPS, "round_robin", health_check_s=0.0)
    b.failed(1)
    assert b.routable == [0, 2] and 1 not in [b.pick() for _ in range(10)]
    b.healthy(1)
    assert b.routable == [0, 1, 2]
    slow = Balancer(UPS, "round_robin", health_check_s=60.0)
    slow.failed(1)
    assert slow.routable == [0, 1, 2]  # still in rotation until health_check_s passed
    with pytest.raises(ValueError, match="balancer must be one of"):
        Balancer(UPS, "fastest")


# ------------------------------------------------------------------------------ real processes

SCENARIO = """
[workload]
side_effect_share = 0.0
[reasoner]
reasoning_time_s = 0.005
chunks = 1
context_rate_per_s = 1000
context_burst = 1000
"""
DEADLINE_S = 20.0


def _replica(base: Path, i: int, port: int | None = None) -> Any:
    (base / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    args = ["--log-level", "warning", "--grpc-port", "0"]
    for token, principal in TOKENS.items():
        args += ["--token", f"{token}={principal}"]
    return start_reasoner(port=port, dedup="memory", scenario=base / "scenario.toml",
                          extra_args=args, log_path=base / f"reasoner-r{i}.log")


def _lines(ledger: Path, kind: str) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [r for r in (json.loads(x) for x in ledger.read_text().splitlines() if x.strip())
            if r["kind"] == kind]


def _wait_line(ledger: Path, kind: str, replica: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not [r for r in _lines(ledger, kind) if r["replica"] == replica]:
        assert time.monotonic() < deadline, f"no {kind} line for replica {replica}"
        time.sleep(0.02)  # polling the proxy's ledger with a deadline


def test_two_replicas_behind_the_proxy(tmp_path: Path, binding: str) -> None:
    reps = [_replica(tmp_path, i) for i in range(2)]
    ledger = tmp_path / "chaos.jsonl"
    px = start_chaos([r.url for r in reps], ledger=ledger, log_path=tmp_path / "chaos.log",
                     extra_args=["--balancer", "round_robin", "--health-check-s", "0",
                                 "--delay-s", "0", "--no-scenario-outages"])
    try:
        c = Client(px.url)
        workers = [c.send(binding, stream(message(ctx=uid("ctx")))).worker for _ in range(6)]
        prefixes = collections.Counter(str(w).split("/")[0] for w in workers)
        if binding == "sse":  # per request
            assert prefixes == {"r0": 3, "r1": 3}, workers
        else:  # per socket: each send opens its own
            assert set(prefixes) == {"r0", "r1"}, workers
        assert {str(w).split("/")[1] for w in workers} == {str(r.pid) for r in reps}
        port = reps[1].port
        reps[1].stop()
        _wait_line(ledger, "replica-out", 1)  # the probe noticed
        for _ in range(4):
            t = c.send(binding, stream(message(ctx=uid("ctx"))))
            assert t.final_state == "TASK_STATE_COMPLETED" and str(t.worker).startswith("r0/")
        reps[1] = _replica(tmp_path, 1, port=port)
        _wait_line(ledger, "replica-in", 1)
        back = {str(c.send(binding, stream(message(ctx=uid("ctx")))).worker).split("/")[0]
                for _ in range(4)}
        assert back == {"r0", "r1"}
    finally:
        px.stop()
        for r in reps:
            r.stop()
    log = (tmp_path / "chaos.log").read_text()
    assert "Traceback" not in log and "round_robin over 2 replicas" in log


@pytest.mark.parametrize("policy", ["round_robin", "sticky"])
def test_grpc_calls_are_balanced_per_call(tmp_path: Path, policy: str) -> None:
    reps = [_replica(tmp_path, i) for i in range(2)]
    grpc_at = f"127.0.0.1:{free_port()}"
    ups = [a for r in reps for a in ("--grpc-upstream", f"grpc://{Client(r.url).grpc_address()}")]
    px = start_chaos([r.url for r in reps], ledger=tmp_path / "chaos.jsonl",
                     log_path=tmp_path / "chaos.log",
                     extra_args=["--balancer", policy, "--delay-s", "0", "--no-scenario-outages",
                                 "--grpc-listen", grpc_at, *ups])
    try:
        def worker(ctx: str) -> str:
            t = grpc_request(grpc_at, stream(message(ctx=ctx)), headers())
            assert t.final_state == "TASK_STATE_COMPLETED", t.errors
            replica, _, pid = t.worker.partition("/")
            assert pid == str(reps[int(replica[1:])].pid), t.worker  # the replica named ran it
            return replica

        if policy == "round_robin":
            assert collections.Counter(worker(uid("ctx")) for _ in range(6)) == {"r0": 3,
                                                                                 "r1": 3}
        else:  # one context, one replica; contexts spread over both
            assert all(len({worker(ctx) for _ in range(3)}) == 1
                       for ctx in (uid("ctx") for _ in range(4)))
            assert {worker(uid("ctx")) for _ in range(12)} == {"r0", "r1"}
    finally:
        px.stop()
        for r in reps:
            r.stop()
    assert "Traceback" not in (tmp_path / "chaos.log").read_text()
