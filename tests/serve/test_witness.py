"""The witness service, driven over real sockets (one server per xdist worker, reset per test)."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtalab.loadtests.common.procs import start_witness
from rtalab.loadtests.witness.cli import faults_from_args, register_witness, run_witness
from rtalab.loadtests.witness.faults import FaultError, Faults

HTTP = httpx.Client(timeout=10)  # one keep-alive client for the module (closed at teardown)


@pytest.fixture(scope="module", autouse=True)
def _close_http() -> Iterator[None]:
    """Close the module's HTTP client."""
    yield
    HTTP.close()


def ex(url: str, ctx: str = "c1", turn: str | None = "t1", guid: str | None = "g1",
       **extra: Any) -> httpx.Response:
    """POST /execute with these identifiers."""
    body = {"contextId": ctx, "turnId": turn, "requestGuid": guid, **extra}
    return HTTP.post(f"{url}/execute", json=body)


def faults(url: str, **changes: Any) -> dict[str, Any]:
    """POST /faults and return the new settings."""
    r = HTTP.post(f"{url}/faults", json=changes)
    assert r.status_code == 200, r.text
    return dict(r.json())


def summary(url: str, **params: str) -> dict[str, Any]:
    """GET /ledger/summary."""
    return dict(HTTP.get(f"{url}/ledger/summary", params=params).json())


def ledger(url: str, **params: Any) -> dict[str, Any]:
    """GET /ledger."""
    r = HTTP.get(f"{url}/ledger", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def poll(condition: Any, timeout_s: float = 10.0) -> Any:
    """Poll ``condition()`` until it returns a truthy value, with a bounded deadline."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.02)
    return value


# ---------------------------------------------------------------------------- recording


def test_execute_records_every_execution(witness: str) -> None:
    """Each execution is a ledger row with its identifiers and times."""
    answers = [ex(witness, guid=f"g{i}", interactionId="i1", taskId="task-1",
                  principal="alice").json() for i in range(3)]
    assert [a["ok"] for a in answers] == [True] * 3
    ids = [a["executionId"] for a in answers]
    assert ids == sorted(ids) and len(set(ids)) == 3
    rows = ledger(witness)["rows"]
    assert [r["id"] for r in rows] == ids
    assert [r["requestGuid"] for r in rows] == ["g0", "g1", "g2"]
    r = rows[0]
    assert (r["contextId"], r["turnId"], r["interactionId"], r["taskId"], r["principal"],
            r["outcome"]) == ("c1", "t1", "i1", "task-1", "alice", "ok")
    assert r["tStart"] <= r["tEnd"]


def test_summary_counts_both_hazards(witness: str) -> None:
    """Duplicate executions of a requestGuid and turns re-executed under new requestGuids."""
    ex(witness, "c1", "t1", "g1")
    ex(witness, "c1", "t1", "g1")  # the MUST violation: g1 ran twice
    ex(witness, "c1", "t2", "g2", interactionId="i2")
    ex(witness, "c1", "t2", "g3", interactionId="i2")  # turn t2 re-executed under g3
    ex(witness, "c2", "t1", "g1")  # another context: not a duplicate
    ex(witness, "c2", None, None)  # no identifiers: counted, never grouped
    s = summary(witness)
    assert {k: s[k] for k in (
        "executions", "executionsWithoutRequestGuid", "distinctRequestGuids",
        "duplicateExecutions", "requestGuidsExecutedMoreThanOnce", "distinctTurns",
        "turnsExecutedUnderMultipleRequestGuids",
        "interactionsExecutedUnderMultipleRequestGuids", "slowSuccesses")} == {
        "executions": 6, "executionsWithoutRequestGuid": 1, "distinctRequestGuids": 4,
        "duplicateExecutions": 1, "requestGuidsExecutedMoreThanOnce": 1, "distinctTurns": 3,
        "turnsExecutedUnderMultipleRequestGuids": 1,
        "interactionsExecutedUnderMultipleRequestGuids": 1, "slowSuccesses": 0}
    assert s["served"] == {"requests": 6, "ok": 6} and s["pending"] == 0
    c2 = summary(witness, contextId="c2")
    assert (c2["executions"], c2["duplicateExecutions"], c2["distinctTurns"]) == (2, 0, 1)


def test_ledger_paging_and_filters(witness: str) -> None:
    """?since pages through the ledger, ?contextId filters it, bad parameters are 400."""
    for i in range(25):
        ex(witness, ctx=f"c{i % 2}", guid=f"g{i}")
    page = ledger(witness, limit=10)
    assert len(page["rows"]) == 10 and page["more"]
    seen = [r["requestGuid"] for r in page["rows"]]
    while page["more"]:
        page = ledger(witness, since=page["nextSince"], limit=10)
        seen += [r["requestGuid"] for r in page["rows"]]
    assert seen == [f"g{i}" for i in range(25)]
    odd = ledger(witness, contextId="c1")["rows"]
    assert [r["requestGuid"] for r in odd] == [f"g{i}" for i in range(1, 25, 2)]
    for params in ({"since": "abc"}, {"since": "-1"}, {"limit": "0"}, {"limit": "100001"}):
        r = HTTP.get(f"{witness}/ledger", params=params)
        assert r.status_code == 400 and r.json()["ok"] is False, params


# ---------------------------------------------------------------------------- bad input

BAD_BODIES: list[tuple[bytes, int]] = [
    (b"", 400), (b"   ", 400), (b"not json", 400), (b"[1, 2]", 400), (b"null", 400),
    (b'"text"', 400), (b"{}", 400), (b'{"contextId": null}', 400), (b'{"contextId": 7}', 400),
    (b'{"contextId": ""}', 400), (b'{"contextId": "c", "turnId": ["t"]}', 400),
    (b'{"contextId": "c", "requestGuid": {"a": 1}}', 400),
    (b'{"contextId": "c", "requestGuid": true}', 400),
    (json.dumps({"contextId": "c" * 257}).encode(), 400),
    (b'{"contextId": "\\ud800"}', 400),  # a lone surrogate cannot be stored
    (b"[" * 50_000 + b"]" * 50_000, 413),
    (b"[" * 20_000 + b"]" * 20_000, 400),  # deeply nested: not a crash
    (b"\xff\xfe\x00garbage", 400),
    (json.dumps({"contextId": "c", "pad": "x" * 70_000}).encode(), 413),
]


def test_malformed_input_is_400_json(witness: str) -> None:
    """Every malformed request gets a 400/413 JSON error and records nothing."""
    with httpx.Client(timeout=10) as client:
        for body, status in BAD_BODIES:
            r = client.post(f"{witness}/execute", content=body,
                            headers={"Content-Type": "application/json"})
            assert r.status_code == status, (body[:60], r.status_code, r.text)
            assert r.json()["ok"] is False and r.json()["error"]
        for method, path, status in (("GET", "/nope", 404), ("GET", "/execute", 405),
                                     ("DELETE", "/ledger", 405)):
            r = client.request(method, f"{witness}{path}")
            assert r.status_code == status and r.json()["ok"] is False
    s = summary(witness)
    assert s["executions"] == 0 and s["served"]["badRequest"] == len(BAD_BODIES)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=4)
                    | st.dictionaries(st.sampled_from(["contextId", "turnId", "requestGuid",
                                                       "interactionId", "x"]), kids,
                                      max_size=5),
                    max_leaves=12)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON | st.binary(max_size=64).map(lambda b: {"__raw__": b}))
def test_fuzzed_execute_never_5xx(witness: str, body: Any) -> None:
    """Arbitrary JSON or bytes: 200 for a valid request, else a 4xx JSON error."""
    content = body["__raw__"] if isinstance(body, dict) and "__raw__" in body else (
        json.dumps(body).encode())
    r = HTTP.post(f"{witness}/execute", content=content)
    assert r.status_code in (200, 400), (content, r.status_code, r.text)
    assert r.json()["ok"] is (r.status_code == 200)


# ---------------------------------------------------------------------------- faults


def test_injected_errors_are_labelled_and_execute_nothing(witness: str) -> None:
    """errorRate 1: every call is a labelled 500/503 and the ledger stays empty."""
    faults(witness, errorRate=1.0, errorStatus=[503])
    r = ex(witness)
    assert r.status_code == 503 and r.headers["X-Witness-Fault"] == "error"
    assert r.json()["fault"] == "error" and "injected" in r.json()["error"]
    faults(witness, errorStatus=[500, 503])
    assert {ex(witness).status_code for _ in range(40)} == {500, 503}
    s = summary(witness)
    assert s["executions"] == 0 and s["served"]["error"] == 41


def test_injected_hang_times_out_the_caller_and_executes_nothing(witness: str) -> None:
    """timeoutP 1: the caller times out; nothing is recorded; reset ends the hang."""
    faults(witness, timeoutP=1.0, hangS=60.0)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{witness}/execute", json={"contextId": "c"}, timeout=0.3)
    assert poll(lambda: summary(witness)["pending"] == 1)
    assert summary(witness)["executions"] == 0
    HTTP.post(f"{witness}/reset", json={})
    assert summary(witness)["pending"] == 0
    assert HTTP.get(f"{witness}/faults").json()["timeoutP"] == 0.0


def test_slow_success_is_recorded_after_the_caller_gave_up(witness: str) -> None:
    """The dangerous case: the caller sees a timeout, the side effect still happens."""
    faults(witness, slowSuccessP=1.0, slowSuccessDelayS=1.5)
    t0 = time.time()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{witness}/execute", timeout=0.2,
                   json={"contextId": "c", "turnId": "t", "requestGuid": "g-slow"})
    assert summary(witness)["executions"] == 0  # not yet: it happens at completion
    rows = poll(lambda: ledger(witness)["rows"])
    assert len(rows) == 1
    row = rows[0]
    assert (row["requestGuid"], row["outcome"]) == ("g-slow", "slow-success")
    assert row["tEnd"] - row["tStart"] >= 1.49 and row["tStart"] >= t0 - 1
    assert summary(witness)["slowSuccesses"] == 1


def test_latency_and_fault_validation(witness: str) -> None:
    """Latency specs use rtalab.sim.dist; bad fault settings are a 400 and change nothing."""
    got = faults(witness, latencyS=0.2)
    assert got["latencyS"] == 0.2
    r = ex(witness).json()
    assert r["tEnd"] - r["tStart"] >= 0.19  # loop timers may wake a millisecond early
    got = faults(witness, latencyS={"dist": "exp", "mean": 0.001})
    assert got["latencyS"] == {"dist": "exp", "mean": 0.001}
    for bad in ({"latencyS": {"dist": "nope"}}, {"latencyS": -1}, {"errorRate": 1.5},
                {"errorRate": 0.7, "timeoutP": 0.5}, {"bogus": 1}, {"hangS": "x"},
                {"errorStatus": [418]}, [1]):
        r = HTTP.post(f"{witness}/faults", json=bad)
        assert r.status_code == 400 and r.json()["ok"] is False, bad
    assert HTTP.get(f"{witness}/faults").json()["latencyS"] == got["latencyS"]


def test_faults_model() -> None:
    """Fault fates follow their probability mass; invalid settings raise FaultError."""
    import numpy as np

    f = Faults(error_rate=0.2, timeout_p=0.1, slow_success_p=0.3)
    rng = np.random.default_rng(3)
    fates = [f.draw(rng) for _ in range(20_000)]
    for fate, p in (("error", 0.2), ("timeout", 0.1), ("slow-success", 0.3), ("ok", 0.4)):
        assert abs(fates.count(fate) / len(fates) - p) < 0.02
    with pytest.raises(FaultError):
        Faults(error_rate=0.6, slow_success_p=0.6)
    assert Faults().updated({"errorRate": 0.5}).error_rate == 0.5


# ---------------------------------------------------------------------------- lifecycle


def test_ledger_survives_sigkill_and_restart_and_reset_needs_hooks(tmp_path: Path) -> None:
    """Executions are durable across SIGKILL; without --test-hooks POST /reset is a 404."""
    db = tmp_path / "ledger.db"
    with start_witness(db, log_path=tmp_path / "w1.log") as w:
        ids = [ex(w.url, guid=f"g{i}").json()["executionId"] for i in range(3)]
        r = HTTP.post(f"{w.url}/reset")
        assert r.status_code == 404 and "--test-hooks" in r.json()["error"]
        health = HTTP.get(f"{w.url}/healthz").json()
        assert health == {"ok": True, "testHooks": False, "pending": 0, "pid": w.pid}
        w.kill()
    assert w.returncode == -9
    with start_witness(db, log_path=tmp_path / "w2.log") as w:
        assert [r["id"] for r in ledger(w.url)["rows"]] == ids
        assert ex(w.url, guid="g3").json()["executionId"] == ids[-1] + 1


def test_cli_parsing_and_exit_codes(tmp_path: Path, repo_root: Path) -> None:
    """register_witness adds the sub-command; bad flags exit 2; a taken port exits 1."""
    parser = argparse.ArgumentParser(prog="rtalab serve")
    register_witness(parser.add_subparsers())
    args = parser.parse_args(["witness", "--port", "9", "--db", str(tmp_path / "x.db"),
                              "--latency-s", '{dist = "exp", mean = 0.05}',
                              "--error-rate", "0.1", "--slow-success-p", "0.2",
                              "--slow-success-delay-s", "3", "--test-hooks"])
    assert args.func is run_witness and args.test_hooks
    f = faults_from_args(args)
    assert (f.latency_s.mean, f.error_rate, f.slow_success_p, f.slow_success_delay_s) == (
        0.05, 0.1, 0.2, 3.0)
    bad = parser.parse_args(["witness", "--latency-s", "{dist = 'zipf'}"])
    assert run_witness(bad) == 2
    run = [sys.executable, "-m", "rtalab.loadtests.witness"]
    assert subprocess.run([*run, "--help"], cwd=repo_root, capture_output=True,
                          timeout=60).returncode == 0
    r = subprocess.run([*run, "--error-rate", "2"], cwd=repo_root, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([*run, "--port", str(port), "--db", str(tmp_path / "y.db")],
                           cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
