"""Dedup modes ``turn`` and ``none``, and two uvicorn workers sharing a store (or not: memory).

Which worker accepts a connection is the kernel's choice, so the multi-worker
tests read ``X-RTA-Worker`` off every response and keep sending on fresh
connections until both workers have answered (bounded; see
:func:`serve_on_both_workers`): a test that never reached the second worker
would prove nothing.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from rtalab.loadtests.common.procs import ManagedProcess
from tests.serve.conftest import (
    TIMEOUT_S,
    WORKER_HEADER,
    Reasoner,
    Turn,
    headers,
    k,
    ledger_summary,
    message,
    set_faults,
    start_test_reasoner,
    stream,
    uid,
)

turn_mode = Reasoner.fixture("turn-mode", "A Reasoner deduplicating by turnId.",
                             extra=["--dedup-mode", "turn"])
none_mode = Reasoner.fixture(
    "none-mode", "A Reasoner without dedup (negative control), keeping at most 5 tasks in memory.",
    extra=["--dedup-mode", "none", "--max-tasks", "5"])
two_workers = Reasoner.fixture("two-workers", "Two uvicorn workers sharing one SQLite dedup store.",
                               workers=2)
two_workers_redis = Reasoner.fixture(
    "two-workers-redis", "Two uvicorn workers sharing one Redis dedup store.", workers=2,
    dedup_server="redis_server")
two_workers_memory = Reasoner.fixture(
    "two-workers-memory", "Two uvicorn workers with per-process memory stores (negative control).",
    workers=2, dedup="memory")


SPREAD_ATTEMPTS = 200  # requests sent at most to reach both workers
SPREAD_BATCH = 8  # sent concurrently: busy workers leave connections to the other one


def serve_on_both_workers(r: Reasoner, body: Callable[[int], dict[str, Any]],
                          attempts: int = SPREAD_ATTEMPTS) -> dict[str, list[Turn]]:
    """Send ``body(i)`` on fresh connections until two workers answered; the turns by worker.

    Requests go ``SPREAD_BATCH`` at a time, alternately over SSE and WebSocket;
    the whole batch is kept (every request of it reached the server).  Fails
    after ``attempts`` requests answered by one worker only.
    """
    by_worker: dict[str, list[Turn]] = {}
    sent = 0
    with ThreadPoolExecutor(SPREAD_BATCH) as pool:
        while len(by_worker) < 2:
            if sent >= attempts:
                pytest.fail(f"all {sent} requests on fresh connections were served by worker(s) "
                            f"{sorted(by_worker)}: the second worker was never reached")
            batch = range(sent, min(sent + SPREAD_BATCH, attempts))
            for turn in pool.map(lambda i: r.send("ws" if i % 2 else "sse", body(i)), batch):
                assert turn.worker, f"no X-RTA-Worker header: {turn.headers}"
                by_worker.setdefault(turn.worker, []).append(turn)
            sent = batch.stop
    return by_worker


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


def _metrics_by_worker(r: Reasoner) -> dict[str, str]:
    """One /metrics scrape from each of the two workers (fresh connections, bounded)."""
    scrapes: dict[str, str] = {}
    for _ in range(SPREAD_ATTEMPTS):
        with httpx.Client(timeout=TIMEOUT_S) as c:
            resp = c.get(r.url + "/metrics")
        scrapes.setdefault(resp.headers[WORKER_HEADER], resp.text)
        if len(scrapes) == 2:
            return scrapes
    pytest.fail(f"{SPREAD_ATTEMPTS} /metrics scrapes all served by worker(s) {sorted(scrapes)}")


def _executed_once_by_two_workers(workers: Reasoner, witness: str) -> tuple[str, list[Turn]]:
    """One side-effect turn sent on fresh connections until both workers answered: every answer
    the same (a replay), one execution in the witness ledger.  Its context and the answers."""
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True})
    by_worker = serve_on_both_workers(workers, lambda i: stream(msg))
    results = [t for turns in by_worker.values() for t in turns]
    assert len(by_worker) == 2
    assert all(r.without_ids() == results[0].without_ids() for r in results)
    assert ledger_summary(witness, ctx)["executions"] == 1
    return ctx, results


def test_two_workers_share_the_store_and_the_metrics(two_workers: Reasoner,
                                                     witness: str) -> None:
    _, results = _executed_once_by_two_workers(two_workers, witness)
    assert len({r.task_id for r in results}) == 1  # both workers answered with one task
    before = {w: _completed(text) for w, text in _metrics_by_worker(two_workers).items()}
    assert len(set(before.values())) == 1  # every worker's scrape aggregates all workers
    new = serve_on_both_workers(two_workers, lambda i: stream(message(ctx=uid("c"))))
    turns = [t for ts in new.values() for t in ts]
    assert all(t.final_state == "TASK_STATE_COMPLETED" for t in turns)
    after = _metrics_by_worker(two_workers)
    assert {w: _completed(text) - before[w] for w, text in after.items()} == {
        w: len(turns) for w in before}  # turns served by both workers, counted by each


def test_two_workers_keep_contexts_bound(two_workers: Reasoner) -> None:
    ctx = uid("c")
    assert two_workers.send("sse", stream(message(ctx=ctx))).final_state == (
        "TASK_STATE_COMPLETED")
    for _ in range(4):  # whichever worker answers, Bob cannot use Alice's context
        bob = two_workers.send("sse", stream(message(ctx=ctx)), headers("token-bob"))
        assert bob.error_code == "session-not-found"


def test_two_workers_share_a_redis_store(two_workers_redis: Reasoner, witness: str,
                                         redis_server: ManagedProcess) -> None:
    import redis

    ctx, results = _executed_once_by_two_workers(two_workers_redis, witness)
    assert results[0].final_state == "TASK_STATE_COMPLETED"
    # the one entry they shared is in Redis (a shared SQLite file would pass the lines above)
    assert len(redis.Redis.from_url(redis_server.url).keys(f"rta:dedup:*{ctx}:*")) == 1


def test_two_workers_with_memory_stores_execute_duplicates(two_workers_memory: Reasoner,
                                                           witness: str) -> None:
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True})
    by_worker = serve_on_both_workers(two_workers_memory, lambda i: stream(msg))
    assert len(by_worker) == 2
    task_by_worker = {}
    for worker, turns in by_worker.items():
        assert all(t.final_state == "TASK_STATE_COMPLETED" for t in turns)
        assert all(t.without_ids() == turns[0].without_ids() for t in turns)  # replays per worker
        task_by_worker[worker] = turns[0].task_id
    assert len(set(task_by_worker.values())) == 2  # each worker ran the turn itself
    summary = ledger_summary(witness, ctx)
    assert summary["executions"] == len(by_worker) == 2  # one execution per worker, not per send
    assert summary["requestGuidsExecutedMoreThanOnce"] == 1


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
