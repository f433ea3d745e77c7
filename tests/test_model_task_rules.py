"""errors.md §4 by default: a known taskId is a retry of its turn (docs/decisions.md D2)
in every dedup mode, and the dedup scope of a first message without contextId (D1)."""

from __future__ import annotations

from typing import Any

import pytest

from rtalab.sim.runner import RunOutput, run_once
from tests.scenarios import one_turn

# 3 s of silent reasoning against a 1-s turn-response timeout: attempts 1 and 2 time out,
# attempt 3 (sent before 2.4 s) hears the first chunk of the shared execution in time
SLOW = {"reasoner.reasoning_time_s": 3.0, "reasoner.progress_directive": False,
        "live.timeouts.turn_response_s": 1.0, "live.retry.max_attempts": 3}


def _disp(out: RunOutput) -> list[str]:
    return out.executions["disposition"].astype(str).tolist()


@pytest.mark.parametrize("dedup", ["request-guid", "turn", "none"])
def test_a_timeout_retry_joins_the_running_task_in_every_mode(dedup: str) -> None:
    """The retry after a timeout keeps the taskId (§3) under a new requestGuid: it joins the
    running execution (and completes with it) instead of running beside it."""
    out = run_once(one_turn(**SLOW, **{"reasoner.dedup": dedup}), seed=1)
    assert _disp(out) == ["executed", "joined", "joined"]
    assert out.attempts["outcome"].astype(str).tolist() == ["timeout", "timeout", "completed"]
    assert out.attempts["request_guid"].nunique() == 3


@pytest.mark.parametrize("dedup", ["request-guid", "none"])
def test_known_task_execute_is_the_old_behaviour(dedup: str) -> None:
    out = run_once(one_turn(**SLOW, **{"reasoner.dedup": dedup,
                                       "reasoner.known_task": "execute"}), seed=1)
    assert _disp(out) == ["executed"] * 3


@pytest.mark.parametrize("dedup", ["request-guid", "none"])
def test_a_retry_of_a_finished_task_gets_its_stored_outcome(dedup: str) -> None:
    """A retry naming a task that already FAILED (a Live layer keeping the taskId, against
    the §4 MUST) gets the stored FAILED; the default Live layer takes a new taskId instead."""
    sc: dict[str, Any] = {"reasoner.errors": {"internal": 1.0}, "reasoner.dedup": dedup,
                          "live.retry.max_attempts_by_code": {}, "live.retry.max_attempts": 2}
    kept = run_once(one_turn(**sc, **{"live.retry.new_turn_id": False}), seed=1)
    assert _disp(kept) == ["executed", "replayed"]
    renewed = run_once(one_turn(**sc), seed=1)  # default new_turn_id = true
    assert _disp(renewed) == ["executed", "executed"]
    assert renewed.attempts["task_id"].nunique() == 2


def test_the_first_continuation_claims_the_task_a_retry_of_it_joins() -> None:
    """INPUT_REQUIRED: the continuation on the same taskId executes (it is not a retry of the
    initial phase); a retry of that continuation joins it."""
    out = run_once(one_turn(**SLOW, **{
        "workload.handoff_share": 1.0, "workload.caller_response_time_s": 1.0,
        "live.timeouts.handoff_s": 0.0}), seed=1)
    ex = out.executions
    cont = ex[ex["phase"] == "continuation"]["disposition"].astype(str).tolist()
    init = ex[ex["phase"] == "initial"]["disposition"].astype(str).tolist()
    assert init == ["executed", "joined", "joined"]
    assert cont == ["executed", "joined", "joined"]
    assert ex["task_id"].nunique() == 1
    assert out.turns["outcome"].iloc[0] == "completed"


# --------------------------------------------------------------------------- D1


def _contextless(**overrides: Any) -> RunOutput:
    """A first message without contextId: the progress directive arrives (the Live layer
    learns the contextId), the rest of the stream is lost in a downlink partition, the total
    timer ends the attempt at 2 s and the retry follows."""
    return run_once(one_turn(**{
        "live.client_context_id": False, "reasoner.known_task": "execute",  # isolate D1
        "live.timeouts.turn_total_s": 2.0,
        "network.outages": [{"start_s": 0.3, "duration_s": 1.8, "direction": "downlink"}],
        **overrides}), seed=1)


def test_same_guid_resend_after_learning_the_context_replays_in_the_first_session() -> None:
    """D1: the resend keeps its requestGuid and now carries the learned contextId; it lands
    in the session minted for the first copy and gets the stored outcome: one execution."""
    out = _contextless(**{"live.retry.new_request_guid": False})
    a = out.attempts
    assert a["outcome"].astype(str).tolist() == ["total-timeout", "completed"]
    assert a["context_id"].tolist()[0] == -1 and a["context_id"].tolist()[1] >= 0
    assert _disp(out) == ["executed", "replayed"]
    assert out.calls["sessions_opened"].tolist() == [1]


def test_new_guid_retry_before_the_context_is_known_opens_a_second_session() -> None:
    """D1: a retry under a NEW requestGuid that carries no contextId is a new first message:
    the duplicated-session hazard, counted separately."""
    out = run_once(one_turn(**SLOW, **{"live.client_context_id": False}), seed=1)
    assert _disp(out) == ["executed"] * 3
    assert out.calls["sessions_opened"].tolist() == [3]


def test_a_network_copy_of_a_contextless_first_message_stays_in_its_session() -> None:
    """D1: the byte-identical copy (no contextId, same requestGuid) resolves to the contextId
    minted for the first copy: it joins the execution and opens no session."""
    out = run_once(one_turn(**{"live.client_context_id": False,
                               "network.uplink.duplication": 1.0,
                               "network.uplink.duplicate_delay_s": 0.1}), seed=1)
    assert _disp(out) == ["executed", "joined"]
    assert out.executions["context_id"].nunique() == 1
    assert out.calls["sessions_opened"].tolist() == [1]
