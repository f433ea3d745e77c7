"""Hostile input (issue 7 defect 2): each gets its stable error, never a 5xx, a cut stream or a
dead socket, and the server stays healthy (a normal turn completes afterwards)."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from tests.serve.conftest import (
    TIMEOUT_S,
    Reasoner,
    headers,
    message,
    rpc,
    stream,
    uid,
)

LONE = "\ud800"  # an unpaired surrogate: valid JSON escape, not valid Unicode
LONE_ESCAPED = json.dumps(LONE)[1:-1]  # the six characters \ud800
RAW_SURROGATE = b"\xed\xa0\x80"  # the same surrogate as (invalid) UTF-8 bytes


def _body(obj: object) -> bytes:
    """JSON text keeping ``\\ud800`` escaped (json.dumps' default ensure_ascii does)."""
    return json.dumps(obj).encode("ascii")


def _healthy(r: Reasoner) -> None:
    """A normal turn still completes."""
    assert r.sse(stream(message(ctx=uid("c")))).final_state == "TASK_STATE_COMPLETED"


def _unhandled(r: Reasoner) -> float:
    """The server's unhandled-exception counter (summed over label sets)."""
    lines = [line for line in r.metrics().splitlines()
             if line.startswith("rta_reasoner_unhandled_exceptions_total")]
    assert lines, "no unhandled-exception counter on /metrics"
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


@pytest.mark.parametrize("method", ["GetTask", "SendStreamingMessage", "SendMessage"])
def test_surrogate_id_over_http(reasoner: Reasoner, method: str) -> None:
    params = {"id": "x"} if method == "GetTask" else {"message": message(ctx=uid("c"))}
    turn = reasoner.sse(None, raw=_body(rpc(method, params, rid=LONE)))
    assert turn.status == 200
    assert [e["code"] for e in turn.errors] == [-32600]
    assert turn.frames[0]["id"] is None  # never echoed
    _healthy(reasoner)


def test_raw_surrogate_bytes_over_http(reasoner: Reasoner) -> None:
    raw = _body(rpc("GetTask", {"id": "x"}, rid="ab")).replace(b'"ab"', b'"' + RAW_SURROGATE + b'"')
    turn = reasoner.sse(None, raw=raw)
    assert turn.status == 200
    assert [e["code"] for e in turn.errors] == [-32700]


@pytest.mark.parametrize("where", ["contextId", "taskId", "messageId", "metadata", "text"])
def test_surrogates_anywhere_in_a_turn(reasoner: Reasoner, where: str) -> None:
    msg = message(ctx=uid("c"))
    if where == "metadata":
        msg["metadata"][f"x{LONE}"] = LONE
    elif where == "text":
        msg["parts"] = [{"text": f"hello {LONE}"}]
    else:
        msg[where] = f"id-{LONE}"
    for body in (stream(msg, rid="s"), rpc("SendMessage", {"message": msg}, rid="u")):
        turn = reasoner.sse(None, raw=_body(body))
        assert turn.status == 200
        assert [e["code"] for e in turn.errors] == [-32600]
    _healthy(reasoner)


def test_ws_hostile_frames_keep_the_socket(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        # A surrogate id: answered (id null), the socket stays up.
        s.send(None, raw=_body(rpc("GetTask", {"id": "x"}, rid=LONE)).decode())
        frame = s.recv()
        assert frame["id"] is None and frame["error"]["code"] == -32600
        # Invalid UTF-8 in a binary frame, a surrogate in a streaming turn, then a normal turn.
        s.send(None, raw=b'{"jsonrpc": "2.0", "id": "' + RAW_SURROGATE + b'"}')
        assert s.recv()["error"]["code"] == -32700
        bad = message(ctx=uid("c"))
        bad["contextId"] = LONE
        s.send(None, raw=_body(stream(bad, rid="bad")).decode())
        assert s.recv()["error"]["code"] == -32600
        ok = s.request(stream(message(ctx=uid("c")), rid="after"))
        assert ok.final_state == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("path", ["/", "/message:send"])
def test_deep_nesting_with_a_bad_token_is_401(reasoner: Reasoner, path: str) -> None:
    r = httpx.post(reasoner.url + path, content=b"[" * 100_000,
                   headers=headers("nope", sse=False), timeout=TIMEOUT_S)
    assert r.status_code == 401
    good = httpx.post(reasoner.url + "/", content=b"[" * 100_000, headers=headers(sse=False),
                      timeout=TIMEOUT_S)
    assert good.status_code == 200 and good.json()["error"]["code"] == -32700


REST_POSTS = ["/message:send", "/message:stream", "/tasks/t-1/pushNotificationConfigs"]


@pytest.mark.parametrize("path", REST_POSTS)
@pytest.mark.parametrize("raw", [b'{"message": {"messageId": "\xff\xfe"}}',
                                 b'{"message": {"messageId": "' + RAW_SURROGATE + b'"}}',
                                 _body({"message": {"messageId": LONE}}),
                                 b"[" * 100_000],
                         ids=["invalid-utf8", "raw-surrogate", "escaped-surrogate", "deep"])
def test_rest_hostile_bodies_are_400(reasoner: Reasoner, path: str, raw: bytes) -> None:
    r = httpx.post(reasoner.url + path, content=raw, headers=headers(sse=False),
                   timeout=TIMEOUT_S)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["status"] == "INVALID_ARGUMENT"


def _raw_request(url: str, method: str, body_bytes: int, token: str) -> int:
    """Send ``method /`` with a body of ``body_bytes`` on a raw socket; the status code."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT_S) as sock:
        head = (f"{method} / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Length: {body_bytes}\r\nContent-Type: application/json\r\n\r\n")
        sock.sendall(head.encode())
        chunk = b"[" * 65536
        sent = 0
        try:
            while sent < body_bytes:
                n = min(len(chunk), body_bytes - sent)
                sock.sendall(chunk[:n])
                sent += n
        except OSError:
            pass  # the server answered and closed before reading it all: the point
        answer = sock.recv(4096)
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("method", ["GET", "DELETE", "HEAD", "OPTIONS", "POST"])
def test_every_method_bounds_its_body_before_auth(reasoner: Reasoner, method: str) -> None:
    import psutil

    pid = int(reasoner.get_json("/healthz")["pid"])
    before = psutil.Process(pid).memory_info().rss
    status = _raw_request(reasoner.url, method, 64 * 1024 * 1024, "nope")
    grown = psutil.Process(pid).memory_info().rss - before
    assert status == (200 if method == "POST" else 413)  # too large (JSON-RPC: -32600 in a
    # 200), before authentication and without buffering the body
    assert grown < 16 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB"
    _healthy(reasoner)


def test_hostile_input_leaves_no_unhandled_exception(reasoner: Reasoner) -> None:
    """Run last in this module: nothing above made the server log a traceback."""
    assert _unhandled(reasoner) == 0
