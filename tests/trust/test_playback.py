"""The Live layer's reorder buffer, cases the planted bugs of last round slipped through:
the hold counted from the oldest held event, a skipped gap moving the expected number,
the first playable chunk, the end of the stream."""

from __future__ import annotations

import math

from rtalab.loadtests.live.playback import Playback


def test_the_hold_runs_from_the_oldest_held_event_not_the_lowest_number() -> None:
    pb = Playback(reorder=True, hold_s=0.5)
    assert pb.push(0, False, 0.0) == [(0, 0)]
    assert pb.push(3, True, 0.1) == []  # 1 and 2 missing: held
    assert pb.push(2, True, 0.55) == []  # oldest held (3) waited 0.45 s < hold
    # 3 has waited 0.55 s >= hold: the gap (1) is skipped, 2 and 3 are played
    assert pb.push(5, True, 0.65) == [(2, 1), (1, 2)]
    assert pb.finish(1.0) == [(3, 3)]
    assert pb.played == 4 and pb.order_violations == 0


def test_a_skipped_gap_moves_the_expected_number_past_what_was_played() -> None:
    pb = Playback(reorder=True, hold_s=0.2)
    pb.push(0, False, 0.0)
    assert pb.push(4, True, 0.1) == []
    assert pb.push(6, True, 0.35) == [(1, 1)]  # 4 held 0.25 s: skip 1-3, play 4; 6 waits
    assert pb.push(5, True, 0.36) == [(3, 2), (2, 3)]  # 5 is next (not 2): 5 then 6
    assert pb.push(2, True, 0.4) == []  # late: already skipped, dropped


def test_first_chunk_is_the_first_chunk_played_not_the_first_event() -> None:
    pb = Playback(reorder=True, hold_s=1.0)
    pb.push(0, False, 0.0)  # a directive: not a chunk
    assert math.isnan(pb.first_chunk_s)
    pb.push(1, True, 0.2)
    pb.push(2, True, 0.3)
    assert pb.first_chunk_s == 0.2


def test_the_end_of_the_stream_plays_everything_held_in_order() -> None:
    pb = Playback(reorder=True, hold_s=10.0)
    pb.push(0, False, 0.0)
    for n, seq in enumerate((5, 3, 4), start=1):
        assert pb.push(seq, True, 0.1 * n) == []
    assert pb.finish(0.5) == [(2, 1), (3, 2), (1, 3)]  # 3, 4, 5


def test_a_first_number_above_zero_waits_hold_then_plays() -> None:
    pb = Playback(reorder=True, hold_s=0.3)
    assert pb.push(2, True, 0.0) == []
    assert pb.push(1, True, 0.1) == []  # 0 might still come: hold from the first arrival
    assert pb.push(3, True, 0.31) == [(1, 0), (0, 1), (2, 2)]


def test_a_repeated_event_just_played_is_dropped() -> None:
    pb = Playback(reorder=True, hold_s=0.5)
    assert pb.push(0, False, 0.0) == [(0, 0)]
    assert pb.push(1, True, 0.1) == [(1, 1)]
    assert pb.push(1, True, 0.2) == []  # a second copy of 1 (next expected: 2)
    assert pb.push(0, False, 0.3) == []
    assert pb.played == 2 and pb.finish(1.0) == []


def test_without_reordering_violations_count_events_below_the_highest_played() -> None:
    """Played as they come: 0, 5, 3, 4 has two events below the highest number played
    (3 and 4 both below 5), a repeated number (1, 1) is not out of order."""
    pb = Playback(reorder=False, hold_s=0.5)
    for i, seq in enumerate((0, 5, 3, 4)):
        pb.push(seq, True, 0.1 * i)
    assert (pb.played, pb.order_violations, pb.last_played) == (4, 2, 5)
    again = Playback(reorder=False, hold_s=0.5)
    for i, seq in enumerate((0, 1, 1, 2)):
        again.push(seq, True, 0.1 * i)
    assert again.order_violations == 0


def test_the_expected_event_plays_at_once_after_a_held_one() -> None:
    """0 played, 2 held (1 missing), then 1 arrives: 1 and 2 play at once, without waiting
    for the hold."""
    pb = Playback(reorder=True, hold_s=5.0)
    assert pb.push(0, False, 0.0) == [(0, 0)]
    assert pb.push(2, True, 0.1) == []
    assert pb.push(1, True, 0.2) == [(2, 1), (1, 2)]
