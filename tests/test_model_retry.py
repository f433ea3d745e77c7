"""Acceptance 3: with independent failures x and N retries, success = 1 - x^(N+1), load = Σ x^i.

Checks in standard errors over replications (tests/stats.py), so they hold on any seed.
"""

from __future__ import annotations

from typing import Any

import pytest

from rtalab.sim import theory
from rtalab.sim.runner import run_once, run_replications
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared.summary import metric, summarize
from tests.stats import assert_close, assert_rejects, seed

X = 0.3
REPS = 20


def independent_failures(x: float, attempts: int, code: str = "upstream-timeout") -> Scenario:
    """Light load, injected failures with probability x per execution, no timeouts, no budget."""
    return Scenario().with_overrides({
        "workload.calls_per_s": 2.0,
        "workload.turns_per_call": 4,
        "workload.think_time_s": {"dist": "exp", "mean": 2.0},
        "workload.side_effect_share": 0.0,
        "workload.handoff_share": 0.0,
        "live.timeouts.turn_response_s": 0.0,
        "live.retry.max_attempts": attempts,
        "live.retry.max_attempts_by_code": {},
        "live.escalation.end_session_after_failed_turns": 0,
        "live.backoff.strategy": "full_jitter",
        "reasoner.workers": 16,
        "reasoner.reasoning_time_s": {"dist": "exp", "mean": 0.3},
        "reasoner.errors": {code: x},
        "run.duration_s": 1200.0,  # one retry more/fewer ≥ 8 SE apart in attempts/turn
        "run.warmup_s": 20.0,
        "run.replications": REPS,
    })


@pytest.fixture(scope="module", params=[1, 3, 4], ids=lambda n: f"attempts{n}")
def closed_form_run(request: pytest.FixtureRequest) -> tuple[int, dict[str, Any]]:
    """Summaries for max_attempts = 1, 3 and 4 (N = 0, 2, 3 retries)."""
    n = request.param
    sc = independent_failures(X, n)
    return n, summarize(run_replications(sc, seed=seed(11)), sc.run.warmup_s)


def _values(s: dict[str, Any], name: str) -> list[float | None]:
    return metric(s, name)["values"]


def test_success_rate_matches_closed_form(closed_form_run: tuple[int, dict[str, Any]]) -> None:
    n, s = closed_form_run
    assert_close(_values(s, "success_rate"), theory.retry_success(X, n), f"success, {n} attempts")


def test_attempts_per_turn_matches_closed_form(closed_form_run: tuple[int, dict[str, Any]]) -> None:
    n, s = closed_form_run
    expected = theory.retry_mean_attempts(X, n)
    assert_close(_values(s, "attempts_per_turn"), expected, f"attempts, {n} attempts")
    # load amplification = executions per offered turn = Σ x^i (every attempt executes)
    assert_close(_values(s, "load_amplification"), expected, f"amplification, {n} attempts")


def test_closed_form_check_can_fail(closed_form_run: tuple[int, dict[str, Any]]) -> None:
    """The checks reject one retry more and one fewer (each ≥ 8 SE from the right answer)."""
    n, s = closed_form_run
    for wrong in (n - 1, n + 1):
        if wrong < 1:
            continue
        assert_rejects(_values(s, "success_rate"), theory.retry_success(X, n),
                       theory.retry_success(X, wrong), f"success, {n} vs {wrong} attempts")
    assert_rejects(_values(s, "attempts_per_turn"), theory.retry_mean_attempts(X, n),
                   theory.retry_mean_attempts(X, n + 1) if n == 1 else
                   theory.retry_mean_attempts(X, n - 1), f"attempts, {n} attempts")


def test_failures_carry_the_injected_code_and_reason() -> None:
    sc = independent_failures(X, 3).with_overrides({"run.duration_s": 200.0})
    out = run_once(sc, seed=seed(5))
    failed = out.turns[out.turns["outcome"] == "failed"]
    assert len(failed) > 0
    assert set(failed["error_code"]) == {"upstream-timeout"}
    assert set(failed["end_reason"]) == {"attempts-exhausted"}
    assert (failed["attempts"] == 3).all()
    retried = out.attempts[out.attempts["decision"] == "retry"]
    assert (retried["error_code"] == "upstream-timeout").all()
    later = out.attempts[out.attempts["attempt"] > 1]
    assert (later["delay_before_s"] >= 0).all() and (later["delay_before_s"] <= 2.0).all()


def test_non_retryable_code_is_never_retried() -> None:
    sc = independent_failures(0.2, 5, code="auth").with_overrides({"run.duration_s": 200.0})
    out = run_once(sc, seed=seed(5))
    assert out.turns["attempts"].max() == 1
    failed = out.turns[out.turns["outcome"] == "failed"]
    assert len(failed) > 0 and set(failed["end_reason"]) == {"not-retryable"}


def test_rate_limited_honours_retry_after() -> None:
    """A per-context rate limit answers rate-limited + retryAfterMs; retries wait at least that."""
    sc = independent_failures(0.0, 4).with_overrides({
        "reasoner.errors": {}, "reasoner.context_rate_per_s": 0.2, "reasoner.context_burst": 1,
        "workload.think_time_s": 0.5, "run.duration_s": 200.0})
    out = run_once(sc, seed=seed(5))
    a = out.attempts
    limited = a[a["error_code"] == "rate-limited"]
    assert len(limited) > 0
    assert (limited["retry_after_ms"] > 0).all()
    nxt = a.set_index(["interaction_id", "phase", "attempt"])
    for row in limited[limited["decision"] == "retry"].itertuples():
        follow = nxt.loc[(row.interaction_id, row.phase, row.attempt + 1)]
        assert follow["delay_before_s"] >= row.retry_after_ms / 1000.0 - 1e-9
