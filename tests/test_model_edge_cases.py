"""Model cases no other test pinned (issue 16, point 5): each planted in a copy turned
these red.  Expected values are written out, not computed by the code under test."""

from __future__ import annotations

import math

import pytest

from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.model.playout import playout
from rtalab.sim.runner import run_once
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import summarize
from tests.scenarios import one_turn

INF = math.inf


def test_queue_limit_does_not_count_cancelled_jobs_still_queued() -> None:
    """One worker busy for 5 s (turn 0, progress keeps it alive), queue limit 1.  Turn 1's
    first attempt waits in the queue, times out at 1 s and is cancelled — its job stays in
    the queue, dead.  Its retry must be admitted (queued), not refused queue-full."""
    sc = one_turn(**{"workload.max_calls": 2, "reasoner.workers": 1, "reasoner.queue_limit": 1,
                     "reasoner.reasoning_time_s": 5.0, "reasoner.progress_directive": True,
                     "live.cancel_on_timeout": True, "live.timeouts.turn_response_s": 1.0,
                     "live.retry.max_attempts": 2, "live.backoff.strategy": "none"})
    ex = run_once(sc, 1).executions
    got = list(zip(ex[S.REQUEST_GUID].tolist(), ex[S.DISPOSITION].astype(str).tolist(),
                   strict=True))
    assert got == [(0, "executed"), (1, "cancel-dropped"), (2, "cancel-dropped")]


def test_spurious_timeouts_count_executions_that_ended_input_required() -> None:
    """Handoff turns: 3 s of silent reasoning ending INPUT_REQUIRED vs a 1-s timeout, 3
    attempts: each times out although its execution succeeded (asked for input)."""
    sc = one_turn(**{"workload.handoff_share": 1.0, "reasoner.reasoning_time_s": 3.0,
                     "reasoner.progress_directive": False, "reasoner.known_task": "execute",
                     "live.timeouts.turn_response_s": 1.0, "live.retry.max_attempts": 3})
    m = {k: v["mean"] for k, v in
         summarize([run_once(sc, seed=1)], sc.run.warmup_s)["metrics"].items()}
    assert m["attempt_outcome.timeout"] == 1.0
    assert m[S.M_SPURIOUS_TIMEOUTS_PER_1K] == 3000.0
    assert m[S.M_SPURIOUS_TIMEOUT_SHARE] == 1.0


@pytest.mark.parametrize(("arrivals", "terminal", "expected"), [
    # two chunks lost in a row: both are known missing when chunk 3 arrives (0.4), both
    # skipped at 0.4 + 0.5, chunk 3 plays then
    ([0.1, INF, INF, 0.4], 0.5, (0.1, 0.9, 2)),
    # the first two lost: chunk 2 at 0.3 reveals both; the first playable is at 0.8
    ([INF, INF, 0.3], 0.6, (0.8, 0.8, 2)),
    # three lost in a row, only the terminal reveals them (at 0.3): skipped at 0.8
    ([0.1, INF, INF, INF], 0.3, (0.1, 0.8, 3)),
])
def test_playout_skips_every_missing_chunk_a_later_one_reveals(
        arrivals: list[float], terminal: float, expected: tuple[float, float, int]) -> None:
    assert playout(arrivals, terminal, 0.5) == pytest.approx(expected)


def test_strict_slo_is_strict() -> None:
    """``<`` and ``>`` exclude the target itself; ``<=`` and ``>=`` include it."""
    at = {"metrics": {"completion_s.p99": {"mean": 3.0, "ci_low": 2.0, "ci_high": 3.0},
                      "success_rate": {"mean": 0.99, "ci_low": 0.99, "ci_high": 0.995}}}
    assert parse_slo("completion_s.p99<=3").holds(at)
    assert not parse_slo("completion_s.p99<3").holds(at)
    assert parse_slo("success_rate>=0.99").holds(at)
    assert not parse_slo("success_rate>0.99").holds(at)
    assert parse_slo("completion_s.p99<3").violation(3.0) > 0
    assert parse_slo("completion_s.p99<=3").violation(3.0) <= 0
