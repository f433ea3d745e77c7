"""Issue 6 §4: every turn, call and attempt is accounted for; the new hazards and counts."""

from __future__ import annotations

from typing import Any

import pytest

from rtalab.sim.runner import run_once, run_replications
from rtalab.sim.scenario import load_scenario, preset_names
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import summarize
from tests.scenarios import one_turn

SHORT = {"run.duration_s": 150.0, "run.warmup_s": 20.0, "run.drain_s": 40.0,
         "run.replications": 2}
VARIANTS = [(p, {}) for p in preset_names()] + [
    ("baseline", {"workload.barge_in_share": 0.3, "live.cancel_on_timeout": True,
                  "live.timeouts.turn_response_s": 0.8, "reasoner.queue_timeout_s": 1.0,
                  "live.timeouts.handoff_s": 3.0}),
    ("retry_storm", {"live.escalation.end_session_after_failed_turns": 2,
                     "run.drain_s": 0.0}),  # escalations, and turns left unfinished
]


def _means(preset: str, overrides: dict[str, Any]) -> dict[str, float]:
    sc = load_scenario(preset, {**SHORT, **overrides})
    s = summarize(run_replications(sc, seed=3), sc.run.warmup_s)
    return {k: v["mean"] for k, v in s["metrics"].items()}


@pytest.mark.parametrize("preset, overrides", VARIANTS)
def test_every_turn_call_and_attempt_is_in_exactly_one_row(preset: str,
                                                           overrides: dict[str, Any]) -> None:
    m = _means(preset, overrides)
    outcomes = ("success_rate", "failed_share", "abandoned_share", "cancelled_share",
                "unfinished_share")
    assert sum(m[k] for k in outcomes) == pytest.approx(1.0)
    by_reason = sum(v for k, v in m.items() if k.startswith(S.M_FAILED_BY_REASON_PREFIX))
    by_code = sum(v for k, v in m.items() if k.startswith(S.M_FAILURE_RATE_PREFIX))
    assert by_reason == pytest.approx(m["failed_share"])
    assert by_code == pytest.approx(m["failed_share"])
    attempts = sum(v for k, v in m.items() if k.startswith(S.M_ATTEMPT_OUTCOME_PREFIX))
    assert attempts == pytest.approx(1.0)
    if m["calls"] > 0:  # (metastable_spike: all 28 callers arrive during the warm-up)
        calls = sum(v for k, v in m.items() if k.startswith(S.M_CALL_END_PREFIX))
        assert calls == pytest.approx(1.0)
    assert m[S.M_CONCURRENT_CALLS_PEAK] >= m[S.M_CONCURRENT_CALLS_MEAN] > 0
    if overrides.get("workload.barge_in_share"):
        assert m["cancelled_share"] > 0.05 and m["cancel.stopped_per_1k_turns"] > 0
    if overrides.get("live.escalation.end_session_after_failed_turns"):
        assert m["call_end.escalated_share"] > 0 and m[S.M_ESCALATED_TURNS_REMOVED] > 0
        assert m["unfinished_share"] > 0


def _one(**overrides: Any) -> dict[str, float]:
    sc = one_turn(**overrides)
    s = summarize([run_once(sc, seed=1)], sc.run.warmup_s)
    return {k: v["mean"] for k, v in s["metrics"].items()}


@pytest.mark.parametrize("response_s, ghost", [(1.0, 1000.0), (0.3, 0.0)])
def test_ghost_success_is_a_failed_turn_whose_side_effect_ran(response_s: float,
                                                              ghost: float) -> None:
    """The side effect starts at 0.5 s; the turn is cancelled and failed at ``response_s``:
    after the tool started it still runs (a ghost success), before it is stopped (none)."""
    m = _one(**{"workload.side_effect_share": 1.0, "reasoner.reasoning_time_s": 0.5,
                "reasoner.tool_latency_s": 3.0, "reasoner.upstream_timeout_s": 0.0,
                "reasoner.progress_directive": False,
                "live.timeouts.turn_response_s": response_s, "live.retry.max_attempts": 1,
                "live.cancel_on_timeout": True})
    assert m["failed_share"] == 1.0
    assert m[S.M_GHOST_PER_1K] == ghost


@pytest.mark.parametrize("errors, spurious", [({}, 3000.0), ({"internal": 1.0}, 0.0)])
def test_spurious_timeouts_are_timeouts_of_work_that_succeeded(errors: dict,
                                                               spurious: float) -> None:
    """3 s of silent reasoning vs a 1-s timeout: each of the 3 attempts times out although
    its execution completes (spurious); executions that fail make the timeouts genuine."""
    m = _one(**{"reasoner.reasoning_time_s": 3.0, "reasoner.progress_directive": False,
                "reasoner.errors": errors, "reasoner.known_task": "execute",
                "live.timeouts.turn_response_s": 1.0, "live.retry.max_attempts": 3})
    assert m["attempt_outcome.timeout"] == 1.0
    assert m[S.M_SPURIOUS_TIMEOUTS_PER_1K] == spurious
    assert m[S.M_SPURIOUS_TIMEOUT_SHARE] == spurious / 3000.0


def test_load_amplification_is_per_offered_turn() -> None:
    """Nothing succeeds, 3 attempts each: 3 executions per offered turn (per *completed*
    turn it would be undefined)."""
    m = _one(**{"reasoner.errors": {"internal": 1.0}, "live.retry.max_attempts": 3,
                "live.retry.max_attempts_by_code": {}})
    assert m["success_rate"] == 0.0
    assert m["load_amplification"] == 3.0
    assert m["attempts_per_turn"] == 3.0
