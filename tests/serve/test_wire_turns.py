"""Turn behaviour on both bindings: output shape, error codes, cancel, handoff, replay."""

from __future__ import annotations

import threading
import time

import pytest

from tests.serve.conftest import (
    EXT,
    FAST_HANDOFF_S,
    Reasoner,
    Turn,
    headers,
    k,
    kind,
    ledger_summary,
    message,
    meta,
    rpc,
    set_faults,
    state,
    status_message,
    stream,
    uid,
)

ALL_CODES = ["schema-validation", "unsupported-directive", "extension-inactive", "auth",
             "rate-limited", "upstream-timeout", "session-not-found", "internal"]


def assert_failed(turn: Turn, code: str) -> None:
    """FAILED with ``code`` in metadata and a safe text part starting with the code."""
    assert turn.errors == []
    assert kind(turn.events[0]) == "task"
    assert turn.final_state == "TASK_STATE_FAILED", turn.events
    assert turn.error_code == code
    assert turn.failure_text.startswith(f"{code}: ")
    assert "what is my balance" not in str(turn.events)  # never echoes the transcript


def test_happy_path(reasoner: Reasoner, binding: str) -> None:
    turn = reasoner.send(binding, stream(message(ctx=uid("c"))))
    assert turn.headers.get("a2a-extensions") == EXT
    assert [kind(e) for e in turn.events] == ["task", "statusUpdate", "artifactUpdate",
                                              "artifactUpdate", "artifactUpdate", "statusUpdate"]
    assert state(turn.events[0]) == "TASK_STATE_SUBMITTED"
    directive = turn.events[1]
    assert state(directive) == "TASK_STATE_WORKING"
    assert meta(directive)[k("eventType")] == "directive"
    assert status_message(directive)["metadata"][k("directiveType")] == "progress"
    assert turn.final_state == "TASK_STATE_COMPLETED"
    assert turn.seqs == [0, 1, 2, 3, 4]
    assert turn.spoken == ["Spoken chunk 1 of 3.", "Spoken chunk 2 of 3.", "Spoken chunk 3 of 3."]
    chunks = [e["artifactUpdate"] for e in turn.events if kind(e) == "artifactUpdate"]
    assert [c.get("append", False) for c in chunks] == [False, True, True]
    assert [c.get("lastChunk", False) for c in chunks] == [False, False, True]
    assert {e[kind(e)].get("taskId", e[kind(e)].get("id")) for e in turn.events} == {turn.task_id}


def test_degraded_without_negotiation(reasoner: Reasoner, binding: str) -> None:
    turn = reasoner.send(binding, stream(message(ctx=uid("c"), profile=False)),
                         headers(ext=False))
    assert "a2a-extensions" not in turn.headers
    assert turn.final_state == "TASK_STATE_COMPLETED"
    assert len(turn.spoken) == 3
    assert EXT not in str(turn.events)  # no rta/* metadata anywhere


def test_profile_metadata_without_negotiation(reasoner: Reasoner, binding: str) -> None:
    turn = reasoner.send(binding, stream(message(ctx=uid("c"))), headers(ext=False))
    assert "a2a-extensions" not in turn.headers
    assert_failed(turn, "extension-inactive")


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_error_code_via_test_hook(reasoner: Reasoner, binding: str, code: str) -> None:
    turn = reasoner.send(binding, stream(message(ctx=uid("c"),
                                                 meta={k("test.forceError"): code})))
    assert_failed(turn, code)
    retry_after = status_message(turn.final)["metadata"].get(k("retryAfterMs"))
    assert (retry_after is not None) == (code == "rate-limited")
    if retry_after is not None:
        assert retry_after > 0


def test_schema_validation_on_oversized_parts(reasoner: Reasoner, binding: str) -> None:
    big_text = message(text="x" * (32 * 1024 + 1), ctx=uid("c"))
    assert_failed(reasoner.send(binding, stream(big_text)), "schema-validation")
    big_data = message(ctx=uid("c"), parts=[{"data": {"blob": "y" * (16 * 1024)}}])
    assert_failed(reasoner.send(binding, stream(big_data)), "schema-validation")
    bad_meta = message(ctx=uid("c"), meta={k("requestGuid"): 42})
    assert_failed(reasoner.send(binding, stream(bad_meta)), "schema-validation")


def test_unsupported_directive(reasoner: Reasoner, binding: str) -> None:
    msg = message(ctx=uid("c"), meta={k("handoff"): True, k("directives"): ["progress"]})
    assert_failed(reasoner.send(binding, stream(msg)), "unsupported-directive")


def test_rate_limited_per_context(reasoner: Reasoner, binding: str) -> None:
    ctx = uid("c")
    turns = [reasoner.send(binding, stream(message(ctx=ctx))) for _ in range(5)]
    assert [t.final_state for t in turns[:4]] == ["TASK_STATE_COMPLETED"] * 4  # burst 4
    assert_failed(turns[4], "rate-limited")
    assert status_message(turns[4].final)["metadata"][k("retryAfterMs")] >= 1
    other = reasoner.send(binding, stream(message(ctx=uid("c"))))
    assert other.final_state == "TASK_STATE_COMPLETED"  # the limit is per context


def test_upstream_timeout_and_slow_success(reasoner: Reasoner, binding: str,
                                           witness: str) -> None:
    set_faults(witness, slowSuccessP=1.0, slowSuccessDelayS=1.0)  # > upstream_timeout_s 0.5
    ctx = uid("c")
    turn = reasoner.send(binding, stream(message(ctx=ctx, meta={k("sideEffect"): True})))
    assert_failed(turn, "upstream-timeout")
    deadline = time.monotonic() + 10
    while ledger_summary(witness, ctx)["executions"] < 1:  # the tool still finishes
        assert time.monotonic() < deadline, "slow success never recorded"
        time.sleep(0.05)


def test_tool_error_is_internal(reasoner: Reasoner, binding: str, witness: str) -> None:
    set_faults(witness, errorRate=1.0)
    ctx = uid("c")
    turn = reasoner.send(binding, stream(message(ctx=ctx, meta={k("sideEffect"): True})))
    assert_failed(turn, "internal")
    assert ledger_summary(witness, ctx)["executions"] == 0


def test_unknown_task_is_session_not_found(reasoner: Reasoner, binding: str) -> None:
    turn = reasoner.send(binding, stream(message(ctx=uid("c"), task="no-such-task")))
    assert_failed(turn, "session-not-found")
    assert turn.task_id == "no-such-task"


def test_side_effect_turn_calls_witness_with_identifiers(reasoner: Reasoner, binding: str,
                                                         witness: str) -> None:
    ctx, guid, turn_id = uid("c"), uid("g"), uid("t")
    turn = reasoner.send(binding, stream(message(ctx=ctx, guid=guid, turn=turn_id,
                                                 meta={k("sideEffect"): True})))
    assert turn.final_state == "TASK_STATE_COMPLETED"
    import httpx

    rows = httpx.get(f"{witness}/ledger", params={"contextId": ctx}).json()["rows"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["requestGuid"], row["turnId"], row["taskId"], row["principal"]) == (
        guid, turn_id, turn.task_id, "alice")


# ---------------------------------------------------------------------------- cancel


def test_cancel_sse(reasoner: Reasoner) -> None:
    import json

    import httpx

    body = stream(message(ctx=uid("c"), meta={k("test.delayS"): 10}))
    turn = Turn()
    with httpx.Client(timeout=20) as c, c.stream("POST", reasoner.url + "/", headers=headers(),
                                                 json=body) as r:
        lines = r.iter_lines()
        for line in lines:
            if not line.startswith("data:"):
                continue
            turn.events.append(json.loads(line[5:])["result"])
            if state(turn.events[-1]) == "TASK_STATE_WORKING":
                cancel = reasoner.call("CancelTask", {"id": turn.task_id})
                assert cancel["result"]["status"]["state"] == "TASK_STATE_CANCELED"
            if state(turn.events[-1]) in ("TASK_STATE_CANCELED", "TASK_STATE_COMPLETED"):
                break
    assert turn.final_state == "TASK_STATE_CANCELED"
    assert turn.spoken == []
    got = reasoner.call("GetTask", {"id": turn.task_id})
    assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED"


def test_cancel_ws(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        body = stream(message(ctx=uid("c"), meta={k("test.delayS"): 10}), rid="turn")
        s.send(body)
        first = [s.recv(), s.recv()]
        assert [state(f["result"]) for f in first] == ["TASK_STATE_SUBMITTED",
                                                       "TASK_STATE_WORKING"]
        cancel = s.request(rpc("CancelTask", {"id": first[0]["result"]["task"]["id"]}, "c1"))
        assert cancel.frames[0]["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        rest = s.until_end("turn")
        assert rest.final_state == "TASK_STATE_CANCELED"
        assert meta(rest.final)[k("sequenceId")] == 1


# ---------------------------------------------------------------------------- handoff


def test_input_required_continuation(reasoner: Reasoner, binding: str) -> None:
    ctx = uid("c")
    first = reasoner.send(binding, stream(message(ctx=ctx, meta={k("handoff"): True})))
    assert first.final_state == "TASK_STATE_INPUT_REQUIRED"
    handoff = status_message(first.final)
    assert handoff["metadata"][k("directiveType")] == "handoff"
    assert first.seqs == [0, 1]
    follow = reasoner.send(binding, stream(message("my answer", ctx=ctx, task=first.task_id)))
    assert kind(follow.events[0]) == "statusUpdate"  # same task: no new Task event
    assert {e[kind(e)]["taskId"] for e in follow.events} == {first.task_id}
    assert follow.final_state == "TASK_STATE_COMPLETED"
    assert [meta(e)[k("sequenceId")] for e in follow.events] == [2, 3, 4, 5, 6]


def test_handoff_timeout_fails_the_task(reasoner: Reasoner, binding: str) -> None:
    ctx = uid("c")
    first = reasoner.send(binding, stream(message(ctx=ctx, meta={k("handoff"): True})))
    assert first.final_state == "TASK_STATE_INPUT_REQUIRED"
    time.sleep(FAST_HANDOFF_S + 0.3)  # the elapsed time is the input under test
    late = reasoner.send(binding, stream(message(ctx=ctx, task=first.task_id)))
    assert late.final_state == "TASK_STATE_FAILED"
    assert status_message(late.final)["metadata"][k("errorCode")] == "session-not-found"
    assert late.final["statusUpdate"]["taskId"] == first.task_id


# ---------------------------------------------------------------------------- idempotency


def _replayed(r: Reasoner, binding: str, msg: dict) -> Turn:
    """Send ``msg`` twice; the second answer replays the first (same events, sequenceIds,
    taskId); the first."""
    first = r.send(binding, stream(msg))
    again = r.send(binding, stream(msg))
    assert again.without_ids() == first.without_ids()
    return first


def test_sequential_duplicate_is_replayed_not_reexecuted(reasoner: Reasoner, binding: str,
                                                         witness: str) -> None:
    ctx, guid, turn_id = uid("c"), uid("g"), uid("t")
    msg = message(ctx=ctx, guid=guid, turn=turn_id, meta={k("sideEffect"): True})
    first = _replayed(reasoner, binding, msg)
    other = reasoner.send("ws" if binding == "sse" else "sse", stream(msg))
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert other.without_ids() == first.without_ids()  # across bindings too
    summary = ledger_summary(witness, ctx)
    assert summary["executions"] == 1


def test_failed_outcome_is_replayed(reasoner: Reasoner, binding: str) -> None:
    msg = message(ctx=uid("c"), meta={k("test.forceError"): "internal"})
    assert _replayed(reasoner, binding, msg).error_code == "internal"


def test_concurrent_duplicates_join_one_execution(reasoner: Reasoner, binding: str,
                                                  witness: str) -> None:
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True, k("test.delayS"): 0.4})
    results: list[Turn] = []

    def run() -> None:
        results.append(reasoner.send(binding, stream(msg)))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 3
    assert all(r.final_state == "TASK_STATE_COMPLETED" for r in results)
    assert len({r.task_id for r in results}) == 1
    assert ledger_summary(witness, ctx)["executions"] == 1


def test_new_guid_for_same_turn_reexecutes_in_request_guid_mode(reasoner: Reasoner,
                                                                witness: str) -> None:
    """The errors.md §3/§4 ambiguity, made visible: a retry with a new requestGuid runs again."""
    ctx, turn_id = uid("c"), uid("t")
    for _ in range(2):
        msg = message(ctx=ctx, turn=turn_id, meta={k("sideEffect"): True})
        assert reasoner.send("sse", stream(msg)).final_state == "TASK_STATE_COMPLETED"
    summary = ledger_summary(witness, ctx)
    assert summary["executions"] == 2
    assert summary["turnsExecutedUnderMultipleRequestGuids"] == 1


def test_first_message_without_context_is_deduplicated(reasoner: Reasoner, binding: str) -> None:
    msg = message()
    first = reasoner.send(binding, stream(msg))
    again = reasoner.send(binding, stream(msg))
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert again.context_id == first.context_id  # no second session


def test_known_task_id_returns_its_state(reasoner: Reasoner, binding: str) -> None:
    ctx = uid("c")
    first = reasoner.send(binding, stream(message(ctx=ctx)))
    retry = reasoner.send(binding, stream(message(ctx=ctx, task=first.task_id)))
    assert [kind(e) for e in retry.events] == ["task"]
    assert retry.final_state == "TASK_STATE_COMPLETED"
    assert retry.task_id == first.task_id


def test_metrics_count_turns_and_replays(reasoner: Reasoner) -> None:
    msg = message(ctx=uid("c"))
    reasoner.send("sse", stream(msg))
    reasoner.send("sse", stream(msg))
    text = reasoner.metrics()
    assert 'rta_reasoner_turns_total{code="",outcome="completed"}' in text
    assert 'rta_reasoner_dedup_total{result="replay"}' in text
    assert "rta_reasoner_turn_seconds_bucket" in text
    assert "rta_reasoner_in_flight" in text


def test_duplicate_continuation_is_replayed(reasoner: Reasoner, binding: str) -> None:
    ctx = uid("c")
    first = reasoner.send(binding, stream(message(ctx=ctx, meta={k("handoff"): True})))
    follow = message("my answer", ctx=ctx, task=first.task_id)
    assert _replayed(reasoner, binding, follow).final_state == "TASK_STATE_COMPLETED"


def test_client_gone_mid_turn_still_records_the_outcome(reasoner: Reasoner, binding: str,
                                                        witness: str) -> None:
    ctx = uid("c")
    msg = message(ctx=ctx, meta={k("sideEffect"): True, k("test.delayS"): 0.3})
    if binding == "sse":
        import httpx

        with httpx.Client(timeout=10) as c, c.stream("POST", reasoner.url + "/",
                                                     headers=headers(), json=stream(msg)) as r:
            next(line for line in r.iter_lines() if line.startswith("data:"))
    else:
        with reasoner.ws() as s:
            s.send(stream(msg, rid="gone"))
            s.recv()
    again = reasoner.send(binding, stream(msg))  # joins the in-flight turn or replays it
    assert again.final_state == "TASK_STATE_COMPLETED"
    assert len(again.spoken) == 3
    assert ledger_summary(witness, ctx)["executions"] == 1
