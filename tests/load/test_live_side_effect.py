"""The Live users read ``rta/sideEffect`` (issue 19) from end states and CancelTask answers."""

from __future__ import annotations

from rtalab.loadtests.live.wire import cancel_answer_side_effect, parse_event
from rtalab.loadtests.reasoner.wire import DEFAULT_EXT_URI

EXT = DEFAULT_EXT_URI


def _status(state: str, meta: dict | None) -> dict:
    status: dict = {"state": state}
    if meta is not None:
        status["message"] = {"parts": [{"text": "x"}], "metadata": meta}
    return status


def test_end_states_carry_the_reported_side_effect() -> None:
    cases = [
        ("TASK_STATE_CANCELED", {f"{EXT}/sideEffect": "rolled-forward"}, "rolled-forward"),
        ("TASK_STATE_FAILED", {f"{EXT}/errorCode": "upstream-timeout",
                               f"{EXT}/sideEffect": "unknown"}, "unknown"),
        ("TASK_STATE_COMPLETED", {f"{EXT}/sideEffect": "rolled-forward"}, "rolled-forward"),
        ("TASK_STATE_CANCELED", None, None),
        ("TASK_STATE_CANCELED", {"other/sideEffect": "rolled-forward"}, None),  # other URI
        ("TASK_STATE_CANCELED", {f"{EXT}/sideEffect": 1.0}, None),  # not a string
        ("TASK_STATE_WORKING", {f"{EXT}/sideEffect": "rolled-forward"}, None),  # not an end
    ]
    for state, meta, want in cases:
        frame = {"jsonrpc": "2.0", "id": "r", "result": {"statusUpdate": {
            "taskId": "t", "contextId": "c", "status": _status(state, meta)}}}
        assert parse_event(frame, EXT).side_effect == want, (state, meta)


def test_cancel_answer() -> None:
    task = {"id": "t", "status": _status("TASK_STATE_CANCELED",
                                         {f"{EXT}/sideEffect": "rolled-forward"})}
    assert cancel_answer_side_effect({"result": task}, EXT) == "rolled-forward"
    assert cancel_answer_side_effect({"result": {"id": "t", "status": _status(
        "TASK_STATE_CANCELED", None)}}, EXT) is None
    assert cancel_answer_side_effect({"error": {"code": -32002}}, EXT) is None
    assert cancel_answer_side_effect(None, EXT) is None
