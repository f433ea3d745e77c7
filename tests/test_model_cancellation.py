"""Issue 6 §1 mechanisms, one exact scenario each: CancelTask, barge-in, queue deadline, LIFO."""

from __future__ import annotations

from typing import Any

import pytest

from rtalab.sim.runner import RunOutput, run_once
from tests.scenarios import one_turn


def _disp(out: RunOutput, **where: Any) -> list[str]:
    ex = out.executions
    for k, v in where.items():
        ex = ex[ex[k] == v]
    return ex["disposition"].astype(str).tolist()


def _crowd(n: int, **overrides: Any) -> dict[str, Any]:
    """``n`` one-turn calls arriving within microseconds at a one-worker Reasoner; no retries."""
    return {"workload.max_calls": n, "workload.calls_per_s": 1e6, "reasoner.workers": 1,
            "reasoner.reasoning_time_s": 2.0, "reasoner.first_chunk_s": 0.0,
            "live.retry.max_attempts": 1, "live.retry.max_attempts_by_code": {}, **overrides}


# --------------------------------------------------------------------------- CancelTask


@pytest.mark.parametrize("cancel", [True, False])
def test_cancelled_queued_work_never_executes(cancel: bool) -> None:
    """Call 1 waits behind call 0 (2 s of reasoning); its attempt times out at 1 s (no
    progress before a worker takes it).  With cancel_on_timeout its queued job is dropped and
    never executes; without, the worker runs it for nobody at 2 s."""
    out = run_once(one_turn(**_crowd(2, **{
        "live.timeouts.turn_response_s": 1.0, "live.cancel_on_timeout": cancel})), seed=1)
    assert out.attempts["outcome"].astype(str).tolist() == ["completed", "timeout"]
    if cancel:
        assert _disp(out, call_id=1) == ["cancel-dropped"]
        assert out.counters["server_executions"] == 1
    else:
        assert _disp(out, call_id=1) == ["executed"]
        assert out.counters["server_executions"] == 2


@pytest.mark.parametrize("response_s, rolled_forward", [(0.3, False), (1.0, True)])
def test_cancel_stops_running_work_unless_the_side_effect_ran(response_s: float,
                                                             rolled_forward: bool) -> None:
    """Reasoning 0.5 s, then a 3-s tool call; no progress directive, so the attempt times out
    at ``response_s``.  A CancelTask arriving during reasoning stops the job at its next step
    (no tool call, no side effect, worker free at 0.51 s); one arriving after the tool started
    cannot undo it: counted ``cancel-rolled-forward`` and the side effect is in the ledger."""
    out = run_once(one_turn(**{
        "workload.side_effect_share": 1.0, "reasoner.reasoning_time_s": 0.5,
        "reasoner.tool_latency_s": 3.0, "reasoner.upstream_timeout_s": 0.0,
        "reasoner.progress_directive": False, "live.timeouts.turn_response_s": response_s,
        "live.retry.max_attempts": 1, "live.cancel_on_timeout": True}), seed=1)
    ex = out.executions
    if rolled_forward:
        assert _disp(out) == ["executed", "cancel-rolled-forward"]
        assert len(out.side_effects) == 1
        # the caller was told the turn failed although its side effect ran: a ghost success
        assert out.turns["outcome"].iloc[0] == "failed"
        assert out.turns["side_effect_executions"].iloc[0] == 1
    else:
        assert _disp(out) == ["executed", "cancel-stopped"]
        assert len(out.side_effects) == 0
        stopped = ex[ex["disposition"] == "cancel-stopped"].iloc[0]
        # stopped at the end of reasoning, before the tool call
        assert stopped["service_end_s"] - stopped["service_start_s"] == pytest.approx(0.5)
        assert out.timeseries["busy_workers"].iloc[0] == 0  # the worker was freed by t = 1 s


def test_cancel_lost_in_an_uplink_outage_changes_nothing() -> None:
    """CancelTask travels the uplink and meets its faults: sent inside a partition, it is lost
    and the queued work runs."""
    out = run_once(one_turn(**_crowd(2, **{
        "live.timeouts.turn_response_s": 1.0, "live.cancel_on_timeout": True,
        "network.outages": [{"start_s": 0.5, "duration_s": 2.0, "direction": "uplink"}]})),
        seed=1)
    assert out.counters["cancels_sent"] == 1
    assert _disp(out, call_id=1) == ["executed"]


def test_retry_after_a_cancel_takes_a_new_task() -> None:
    """The cancelled task is over (CANCELED): the retry runs as a new task, not a join."""
    out = run_once(one_turn(**_crowd(2, **{
        "live.timeouts.turn_response_s": 1.0, "live.cancel_on_timeout": True,
        "live.retry.max_attempts": 2})), seed=1)
    a = out.attempts[out.attempts["call_id"] == 1]
    assert a["task_id"].nunique() == 2
    assert _disp(out, call_id=1)[0] == "cancel-dropped"


# --------------------------------------------------------------------------- barge-in


def test_barge_in_cancels_the_turn_and_starts_the_next_at_once() -> None:
    out = run_once(one_turn(**{
        "workload.turns_per_call": 3, "workload.barge_in_share": 1.0,
        "workload.barge_in_after_s": 0.3, "reasoner.reasoning_time_s": 1.0}), seed=1)
    t = out.turns
    assert t["outcome"].astype(str).tolist() == ["cancelled"] * 3
    assert t["end_reason"].astype(str).tolist() == ["barge-in"] * 3
    assert t["start_s"].diff().iloc[1:].tolist() == pytest.approx([0.3, 0.3])  # no think time
    assert out.attempts["outcome"].astype(str).tolist() == ["cancelled"] * 3
    assert _disp(out).count("cancel-stopped") == 3
    assert out.calls["end_reason"].iloc[0] == "all-turns-done"


def test_barge_in_after_the_turn_ended_is_ignored() -> None:
    out = run_once(one_turn(**{"workload.barge_in_share": 1.0,
                               "workload.barge_in_after_s": 5.0}), seed=1)
    assert out.turns["outcome"].iloc[0] == "completed"
    assert "cancel-too-late" not in _disp(out)
    assert out.counters["cancels_sent"] == 0


# --------------------------------------------------------------------------- load shedding


@pytest.mark.parametrize("code, hint", [("rate-limited", 500.0), ("internal", None)])
def test_queue_deadline_refuses_stale_work_with_the_queue_full_code(code: str,
                                                                    hint: float | None) -> None:
    """docs/decisions.md D3: work that waited longer than queue_timeout_s is refused when a worker
    reaches it, with the full queue's code (+ retryAfterMs when rate-limited)."""
    out = run_once(one_turn(**_crowd(2, **{
        "live.timeouts.turn_response_s": 0.0, "reasoner.queue_timeout_s": 1.0,
        "reasoner.queue_full_code": code})), seed=1)
    assert _disp(out, call_id=1) == ["queue-timeout"]
    a = out.attempts[out.attempts["call_id"] == 1].iloc[0]
    assert a["outcome"] == "failed" and a["error_code"] == code
    if hint is None:
        assert a["retry_after_ms"] != a["retry_after_ms"]  # NaN: no hint
    else:
        assert a["retry_after_ms"] == hint
    first = out.executions.iloc[0]
    # refused when the worker freed up (+ 10 ms downlink), not when the deadline passed
    assert a["end_s"] == pytest.approx(first["service_end_s"] + 0.01)
    assert out.counters["server_executions"] == 1


@pytest.mark.parametrize("discipline, order", [("fifo", [0, 1, 2, 3]), ("lifo", [0, 3, 2, 1])])
def test_queue_discipline(discipline: str, order: list[int]) -> None:
    out = run_once(one_turn(**_crowd(4, **{
        "live.timeouts.turn_response_s": 0.0, "reasoner.queue_discipline": discipline})),
        seed=1)
    ex = out.executions[out.executions["disposition"] == "executed"]
    assert ex.sort_values("service_start_s")["call_id"].tolist() == order
