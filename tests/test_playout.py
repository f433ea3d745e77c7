"""Issue 6 §2: what the caller hears — the reorder buffer's playable times (sim/model/playout.py)
and time to first PLAYABLE chunk under downlink reordering."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtalab.sim.model.playout import playout
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import Scenario

INF = float("inf")


def test_in_order_chunks_play_on_arrival() -> None:
    assert playout([1.0, 1.2, 1.4], 1.41, 0.5) == (1.0, 1.41, 0)


def test_a_late_first_chunk_is_skipped_after_the_gap() -> None:
    # chunk 0 arrives at 4.0; chunk 1 at 1.2 shows the gap; the buffer gives up on 0 at 1.7
    first, done, skipped = playout([4.0, 1.2, 1.4], 1.41, 0.5)
    assert (first, skipped) == (1.7, 1)
    assert done == pytest.approx(1.7)
    # ... unless it arrives within the gap
    assert playout([1.5, 1.2, 1.4], 1.41, 0.5) == (1.5, 1.5, 0)


def test_a_chunk_arriving_exactly_gap_s_after_a_later_one_still_plays() -> None:
    """The gap is declared lost gap_s after the buffer knew of it; only a chunk arriving
    *after* that is dropped (chunk 0 here arrives at 1.0 + 0.5)."""
    assert playout([1.5, 1.0], 2.0, 0.5) == (1.5, 2.0, 0)
    assert playout([1.5 + 1e-9, 1.0], 2.0, 0.5)[2] == 1  # a moment later: skipped


def test_the_terminal_state_bounds_the_wait_and_nothing_may_be_playable() -> None:
    first, done, skipped = playout([INF, INF, INF], 2.0, 0.5)
    assert math.isnan(first) and done == 2.5 and skipped == 3
    first, done, _ = playout([1.0, INF, 1.4], INF, 0.5)  # terminal missing: never complete
    assert first == 1.0 and done == INF


# --------------------------------------------------------------------------- TTFC under reorder

C = 0.12  # uplink 10 ms + first chunk 100 ms after reasoning + downlink 10 ms
GAP = 0.5
# offset of the first playable chunk, with each of chunk 0, 1, 2 (sent 0, 0.2, 0.4 s after
# the first) and the terminal state (sent with chunk 2) delayed 3 s with probability 1/2
# (D_k), gap rule 0.5 s: worked out in docs/metrics.md ("Time to first playable chunk")
NEW = {0.0: 8, 0.7: 4, 0.9: 2, 3.0: 1}  # /16; the 16th: every chunk skipped (no TTFC)
OLD = {0.0: 8, 0.2: 4, 0.4: 2, 3.0: 2}  # earliest arriving chunk, whatever its sequenceId


def _median(mixture: dict[float, int], mean_r: float) -> float:
    """Median of C + R + X, R ~ Exp(mean_r), X ~ mixture (weights normalised)."""
    w = np.array(list(mixture.values()), float)
    w /= w.sum()
    x = np.array(list(mixture))

    def cdf(t: float) -> float:
        z = np.clip(t - C - x, 0.0, None)
        return float((w * (1.0 - np.exp(-z / mean_r))).sum())

    lo, hi = 0.0, 20.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 0.5 else (lo, mid)
    return lo


def _reordered(reorder: float) -> Scenario:
    return Scenario().with_overrides({
        "workload.calls_per_s": 30.0, "workload.turns_per_call": 1,
        "workload.side_effect_share": 0.0, "workload.handoff_share": 0.0,
        "live.timeouts.turn_response_s": 0.0, "live.timeouts.negotiation_s": 0.0,
        "live.reorder_gap_s": GAP,
        "network.uplink.latency_s": 0.01, "network.downlink.latency_s": 0.01,
        "network.downlink.reorder": reorder, "network.downlink.reorder_delay_s": 3.0,
        "reasoner.workers": 300, "reasoner.reasoning_time_s": {"dist": "exp", "mean": 1.0},
        "reasoner.first_chunk_s": 0.1, "reasoner.chunks": 3, "reasoner.chunk_interval_s": 0.2,
        "run.duration_s": 500.0, "run.warmup_s": 10.0, "run.drain_s": 20.0})


def test_reordering_moves_ttfc_p50_by_the_computed_amount() -> None:
    out = run_once(_reordered(0.5), seed=1)
    t = out.turns[out.turns["start_s"] >= 10.0]
    assert (t["outcome"] == "completed").all()
    ttfc = t["ttfc_s"].to_numpy()
    n = len(ttfc)
    # 1/16 of the turns play nothing (every chunk skipped): no TTFC
    silent = np.isnan(ttfc).mean()
    assert abs(silent - 1 / 16) < 4 * math.sqrt(1 / 16 * 15 / 16 / n)
    p50 = float(np.percentile(ttfc[np.isfinite(ttfc)], 50, method="inverted_cdf"))
    expected, old = _median(NEW, 1.0), _median(OLD, 1.0)
    # standard error of a median: sqrt(1/4n) / density at the median (density <= 1/mean_r)
    se = math.sqrt(0.25 / n) / 0.3
    assert abs(p50 - expected) < 4 * se, (p50, expected, se)
    assert abs(expected - old) > 8 * se  # the earliest-chunk rule would be told apart
    clean = run_once(_reordered(0.0), seed=1).turns["ttfc_s"].to_numpy()
    shift = p50 - float(np.percentile(clean[np.isfinite(clean)], 50, method="inverted_cdf"))
    assert abs(shift - (expected - (C + math.log(2.0)))) < 6 * se


# --------------------------------------------------------------------------- no turn hangs


@pytest.mark.parametrize("total_s, hangs", [(0.0, True), (None, False)])
def test_a_partition_behind_a_progress_directive_cannot_hang_a_turn(total_s: float | None,
                                                                   hangs: bool) -> None:
    """A downlink partition swallows terminal states whose progress directive already
    arrived (the turn-response timer is satisfied).  Without a total timer those attempts
    wait for ever; with the finite default (10 s) every turn has ended after the drain."""
    over = {"workload.calls_per_s": 2.0, "run.duration_s": 60.0, "run.warmup_s": 5.0,
            "run.drain_s": 30.0,
            "network.outages": [{"start_s": 20.0, "duration_s": 5.0, "direction": "downlink"}]}
    if total_s is not None:
        over["live.timeouts.turn_total_s"] = total_s
    out = run_once(Scenario().with_overrides(over), seed=1)
    unfinished = int((out.turns["outcome"] == "unfinished").sum())
    if hangs:
        assert unfinished > 0
    else:
        assert unfinished == 0
        assert (out.attempts["outcome"] == "total-timeout").sum() > 0
