"""The reference Reasoner tells the truth (issue 19): a reused idempotency key never swallows
another request, a cancelled turn says whether its side effect ran, and after a crash an
in-flight request is answered with what is known about it.

Real Reasoner subprocesses on 127.0.0.1 with a real SQLite store and the witness service.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rtalab.loadtests.common.procs import ManagedProcess
from tests.serve.conftest import (
    END_STATES,
    FAST_SCENARIO,
    TIMEOUT_S,
    Reasoner,
    Turn,
    headers,
    k,
    ledger_summary,
    message,
    rpc,
    set_faults,
    start_test_reasoner,
    state,
    stream,
    uid,
)

KEY_CONFLICT = "schema-validation: The requestGuid (or turnId) was already used for a " \
               "different request."


def _pay(text: str, ctx: str, guid: str, delay_s: float = 0.0) -> dict:
    """A side-effect turn."""
    meta = {k("sideEffect"): True}
    if delay_s:
        meta[k("test.delayS")] = delay_s
    return message(text, ctx=ctx, guid=guid, meta=meta)


# ---------------------------------------------------------------------------- fingerprints


@pytest.mark.parametrize("binding", ["sse", "ws"])
def test_same_guid_different_request_is_refused_and_runs_nothing(reasoner: Reasoner,
                                                                  binding: str,
                                                                  witness: str) -> None:
    ctx, guid = uid("c"), uid("g")
    first = reasoner.send(binding, stream(_pay("pay 10 to Bob", ctx, guid)))
    other = reasoner.send(binding, stream(_pay("pay 5000 to Mallory", ctx, guid)))
    again = reasoner.send(binding, stream(_pay("pay 10 to Bob", ctx, guid)))
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert (other.final_state, other.error_code, other.failure_text) == (
        "TASK_STATE_FAILED", "schema-validation", KEY_CONFLICT)
    assert other.task_id != first.task_id
    assert (again.final_state, again.task_id) == ("TASK_STATE_COMPLETED", first.task_id)  # replay
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_same_guid_different_side_effect_flag_is_refused(reasoner: Reasoner,
                                                         witness: str) -> None:
    ctx, guid = uid("c"), uid("g")
    plain = reasoner.send("sse", stream(message("pay 10 to Bob", ctx=ctx, guid=guid)))
    paying = reasoner.send("sse", stream(_pay("pay 10 to Bob", ctx, guid)))
    assert plain.final_state == "TASK_STATE_COMPLETED"
    assert paying.error_code == "schema-validation"
    assert ledger_summary(witness, ctx)["executions"] == 0


def test_concurrent_reuse_of_an_in_flight_key_is_refused(reasoner: Reasoner,
                                                         witness: str) -> None:
    ctx, guid = uid("c"), uid("g")
    with reasoner.ws() as s:
        s.send(stream(_pay("pay 10 to Bob", ctx, guid, delay_s=0.5), rid="a"))
        assert s.recv()["result"]["task"]  # the original is in flight
        s.send(stream(_pay("pay 5000 to Mallory", ctx, guid), rid="b"))
        other = s.until_end("b")
        first = s.until_end("a")
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert other.error_code == "schema-validation"
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_reuse_refused_by_both_workers_on_redis(tmp_path: Path, witness_server: ManagedProcess,
                                                redis_server: ManagedProcess,
                                                witness: str) -> None:
    """Two workers sharing Redis: reuses reaching either worker are refused, both bindings."""
    with start_test_reasoner(tmp_path, witness=witness_server.url, workers=2,
                             dedup=redis_server.url) as proc:
        r = Reasoner(proc)
        ctx, guid = uid("c"), uid("g")
        first = r.send("sse", stream(_pay("pay 10 to Bob", ctx, guid)))
        others: list[Turn] = []
        while len(others) < 8 or (len({o.worker for o in others}) < 2 and len(others) < 60):
            others.append(r.send(("sse", "ws")[len(others) % 2],
                                 stream(_pay("pay 5000 to Mallory", ctx, guid))))
        again = r.send("ws", stream(_pay("pay 10 to Bob", ctx, guid)))
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert {(o.final_state, o.error_code) for o in others} == {("TASK_STATE_FAILED",
                                                                "schema-validation")}
    assert len({o.worker for o in others}) == 2  # both workers refused it
    assert again.task_id == first.task_id
    assert _executions(witness, ctx) == 1


def _paused(r: Reasoner, ctx: str) -> Turn:
    """A task parked at INPUT_REQUIRED."""
    t = r.send("sse", stream(message("book it", ctx=ctx, meta={k("handoff"): True})))
    assert t.final_state == "TASK_STATE_INPUT_REQUIRED"
    return t


@pytest.mark.parametrize("order", ["finished-first", "continuation-first"])
def test_a_continuation_never_gets_another_tasks_outcome(reasoner: Reasoner, order: str,
                                                        witness: str) -> None:
    """A continuation of parked T2 carrying T1's requestGuid continues T2 (either order)."""
    ctx, guid = uid("c"), uid("g")
    t2 = _paused(reasoner, ctx).task_id
    answer = message("my answer", ctx=ctx, task=t2, guid=guid, meta={k("sideEffect"): True})
    t1_msg = _pay("pay 10 to Bob", ctx, guid)
    if order == "finished-first":
        t1 = reasoner.send("sse", stream(t1_msg))
        cont = reasoner.send("sse", stream(answer))
    else:
        cont = reasoner.send("sse", stream(answer))
        t1 = reasoner.send("sse", stream(t1_msg))
    assert t1.final_state == cont.final_state == "TASK_STATE_COMPLETED"
    assert cont.final["statusUpdate"]["taskId"] == t2 != t1.task_id
    assert ledger_summary(witness, ctx)["executions"] == 2


# ---------------------------------------------------------------------------- cancel

SLOW_SPEECH = FAST_SCENARIO.replace("first_chunk_s = 0.0", "first_chunk_s = 3.0")
ROLLED = "rolled-forward"


slow_speech = Reasoner.fixture(
    "slow-speech", "A Reasoner whose turns wait 3 s between the tool call and the first chunk.",
    scenario=SLOW_SPEECH)


def _side_effect_of(status: dict) -> str | None:
    """``rta/sideEffect`` of a status's message."""
    return status.get("message", {}).get("metadata", {}).get(k("sideEffect"))


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``cond`` (an observable fact of another process) until true."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def _cancelled_turn(r: Reasoner, binding: str, body: dict, ready: Callable[[str], bool]
                    ) -> tuple[Turn, dict]:
    """Send ``body``; once ``ready(task_id)``, CancelTask it; (the stream, the cancel answer)."""
    if binding == "ws":
        with r.ws() as s:
            s.send(body | {"id": "turn"})
            first = s.recv()["result"]
            task_id = first["task"]["id"]
            _until(lambda: ready(task_id), "ready to cancel")
            cancel = s.request(rpc("CancelTask", {"id": task_id}, "cancel")).frames[0]["result"]
            rest = s.until_end("turn")
            rest.events.insert(0, first)
            return rest, cancel
    turn = Turn()
    with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=TIMEOUT_S) as c, \
            c.stream("POST", r.url + "/", headers=headers(), json=body) as resp:
        fut = None
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            turn.events.append(json.loads(line[5:])["result"])
            if fut is None:
                task_id = turn.task_id

                def cancel_when_ready(task_id: str = task_id) -> dict:
                    _until(lambda: ready(task_id), "ready to cancel")
                    return dict(r.call("CancelTask", {"id": task_id})["result"])

                fut = pool.submit(cancel_when_ready)
            if state(turn.events[-1]) in END_STATES:
                break
        assert fut is not None
        return turn, fut.result()


def _tool_call_under_way(witness: str, ctx: str) -> bool:
    """The witness is executing a side effect of ``ctx`` (other tests' do not count)."""
    return int(ledger_summary(witness, ctx)["executingInContext"]) == 1


def _executions(witness: str, ctx: str) -> int:
    return int(ledger_summary(witness, ctx)["executions"])


def _check_cancel(r: Reasoner, turn: Turn, cancel: dict, want: str | None) -> None:
    """The stream's end, the CancelTask answer and GetTask all say the same."""
    got = r.call("GetTask", {"id": turn.task_id})["result"]
    assert turn.final_state == "TASK_STATE_CANCELED"
    assert turn.spoken == []
    assert _side_effect_of(turn.final["statusUpdate"]["status"]) == want
    assert (cancel["status"]["state"], _side_effect_of(cancel["status"])) == (
        "TASK_STATE_CANCELED", want)
    assert (got["status"]["state"], _side_effect_of(got["status"])) == (
        "TASK_STATE_CANCELED", want)


@pytest.mark.parametrize("binding", ["sse", "ws"])
def test_cancel_after_the_side_effect_ran_says_rolled_forward(slow_speech: Reasoner,
                                                              binding: str,
                                                              witness: str) -> None:
    ctx = uid("c")
    body = stream(message("pay 10 to Bob", ctx=ctx, meta={k("sideEffect"): True}))
    turn, cancel = _cancelled_turn(slow_speech, binding, body,
                                   lambda _: _executions(witness, ctx) == 1)
    _check_cancel(slow_speech, turn, cancel, ROLLED)
    assert "rolled forward" in turn.final["statusUpdate"]["status"]["message"]["parts"][0]["text"]
    assert _executions(witness, ctx) == 1


@pytest.mark.parametrize("binding", ["sse", "ws"])
def test_cancel_before_the_side_effect_is_a_plain_cancel(slow_speech: Reasoner, binding: str,
                                                         witness: str) -> None:
    ctx = uid("c")
    body = stream(message("pay 10 to Bob", ctx=ctx, meta={k("sideEffect"): True,
                                                          k("test.delayS"): 5}))
    turn, cancel = _cancelled_turn(slow_speech, binding, body, lambda _: True)
    _check_cancel(slow_speech, turn, cancel, None)
    assert _executions(witness, ctx) == 0


@pytest.mark.parametrize("latency_s, want, executions_at_answer", [
    (0.3, ROLLED, 1),  # the tool answers in time (upstream_timeout_s = 0.5)
    (0.8, "unknown", 0),  # no answer in time: it may still run (and does, at 0.8 s)
])
def test_cancel_during_the_tool_call_waits_for_it(slow_speech: Reasoner, witness: str,
                                                  latency_s: float, want: str,
                                                  executions_at_answer: int) -> None:
    """The tool call in flight is not interrupted: the cancel answers once it ended."""
    set_faults(witness, latencyS=latency_s)
    ctx = uid("c")
    body = stream(message("pay 10 to Bob", ctx=ctx, meta={k("sideEffect"): True}))
    turn, cancel = _cancelled_turn(slow_speech, "ws", body,  # the tool call in flight:
                                   lambda _: _tool_call_under_way(witness, ctx))
    assert _executions(witness, ctx) == executions_at_answer
    _check_cancel(slow_speech, turn, cancel, want)
    _until(lambda: _executions(witness, ctx) == 1, "the side effect ran")


# ---------------------------------------------------------------------------- recovery


def test_sigkill_at_each_step_of_a_turn_then_answers_what_is_known(
        tmp_path: Path, witness_server: ManagedProcess, witness: str) -> None:
    """Four side-effect turns are at different steps when the Reasoner is SIGKILLed: reasoning
    (tool not called), tool call in flight, speaking (tool done), finished (outcome stored).
    After a restart on the same SQLite store, a duplicate of each (same requestGuid) gets what
    is known: nothing ran (internal), may have run (upstream-timeout + sideEffect unknown),
    ran (COMPLETED + sideEffect rolled-forward), the stored outcome."""
    store = f"sqlite:///{tmp_path / 'dedup.sqlite'}"
    ctx = uid("c")
    body = {step: _pay(f"pay 10 to Bob ({step})", ctx, uid("g"),
                       delay_s=30.0 if step == "reasoning" else 0.0)
            for step in ("finished", "speaking", "tool", "reasoning")}
    with start_test_reasoner(tmp_path / "a", witness=witness_server.url, dedup=store,
                             scenario=SLOW_SPEECH.replace("first_chunk_s = 3.0",
                                                          "first_chunk_s = 60.0")
                             .replace("upstream_timeout_s = 0.5", "upstream_timeout_s = 60")
                             ) as proc, Reasoner(proc).ws() as s:
        r = Reasoner(proc)
        body["finished"] = message("no side effect", ctx=ctx, guid=uid("g"),
                                   meta={k("test.forceError"): "internal"})  # ends at once
        finished = r.send("sse", stream(body["finished"]))
        s.send(stream(body["speaking"], rid="speaking"))
        _until(lambda: _executions(witness, ctx) == 1, "the first tool call ran")
        set_faults(witness, latencyS=60)
        s.send(stream(body["tool"], rid="tool"))
        _until(lambda: _tool_call_under_way(witness, ctx), "a tool call in flight")
        s.send(stream(body["reasoning"], rid="reasoning"))
        _until(lambda: s.recv().get("id") == "reasoning", "the reasoning turn started")
        proc.kill(signal.SIGKILL)
    with start_test_reasoner(tmp_path / "b", witness=witness_server.url, dedup=store) as proc:
        r = Reasoner(proc)
        got = {step: r.send("sse", stream(b)) for step, b in body.items()}
    assert finished.final_state == "TASK_STATE_FAILED"
    assert (got["finished"].final_state, got["finished"].task_id) == (
        "TASK_STATE_FAILED", finished.task_id)  # the stored outcome, replayed
    speaking = got["speaking"].final["statusUpdate"]["status"]
    assert (speaking["state"], _side_effect_of(speaking)) == ("TASK_STATE_COMPLETED", ROLLED)
    tool = got["tool"]
    assert (tool.final_state, tool.error_code, _side_effect_of(
        tool.final["statusUpdate"]["status"])) == ("TASK_STATE_FAILED", "upstream-timeout",
                                                   "unknown")
    reasoning = got["reasoning"]
    assert (reasoning.final_state, reasoning.error_code, _side_effect_of(
        reasoning.final["statusUpdate"]["status"])) == ("TASK_STATE_FAILED", "internal", None)
    assert "nothing of it ran" in reasoning.failure_text
    assert _executions(witness, ctx) == 1  # nothing re-executed (the in-flight one: pending)


def test_sigkill_during_the_tool_call_then_the_witness_saw_it_run(
        tmp_path: Path, witness_server: ManagedProcess, witness: str) -> None:
    """The owner died during the tool call (its record says "started"); the tool finished
    afterwards: the duplicate asks the witness and is answered COMPLETED, rolled forward."""
    store = f"sqlite:///{tmp_path / 'dedup.sqlite'}"
    ctx = uid("c")
    body = _pay("pay 10 to Bob", ctx, uid("g"))
    set_faults(witness, latencyS=1.0)
    with start_test_reasoner(tmp_path / "a", witness=witness_server.url, dedup=store,
                             scenario=FAST_SCENARIO.replace("upstream_timeout_s = 0.5",
                                                            "upstream_timeout_s = 60")
                             ) as proc, Reasoner(proc).ws() as s:
        s.send(stream(body, rid="pay"))
        _until(lambda: _tool_call_under_way(witness, ctx), "the tool call in flight")
        proc.kill(signal.SIGKILL)
    _until(lambda: _executions(witness, ctx) == 1, "the witness finished the execution")
    with start_test_reasoner(tmp_path / "b", witness=witness_server.url, dedup=store) as proc:
        again = Reasoner(proc).send("sse", stream(body))
    status = again.final["statusUpdate"]["status"]
    assert (status["state"], _side_effect_of(status)) == ("TASK_STATE_COMPLETED", ROLLED)
    assert _executions(witness, ctx) == 1
