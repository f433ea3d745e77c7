"""Reasoner resource limits (issue 19): WebSocket in-flight slots, slow and idle clients.

Real Reasoner subprocesses on 127.0.0.1, raw sockets for the hostile clients.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from websockets.sync.client import connect

from tests.serve.conftest import (
    Reasoner,
    frame_ends,
    headers,
    message,
    rpc,
    start_test_reasoner,
    stream,
)

WS_IN_FLIGHT = 64  # the server's per-socket limit (loadtests.reasoner.ws)
WS_REQUESTS = 2000


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reasoner]:
    """A Reasoner of its own (no witness)."""
    base = tmp_path_factory.mktemp("limits")
    with start_test_reasoner(base) as proc:
        yield Reasoner(proc)


def _request(i: int) -> dict:
    """Turns (each on a new session), refused turns (Task + FAILED) and unary GetTasks."""
    if i % 4 == 3:
        return rpc("GetTask", {"id": f"no-such-task-{i}"}, rid=i)
    if i % 4 == 2:
        return stream(message(parts=[]), rid=i)  # schema-validation: two stream frames
    return stream(message(), rid=i)


def test_ws_slot_is_free_once_the_final_frame_is_sent(limited: Reasoner) -> None:
    """A client that sends a new request each time one ends keeps exactly 64 in flight:
    0 refusals over thousands of requests (the slot is free when the final frame is sent)."""
    refused, ended, sent = 0, 0, 0
    with connect(limited.ws_url, additional_headers=headers(), open_timeout=10) as ws:
        for _ in range(WS_IN_FLIGHT):
            ws.send(json.dumps(_request(sent)))
            sent += 1
        while ended < WS_REQUESTS:
            frame = json.loads(ws.recv(timeout=20))
            if not frame_ends(frame):
                continue
            ended += 1
            if "error" in frame and "in flight" in frame["error"].get("message", ""):
                refused += 1
            if sent < WS_REQUESTS:
                ws.send(json.dumps(_request(sent)))
                sent += 1
    assert (ended, refused) == (WS_REQUESTS, 0)
