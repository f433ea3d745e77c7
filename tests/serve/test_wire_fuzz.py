"""Fuzzing both bindings: 1,000 malformed or oversized requests each, no 5xx, no crash, no hang.

Every answer must be a JSON-RPC error, a unary result, or a stream that ends in
a final state; a FAILED status must carry a stable error code.  Examples are
derandomized so CI runs are reproducible.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.conftest import END_STATES, TIMEOUT_S, Reasoner, frame_ends, headers, k, kind

CODES = {"schema-validation", "unsupported-directive", "extension-inactive", "auth",
         "rate-limited", "upstream-timeout", "session-not-found", "internal"}
FUZZ = settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)
big_text = st.integers(0, 70_000).map(lambda n: "x" * n)
profile_keys = st.sampled_from([k(n) for n in ("turnId", "requestGuid", "interactionId",
                                               "sideEffect", "handoff", "directives",
                                               "test.forceError", "test.delayS", "other")])
metadata = st.dictionaries(profile_keys | st.text(max_size=8),
                           values | st.sampled_from(sorted(CODES)) | st.just(0.0), max_size=5)
part = st.one_of(st.fixed_dictionaries({"text": st.text(max_size=40) | big_text}),
                 st.fixed_dictionaries({"data": values}),
                 st.dictionaries(st.sampled_from(["text", "data", "url", "raw", "metadata"]),
                                 values, max_size=3))
message = st.fixed_dictionaries(
    {"messageId": st.text(min_size=1, max_size=8) | values,
     "role": st.sampled_from(["ROLE_USER", "ROLE_USER", "ROLE_AGENT", "nope", 3, None])},
    optional={"parts": st.lists(part, max_size=3) | values,
              "contextId": st.text(max_size=300) | values,
              "taskId": st.text(max_size=8) | values,
              "metadata": metadata | values})
methods = st.sampled_from(["SendStreamingMessage", "SendStreamingMessage", "SendMessage",
                           "GetTask", "CancelTask", "ListTasks", "SubscribeToTask", "Nope"])
envelope = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]),
     "id": st.text(min_size=1, max_size=6) | st.integers(0, 10**6),
     "method": methods,
     "params": st.fixed_dictionaries({"message": message}) | values})
raw_bodies = st.one_of(envelope.map(json.dumps), values.map(json.dumps),
                       st.text(max_size=60), envelope.map(lambda e: json.dumps(e)[:-3]))


def check(frames: list[dict[str, Any]]) -> None:
    """The answer is an error, a unary result or a finished stream with stable codes."""
    assert frames
    last = frames[-1]
    assert frame_ends(last), frames
    if "error" in last:
        assert isinstance(last["error"]["code"], int)
        return
    result = last["result"]
    if isinstance(result, dict) and len(result) == 1 and kind(result) in ("task", "statusUpdate"):
        status = result[kind(result)]["status"]
        assert status["state"] in END_STATES or kind(result) == "task"
        if status["state"] == "TASK_STATE_FAILED" and "message" in status:
            assert status["message"]["metadata"][k("errorCode")] in CODES


@pytest.fixture(scope="module")
def http(reasoner: Reasoner) -> Iterator[httpx.Client]:
    """One HTTP client for the module."""
    with httpx.Client(timeout=TIMEOUT_S) as c:
        yield c


def test_fuzz_http(reasoner: Reasoner, http: httpx.Client) -> None:
    @FUZZ
    @given(raw_bodies)
    def run(raw: str) -> None:
        frames: list[dict[str, Any]] = []
        with http.stream("POST", reasoner.url + "/", content=raw.encode(),
                         headers=headers()) as r:
            assert r.status_code < 500, r.read()
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                frames = [json.loads(line[5:]) for line in r.iter_lines()
                          if line.startswith("data:")]
            else:
                frames = [json.loads(r.read())]
        check(frames)

    run()


def test_fuzz_ws(reasoner: Reasoner) -> None:
    with reasoner.ws() as s:
        @FUZZ
        @given(raw_bodies)
        def run(raw: str) -> None:
            s.send(None, raw=raw)
            frames = [s.recv()]
            while not frame_ends(frames[-1]):
                frames.append(s.recv())
            check(frames)

        run()
        s.send(None, raw=json.dumps({"jsonrpc": "2.0", "id": "alive", "method": "GetTask",
                                     "params": {"id": "x"}}))
        assert s.recv()["id"] == "alive"  # the socket survived all of it
