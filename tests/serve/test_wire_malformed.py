"""Malformed input gets JSON-RPC errors or FAILED statuses, never a 5xx or a dropped socket."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serve.conftest import Reasoner, headers, message, rpc, stream, uid

GOOD = stream(message())
CASES = [
    pytest.param(b"{not json", -32700, id="parse-error"),
    pytest.param(b"\xff\xfe\x00garbage", -32700, id="invalid-utf8"),
    pytest.param(b"", -32700, id="empty"),
    pytest.param(b"[]", -32600, id="batch"),
    pytest.param(b'"just a string"', -32600, id="not-an-object"),
    pytest.param(json.dumps({"id": 1, "method": "SendStreamingMessage"}).encode(), -32600,
                 id="no-jsonrpc"),
    pytest.param(json.dumps({"jsonrpc": "2.0", "id": True, "method": "GetTask"}).encode(),
                 -32600, id="bool-id"),
    pytest.param(json.dumps({"jsonrpc": "2.0", "id": 1}).encode(), -32600, id="no-method"),
    pytest.param(json.dumps(rpc("NoSuchMethod", {}, 1)).encode(), -32601, id="unknown-method"),
    pytest.param(json.dumps(rpc("SendStreamingMessage", [1, 2], 1)).encode(), -32602,
                 id="params-not-object"),
    pytest.param(json.dumps(rpc("SendStreamingMessage", {}, 1)).encode(), -32602,
                 id="no-message"),
    pytest.param(json.dumps(rpc("SendStreamingMessage", {"message": {"parts": 5}}, 1)).encode(),
                 -32602, id="wrong-type"),
    pytest.param(json.dumps(rpc("GetTask", {"id": "x", "historyLength": "many"}, 1)).encode(),
                 -32602, id="bad-field"),
]


@pytest.mark.parametrize(("raw", "code"), CASES)
def test_http_malformed(reasoner: Reasoner, raw: bytes, code: int) -> None:
    turn = reasoner.sse(None, raw=raw)
    assert turn.status == 200
    assert [e["code"] for e in turn.errors] == [code]


@pytest.mark.parametrize(("raw", "code"), CASES)
def test_ws_malformed_keeps_the_socket(reasoner: Reasoner, raw: bytes, code: int) -> None:
    with reasoner.ws() as s:
        s.send(None, raw=raw.decode("utf-8", errors="replace") if raw.isascii() else raw)
        frame = s.recv()
        assert frame["error"]["code"] == code
        ok = s.request(stream(message(ctx=uid("c")), rid="after"))  # the socket is still up
        assert ok.final_state == "TASK_STATE_COMPLETED"


def test_http_oversized_body(reasoner: Reasoner) -> None:
    big = json.dumps(stream(message(text="z" * 300_000))).encode()
    turn = reasoner.sse(None, raw=big)
    assert turn.status == 200
    assert [e["code"] for e in turn.errors] == [-32600]
    again = reasoner.sse(stream(message(ctx=uid("c"))))
    assert again.final_state == "TASK_STATE_COMPLETED"


def test_ws_oversized_frame_keeps_the_socket(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        s.send(stream(message(text="z" * 300_000), rid="big"))
        assert s.recv()["error"]["code"] == -32600
        assert s.request(stream(message(ctx=uid("c")), rid="ok")).final_state == (
            "TASK_STATE_COMPLETED")


def test_ws_requires_unique_ids(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        s.send({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}})
        assert s.recv()["error"]["code"] == -32600  # no id: cannot be correlated
        slow = stream(message(ctx=uid("c"), meta={"https://schemas.salesforce.com/a2a/ext/"
                                                  "realtime-agent/v0.1/test.delayS": 0.5}), "dup")
        s.send(slow)
        s.send(slow)
        turn = s.until_end("dup")
        errors = [f for f in turn.frames if "error" in f]
        assert errors and errors[0]["error"]["code"] == -32600
        rest = s.until_end("dup")
        assert rest.final_state == "TASK_STATE_COMPLETED"


def test_ws_interleaves_concurrent_requests(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        ids = [f"r{i}" for i in range(4)]
        for rid in ids:
            s.send(stream(message(ctx=uid("c")), rid))
        order = []
        done: set[str] = set()
        while len(done) < len(ids):
            frame = s.recv()
            order.append(frame["id"])
            if frame["result"].get("statusUpdate", {}).get("status", {}).get("state") == (
                    "TASK_STATE_COMPLETED"):
                done.add(frame["id"])
        assert sorted(order) == sorted(ids * 6)
        firsts = [order.index(rid) for rid in ids]
        assert max(firsts) < min(len(order) - 1 - order[::-1].index(rid) for rid in ids)


def test_missing_version_header_is_a_jsonrpc_error(reasoner: Reasoner) -> None:
    turn = reasoner.sse(stream(message()), headers(version=False))
    assert turn.status == 200
    assert len(turn.errors) == 1 and turn.errors[0]["code"] < 0


def test_wrong_role_and_empty_part_are_schema_validation(reasoner: Reasoner) -> None:
    agent = message(ctx=uid("c"))
    agent["role"] = "ROLE_AGENT"
    assert reasoner.sse(stream(agent)).error_code == "schema-validation"
    empty = message(ctx=uid("c"), parts=[{}])
    turn = reasoner.sse(stream(empty))
    assert turn.error_code == "schema-validation" or turn.errors


def test_unary_errors_never_5xx(reasoner: Reasoner) -> None:
    for method, params in [("GetTask", {"id": "nope"}), ("CancelTask", {"id": "nope"}),
                           ("ListTasks", {}), ("SubscribeToTask", {"id": "nope"})]:
        r = httpx.post(reasoner.url + "/", json=rpc(method, params), headers=headers(),
                       timeout=10)
        assert r.status_code < 500, (method, r.text)
