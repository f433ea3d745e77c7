"""Pure parts of the Live users: reorder buffer, event parsing, ledger gathering."""

from __future__ import annotations

import json
import math

from loadtests.live.ledger import TABLES, Gatherer, Ledger
from loadtests.live.playback import Playback
from loadtests.live.wire import DEFAULT_EXT_URI as EXT
from loadtests.live.wire import parse_event


def test_playback_reorders_and_times_first_playable_chunk():
    pb = Playback(reorder=True, hold_s=1.0)
    assert pb.push(0, False, 0.0) == [(0, 0)]  # directive: played at once
    assert pb.push(2, True, 0.1) == []  # chunk 2 waits for chunk 1
    assert math.isnan(pb.first_chunk_s)
    assert pb.push(1, True, 0.2) == [(2, 1), (1, 2)]  # 1 then 2
    assert pb.first_chunk_s == 0.2  # first *playable* chunk: when 1 arrived, not when 2 did
    assert pb.order_violations == 0


def test_playback_skips_a_gap_after_hold_and_drops_the_late_event():
    pb = Playback(reorder=True, hold_s=0.5)
    pb.push(0, False, 0.0)
    assert pb.push(2, True, 0.1) == []
    assert pb.push(3, True, 0.7) == [(1, 1), (2, 2)]  # 1 never came within hold: skipped
    assert pb.push(1, True, 0.8) == []  # late: never played out of order
    assert pb.order_violations == 0 and pb.played == 3


def test_playback_without_reordering_counts_violations():
    pb = Playback(reorder=False)
    for n, seq in enumerate((0, 2, 1, 3)):
        pb.push(seq, True, n * 0.1)
    assert pb.order_violations == 1
    assert pb.first_chunk_s == 0.0


def test_playback_one_based_and_continuation_numbering():
    pb = Playback(reorder=True, hold_s=0.3)
    assert pb.push(1, False, 0.0) == []  # could be 0-based with 0 late: wait hold_s
    assert pb.push(2, True, 0.5) == [(0, 0), (1, 1)]
    cont = Playback(reorder=True, hold_s=0.3, next_expected=5)
    assert cont.push(5, True, 0.0) == [(0, 0)]  # a continuation goes on counting
    assert cont.finish(1.0) == []


def test_playback_plays_in_order_arrivals_at_once_and_any_stream_in_increasing_order():
    pb = Playback(reorder=True, hold_s=1.0)
    for n in range(5):  # in order, nothing held: each played on arrival, same pairs
        assert pb.push(float(n), n > 0, n * 0.01) == [(n, n)]
    assert pb.first_chunk_s == 0.01 and pb.finish(1.0) == []
    import random

    for seed in range(200):  # shuffled, gapped streams (0- or 1-based)
        rnd = random.Random(seed)
        seqs = [float(x) for x in range(rnd.choice((0, 1)), 12) if rnd.random() > 0.1]
        rnd.shuffle(seqs)
        pb = Playback(reorder=True, hold_s=0.05)
        played: dict[int, float] = {}
        for n, seq in enumerate(seqs):
            for arr, idx in pb.push(seq, True, n * 0.02):
                played[idx] = seqs[arr]
        for arr, idx in pb.finish(1.0):
            played[idx] = seqs[arr]
        order = [played[i] for i in range(len(played))]
        assert order == sorted(set(order)), seed  # never out of order, never twice
        assert len(order) + sum(s < order[0] for s in seqs) <= len(seqs)
        assert pb.order_violations == 0


def test_parse_event_reads_codes_sequence_and_context():
    p = EXT + "/"
    ev = parse_event({"jsonrpc": "2.0", "id": "r", "result": {"statusUpdate": {
        "taskId": "t1", "contextId": "c1", "metadata": {p + "sequenceId": 4.0},
        "status": {"state": "TASK_STATE_FAILED", "message": {
            "parts": [{"text": "rate-limited: slow down"}],
            "metadata": {p + "errorCode": "rate-limited", p + "retryAfterMs": 250.0}}}}}}, EXT)
    assert (ev.kind, ev.task_id, ev.context_id, ev.sequence_id) == ("status", "t1", "c1", 4.0)
    assert ev.ends_stream and ev.error_code == "rate-limited" and ev.retry_after_ms == 250.0
    degraded = parse_event({"result": {"statusUpdate": {"status": {
        "state": "TASK_STATE_FAILED", "message": {"parts": [{"text": "internal: oops"}]}}}}}, EXT)
    assert degraded.error_code == "internal" and degraded.sequence_id is None
    err = parse_event({"jsonrpc": "2.0", "id": None, "error": {"code": -32040, "message": "x"}},
                      EXT)
    assert err.ends_stream and err.error_code == "auth"
    chunk = parse_event({"result": {"artifactUpdate": {"taskId": "t", "metadata": {
        p + "sequenceId": 1}}}}, EXT)
    assert chunk.is_output and not chunk.ends_stream and chunk.sequence_id == 1.0


def test_gatherer_detects_a_lost_batch(tmp_path):
    g = Gatherer(tmp_path)
    led = Ledger("w1")
    led.attempt({"a": 1})
    b0 = led.take_batch()
    led.turn({"t": float("nan")})
    b1 = led.take_batch()
    g.on_batch(b0)
    g.on_done(led.done_message())
    assert not g.complete(1)  # batch 1 announced, never received
    g.on_batch(b1)
    assert g.complete(1) and not g.complete(2)
    g.close()
    assert [json.loads(x) for x in (tmp_path / "turns.jsonl").read_text().splitlines()] == [
        {"t": None}]
    assert g.report(1)["processes"]["w1"]["rows_received"] == dict(
        zip(TABLES, (1, 0, 1, 0), strict=True))
