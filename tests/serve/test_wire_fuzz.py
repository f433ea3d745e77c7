"""The fuzzer reaches the handler on every binding, and its oracle catches a planted crash.

:mod:`loadtests.fuzz.engine` sends mostly valid profile requests with mutated
metadata, parts, identifiers, headers and sizes over JSON-RPC/SSE, REST and
WebSocket.  Each run must: get a stable answer to every request (no 5xx, no
-32603, no cut stream, no lost socket, FAILED only with stable codes), leave
the server's unhandled-exception counter at 0, have at least half of its
requests reach turn parsing (counted by the server), and a normal turn must
complete afterwards.  The negative control plants an exception in turn
parsing (``rta/test.raise``) and the same oracle must fail.  Seeds are fixed.
"""

from __future__ import annotations

import pytest

from loadtests.fuzz.engine import BINDINGS, MIN_REACHED, fuzz_binding
from tests.serve.conftest import Reasoner

REQUESTS = 240  # per binding


@pytest.mark.parametrize("binding", BINDINGS)
def test_fuzz_reaches_the_handler_and_finds_nothing(reasoner: Reasoner, binding: str) -> None:
    report = fuzz_binding(reasoner, binding, REQUESTS, seed=7)
    assert report.requests == REQUESTS
    assert report.failures() == [], report.as_dict()
    assert report.reached_share >= MIN_REACHED
    assert report.http_5xx == report.unanswered == report.sockets_lost == 0
    assert report.completed >= REQUESTS // 10  # turns really executed, not only refused


@pytest.mark.parametrize("binding", BINDINGS)
def test_fuzz_oracle_catches_a_planted_exception_in_parse_turn(reasoner: Reasoner,
                                                               binding: str) -> None:
    report = fuzz_binding(reasoner, binding, 60, seed=11, plant_share=0.3)
    failures = report.failures()
    assert report.unhandled > 0, report.as_dict()  # counted by the server ...
    assert any("unhandled exception" in f for f in failures)
    assert any("-32603" in p or "HTTP 500" in p for p in report.problems)  # ... seen by clients
