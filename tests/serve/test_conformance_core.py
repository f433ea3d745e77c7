"""Core A2A 1.0 conformance of the reference Reasoner when the profile is NOT negotiated.

Written from the specification's rules, not from the server's code:

- §3.1.1 a message naming a task in a terminal state MUST be answered with
  ``UnsupportedOperationError``;
- §3.4.2 a taskId the server does not know (or that the caller may not see) is
  ``TaskNotFoundError``;
- §3.4.3 a taskId whose task belongs to another contextId MUST be rejected
  (invalid params);
- §5.4 each binding answers an error in its canonical form: JSON-RPC error codes
  (-32001 TaskNotFound, -32004 UnsupportedOperation, -32602 invalid params, on
  SSE, unary JSON and WebSocket alike), HTTP+JSON statuses with a google.rpc
  ``Status`` body (404 NOT_FOUND, 400 FAILED_PRECONDITION, 400 INVALID_ARGUMENT),
  gRPC statuses (NOT_FOUND, UNIMPLEMENTED, INVALID_ARGUMENT) with the
  ``ErrorInfo`` reason, streaming and unary (§5.4's gRPC column: UnsupportedOperation,
  PushNotificationNotSupported and VersionNotSupported are UNIMPLEMENTED);
- §3.6.2 / §5.4 an unsupported ``a2a-version`` is VersionNotSupportedError on gRPC too;
- §9.1 JSON-RPC requests are ``application/json``: a non-JSON body sent as another
  media type is ContentTypeNotSupportedError (-32005);
- the agent card is cacheable (``Cache-Control``, ``ETag``, 304 on revalidation).

With the extension active errors.md's rules stay: a rejection is a FAILED task
with a code, and a repeated taskId is a retry of that turn (its stored Task).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.serve.conftest import (
    ALICE,
    BOB,
    TIMEOUT_S,
    Reasoner,
    headers,
    message,
    rpc,
    stream,
    uid,
)

# error kind -> (JSON-RPC code, HTTP status, REST google.rpc status, gRPC status,
#                ErrorInfo reason)  (A2A §5.4)
CANONICAL = {
    "TaskNotFound": (-32001, 404, "NOT_FOUND", "NOT_FOUND", "TASK_NOT_FOUND"),
    "UnsupportedOperation": (-32004, 400, "FAILED_PRECONDITION", "UNIMPLEMENTED",
                             "UNSUPPORTED_OPERATION"),
    "InvalidParams": (-32602, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_PARAMS"),
}
BINDINGS = ["jsonrpc-sse", "jsonrpc-unary", "ws", "rest-stream", "rest-unary", "grpc-stream",
            "grpc-unary"]
SECRET = "my card number is 4111"  # must never come back in an error


@dataclass
class Answer:
    """What one core (non-negotiated) send produced on one binding."""

    events: list[dict[str, Any]]  # stream results / the unary result
    error: dict[str, Any] | None  # the JSON-RPC error object, or the REST google.rpc Status
    http_status: int
    raw: str


def plain(token: str = ALICE) -> dict[str, str]:
    """Headers of a core A2A client: A2A-Version, auth, no A2A-Extensions."""
    return headers(token, ext=False, sse=False)


def core_message(**kw: Any) -> dict[str, Any]:
    """A user message without any profile metadata."""
    return message(SECRET, profile=False, **kw)


def send(reasoner: Reasoner, binding: str, msg: dict[str, Any], token: str = ALICE) -> Answer:
    """Send ``msg`` over ``binding`` as a core A2A client and collect the answer."""
    if binding == "jsonrpc-sse":
        turn = reasoner.sse(stream(msg), headers(token, ext=False))
        return Answer(turn.events, turn.errors[0] if turn.errors else None, turn.status,
                      json.dumps(turn.frames))
    if binding == "ws":
        with reasoner.ws(plain(token)) as s:
            turn = s.request(stream(msg))
        return Answer(turn.events, turn.errors[0] if turn.errors else None, 101,
                      json.dumps(turn.frames))
    if binding.startswith("grpc"):
        body = stream(msg) if binding == "grpc-stream" else rpc("SendMessage", {"message": msg})
        turn = reasoner.grpc(body, plain(token))
        events = [next(iter(e.values())) if binding == "grpc-unary" else e for e in turn.events]
        return Answer(events, turn.errors[0] if turn.errors else None, turn.status,
                      json.dumps(turn.frames))
    if binding == "jsonrpc-unary":
        r = httpx.post(reasoner.url + "/", json=rpc("SendMessage", {"message": msg}),
                       headers=plain(token), timeout=TIMEOUT_S)
        body = r.json()
        result = body.get("result")
        events = [result] if isinstance(result, dict) else []
        return Answer(events, body.get("error"), r.status_code, r.text)
    path = "/message:stream" if binding == "rest-stream" else "/message:send"
    hdrs = plain(token)
    if binding == "rest-stream":
        hdrs["Accept"] = "text/event-stream"
    events: list[dict[str, Any]] = []
    with httpx.Client(timeout=TIMEOUT_S) as c, c.stream(
            "POST", reasoner.url + path, json={"message": msg}, headers=hdrs) as r:
        text = r.read().decode()
    if r.status_code != 200:
        return Answer([], json.loads(text).get("error"), r.status_code, text)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    else:
        events = [json.loads(text)]
    return Answer(events, None, r.status_code, text)


def finished_task(reasoner: Reasoner, token: str = ALICE) -> tuple[str, str]:
    """(taskId, contextId) of a COMPLETED core turn of ``token``'s principal."""
    turn = reasoner.sse(stream(core_message(ctx=uid("c"))), headers(token, ext=False))
    assert turn.final_state == "TASK_STATE_COMPLETED", turn.frames
    return turn.task_id, turn.context_id


def assert_core_error(binding: str, answer: Answer, kind: str) -> None:
    """``answer`` is the canonical error ``kind`` of ``binding`` (and echoes nothing)."""
    code, http_status, rest_status, grpc_status, reason = CANONICAL[kind]
    assert answer.events == [], f"{binding}: events instead of {kind}: {answer.raw[:400]}"
    assert answer.error is not None, f"{binding}: no error: {answer.raw[:400]}"
    if binding.startswith("grpc"):
        assert answer.error["grpcStatus"] == grpc_status, answer.raw
        assert answer.error["reason"] == reason, answer.raw
    elif binding.startswith("rest"):
        assert answer.http_status == http_status, answer.raw
        assert answer.error["status"] == rest_status, answer.raw
        reasons = [d.get("reason") for d in answer.error.get("details", [])]
        assert reason in reasons, answer.raw
    else:
        assert answer.error["code"] == code, answer.raw
    assert SECRET not in answer.raw and "Traceback" not in answer.raw


@pytest.fixture(params=BINDINGS)
def core_binding(request: pytest.FixtureRequest) -> str:
    """Every binding and call style the Reasoner serves."""
    return str(request.param)


def test_message_to_a_finished_task_is_unsupported_operation(reasoner: Reasoner,
                                                             core_binding: str) -> None:
    task_id, ctx = finished_task(reasoner)
    answer = send(reasoner, core_binding, core_message(ctx=ctx, task=task_id))
    assert_core_error(core_binding, answer, "UnsupportedOperation")
    # the task itself is untouched: still COMPLETED, nothing was executed again
    got = reasoner.call("GetTask", {"id": task_id})
    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_message_to_a_finished_task_without_context_is_unsupported_operation(
        reasoner: Reasoner, core_binding: str) -> None:
    task_id, _ = finished_task(reasoner)
    answer = send(reasoner, core_binding, core_message(task=task_id))
    assert_core_error(core_binding, answer, "UnsupportedOperation")


def test_unknown_task_is_task_not_found(reasoner: Reasoner, core_binding: str) -> None:
    answer = send(reasoner, core_binding, core_message(ctx=uid("c"), task=uid("no-such-task")))
    assert_core_error(core_binding, answer, "TaskNotFound")


def test_another_principals_task_is_task_not_found(reasoner: Reasoner,
                                                   core_binding: str) -> None:
    task_id, _ = finished_task(reasoner, BOB)
    answer = send(reasoner, core_binding, core_message(task=task_id), token=ALICE)
    assert_core_error(core_binding, answer, "TaskNotFound")
    # Bob's task is not revealed by a context mismatch either: not-found comes first
    answer = send(reasoner, core_binding, core_message(ctx=uid("c"), task=task_id), token=ALICE)
    assert_core_error(core_binding, answer, "TaskNotFound")


def test_task_of_another_context_is_invalid_params(reasoner: Reasoner,
                                                   core_binding: str) -> None:
    task_id, _ = finished_task(reasoner)
    answer = send(reasoner, core_binding, core_message(ctx=uid("other"), task=task_id))
    assert_core_error(core_binding, answer, "InvalidParams")


def test_a_new_core_message_still_runs(reasoner: Reasoner, core_binding: str) -> None:
    """The must-not: a plain message without taskId is a normal turn on every binding."""
    answer = send(reasoner, core_binding, core_message(ctx=uid("c")))
    assert answer.error is None, answer.raw
    assert answer.events, answer.raw
    assert "TASK_STATE_COMPLETED" in answer.raw


@pytest.mark.parametrize("binding", ["sse", "ws", "grpc"])
def test_with_the_extension_errors_md_rules_stay(reasoner: Reasoner, binding: str) -> None:
    """Negotiated: unknown task = FAILED session-not-found; a finished taskId = its retry."""
    unknown = reasoner.send(binding, stream(message(ctx=uid("c"), task=uid("no-such-task"))))
    assert unknown.errors == [] and unknown.final_state == "TASK_STATE_FAILED"
    assert unknown.error_code == "session-not-found"
    first = reasoner.send(binding, stream(message(ctx=uid("c"))))
    assert first.final_state == "TASK_STATE_COMPLETED"
    again = reasoner.send(binding, stream(message(ctx=first.context_id, task=first.task_id)))
    assert again.errors == []
    assert [e["task"]["id"] for e in again.events] == [first.task_id]  # the stored snapshot
    assert again.final_state == "TASK_STATE_COMPLETED"


def test_agent_card_is_cacheable(reasoner: Reasoner) -> None:
    r = httpx.get(reasoner.url + "/.well-known/agent-card.json", timeout=TIMEOUT_S)
    assert r.status_code == 200
    cache = r.headers.get("cache-control", "")
    assert "max-age=" in cache and int(cache.split("max-age=")[1].split(",")[0]) > 0
    etag = r.headers["etag"]
    again = httpx.get(reasoner.url + "/.well-known/agent-card.json",
                      headers={"If-None-Match": etag}, timeout=TIMEOUT_S)
    assert again.status_code == 304 and again.content == b""
    other = httpx.get(reasoner.url + "/.well-known/agent-card.json",
                      headers={"If-None-Match": 'W/"not-this-card"'}, timeout=TIMEOUT_S)
    assert other.status_code == 200 and other.json()["name"] == r.json()["name"]


def _grpc_error(reasoner: Reasoner, call: Any) -> tuple[str, str]:
    """(status name, ErrorInfo reason) of a gRPC call that must fail."""
    import grpc
    from a2a.types import a2a_pb2_grpc
    from google.rpc import error_details_pb2, status_pb2

    with grpc.insecure_channel(reasoner.grpc_address()) as ch, \
            pytest.raises(grpc.RpcError) as e:
        call(a2a_pb2_grpc.A2AServiceStub(ch))
    reason = ""
    for key, value in e.value.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for d in status.details:
                info = error_details_pb2.ErrorInfo()
                if d.Unpack(info):
                    reason = info.reason
    return e.value.code().name, reason


def _grpc_md(version: str = "1.0") -> list[tuple[str, str]]:
    return [("a2a-version", version), ("authorization", f"Bearer {ALICE}")]


@pytest.mark.parametrize("version", ["99.0", "0.3", "2"])
def test_grpc_unsupported_version_is_unimplemented(reasoner: Reasoner, version: str) -> None:
    """a2a-tck GRPC-ERR-002: an a2a-version the server does not speak is
    VersionNotSupportedError = UNIMPLEMENTED (§5.4), before anything runs; 1.x is served."""
    from a2a.types import a2a_pb2
    from google.protobuf.json_format import ParseDict

    req = ParseDict({"message": core_message(ctx=uid("c"))}, a2a_pb2.SendMessageRequest())
    assert _grpc_error(reasoner, lambda stub: stub.SendMessage(
        req, metadata=_grpc_md(version), timeout=TIMEOUT_S)) == (
        "UNIMPLEMENTED", "VERSION_NOT_SUPPORTED")
    assert _grpc_error(reasoner, lambda stub: list(stub.SendStreamingMessage(
        req, metadata=_grpc_md(version), timeout=TIMEOUT_S)))[0] == "UNIMPLEMENTED"
    for ok in ("1.0", "1.1"):  # the minor is ignored, as on the HTTP bindings
        import grpc

        with grpc.insecure_channel(reasoner.grpc_address()) as ch:
            from a2a.types import a2a_pb2_grpc

            answer = a2a_pb2_grpc.A2AServiceStub(ch).SendMessage(
                req, metadata=_grpc_md(ok), timeout=TIMEOUT_S)
        assert answer.task.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED


def test_grpc_push_notifications_not_supported_is_unimplemented(reasoner: Reasoner) -> None:
    """a2a-tck GRPC-ERR-002: PushNotificationNotSupportedError = UNIMPLEMENTED (§5.4; the
    card says pushNotifications false)."""
    from a2a.types import a2a_pb2

    card = httpx.get(reasoner.url + "/.well-known/agent-card.json", timeout=TIMEOUT_S).json()
    assert not card["capabilities"].get("pushNotifications")
    cfg = a2a_pb2.TaskPushNotificationConfig(task_id=uid("t"), url="https://example.com")
    assert _grpc_error(reasoner, lambda stub: stub.CreateTaskPushNotificationConfig(
        cfg, metadata=_grpc_md(), timeout=TIMEOUT_S)) == (
        "UNIMPLEMENTED", "PUSH_NOTIFICATION_NOT_SUPPORTED")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_jsonrpc_non_json_body_of_another_media_type_is_content_type_not_supported(
        reasoner: Reasoner, content_type: str) -> None:
    """a2a-tck JSONRPC-SSE-002: §9.1 requests are application/json; a body that is not JSON,
    labelled as something else, is -32005. JSON under any label is still served, and a
    broken body labelled JSON stays a parse error (-32700, JSON-RPC 2.0)."""
    good = rpc("SendMessage", {"message": core_message(ctx=uid("c"))})
    bad = repr(good).encode()  # a Python repr: not JSON
    hdrs = {**plain(), "Content-Type": content_type}
    r = httpx.post(reasoner.url + "/", content=bad, headers=hdrs, timeout=TIMEOUT_S)
    assert r.json()["error"]["code"] == -32005, r.text
    r = httpx.post(reasoner.url + "/", content=bad,
                   headers={**hdrs, "Content-Type": "application/json"}, timeout=TIMEOUT_S)
    assert r.json()["error"]["code"] == -32700, r.text
    r = httpx.post(reasoner.url + "/", content=json.dumps(good).encode(), headers=hdrs,
                   timeout=TIMEOUT_S)
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
