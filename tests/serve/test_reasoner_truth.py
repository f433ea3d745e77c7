"""The reference Reasoner tells the truth (issue 19): a reused idempotency key never swallows
another request, a cancelled turn says whether its side effect ran, and after a crash an
in-flight request is answered with what is known about it.

Real Reasoner subprocesses on 127.0.0.1 with a real SQLite store and the witness service.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadtests.procs import ManagedProcess
from tests.serve.conftest import (
    Reasoner,
    Turn,
    k,
    ledger_summary,
    message,
    start_test_reasoner,
    stream,
    uid,
)

KEY_CONFLICT = "schema-validation: The requestGuid (or turnId) was already used for a " \
               "different request."


@pytest.fixture(scope="module")
def truthful(tmp_path_factory: pytest.TempPathFactory,
             witness_server: ManagedProcess) -> Iterator[Reasoner]:
    """The module's Reasoner (SQLite store, witness attached)."""
    base = tmp_path_factory.mktemp("truth")
    with start_test_reasoner(base, witness=witness_server.url) as proc:
        yield Reasoner(proc)


def _pay(text: str, ctx: str, guid: str, delay_s: float = 0.0) -> dict:
    """A side-effect turn."""
    meta = {k("sideEffect"): True}
    if delay_s:
        meta[k("test.delayS")] = delay_s
    return message(text, ctx=ctx, guid=guid, meta=meta)


# ---------------------------------------------------------------------------- fingerprints


@pytest.mark.parametrize("binding", ["sse", "ws"])
def test_same_guid_different_request_is_refused_and_runs_nothing(truthful: Reasoner,
                                                                  binding: str,
                                                                  witness: str) -> None:
    ctx, guid = uid("c"), uid("g")
    first = truthful.send(binding, stream(_pay("pay 10 to Bob", ctx, guid)))
    other = truthful.send(binding, stream(_pay("pay 5000 to Mallory", ctx, guid)))
    again = truthful.send(binding, stream(_pay("pay 10 to Bob", ctx, guid)))
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert (other.final_state, other.error_code, other.failure_text) == (
        "TASK_STATE_FAILED", "schema-validation", KEY_CONFLICT)
    assert other.task_id != first.task_id
    assert (again.final_state, again.task_id) == ("TASK_STATE_COMPLETED", first.task_id)  # replay
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_same_guid_different_side_effect_flag_is_refused(truthful: Reasoner,
                                                         witness: str) -> None:
    ctx, guid = uid("c"), uid("g")
    plain = truthful.send("sse", stream(message("pay 10 to Bob", ctx=ctx, guid=guid)))
    paying = truthful.send("sse", stream(_pay("pay 10 to Bob", ctx, guid)))
    assert plain.final_state == "TASK_STATE_COMPLETED"
    assert paying.error_code == "schema-validation"
    assert ledger_summary(witness, ctx)["executions"] == 0


def test_concurrent_reuse_of_an_in_flight_key_is_refused(truthful: Reasoner,
                                                         witness: str) -> None:
    ctx, guid = uid("c"), uid("g")
    with truthful.ws() as s:
        s.send(stream(_pay("pay 10 to Bob", ctx, guid, delay_s=0.5), rid="a"))
        assert s.recv()["result"]["task"]  # the original is in flight
        s.send(stream(_pay("pay 5000 to Mallory", ctx, guid), rid="b"))
        other = s.until_end("b")
        first = s.until_end("a")
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert other.error_code == "schema-validation"
    assert ledger_summary(witness, ctx)["executions"] == 1


def _paused(r: Reasoner, ctx: str) -> Turn:
    """A task parked at INPUT_REQUIRED."""
    t = r.send("sse", stream(message("book it", ctx=ctx, meta={k("handoff"): True})))
    assert t.final_state == "TASK_STATE_INPUT_REQUIRED"
    return t


@pytest.mark.parametrize("order", ["finished-first", "continuation-first"])
def test_a_continuation_never_gets_another_tasks_outcome(truthful: Reasoner, order: str,
                                                        witness: str) -> None:
    """A continuation of parked T2 carrying T1's requestGuid continues T2 (either order)."""
    ctx, guid = uid("c"), uid("g")
    t2 = _paused(truthful, ctx).task_id
    answer = message("my answer", ctx=ctx, task=t2, guid=guid, meta={k("sideEffect"): True})
    t1_msg = _pay("pay 10 to Bob", ctx, guid)
    if order == "finished-first":
        t1 = truthful.send("sse", stream(t1_msg))
        cont = truthful.send("sse", stream(answer))
    else:
        cont = truthful.send("sse", stream(answer))
        t1 = truthful.send("sse", stream(t1_msg))
    assert t1.final_state == cont.final_state == "TASK_STATE_COMPLETED"
    assert cont.final["statusUpdate"]["taskId"] == t2 != t1.task_id
    assert ledger_summary(witness, ctx)["executions"] == 2
