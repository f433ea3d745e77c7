"""The tests' wire client (rtalab.loadtests.wireclient) without a server: what a Turn reads
from its frames, the requests it builds, and a WebSocket session's routing by id."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from rtalab.loadtests.wireclient import EXT, Turn, WsSession, k, message, stream


def _task(state: str = "TASK_STATE_WORKING") -> dict[str, Any]:
    return {"task": {"id": "t1", "contextId": "c1", "status": {"state": state}}}


def _status(seq: int, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"status": {"state": state}, "metadata": {k("sequenceId"): seq}}}


def test_seqs_are_the_events_after_the_task() -> None:
    turn = Turn(events=[_task(), _status(0, "TASK_STATE_WORKING"),
                        _status(1, "TASK_STATE_COMPLETED")])
    assert turn.seqs == [0, 1] and turn.final_state == "TASK_STATE_COMPLETED"


def test_a_message_carries_the_ids_it_was_given() -> None:
    m = message(ctx="c", task="t", guid="g", turn="tu", interaction="i")
    assert m["metadata"] == {f"{EXT}/turnId": "tu", f"{EXT}/requestGuid": "g",
                             f"{EXT}/interactionId": "i"}
    assert (m["contextId"], m["taskId"]) == ("c", "t")
    fresh = message(), message()
    assert fresh[0]["metadata"][k("interactionId")] != fresh[1]["metadata"][k("interactionId")]


class _Conn:
    """A WebSocket connection that answers with canned frames."""

    def __init__(self, frames: list[dict[str, Any]]) -> None:
        self.response = SimpleNamespace(headers=SimpleNamespace(
            raw_items=lambda: [("X-RTA-Worker", "7")]))  # the upgrade's headers
        self.frames = [json.dumps(f) for f in frames]
        self.sent: list[str] = []

    def send(self, text: str) -> None:
        self.sent.append(text)

    def recv(self, timeout: float) -> str:
        return self.frames.pop(0)


def test_a_websocket_keeps_the_frames_of_another_request_for_it() -> None:
    """Two requests on one socket: frames of the second that arrive while the first is
    read are kept, and the second request's turn gets them."""
    a, b = stream(message(), rid="a"), stream(message(), rid="b")
    done = "TASK_STATE_COMPLETED"
    s = WsSession(_Conn([  # type: ignore[arg-type]
        {"jsonrpc": "2.0", "id": "b", "result": _task()},
        {"jsonrpc": "2.0", "id": "a", "result": _task()},
        {"jsonrpc": "2.0", "id": "b", "result": _status(0, done)},
        {"jsonrpc": "2.0", "id": "a", "result": _status(0, done)}]))
    s.send(a)
    s.send(b)
    first = s.until_end("a")
    second = s.until_end("b")
    assert [e.get("statusUpdate", {}).get("status", {}).get("state") for e in first.events] \
        == [None, done]
    assert len(second.events) == 2 and second.final_state == done
    assert first.headers == {"x-rta-worker": "7"} and first.worker == "7"
