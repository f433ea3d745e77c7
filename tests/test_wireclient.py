"""The tests' wire client (rtalab.loadtests.wireclient) without a server: what a Turn reads
from its frames, the requests it builds, and a WebSocket session's routing by id."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from rtalab.loadtests.wireclient import EXT, Turn, WsSession, k, message, stream


def _task(state: str = "TASK_STATE_WORKING") -> dict[str, Any]:
    return {"task": {"id": "t1", "contextId": "c1", "status": {"state": state}}}


def _status(seq: int, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"status": {"state": state}, "metadata": {k("sequenceId"): seq}}}


def test_seqs_are_the_events_after_the_task() -> None:
    turn = Turn(events=[_task(), _status(0, "TASK_STATE_WORKING"),
                        _status(1, "TASK_STATE_COMPLETED")])
    assert turn.seqs == [0, 1] and turn.final_state == "TASK_STATE_COMPLETED"


def test_a_failed_turns_code_and_text_are_its_status_messages() -> None:
    """``rta/errorCode`` sits in the FAILED status's message (errors.md), not in the event's
    own metadata (which holds the sequenceId)."""
    failed = {"statusUpdate": {
        "status": {"state": "TASK_STATE_FAILED", "message": {
            "metadata": {k("errorCode"): "internal"},
            "parts": [{"text": "try "}, {"text": "again"}]}},
        "metadata": {k("sequenceId"): 1, k("errorCode"): "not-this"}}}
    turn = Turn(events=[_task(), failed])
    assert (turn.error_code, turn.failure_text) == ("internal", "try again")
    assert Turn(events=[_task(), _status(0, "TASK_STATE_COMPLETED")]).error_code is None


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


def test_a_grpc_request_carries_the_profiles_headers_as_metadata(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``Authorization``, ``A2A-Extensions`` and ``A2A-Version`` become gRPC metadata however
    they are spelled (metadata keys are lower case); other headers stay behind."""
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from rtalab.loadtests.wireclient import grpc_request, headers, rpc

    sent: list[Any] = []

    class Call:
        def initial_metadata(self) -> tuple[tuple[str, str], ...]:
            return (("x-rta-worker", "9"),)

    class Method:
        def with_call(self, request: Any, metadata: Any, timeout: float) -> Any:
            sent.append(metadata)
            return a2a_pb2.SendMessageResponse(), Call()

    class Stub:
        def __init__(self, channel: Any) -> None:
            self.SendMessage = Method()

    monkeypatch.setattr(grpc, "insecure_channel", lambda address: SimpleNamespace(
        close=lambda: None))
    monkeypatch.setattr(a2a_pb2_grpc, "A2AServiceStub", Stub)
    hdrs = {**headers(), "X-Other": "no"}
    assert {"Authorization", "A2A-Extensions", "A2A-Version"} <= set(hdrs)
    turn = grpc_request("127.0.0.1:1", rpc("SendMessage", {"message": message()}, "r1"), hdrs)
    (md,) = sent
    assert {key for key, _ in md} == {"authorization", "a2a-extensions", "a2a-version"}
    assert dict(md)["authorization"] == hdrs["Authorization"]
    assert turn.worker == "9" and turn.frames[0]["id"] == "r1"
