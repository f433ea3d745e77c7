"""The sans-IO turn machine (rtalab.sim.policy.turn): events in, actions out, every ending."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from rtalab.sim.policy import RetryPolicy
from rtalab.sim.policy.config import (
    BackoffConfig,
    EscalationConfig,
    LivePolicyConfig,
    RetryConfig,
)
from rtalab.sim.policy.turn import (
    AWAIT_CALLER,
    CANCEL,
    END,
    IGNORE,
    SEND,
    WAIT,
    CallMachine,
    TurnMachine,
    TurnRules,
)
from rtalab.sim.vocab import AttemptOutcome as A
from rtalab.sim.vocab import CallEndReason, Ending, EndReason, TurnOutcome


class Budget:
    """A retry budget that records every call the machine makes (and may refuse)."""

    def __init__(self, first: bool = True, retry: bool = True) -> None:
        self.first, self.retry = first, retry
        self.calls: list[tuple[Any, ...]] = []

    def allow_first(self, now: float, rng: Any) -> bool:
        self.calls.append(("allow_first", now))
        return self.first

    def on_attempt(self, now: float, is_retry: bool) -> None:
        self.calls.append(("on_attempt", now, is_retry))

    def end_attempt(self, now: float, ending: Ending, is_retry: bool = False,
                    after_timeout: bool = False) -> None:
        self.calls.append(("end", now, ending, is_retry, after_timeout))

    def allow_retry(self, now: float, rng: Any, timeout: bool = False) -> bool:
        self.calls.append(("allow_retry", now, timeout))
        return self.retry


def rules(budget: Budget | None = None, t0: float = 0.0, **retry: Any) -> TurnRules:
    cancel = retry.pop("cancel_on_timeout", False)
    cfg = LivePolicyConfig(retry=RetryConfig(**retry),
                           backoff=BackoffConfig(strategy="exponential", base_s=0.5),
                           cancel_on_timeout=cancel)
    policy = RetryPolicy(cfg, budget)  # type: ignore[arg-type]
    return TurnRules(cfg, policy, budget, np.random.default_rng(0),  # type: ignore[arg-type]
                     itertools.count(100).__next__, itertools.count(1).__next__, t0)


def turn(r: TurnRules, handoff: bool = False) -> TurnMachine:
    return TurnMachine(r, 10.0, side_effect=False, handoff=handoff)


def test_completed_first_attempt_mints_ids_and_times_the_turn() -> None:
    t = turn(rules())
    assert t.send(10.0) == SEND
    assert (t.guid, t.turn_id, t.task_id, t.phase_attempts, t.delay_s) == (100, 1, None, 1, 0.0)
    t.learn_task("task-a")
    t.first_chunk_s = 10.5
    assert t.attempt_ended(11.0, A.COMPLETED) == END
    assert (t.outcome, t.reason, t.code, t.decision) == ("completed", "completed", None, None)
    assert t.timings(12.0) == (0.5, 2.0)
    assert t.ended and not t.in_flight


def test_every_chunk_skipped_has_no_time_to_first_chunk() -> None:
    t = turn(rules())
    t.send(10.0)
    t.first_chunk_s = math.inf
    t.attempt_ended(11.0, A.COMPLETED)
    ttfc, completion = t.timings(11.0)
    assert math.isnan(ttfc) and completion == 1.0


@pytest.mark.parametrize("new_guid, new_turn_id", [(True, True), (False, False), (True, False)])
def test_a_retry_after_failed_is_a_new_task(new_guid: bool, new_turn_id: bool) -> None:
    t = turn(rules(new_request_guid=new_guid, new_turn_id=new_turn_id))
    t.send(10.0)
    t.learn_task("task-a")
    assert t.attempt_ended(10.2, A.FAILED, "internal") == WAIT
    assert (t.decision, t.delay_s, t.code) == ("retry", 0.5, "internal")
    assert not t.retry_after_timeout
    assert t.retry_due(10.7) == SEND
    assert t.task_id is None  # errors.md §4: the FAILED task is over
    assert t.guid == (101 if new_guid else 100)
    assert t.turn_id == (2 if new_turn_id else 1)
    assert (t.phase_attempts, t.attempts, t.first_sends, t.delay_s) == (2, 2, 1, 0.5)


@pytest.mark.parametrize("outcome, ending, after_timeout", [
    (A.TIMEOUT, Ending.TIMEOUT, True), (A.TOTAL_TIMEOUT, Ending.TIMEOUT, True),
    (A.RESPONSE_LOST, Ending.LOST, False)])
def test_a_retry_after_a_timeout_keeps_the_task(outcome: A, ending: Ending,
                                                after_timeout: bool) -> None:
    b = Budget()
    t = turn(rules(b))
    t.send(10.0)
    t.learn_task("task-a")
    assert t.attempt_ended(12.0, outcome) == WAIT
    assert t.code == "upstream-timeout" and t.retry_after_timeout is after_timeout
    assert b.calls[-2] == ("end", 12.0, ending, False, False)
    assert b.calls[-1] == ("allow_retry", 12.0, ending == Ending.TIMEOUT)
    assert t.retry_due(12.5) == SEND
    assert (t.task_id, t.turn_id) == ("task-a", 1)
    t.attempt_ended(13.0, A.COMPLETED)
    assert b.calls[-1] == ("end", 13.0, Ending.SUCCESS, True, after_timeout)


def test_cancel_on_timeout_cancels_and_renews_the_task() -> None:
    t = turn(rules(cancel_on_timeout=True))
    t.send(10.0)
    t.learn_task("task-a")
    assert t.attempt_ended(12.0, A.TIMEOUT) == WAIT and t.cancel
    t.retry_due(12.5)
    assert t.task_id is None and t.turn_id == 2
    t.attempt_ended(13.0, A.RESPONSE_LOST)
    assert not t.cancel  # a lost response is not cancelled


@pytest.mark.parametrize("kw, code, reason", [
    ({}, "auth", EndReason.NOT_RETRYABLE),
    ({"max_attempts_by_code": {"internal": 1}}, "internal", EndReason.ATTEMPTS_EXHAUSTED),
    ({"deadline_s": 0.1}, "internal", EndReason.DEADLINE)])
def test_refused_retries_end_the_turn_failed(kw: dict[str, Any], code: str,
                                             reason: EndReason) -> None:
    t = turn(rules(**kw))
    t.send(10.0)
    assert t.attempt_ended(10.2, A.FAILED, code) == END
    assert (t.outcome, t.reason, t.code, t.decision) == ("failed", reason, code, reason)


def test_the_budget_refuses_a_first_attempt_or_a_retry() -> None:
    b = Budget(first=False)
    t = turn(rules(b, t0=4.0))
    assert t.send(10.0) == END
    assert (t.outcome, t.reason, t.attempts) == ("failed", "budget", 0)
    assert b.calls == [("allow_first", 6.0)]  # the budget's clock starts at t0
    b = Budget(retry=False)
    t = turn(rules(b))
    t.send(10.0)
    assert t.attempt_ended(10.2, A.FAILED, "rate-limited") == END
    assert t.reason == "budget"
    assert b.calls[2] == ("end", 10.2, Ending.OVERLOADED, False, False)


def test_handoff_continuation_goes_on_the_input_required_task() -> None:
    t = turn(rules(), handoff=True)
    t.send(10.0)
    assert t.wants_input and t.phase_name == "initial"
    t.learn_task("task-a")
    assert t.attempt_ended(10.5, A.INPUT_REQUIRED) == AWAIT_CALLER
    assert t.barge_in(10.6) == IGNORE  # the caller owes the answer
    assert not t.caller_wait(2.0, 5.0) and t.handoff_wait_s == 2.0
    assert t.caller_answered(12.5) == SEND
    assert (t.phase_name, t.phase_attempts, t.attempts, t.first_sends) == ("continuation", 1, 2, 2)
    assert (t.task_id, t.guid, t.turn_id) == ("task-a", 101, 1)
    assert not t.wants_input
    t.first_chunk_s = 13.0
    t.attempt_ended(13.5, A.COMPLETED)
    assert t.timings(14.0) == (1.0, 2.0)  # from the caller's answer


def test_handoff_abandoned_when_the_caller_is_too_slow() -> None:
    t = turn(rules(), handoff=True)
    t.send(10.0)
    t.attempt_ended(10.5, A.INPUT_REQUIRED)
    assert t.caller_wait(9.0, 5.0) and t.handoff_wait_s == 5.0
    assert t.caller_gone(15.5) == END
    assert (t.outcome, t.reason) == ("abandoned", "handoff-timeout")
    assert t.caller_answered(19.5) == IGNORE


def test_barge_in_cancels_an_open_attempt_or_drops_a_pending_retry() -> None:
    b = Budget()
    t = turn(rules(b))
    t.send(10.0)
    assert t.barge_in(10.3) == CANCEL
    assert (t.outcome, t.reason) == ("cancelled", "barge-in")
    assert b.calls[-1] == ("end", 10.3, Ending.CANCELLED, False, False)
    assert t.barge_in(10.4) == IGNORE and t.retry_due(10.5) == IGNORE
    b = Budget()
    t = turn(rules(b))
    t.send(10.0)
    t.attempt_ended(10.2, A.FAILED, "internal")
    assert t.barge_in(10.3) == END and t.outcome == "cancelled"
    assert b.calls[-1] == ("end", 10.3, Ending.DROPPED, True, False)
    assert t.retry_due(10.7) == IGNORE  # the dropped retry is never sent


def test_an_attempt_cancelled_on_the_wire_ends_the_turn() -> None:
    t = turn(rules())
    t.send(10.0)
    assert t.attempt_ended(10.3, A.CANCELLED) == END
    assert (t.outcome, t.reason) == (TurnOutcome.CANCELLED, EndReason.BARGE_IN)


def test_stop_drops_a_pending_retry_unless_the_clock_ended() -> None:
    for now, told in ((11.0, True), (None, False)):
        b = Budget()
        t = turn(rules(b))
        t.send(10.0)
        t.attempt_ended(10.2, A.FAILED, "internal")
        t.stop(now)
        assert (t.outcome, t.reason) == ("unfinished", "end-of-run")
        assert (b.calls[-1][:3] == ("end", 11.0, Ending.DROPPED)) is told


def test_call_machine_escalates_after_failed_turns_in_a_row() -> None:
    c = CallMachine(5, EscalationConfig(end_session_after_failed_turns=2))
    c.turns_started = 1
    assert c.turn_ended(TurnOutcome.FAILED) == (False, None)
    c.turns_started = 2
    assert c.turn_ended(TurnOutcome.ABANDONED) == (False, None)  # resets the count
    c.turns_started = 3
    assert c.turn_ended(TurnOutcome.FAILED) == (False, None)
    c.turns_started = 4
    assert c.turn_ended(TurnOutcome.FAILED) == (True, CallEndReason.ESCALATED)
    c = CallMachine(1, EscalationConfig())
    c.turns_started = 1
    assert c.turn_ended(TurnOutcome.FAILED) == (False, CallEndReason.ALL_TURNS_DONE)


def test_same_events_same_numbers() -> None:
    def play() -> list[Any]:
        cfg = LivePolicyConfig(backoff=BackoffConfig(strategy="full_jitter"))
        r = TurnRules(cfg, RetryPolicy(cfg), None, np.random.default_rng(7),
                      itertools.count().__next__, itertools.count().__next__)
        t = TurnMachine(r, 0.0, False, False)
        out = [t.send(0.0)]
        for k in range(5):
            out += [t.attempt_ended(k + 0.1, A.FAILED, "internal"), t.delay_s]
            if t.ended:
                break
            out.append(t.retry_due(k + 1.0))
        return [*out, t.reason]
    assert play() == play()
    assert play()[-1] == "attempts-exhausted"


def test_a_caller_answering_exactly_at_the_handoff_timeout_is_in_time() -> None:
    t = turn(rules(), handoff=True)
    t.send(10.0)
    t.attempt_ended(10.5, A.INPUT_REQUIRED)
    assert not t.caller_wait(5.0, 5.0) and t.handoff_wait_s == 5.0  # "within" the timeout
    assert t.caller_answered(15.5) == SEND


def test_a_continuation_is_its_phases_first_attempt_and_its_retry_a_new_task() -> None:
    """The continuation's first attempt goes on the INPUT_REQUIRED task, with no backoff
    carried over from the first phase and told to the budget as a first attempt, under a
    requestGuid of its own (new per phase even when retries keep theirs); its retry after
    FAILED is a new task (errors.md §4), not the paused one again."""
    b = Budget()
    t = turn(rules(b, max_attempts=3, new_request_guid=False), handoff=True)
    t.send(10.0)
    t.learn_task("task-a")
    assert t.attempt_ended(10.2, A.FAILED, "internal") == WAIT and t.delay_s > 0
    t.retry_due(10.2 + t.delay_s)
    assert t.guid == 100  # the retry keeps the phase's requestGuid
    t.learn_task("task-b")
    assert t.attempt_ended(11.5, A.INPUT_REQUIRED) == AWAIT_CALLER
    t.caller_wait(1.0, 5.0)
    assert t.caller_answered(12.5) == SEND
    assert (t.task_id, t.delay_s, t.phase_attempts, t.guid) == ("task-b", 0.0, 1, 101)
    assert t.attempt_ended(12.8, A.FAILED, "internal") == WAIT
    assert b.calls[-2] == ("end", 12.8, Ending.FAILURE, False, False)  # not a retry
    assert t.retry_due(12.8 + t.delay_s) == SEND
    assert t.task_id is None  # the failed task is not resumed
