"""The chaos proxy as a real process between real clients and the real reference Reasoner.

Each test starts its own proxy (flags chosen per test) in front of a module-scoped
Reasoner (SQLite request-guid dedup, or dedup ``none``) wired to the session's
witness; synchronisation is on observable facts (the proxy's ledger lines, the
witness ledger), polled with bounded deadlines.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rtalab.loadtests.chaos.procs import start_chaos
from rtalab.loadtests.common.procs import ManagedProcess, free_port, start_reasoner
from tests.serve.conftest import (
    BOB,
    TOKENS,
    Reasoner,
    headers,
    k,
    message,
    stream,
    uid,
)

CHUNKY = """
[workload]
side_effect_share = 0.0

[reasoner]
reasoning_time_s = 0.01
first_chunk_s = 0.0
chunks = 8
chunk_interval_s = 0.01
upstream_timeout_s = 2.0
context_rate_per_s = 1000
context_burst = 1000
"""
DEADLINE_S = 20.0
QUIET = ["--delay-s", "0", "--no-scenario-outages"]


sqlite_reasoner = Reasoner.fixture("r-sqlite", "Request-guid dedup on SQLite (the MUST).",
                                   scenario=CHUNKY)
none_reasoner = Reasoner.fixture("r-none", "Dedup ``none`` (negative control).",
                                 scenario=CHUNKY, extra=["--dedup-mode", "none"])


class Proxy:
    """A running proxy and its ledger."""

    def __init__(self, proc: ManagedProcess, ledger: Path):
        self.proc, self.ledger = proc, ledger
        self.r = Reasoner(proc)

    def lines(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Ledger lines (of one kind)."""
        if not self.ledger.exists():
            return []
        rows = [json.loads(x) for x in self.ledger.read_text().splitlines() if x.strip()]
        return [r for r in rows if kind is None or r["kind"] == kind]

    def wait_lines(self, kind: str, n: int, pred: Callable[[dict], bool] = lambda r: True
                   ) -> list[dict[str, Any]]:
        """Poll until ``n`` lines of ``kind`` (matching ``pred``) exist (bounded)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            rows = [r for r in self.lines(kind) if pred(r)]
            if len(rows) >= n or time.monotonic() > deadline:
                return rows
            time.sleep(0.02)  # polling an observable condition with a deadline


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Callable[..., Proxy]]:
    """Start proxies in front of a Reasoner; all stopped after the test."""
    started: list[ManagedProcess] = []

    def make(upstream: str, *flags: str) -> Proxy:
        ledger = tmp_path / f"chaos-{len(started)}.jsonl"
        proc = start_chaos(upstream, ledger=ledger, extra_args=list(flags),
                           log_path=tmp_path / f"chaos-{len(started)}.log")
        started.append(proc)
        return Proxy(proc, ledger)

    yield make
    for p in started:
        assert p.alive(), f"the proxy died:\n{p.log_tail()}"
        assert "Traceback" not in p.log_text(), p.log_text()
        p.stop()


def side_effect_msg(ctx: str, guid: str) -> dict[str, Any]:
    """A side-effect turn with a fixed requestGuid."""
    return message("pay my bill", ctx=ctx, guid=guid, meta={k("sideEffect"): True})


def executions(witness_url: str, ctx: str) -> dict[str, int]:
    """Witness executions per requestGuid of one context."""
    rows = httpx.get(f"{witness_url}/ledger", params={"contextId": ctx}, timeout=10).json()["rows"]
    out: dict[str, int] = {}
    for r in rows:
        out[r["requestGuid"]] = out.get(r["requestGuid"], 0) + 1
    return out


# ------------------------------------------------------------------------------ pass-through


def test_headers_pass_through_and_echo(sqlite_reasoner: Reasoner, witness: str,
                                       proxy_factory: Callable[..., Proxy],
                                       binding: str) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET)
    t = px.r.send(binding, stream(message(ctx=uid("ctx"))))
    assert t.final_state == "TASK_STATE_COMPLETED"
    assert t.headers.get("a2a-extensions") == k("").rstrip("/")  # the echo came back
    assert t.worker  # X-RTA-Worker of the Reasoner
    assert t.seqs == [float(i) for i in range(len(t.seqs))]
    no_ext = px.r.send(binding, stream(message(ctx=uid("ctx"), profile=False)),
                       headers(ext=False, sse=binding == "sse"))
    assert "a2a-extensions" not in no_ext.headers  # no negotiation, no echo: passed as is


def test_auth_failure_passes_through(sqlite_reasoner: Reasoner,
                                     proxy_factory: Callable[..., Proxy]) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET)
    bad = headers(token="wrong")
    t = px.r.sse(stream(message(), rid="r-auth"), bad)
    assert t.status == 401 and t.errors[0]["code"] == -32040 and t.frames[0]["id"] == "r-auth"
    with pytest.raises(InvalidStatus) as e:
        px.r.ws({key: v for key, v in bad.items() if key != "Accept"})
    assert e.value.response.status_code == 401
    assert json.loads(e.value.response.body)["error"]["code"] == -32040
    ok = px.r.sse(stream(message(ctx=uid("ctx"))), headers(token=BOB))
    assert ok.final_state == "TASK_STATE_COMPLETED"


# ------------------------------------------------------------------------------ duplication


@pytest.mark.parametrize("dedup", ["none", "sqlite"])
def test_duplication_reaches_the_reasoner(request: pytest.FixtureRequest, witness: str,
                                          proxy_factory: Callable[..., Proxy], binding: str,
                                          dedup: str) -> None:
    """Every request is duplicated: two executions per requestGuid without dedup, one with."""
    reasoner: Reasoner = request.getfixturevalue(f"{dedup}_reasoner")
    px = proxy_factory(reasoner.url, *QUIET, "--duplicate", "1", "--seed", "7")
    ctx = uid("ctx")
    guids = [uid("g") for _ in range(3)]

    def answered(r: dict[str, Any]) -> bool:
        return r["copy_status"] in (200, "answered")

    if binding == "sse":
        for g in guids:
            assert px.r.sse(stream(side_effect_msg(ctx, g))).final_state == (
                "TASK_STATE_COMPLETED")
        dups = px.wait_lines("duplicate", 3, answered)
    else:  # a copy travels on the caller's socket: keep it open until the copies are answered
        with px.r.ws() as s:
            for g in guids:
                assert s.request(stream(side_effect_msg(ctx, g))).final_state == (
                    "TASK_STATE_COMPLETED")
            dups = px.wait_lines("duplicate", 3, answered)
    assert sorted(d["request_guid"] for d in dups) == sorted(guids)
    assert {d["binding"] for d in dups} == {binding}
    expected = 2 if dedup == "none" else 1
    assert executions(witness, ctx) == {g: expected for g in guids}


@pytest.mark.parametrize("first", [1, 0])
def test_a_duplicate_can_reach_the_reasoner_before_its_original(
        none_reasoner: Reasoner, witness: str, proxy_factory: Callable[..., Proxy],
        binding: str, first: int) -> None:
    """``--duplicate-first 1``: every copy is executed BEFORE the original the caller hears
    (dedup ``none``: two tasks per requestGuid; the witness's tStart orders them); the
    must-not, ``--duplicate-first 0``: the caller's original runs first."""
    px = proxy_factory(none_reasoner.url, *QUIET, "--duplicate", "1", "--duplicate-first",
                       str(first), "--set", "network.uplink.duplicate_delay_s=0.3",
                       "--seed", "7")
    ctx = uid("ctx")
    guids = [uid("g") for _ in range(2)]

    def answered(r: dict[str, Any]) -> bool:
        return r["copy_status"] in (200, "answered")

    if binding == "sse":
        turns = [px.r.sse(stream(side_effect_msg(ctx, g))) for g in guids]
        dups = px.wait_lines("duplicate", 2, answered)
    else:
        with px.r.ws() as s:
            turns = [s.request(stream(side_effect_msg(ctx, g))) for g in guids]
            dups = px.wait_lines("duplicate", 2, answered)
    assert [d["first"] for d in dups] == [bool(first)] * 2
    deadline = time.monotonic() + DEADLINE_S
    while sum(executions(witness, ctx).values()) < 4:
        assert time.monotonic() < deadline, executions(witness, ctx)
        time.sleep(0.05)  # polling the witness ledger with a deadline
    rows = httpx.get(f"{witness}/ledger", params={"contextId": ctx}, timeout=10).json()["rows"]
    for g, turn in zip(guids, turns, strict=True):
        assert turn.final_state == "TASK_STATE_COMPLETED"
        mine = [r for r in rows if r["requestGuid"] == g and r["taskId"] == turn.task_id]
        other = [r for r in rows if r["requestGuid"] == g and r["taskId"] != turn.task_id]
        assert len(mine) == 1 and len(other) == 1, rows
        copy_ran_first = other[0]["tStart"] < mine[0]["tStart"]
        assert copy_ran_first == bool(first), (g, mine, other)


# ------------------------------------------------------------------------------ reordering


def test_reordering_keeps_every_event(sqlite_reasoner: Reasoner,
                                      proxy_factory: Callable[..., Proxy],
                                      binding: str) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET, "--reorder", "0.5", "--reorder-delay-s",
                       "0.05", "--seed", "11")
    turns = [px.r.send(binding, stream(message(ctx=uid("ctx"), guid=f"g-reorder-{i}")))
             for i in range(6)]
    out_of_order = 0
    for t in turns:
        assert "task" in t.events[0]  # no sequenceId: never held back
        seqs = t.seqs
        assert sorted(seqs) == [float(i) for i in range(10)]  # progress, 8 chunks, final: all kept
        assert t.final_state == "TASK_STATE_COMPLETED"        # the terminal event stays last
        out_of_order += seqs != sorted(seqs)
    assert out_of_order >= 1
    lines = px.lines("reorder")
    assert sum(r["out_of_order"] for r in lines) == out_of_order
    assert {r["request_guid"] for r in lines if r["out_of_order"]} <= {
        f"g-reorder-{i}" for i in range(6)}


# ------------------------------------------------------------------------------ drops


def test_dropped_streams_and_the_proxy_survives(sqlite_reasoner: Reasoner,
                                                proxy_factory: Callable[..., Proxy],
                                                binding: str) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET, "--drop", "1")
    guid = uid("g")
    with pytest.raises((httpx.TransportError, ConnectionClosed)):
        px.r.send(binding, stream(message(ctx=uid("ctx"), guid=guid)))
    drops = px.wait_lines("drop", 1)
    assert drops[0]["request_guid"] == guid and drops[0]["binding"] == binding
    card = httpx.get(px.r.url + "/.well-known/agent-card.json", timeout=10)
    assert card.status_code == 200  # not a JSON-RPC request: never faulted


# ------------------------------------------------------------------------------ outages


def _probe(url: str, timeout_s: float = 0.5) -> str:
    """``ok`` / ``refused`` / ``timeout`` / ``reset`` for one small JSON-RPC call."""
    body = {"jsonrpc": "2.0", "id": "probe", "method": "GetTask", "params": {"id": "none"}}
    try:
        r = httpx.post(url + "/", json=body, headers=headers(sse=False), timeout=timeout_s)
        return "ok" if r.status_code < 500 else f"http {r.status_code}"
    except httpx.ConnectError:
        return "refused"
    except httpx.TimeoutException:
        return "timeout"
    except httpx.TransportError:
        return "reset"


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_outage_window(sqlite_reasoner: Reasoner, witness: str,
                       proxy_factory: Callable[..., Proxy], mode: str) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET, "--outage", "1:3", "--outage-mode", mode)
    assert px.wait_lines("outage-start", 1), "the outage never started"
    assert _probe(px.r.url) == ("refused" if mode == "refuse" else "timeout")
    if mode == "blackhole":  # a request in the window is never forwarded
        ctx, guid = uid("ctx"), uid("g")
        with pytest.raises(httpx.TimeoutException):
            httpx.post(px.r.url + "/", json=stream(side_effect_msg(ctx, guid)),
                       headers=headers(), timeout=0.5)
    assert px.wait_lines("outage-end", 1), "the outage never ended"
    assert _probe(px.r.url, 5.0) == "ok"
    if mode == "blackhole":
        assert executions(witness, ctx) == {}
        assert px.lines("blackhole")


def test_refuse_resets_streams_in_flight(sqlite_reasoner: Reasoner,
                                         proxy_factory: Callable[..., Proxy]) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET, "--outage", "3:1", "--outage-mode",
                       "refuse")
    slow = message(ctx=uid("ctx"), meta={k("test.delayS"): 6})
    with pytest.raises(httpx.TransportError):
        px.r.sse(stream(slow))  # still streaming when the window opens
    assert px.lines("refused")[0]["connections"] >= 1


# ------------------------------------------------------------------------------ bad input


def test_bad_input_gets_clean_answers(sqlite_reasoner: Reasoner,
                                      proxy_factory: Callable[..., Proxy]) -> None:
    px = proxy_factory(sqlite_reasoner.url, *QUIET, "--duplicate", "1", "--reorder", "1",
                       "--drop", "0.0")
    garbage = px.r.sse(None, raw=b"{not json")
    assert garbage.errors and garbage.errors[0]["code"] == -32700
    odd = px.r.sse([1, 2, 3])
    assert odd.errors and odd.errors[0]["code"] == -32600
    big = httpx.post(px.r.url + "/", content=b"x" * (9 * 1024 * 1024), headers=headers(),
                     timeout=20)
    assert big.status_code == 413 and big.json()["error"]["code"] == -32600
    with px.r.ws() as s:
        s.send(None, raw="{broken")
        assert s.recv()["error"]["code"] == -32700
        s.send(None, raw=b"\xff\xfe binary junk")
        assert "error" in s.recv()
        ok = s.request(stream(message(ctx=uid("ctx"))))  # the socket is still usable
        assert ok.final_state == "TASK_STATE_COMPLETED"
    assert px.r.send("sse", stream(message(ctx=uid("ctx")))).final_state == (
        "TASK_STATE_COMPLETED")


def test_dead_upstream_gets_502(proxy_factory: Callable[..., Proxy]) -> None:
    px = proxy_factory(f"http://127.0.0.1:{free_port()}", *QUIET)
    r = httpx.post(px.r.url + "/", json=stream(message(), rid="r-dead"), headers=headers(),
                   timeout=10)
    assert r.status_code == 502 and r.json()["id"] == "r-dead"
    assert "upstream unreachable" in r.json()["error"]["message"]
    with pytest.raises(InvalidStatus) as e:
        px.r.ws()
    assert e.value.response.status_code == 502


def reasoner_on(port: int, base: Path, witness: str, store: str) -> ManagedProcess:
    """A test Reasoner on a fixed port (to restart it where the proxy points)."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "scenario.toml").write_text(CHUNKY)
    args = ["--test-hooks", "--log-level", "warning"]
    for token, principal in TOKENS.items():
        args += ["--token", f"{token}={principal}"]
    return start_reasoner(port=port, dedup=store, scenario=base / "scenario.toml",
                          witness=witness, extra_args=args, log_path=base / "reasoner.log")


def test_upstream_killed_mid_stream_then_restarted(tmp_path: Path, witness: str,
                                                   proxy_factory: Callable[..., Proxy]) -> None:
    """The caller's stream dies with the Reasoner; the proxy survives and serves the restart."""
    port = free_port()
    store = f"sqlite:///{tmp_path / 'dedup.sqlite'}"
    upstream = f"http://127.0.0.1:{port}"
    first = reasoner_on(port, tmp_path / "a", witness, store)
    try:
        px = proxy_factory(upstream, *QUIET)
        slow = stream(message(ctx=uid("ctx"), meta={k("test.delayS"): 10}))
        with httpx.Client(timeout=20) as c, c.stream("POST", px.r.url + "/", json=slow,
                                                     headers=headers()) as r:
            lines = r.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))  # the Task arrived
            first.kill()
            with pytest.raises(httpx.TransportError):
                for _ in lines:
                    pass
        assert _probe(px.r.url, 5.0) == "http 502"  # nobody upstream: a clean 502
    finally:
        first.stop()
    with reasoner_on(port, tmp_path / "b", witness, store):
        assert px.r.send("sse", stream(message(ctx=uid("ctx")))).final_state == (
            "TASK_STATE_COMPLETED")
        with px.r.ws() as s:
            assert s.request(stream(message(ctx=uid("ctx")))).final_state == (
                "TASK_STATE_COMPLETED")


def test_scenario_network_section_drives_the_proxy(tmp_path: Path, sqlite_reasoner: Reasoner,
                                                   proxy_factory: Callable[..., Proxy]) -> None:
    """No fault flags: the scenario's [network] rates and outages are what is injected."""
    scenario = tmp_path / "net.toml"
    scenario.write_text("""
[network.uplink]
latency_s = 0.0
duplication = 1.0
duplicate_delay_s = 0.0
[network.downlink]
latency_s = 0.0
reorder = 1.0
reorder_delay_s = 0.02
[[network.outages]]
start_s = 3600
duration_s = 10
""")
    px = proxy_factory(sqlite_reasoner.url, "--scenario", str(scenario))
    t = px.r.sse(stream(message(ctx=uid("ctx"), guid="g-scenario")))
    assert t.final_state == "TASK_STATE_COMPLETED"
    assert px.wait_lines("duplicate", 1)[0]["request_guid"] == "g-scenario"
    assert px.lines("reorder")[0]["delayed"] >= 1
    assert not px.lines("outage-start")  # an hour away


def test_concurrent_turns_under_faults_all_complete(sqlite_reasoner: Reasoner, witness: str,
                                                    proxy_factory: Callable[..., Proxy]) -> None:
    """Many turns in flight at once (SSE in threads, WS interleaved on one socket); the proxy
    duplicates exactly the requests its seeded per-request draws say, whatever the interleaving.
    """
    from concurrent.futures import ThreadPoolExecutor

    from rtalab.loadtests.chaos.config import ChaosConfig, rng_for, uplink_faults, with_overrides

    px = proxy_factory(sqlite_reasoner.url, *QUIET, "--duplicate", "0.5", "--reorder", "0.5",
                       "--reorder-delay-s", "0.03", "--seed", "5")
    link = with_overrides(ChaosConfig(), duplicate=0.5, delay_s=0.0).network.uplink
    run = uid("run")
    sse_guids = [f"g-sse-{run}-{i}" for i in range(16)]
    ws_guids = [f"g-ws-{run}-{i}" for i in range(12)]
    expected = {g for g in sse_guids + ws_guids
                if uplink_faults(link, rng_for(5, f"{g}#0"), True).duplicate}
    assert 0 < len(expected) < 28

    def answered(r: dict[str, Any]) -> bool:
        return r["copy_status"] in (200, "answered")

    ctx = uid("ctx")
    with ThreadPoolExecutor(8) as pool:
        sse = list(pool.map(lambda g: px.r.sse(stream(side_effect_msg(ctx, g))), sse_guids))
    with px.r.ws() as s:
        reqs = [stream(side_effect_msg(ctx, g), rid=f"r-{i}") for i, g in enumerate(ws_guids)]
        for body in reqs:
            s.send(body)
        ws = [s.until_end(body["id"]) for body in reqs]
        dups = px.wait_lines("duplicate", len(expected), answered)  # copies answered upstream
    assert {d["request_guid"] for d in dups} == expected
    for t in sse + ws:
        assert t.final_state == "TASK_STATE_COMPLETED"
        assert sorted(t.seqs) == [float(i) for i in range(10)]
    assert executions(witness, ctx) == {g: 1 for g in sse_guids + ws_guids}  # dedup absorbed
