"""Auth, negotiation echo, tenant isolation, the agent card and the REST binding."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import InvalidStatus

from tests.serve.conftest import (
    ALICE,
    BOB,
    EXT,
    WORKER_HEADER,
    Reasoner,
    headers,
    k,
    kind,
    message,
    rpc,
    stream,
    uid,
)

BAD_AUTH = [
    pytest.param(None, id="missing"),
    pytest.param("Bearer nope", id="unknown-token"),
    pytest.param("Basic dG9rZW4tYWxpY2U=", id="wrong-scheme"),
    pytest.param("Bearer", id="empty-token"),
]


def _headers_with(auth: str | None, sse: bool = True) -> dict[str, str]:
    """Profile headers with a given Authorization value (None: absent)."""
    h = headers(token=None, sse=sse)
    if auth is not None:
        h["Authorization"] = auth
    return h


@pytest.mark.parametrize("auth", BAD_AUTH)
def test_http_auth_failure_is_401_jsonrpc_error(reasoner: Reasoner, auth: str | None) -> None:
    body = stream(message(ctx=uid("c")), rid="req-7")
    r = httpx.post(reasoner.url + "/", json=body, headers=_headers_with(auth), timeout=10)
    assert r.status_code == 401
    assert "a2a-extensions" not in r.headers  # auth is checked before negotiation
    assert r.headers["www-authenticate"].startswith("Bearer")
    err = r.json()
    assert err["id"] == "req-7"
    assert err["error"]["data"][k("errorCode")] == "auth"


@pytest.mark.parametrize("auth", BAD_AUTH)
def test_ws_auth_failure_refuses_the_upgrade(reasoner: Reasoner, auth: str | None) -> None:
    with pytest.raises(InvalidStatus) as exc:
        reasoner.ws(_headers_with(auth, sse=False)).__enter__()
    response = exc.value.response
    assert response.status_code == 401
    assert json.loads(response.body)["error"]["data"][k("errorCode")] == "auth"
    assert "a2a-extensions" not in {key.lower() for key in response.headers}


def test_rest_auth_failure(reasoner: Reasoner) -> None:
    r = httpx.post(reasoner.url + "/message:stream", json={"message": message()},
                   headers=_headers_with(None), timeout=10)
    assert r.status_code == 401
    assert r.json()["error"]["status"] == "UNAUTHENTICATED"


def test_extension_echo_on_ws_upgrade(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        assert s.response_headers.get("a2a-extensions") == EXT
    with reasoner.ws(headers(ext=False, sse=False)) as s:
        assert "a2a-extensions" not in s.response_headers


def test_worker_header_names_the_serving_process(reasoner: Reasoner, binding: str) -> None:
    pid = str(reasoner.get_json("/healthz")["pid"])
    for ext in (True, False):  # with or without negotiation
        turn = reasoner.send(binding, stream(message(ctx=uid("c"), profile=ext)),
                             headers(ext=ext, sse=binding == "sse"))
        assert turn.worker == pid
    denied = httpx.post(reasoner.url + "/", json=stream(message()), headers=_headers_with(None),
                        timeout=10)
    assert WORKER_HEADER not in denied.headers  # like the echo: not on a 401


def test_extension_echo_with_several_requested(reasoner: Reasoner) -> None:
    h = headers()
    h["A2A-Extensions"] = f"https://example.com/other, {EXT}"
    turn = reasoner.sse(stream(message(ctx=uid("c"))), h)
    assert turn.headers["a2a-extensions"] == EXT
    assert turn.final_state == "TASK_STATE_COMPLETED"


def test_tenant_isolation(reasoner: Reasoner, binding: str) -> None:
    ctx = uid("c")
    mine = message(ctx=ctx, meta={k("handoff"): True})
    alice = reasoner.send(binding, stream(mine))
    assert alice.final_state == "TASK_STATE_INPUT_REQUIRED"
    bob_h = headers(BOB) if binding == "sse" else headers(BOB, sse=False)

    # Bob on Alice's context: session-not-found, nothing of Alice's turn.
    bob = reasoner.send(binding, stream(message(ctx=ctx)), bob_h)
    assert bob.final_state == "TASK_STATE_FAILED"
    assert bob.error_code == "session-not-found"
    assert alice.task_id not in json.dumps(bob.frames)

    # Bob replaying Alice's exact request: still not Alice's outcome.
    replay = reasoner.send(binding, stream(mine), bob_h)
    assert replay.error_code == "session-not-found"
    assert alice.task_id not in json.dumps(replay.frames)

    # Bob continuing Alice's INPUT_REQUIRED task: session-not-found, the task is untouched.
    cont = reasoner.send(binding, stream(message(ctx=ctx, task=alice.task_id)), bob_h)
    assert cont.error_code == "session-not-found"
    assert "Spoken chunk" not in json.dumps(cont.frames)

    # Bob reading or cancelling Alice's task: not found.
    for method in ("GetTask", "CancelTask"):
        r = reasoner.call(method, {"id": alice.task_id}, token=BOB)
        assert "result" not in r and r["error"]["code"] == -32001

    # Alice can still finish her handoff.
    done = reasoner.send(binding, stream(message(ctx=ctx, task=alice.task_id)))
    assert done.final_state == "TASK_STATE_COMPLETED"


def test_agent_card_is_public_and_advertises_the_extension(reasoner: Reasoner) -> None:
    card = reasoner.get_json("/.well-known/agent-card.json")
    ext = card["capabilities"]["extensions"]
    assert [(e["uri"], e.get("required", False)) for e in ext] == [(EXT, False)]
    assert card["capabilities"]["streaming"] is True
    assert "bearer" in card["securitySchemes"]
    assert ext[0]["params"]["webSocket"].endswith("/ws")


def test_rest_binding_streams_a_turn(reasoner: Reasoner) -> None:
    events = []
    with httpx.Client(timeout=10) as c, c.stream(
            "POST", reasoner.url + "/message:stream", headers=headers(),
            json={"message": message(ctx=uid("c"))}) as r:
        assert r.status_code == 200
        assert r.headers["a2a-extensions"] == EXT
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    assert kind(events[0]) == "task"
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    task_id = events[0]["task"]["id"]
    got = httpx.get(f"{reasoner.url}/tasks/{task_id}", headers=headers(sse=False), timeout=10)
    assert got.json()["status"]["state"] == "TASK_STATE_COMPLETED"
    other = httpx.get(f"{reasoner.url}/tasks/{task_id}", headers=headers(BOB, sse=False),
                      timeout=10)
    assert other.status_code == 404


def test_non_streaming_send_message(reasoner: Reasoner) -> None:
    r = httpx.post(reasoner.url + "/", json=rpc("SendMessage", {"message": message(ctx=uid("c"))}),
                   headers=headers(ALICE, sse=False), timeout=10)
    task = r.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(task["artifacts"][0]["parts"]) == 3


def test_non_streaming_handoff_continuation(reasoner: Reasoner) -> None:
    ctx = uid("c")

    def send(msg: dict) -> dict:
        r = httpx.post(reasoner.url + "/", json=rpc("SendMessage", {"message": msg}),
                       headers=headers(ALICE, sse=False), timeout=10)
        return dict(r.json()["result"]["task"])

    first = send(message(ctx=ctx, meta={k("handoff"): True}))
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    done = send(message(ctx=ctx, task=first["id"]))
    assert done["id"] == first["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
