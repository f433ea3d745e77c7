"""Dedup modes ``turn`` and ``none``, and two uvicorn workers sharing one SQLite store."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.procs import ManagedProcess
from tests.serve.conftest import (
    Reasoner,
    headers,
    k,
    ledger_summary,
    message,
    set_faults,
    start_test_reasoner,
    stream,
    uid,
)


@pytest.fixture(scope="module")
def turn_mode(tmp_path_factory: pytest.TempPathFactory,
              witness_server: ManagedProcess) -> Iterator[Reasoner]:
    """A Reasoner deduplicating by turnId."""
    base = tmp_path_factory.mktemp("turn-mode")
    with start_test_reasoner(base, witness=witness_server.url,
                             extra=["--dedup-mode", "turn"]) as proc:
        yield Reasoner(proc)


@pytest.fixture(scope="module")
def none_mode(tmp_path_factory: pytest.TempPathFactory,
              witness_server: ManagedProcess) -> Iterator[Reasoner]:
    """A Reasoner without dedup (negative control), keeping at most 5 tasks in memory."""
    base = tmp_path_factory.mktemp("none-mode")
    with start_test_reasoner(base, witness=witness_server.url,
                             extra=["--dedup-mode", "none", "--max-tasks", "5"]) as proc:
        yield Reasoner(proc)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory,
                witness_server: ManagedProcess) -> Iterator[Reasoner]:
    """Two uvicorn workers sharing one SQLite dedup store."""
    base: Path = tmp_path_factory.mktemp("two-workers")
    with start_test_reasoner(base, witness=witness_server.url, workers=2) as proc:
        yield Reasoner(proc)


@pytest.fixture(scope="module")
def two_workers_redis(tmp_path_factory: pytest.TempPathFactory, witness_server: ManagedProcess,
                      redis_server: ManagedProcess) -> Iterator[Reasoner]:
    """Two uvicorn workers sharing one Redis dedup store."""
    base: Path = tmp_path_factory.mktemp("two-workers-redis")
    with start_test_reasoner(base, witness=witness_server.url, workers=2,
                             dedup=redis_server.url) as proc:
        yield Reasoner(proc)


def test_turn_mode_replays_a_retry_with_a_new_guid(turn_mode: Reasoner, witness: str) -> None:
    ctx, turn_id = uid("c"), uid("t")
    turns = [turn_mode.send("sse", stream(message(ctx=ctx, turn=turn_id,
                                                  meta={k("sideEffect"): True})))
             for _ in range(2)]
    assert [t.final_state for t in turns] == ["TASK_STATE_COMPLETED"] * 2
    assert turns[1].without_ids() == turns[0].without_ids()
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_turn_mode_retry_after_timeout_does_not_repeat_the_side_effect(
        turn_mode: Reasoner, witness: str) -> None:
    set_faults(witness, slowSuccessP=1.0, slowSuccessDelayS=0.8)
    ctx, turn_id = uid("c"), uid("t")
    first = turn_mode.send("ws", stream(message(ctx=ctx, turn=turn_id,
                                                meta={k("sideEffect"): True})))
    assert first.error_code == "upstream-timeout"
    retry = turn_mode.send("ws", stream(message(ctx=ctx, turn=turn_id,
                                                meta={k("sideEffect"): True})))
    assert retry.final_state == "TASK_STATE_COMPLETED"  # retryable failure: the turn runs again
    assert retry.task_id != first.task_id
    deadline = time.monotonic() + 10
    while ledger_summary(witness, ctx)["executions"] < 1:  # the slow success lands
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert ledger_summary(witness, ctx)["executions"] == 1  # ... and only once
    assert "rta_reasoner_side_effects_total{result=\"skipped\"}" in turn_mode.metrics()


def test_none_mode_executes_duplicates(none_mode: Reasoner, witness: str) -> None:
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True})
    turns = [none_mode.send(b, stream(msg)) for b in ("sse", "ws")]
    assert turns[0].task_id != turns[1].task_id
    summary = ledger_summary(witness, ctx)
    assert summary["executions"] == 2
    assert summary["requestGuidsExecutedMoreThanOnce"] == 1


def test_task_store_is_bounded(none_mode: Reasoner) -> None:
    turns = [none_mode.send("sse", stream(message(ctx=uid("c")))) for _ in range(8)]
    oldest = none_mode.call("GetTask", {"id": turns[0].task_id})
    newest = none_mode.call("GetTask", {"id": turns[-1].task_id})
    assert oldest["error"]["code"] == -32001  # evicted (LRU, --max-tasks 5)
    assert newest["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _completed(metrics_text: str) -> float:
    """rta_reasoner_turns_total{outcome="completed"} summed over label sets."""
    pattern = r'^rta_reasoner_turns_total\{code="",outcome="completed"\} ([0-9.e+]+)$'
    return sum(float(m) for m in re.findall(pattern, metrics_text, re.MULTILINE))


def test_two_workers_share_the_store_and_the_metrics(two_workers: Reasoner,
                                                     witness: str) -> None:
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True})
    results = []
    for i in range(8):  # fresh connections: the kernel spreads them over the workers
        results.append(two_workers.send("sse" if i % 2 else "ws", stream(msg)))
    assert len({r.task_id for r in results}) == 1
    assert all(r.without_ids() == results[0].without_ids() for r in results)
    assert ledger_summary(witness, ctx)["executions"] == 1
    before = _completed(two_workers.metrics())
    for _ in range(4):
        assert two_workers.send("sse", stream(message(ctx=uid("c")))).final_state == (
            "TASK_STATE_COMPLETED")
    assert _completed(two_workers.metrics()) - before == 4  # aggregated over workers


def test_two_workers_keep_contexts_bound(two_workers: Reasoner) -> None:
    ctx = uid("c")
    assert two_workers.send("sse", stream(message(ctx=ctx))).final_state == (
        "TASK_STATE_COMPLETED")
    for _ in range(4):  # whichever worker answers, Bob cannot use Alice's context
        bob = two_workers.send("sse", stream(message(ctx=ctx)), headers("token-bob"))
        assert bob.error_code == "session-not-found"


def test_two_workers_share_a_redis_store(two_workers_redis: Reasoner, witness: str) -> None:
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True})
    results = [two_workers_redis.send("ws" if i % 2 else "sse", stream(msg)) for i in range(6)]
    assert all(r.without_ids() == results[0].without_ids() for r in results)
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_sigkill_and_restart_on_the_same_sqlite_file(tmp_path: Path, witness_server: ManagedProcess,
                                                     witness: str) -> None:
    store = f"sqlite:///{tmp_path / 'dedup.sqlite'}?lease_s=1"
    ctx = uid("c")
    done_msg = message(ctx=ctx, meta={k("sideEffect"): True})
    slow_msg = message(ctx=ctx, meta={k("sideEffect"): True, k("test.delayS"): 30})
    with start_test_reasoner(tmp_path / "a", witness=witness_server.url, dedup=store) as proc:
        first = Reasoner(proc).send("sse", stream(done_msg))
        with Reasoner(proc).ws() as s:  # a turn in flight when the process dies
            s.send(stream(slow_msg, rid="slow"))
            assert s.recv()["result"]["task"]
            proc.kill(signal.SIGKILL)
    assert first.final_state == "TASK_STATE_COMPLETED"
    with start_test_reasoner(tmp_path / "b", witness=witness_server.url, dedup=store) as proc:
        again = Reasoner(proc).send("ws", stream(done_msg))
        assert again.without_ids() == first.without_ids()  # replayed from the file
        lost = Reasoner(proc).send("sse", stream(slow_msg))
        assert lost.error_code == "internal"  # outcome unknown: never re-executed
    assert ledger_summary(witness, ctx)["executions"] == 1
