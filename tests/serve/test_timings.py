"""The Reasoner's per-turn timings (docs/reasoner.md "Per-turn timings"), on the wire.

Each execution reports intake, queue wait, service and first-chunk delay in the
metadata of the event ending its stream, in ``/metrics`` histograms and, for the
non-streaming ``SendMessage``, in a ``Server-Timing`` header; the Live users'
parser reads them and leaves them empty when a server does not send them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rtalab.loadtests.common.procs import ManagedProcess
from rtalab.loadtests.live.wire import parse_event
from tests.serve.conftest import (
    EXT,
    FAST_SCENARIO,
    Reasoner,
    headers,
    k,
    message,
    meta,
    rpc,
    stream,
    uid,
)

EARLY_MS = 2.0  # uvloop's timers have millisecond granularity: a sleep may end ~1 ms early
TIMING_KEYS = ("serverIntakeMs", "serverQueueWaitMs", "serverServiceMs",
               "serverFirstChunkDelayMs")


def _timings(final: dict) -> dict[str, float]:
    m = meta(final)
    return {name: m[k(name)] for name in TIMING_KEYS if k(name) in m}


@pytest.mark.parametrize("binding", ["sse", "ws"])
def test_a_turn_reports_its_service_and_first_chunk_delay(reasoner: Reasoner,
                                                           binding: str) -> None:
    """reasoning 0.3 s (test.delayS) on an idle server: service >= 300 ms, no queue wait;
    first_chunk_s = 0 (FAST_SCENARIO): the first chunk follows at once."""
    t = reasoner.send(binding, stream(message(ctx=uid("c"), meta={k("test.delayS"): 0.3})))
    assert t.final_state == "TASK_STATE_COMPLETED"
    got = _timings(t.final)
    assert set(got) == set(TIMING_KEYS)
    assert 300.0 - EARLY_MS <= got["serverServiceMs"] < 300.0 + 250.0
    assert 0.0 <= got["serverQueueWaitMs"] < 50.0
    assert 0.0 <= got["serverIntakeMs"] < 250.0
    assert 0.0 <= got["serverFirstChunkDelayMs"] < 100.0
    # the Live users' parser turns them into the ledger's seconds
    ev = parse_event(t.frames[-1], EXT)
    assert ev.timing is not None
    assert ev.timing["server_service_s"] == pytest.approx(got["serverServiceMs"] / 1000.0)


def test_a_waiting_turn_reports_its_queue_wait(tmp_path: Path,
                                               witness_server: ManagedProcess) -> None:
    """One worker held 0.8 s: a turn sent while it is busy waits at least the rest of it."""
    from tests.serve.conftest import start_test_reasoner

    with start_test_reasoner(tmp_path, witness=witness_server.url,
                             scenario=FAST_SCENARIO + "workers = 1\n") as proc:
        r = Reasoner(proc)
        with ThreadPoolExecutor(2) as pool:
            t0 = time.monotonic()
            first = pool.submit(r.send, "sse", stream(message(ctx=uid("c"),
                                                              meta={k("test.delayS"): 0.8})))
            for _ in range(500):  # until the slow turn holds the worker (bounded)
                if r.get_json("/healthz")["inFlight"]:
                    break
            sent_after_s = time.monotonic() - t0
            t_sent = time.monotonic()
            second_f = pool.submit(r.send, "sse", stream(message(ctx=uid("c"))))
            first_t = first.result()
            t_first_done = time.monotonic()
            second = second_f.result()
        text = r.metrics()
    waited = _timings(second.final)["serverQueueWaitMs"]
    # it waited for the rest of the 0.8 s hold, less the time its request took to reach the
    # server (up to 250 ms on a busy machine), and never longer than from its
    # sending to the end of the first turn as the client saw it
    assert waited >= (0.8 - sent_after_s) * 1000.0 - 250.0, (waited, sent_after_s)
    assert waited <= (t_first_done - t_sent) * 1000.0 + 5.0, (waited, t_first_done - t_sent)
    assert _timings(first_t.final)["serverQueueWaitMs"] < 50.0
    # /metrics: one observation per execution in each histogram
    for name in ("rta_reasoner_queue_wait_seconds", "rta_reasoner_service_seconds",
                 "rta_reasoner_first_chunk_delay_seconds", "rta_reasoner_intake_seconds"):
        assert f"{name}_count 2.0" in text, name


def test_a_side_effect_turn_holds_the_worker_through_its_tool_call(
        tmp_path: Path) -> None:
    """Without a witness the tool sleeps tool_latency_s (0.4 s here): the service time has
    reasoning (0.02 s) + tool, as the simulator's worker does."""
    from tests.serve.conftest import start_test_reasoner

    scenario = FAST_SCENARIO.replace("upstream_timeout_s = 0.5", "upstream_timeout_s = 2.0") \
        + "tool_latency_s = 0.4\n"
    with start_test_reasoner(tmp_path, scenario=scenario) as proc:
        t = Reasoner(proc).send("sse", stream(message(ctx=uid("c"),
                                                      meta={k("sideEffect"): True})))
    assert t.final_state == "TASK_STATE_COMPLETED"
    assert 420.0 - EARLY_MS <= _timings(t.final)["serverServiceMs"] < 420.0 + 250.0


def test_non_streaming_answer_has_a_server_timing_header(reasoner: Reasoner) -> None:
    msg = message(ctx=uid("c"), meta={k("test.delayS"): 0.1})
    t = reasoner.sse(rpc("SendMessage", {"message": msg}), headers(sse=False))
    value = t.headers.get("server-timing", "")
    parts = dict(p.strip().split(";dur=") for p in value.split(","))
    assert set(parts) == {"intake", "queue", "service", "first-chunk"}
    assert float(parts["service"]) >= 100.0 - EARLY_MS


def test_degraded_session_and_foreign_servers_leave_the_columns_empty(
        reasoner: Reasoner) -> None:
    """No extension negotiated: no profile metadata, so no timings; an event without the
    keys (any other server) parses to no timing at all."""
    t = reasoner.sse(stream(message(ctx=uid("c"), profile=False)), headers(ext=False))
    assert t.final_state == "TASK_STATE_COMPLETED"
    assert _timings(t.final) == {}
    bare = {"result": {"statusUpdate": {"taskId": "t", "contextId": "c",
                                        "status": {"state": "TASK_STATE_COMPLETED"},
                                        "metadata": {k("sequenceId"): 4}}}}
    assert parse_event(bare, EXT).timing is None
