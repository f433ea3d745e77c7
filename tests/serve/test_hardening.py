"""Reasoner hardening (issue 7): concurrent continuations, crashed owners, per-principal bounds.

Each test here is the regression test of one defect found by an independent
client; each failed on the code before its fix.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from loadtests.procs import ManagedProcess
from tests.serve.conftest import (
    Reasoner,
    Turn,
    k,
    kind,
    ledger_summary,
    message,
    meta,
    start_test_reasoner,
    stream,
    uid,
)

CONCURRENT_ANSWERS = 5
TASKS_PER_BINDING = 4


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory,
             witness_server: ManagedProcess) -> Iterator[Reasoner]:
    """The module's Reasoner (SQLite store, witness attached)."""
    base = tmp_path_factory.mktemp("hardening")
    with start_test_reasoner(base, witness=witness_server.url) as proc:
        yield Reasoner(proc)


def _paused(r: Reasoner, ctx: str) -> Turn:
    """A task parked at INPUT_REQUIRED in ``ctx``."""
    first = r.send("sse", stream(message(ctx=ctx, meta={k("handoff"): True})))
    assert first.final_state == "TASK_STATE_INPUT_REQUIRED"
    return first


def _answers(r: Reasoner, binding: str, ctx: str, task: str, n: int) -> list[Turn]:
    """``n`` simultaneous answers to one paused task, each with its own requestGuid (a Live
    layer re-sending the caller's answer after a timeout), each running the side effect."""
    msgs = [message("my answer", ctx=ctx, task=task,
                    meta={k("sideEffect"): True, k("test.delayS"): 0.2}) for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda m: r.send(binding, stream(m)), msgs))


@pytest.mark.parametrize("binding", ["sse", "ws"])
def test_concurrent_continuations_execute_once(hardened: Reasoner, binding: str,
                                               witness: str) -> None:
    """Defect 1: every answer gets the ONE continuation's outcome; the witness saw one run."""
    for _ in range(TASKS_PER_BINDING):
        ctx = uid("c")
        task = _paused(hardened, ctx).task_id
        answers = _answers(hardened, binding, ctx, task, CONCURRENT_ANSWERS)
        assert ledger_summary(witness, ctx)["executions"] == 1
        for a in answers:
            assert a.final_state == "TASK_STATE_COMPLETED", a.frames
            assert [e for e in a.events if e[next(iter(e))].get("status", {}).get("state")
                    == "TASK_STATE_COMPLETED"] == [a.final]  # one COMPLETED per stream
            assert all(e[next(iter(e))].get("taskId", e.get("task", {}).get("id")) == task
                       for e in a.events)
        for a in answers:  # the continuation's events, or (it had finished) the task's snapshot
            seqs = [meta(e)[k("sequenceId")] for e in a.events]
            assert seqs == [2, 3, 4, 5, 6] or (seqs == [6] and kind(a.final) == "task"), seqs


def test_retry_of_a_finished_continuation_gets_its_outcome(hardened: Reasoner,
                                                           witness: str) -> None:
    """D2: an answer to a task whose continuation already finished is a retry of it."""
    ctx = uid("c")
    task = _paused(hardened, ctx).task_id
    [done] = _answers(hardened, "sse", ctx, task, 1)
    [late] = _answers(hardened, "ws", ctx, task, 1)
    assert done.final_state == late.final_state == "TASK_STATE_COMPLETED"
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_none_mode_known_task_is_still_a_retry(tmp_path: Path, witness_server: ManagedProcess,
                                               witness: str) -> None:
    """D2 applies in dedup mode ``none`` too: the continuation claim is not a dedup key."""
    with start_test_reasoner(tmp_path, witness=witness_server.url,
                             extra=["--dedup-mode", "none"]) as proc:
        r = Reasoner(proc)
        ctx = uid("c")
        task = _paused(r, ctx).task_id
        answers = _answers(r, "sse", ctx, task, 3)
        assert [a.final_state for a in answers] == ["TASK_STATE_COMPLETED"] * 3
        assert ledger_summary(witness, ctx)["executions"] == 1


def test_crashed_owner_claim_resolves_at_once_after_restart(tmp_path: Path,
                                                            witness_server: ManagedProcess,
                                                            witness: str) -> None:
    """Defect 4: after SIGKILL + restart, a duplicate of the claim that was in flight gets its
    answer (lost: ``internal``, never re-executed) at once, not after --dedup-wait-s, although
    the dead owner's lease (default 120 s) has not run out."""
    store = f"sqlite:///{tmp_path / 'dedup.sqlite'}"  # default lease: 120 s
    ctx = uid("c")
    slow = message(ctx=ctx, meta={k("sideEffect"): True, k("test.delayS"): 30})
    wait = ["--dedup-wait-s", "10"]
    with start_test_reasoner(tmp_path / "a", witness=witness_server.url, dedup=store,
                             extra=wait) as proc, Reasoner(proc).ws() as s:
        s.send(stream(slow, rid="slow"))  # a turn in flight when the process dies
        assert s.recv()["result"]["task"]
        proc.kill(signal.SIGKILL)
    with start_test_reasoner(tmp_path / "b", witness=witness_server.url, dedup=store,
                             extra=wait) as proc:
        started = time.monotonic()
        lost = Reasoner(proc).send("sse", stream(slow))
        elapsed = time.monotonic() - started
    print(f"time to answer a duplicate of a crashed owner's claim: {elapsed:.3f} s")
    assert lost.error_code == "internal"  # outcome unknown: never re-executed
    assert elapsed < 2.0, f"the duplicate waited {elapsed:.1f} s"
    assert ledger_summary(witness, ctx)["executions"] == 0


def test_live_owner_claim_is_joined_not_resolved(hardened: Reasoner, witness: str) -> None:
    """Negative control of defect 4: an owner that is alive is waited for (joined), never
    declared gone: the duplicate gets the real outcome, one execution."""
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True, k("test.delayS"): 1.5})
    with ThreadPoolExecutor(2) as pool:
        first, dup = pool.map(lambda b: hardened.send(b, stream(msg)), ["sse", "ws"])
    assert first.final_state == dup.final_state == "TASK_STATE_COMPLETED"
    assert first.without_ids() == dup.without_ids()
    assert ledger_summary(witness, ctx)["executions"] == 1
