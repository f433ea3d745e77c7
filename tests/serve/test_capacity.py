"""The reference Reasoner's load shedding (docs/decisions.md D3): queue deadline and discipline."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rtalab.loadtests.common.procs import ManagedProcess
from rtalab.loadtests.reasoner.capacity import Capacity, QueueTimeout
from tests.serve.conftest import (
    FAST_SCENARIO,
    Reasoner,
    k,
    ledger_summary,
    message,
    status_message,
    stream,
    uid,
)


@pytest.mark.parametrize(("discipline", "order"), [("fifo", ["b", "c", "d"]),
                                                   ("lifo", ["d", "c", "b"])])
def test_a_freed_worker_takes_the_oldest_or_the_newest(discipline: str, order: list[str]) -> None:
    async def run() -> list[str]:
        cap = Capacity(1, 10, discipline)
        got: list[str] = []
        await cap.acquire()  # "a" holds the only worker

        async def turn(name: str) -> None:
            async with cap.slot():
                got.append(name)

        tasks = []
        for name in "bcd":
            tasks.append(asyncio.create_task(turn(name)))
            await asyncio.sleep(0)  # queued in this order
        assert cap.waiting == 3 and cap.full() is False
        cap.release()
        await asyncio.gather(*tasks)
        assert cap.busy == 0 and cap.waiting == 0
        return got

    assert asyncio.run(run()) == order


def test_queue_deadline_refuses_and_leaves_the_line() -> None:
    async def run() -> None:
        cap = Capacity(1, 10, timeout_s=0.05)
        await cap.acquire()
        with pytest.raises(QueueTimeout):
            await cap.acquire()
        assert cap.waiting == 0 and cap.busy == 1
        cap.release()
        assert cap.busy == 0
        await asyncio.wait_for(cap.acquire(), 1.0)  # a free worker is taken at once
        assert Capacity(1, 0).full() is False

    asyncio.run(run())


def test_queue_deadline_on_the_wire(tmp_path: Path, witness_server: ManagedProcess,
                                    witness: str) -> None:
    """A turn that waited past queue_timeout_s gets queue_full_code (rate-limited, with
    retryAfterMs) and never runs; the turn holding the worker completes."""
    from tests.serve.conftest import start_test_reasoner

    scenario = FAST_SCENARIO + "workers = 1\nqueue_timeout_s = 0.3\n"
    with start_test_reasoner(tmp_path, witness=witness_server.url, scenario=scenario) as proc:
        r = Reasoner(proc)
        slow = message(ctx=uid("c"), meta={k("test.delayS"): 1.5})
        ctx = uid("c")
        late = message(ctx=ctx, meta={k("sideEffect"): True})
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(r.send, "sse", stream(slow))
            for _ in range(500):  # until the slow turn holds the worker (bounded)
                if r.get_json("/healthz")["inFlight"]:
                    break
            refused = pool.submit(r.send, "ws", stream(late)).result()
            assert first.result().final_state == "TASK_STATE_COMPLETED"
    assert refused.error_code == "rate-limited"
    assert status_message(refused.final)["metadata"][k("retryAfterMs")] == 500
    assert ledger_summary(witness, ctx)["executions"] == 0


def test_worker_processes_share_one_pool(tmp_path: Path, witness_server: ManagedProcess) -> None:
    """``workers`` is the whole Reasoner's, as in the simulator: with 2 processes, workers = 1
    and queue_limit = 1, of 8 concurrent 1-s turns exactly 2 are admitted (one served, one
    waiting) whichever processes they reached; per-process pools would admit 2 per process."""
    from tests.serve.conftest import start_test_reasoner
    from tests.serve.test_wire_modes import serve_on_both_workers

    scenario = FAST_SCENARIO + "workers = 1\nqueue_limit = 1\n"
    with start_test_reasoner(tmp_path, witness=witness_server.url, scenario=scenario,
                             workers=2) as proc:
        r = Reasoner(proc)
        by_worker = serve_on_both_workers(
            r, lambda i: stream(message(ctx=uid("c"), meta={k("test.delayS"): 1.0})))
    turns = [t for ts in by_worker.values() for t in ts]
    assert len(by_worker) == 2 and len(turns) % 8 == 0
    completed = sum(t.final_state == "TASK_STATE_COMPLETED" for t in turns)
    refused = [t.error_code for t in turns if t.final_state != "TASK_STATE_COMPLETED"]
    assert completed == 2 * (len(turns) // 8), (completed, len(turns))
    assert set(refused) == {"rate-limited"}
