"""RetryPolicy.decide over the code table, limits, hints, deadline and budgets; Escalation."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtalab.sim.policy import (
    ALL_CODES,
    CODES,
    REASONS,
    RETRYABLE_CODES,
    AdaptiveThrottleConfig,
    BackoffConfig,
    BudgetConfig,
    Decision,
    Escalation,
    EscalationConfig,
    FinagleBudgetConfig,
    LivePolicyConfig,
    RetryConfig,
    RetryPolicy,
    TokenBucketConfig,
    ending_of,
    is_retryable,
    make_budget,
)
from rtalab.sim.vocab import Ending

EXPO = BackoffConfig(strategy="exponential", base_s=0.25, multiplier=2.0, cap_s=2.0)


def policy(retry: RetryConfig | None = None, backoff: BackoffConfig = EXPO,
           budget: BudgetConfig | None = None) -> RetryPolicy:
    """A policy with deterministic exponential backoff unless told otherwise."""
    cfg = LivePolicyConfig(backoff=backoff, retry=retry or RetryConfig())
    return RetryPolicy(cfg, make_budget(budget) if budget is not None else None)


def decide(p: RetryPolicy, code: str, attempt: int = 1, elapsed_s: float = 0.0,
           **kw: float | bool | Ending | None) -> Decision:
    """Shorthand with a fixed seed."""
    return p.decide(code, attempt, elapsed_s, 0.0, np.random.default_rng(0), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_code_in_the_table(code: str) -> None:
    d = decide(policy(), code)
    if CODES[code].retryable:  # type: ignore[index]
        assert d == Decision(True, 0.25, "retry")
    else:
        assert d == Decision(False, 0.0, "not-retryable")


def test_retryable_set_is_the_seed_table() -> None:
    p = policy()
    assert {c for c in ALL_CODES if decide(p, c).retry} == {"rate-limited", "upstream-timeout",
                                                             "internal"}
    assert decide(p, "teapot") == Decision(False, 0.0, "not-retryable")  # unknown code


@pytest.mark.parametrize("code", ["teapot", "", "Internal", "rate_limited", "upstream-timeout "])
def test_a_code_outside_the_table_is_not_retryable(code: str) -> None:
    """errors.md §2: only the table's retryable codes may be resent; a code the table does not
    name (a typo, another case, a server's own) is not retryable -- for the decision and for
    the budget, which counts it as an answer, not as a failure."""
    assert not is_retryable(code)
    assert code not in RETRYABLE_CODES
    assert ending_of("failed", code, is_retryable(code)) is Ending.NOT_RETRYABLE
    assert {"rate-limited", "upstream-timeout", "internal"} == RETRYABLE_CODES


def test_default_per_code_limits() -> None:
    p = policy()
    assert {c: p.max_attempts_for(c) for c in ALL_CODES} == {
        "schema-validation": 1, "unsupported-directive": 1, "extension-inactive": 1, "auth": 1,
        "rate-limited": 3, "upstream-timeout": 3, "session-not-found": 1, "internal": 2}
    assert [decide(p, "internal", a).reason for a in (1, 2, 3)] == [
        "retry", "attempts-exhausted", "attempts-exhausted"]
    assert [decide(p, "upstream-timeout", a).reason for a in (1, 2, 3)] == [
        "retry", "retry", "attempts-exhausted"]


def test_custom_per_code_limits() -> None:
    limits = types.MappingProxyType({"rate-limited": 5, "auth": 4})
    p = policy(RetryConfig(max_attempts=2, max_attempts_by_code=limits))
    assert p.max_attempts_for("rate-limited") == 5
    assert p.max_attempts_for("internal") == 2  # the table replaces the default {internal: 2}
    assert p.max_attempts_for("auth") == 1  # a limit cannot make a non-retryable code retryable
    assert decide(p, "auth").reason == "not-retryable"
    assert [decide(p, "rate-limited", a).retry for a in range(1, 7)] == [True] * 4 + [False] * 2


def test_delay_is_backoff_for_retry_number_attempt() -> None:
    p = policy(RetryConfig(max_attempts=10))
    assert [decide(p, "internal" if a < 2 else "upstream-timeout", a).delay_s
            for a in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_timeout_follows_retry_on_timeout() -> None:
    on = policy()
    # a timeout is decided as upstream-timeout (limit 3), whatever the code says
    assert decide(on, "internal", 2, ending=Ending.TIMEOUT) == Decision(True, 0.5, "retry")
    assert decide(on, "auth", 1, ending=Ending.TIMEOUT).retry  # timeout overrides the code
    assert on.max_attempts_for("internal", timeout=True) == 3
    off = policy(RetryConfig(retry_on_timeout=False))
    assert decide(off, "upstream-timeout", 1, ending=Ending.TIMEOUT) == Decision(
        False, 0.0, "not-retryable")
    assert decide(off, "upstream-timeout", 1).retry  # a Reasoner-reported upstream-timeout still is
    assert off.max_attempts_for("upstream-timeout", timeout=True) == 1


def test_retry_after_is_honoured() -> None:
    p = policy()
    assert decide(p, "rate-limited", retry_after_ms=500).delay_s == 0.5
    assert decide(p, "rate-limited", retry_after_ms=100).delay_s == 0.25  # backoff is longer
    assert decide(p, "rate-limited", 2, retry_after_ms=0).delay_s == 0.5
    assert decide(p, "internal", retry_after_ms=5000).delay_s == 0.25  # only for rate-limited
    ignore = policy(RetryConfig(honour_retry_after=False))
    assert decide(ignore, "rate-limited", retry_after_ms=500).delay_s == 0.25
    none = policy(backoff=BackoffConfig(strategy="none"))
    assert decide(none, "rate-limited", retry_after_ms=750) == Decision(True, 0.75, "retry")


def test_deadline() -> None:
    p = policy(RetryConfig(deadline_s=1.0))
    assert decide(p, "internal", 1, elapsed_s=0.75) == Decision(True, 0.25, "retry")  # == deadline
    assert decide(p, "internal", 1, elapsed_s=0.76) == Decision(False, 0.0, "deadline")
    assert decide(p, "rate-limited", 1, elapsed_s=0.0, retry_after_ms=1500).reason == "deadline"
    assert decide(policy(), "internal", 1, elapsed_s=1e9).retry  # deadline_s = 0: none


def test_budget_veto_and_order_of_checks() -> None:
    tb = BudgetConfig(token_bucket=TokenBucketConfig(enabled=True, max_tokens=2))
    p = policy(RetryConfig(deadline_s=1.0), budget=tb)
    assert decide(p, "internal").retry
    assert p.budget is not None
    p.budget.on_failure(0.0)  # 1 token: not > 1
    assert decide(p, "internal") == Decision(False, 0.0, "budget")
    assert decide(p, "auth").reason == "not-retryable"  # non-retryable comes first
    assert decide(p, "internal", 2).reason == "attempts-exhausted"  # and attempts
    assert decide(p, "internal", elapsed_s=0.9).reason == "deadline"  # and the deadline


def test_refusals_charge_no_budget() -> None:
    fin = BudgetConfig(finagle=FinagleBudgetConfig(enabled=True, min_retries_per_s=0.2, ttl_s=10))
    p = policy(RetryConfig(deadline_s=1.0), budget=fin)  # reserve: 2 retries
    for code, attempt, elapsed in [("auth", 1, 0.0), ("internal", 2, 0.0), ("internal", 1, 0.9)]:
        assert not decide(p, code, attempt, elapsed).retry
    assert [decide(p, "internal").reason for _ in range(3)] == ["retry", "retry", "budget"]


def test_decorrelated_backoff_gets_prev_delay() -> None:
    p = policy(RetryConfig(max_attempts=5), backoff=BackoffConfig(
        strategy="decorrelated_jitter", base_s=0.1, cap_s=100.0))
    rng = np.random.default_rng(9)
    for _ in range(500):
        d = p.decide("upstream-timeout", 3, 0.0, 0.0, rng, prev_delay_s=0.2)
        assert 0.1 <= d.delay_s <= 0.6


def test_same_seed_same_decisions() -> None:
    budget = BudgetConfig(adaptive=AdaptiveThrottleConfig(enabled=True),
                          token_bucket=TokenBucketConfig(enabled=True, max_tokens=50))
    cfg = LivePolicyConfig(backoff=BackoffConfig(strategy="full_jitter"),
                           retry=RetryConfig(max_attempts=4))

    def run(seed: int) -> list[Decision]:
        pol = RetryPolicy(cfg, make_budget(budget))
        assert pol.budget is not None
        rng = np.random.default_rng(seed)
        out = []
        for i in range(2_000):
            now = i * 0.05
            pol.budget.on_attempt(now, is_retry=False)
            if rng.random() < 0.4:
                pol.budget.on_success(now)
                continue
            pol.budget.on_failure(now)
            code = ALL_CODES[int(rng.integers(len(ALL_CODES)))]
            out.append(pol.decide(code, int(rng.integers(1, 5)), 0.0, now, rng,
                                  retry_after_ms=300.0, prev_delay_s=0.1))
        return out

    a, b = run(123), run(123)
    assert a == b
    assert {d.reason for d in a} == {"retry", "not-retryable", "attempts-exhausted", "budget"}
    assert run(124) != a


def test_attempt_must_be_positive() -> None:
    with pytest.raises(ValueError):
        decide(policy(), "internal", 0)


@settings(max_examples=300, deadline=None)
@given(code=st.sampled_from([*ALL_CODES, "unknown"]), attempt=st.integers(1, 8),
       elapsed=st.floats(0.0, 5.0), timeout=st.booleans(),
       retry_after=st.none() | st.floats(0.0, 3000.0),
       strategy=st.sampled_from(["none", "exponential", "full_jitter", "equal_jitter",
                                 "decorrelated_jitter", "grpc"]),
       deadline=st.sampled_from([0.0, 1.0, 3.0]), seed=st.integers(0, 2**32 - 1))
def test_property_decision_invariants(code: str, attempt: int, elapsed: float, timeout: bool,
                                      retry_after: float | None, strategy: str, deadline: float,
                                      seed: int) -> None:
    p = policy(RetryConfig(deadline_s=deadline),
               backoff=BackoffConfig(strategy=strategy))  # type: ignore[arg-type]
    d = p.decide(code, attempt, elapsed, 0.0, np.random.default_rng(seed), retry_after, 0.0,
                 Ending.TIMEOUT if timeout else Ending.FAILURE)
    assert d.reason in REASONS
    assert d.retry == (d.reason == "retry")
    if not d.retry:
        assert d.delay_s == 0.0
        return
    assert attempt < p.max_attempts_for(code, timeout)
    assert code in {"rate-limited", "upstream-timeout", "internal"} or timeout
    lo, hi = p.backoff.bounds_s(attempt, 0.0)
    hint = retry_after / 1000 if retry_after is not None and code == "rate-limited" else 0.0
    if timeout:
        hint = 0.0
    assert max(lo, hint) <= d.delay_s <= max(hi, hint)
    assert deadline == 0.0 or elapsed + d.delay_s <= deadline


def test_escalation() -> None:
    esc = Escalation(EscalationConfig(end_session_after_failed_turns=2))
    assert [esc.record_turn(f) for f in (True, False, True, True, True)] == [
        False, False, False, True, True]
    esc.reset()
    assert esc.record_turn(True) is False
    one = Escalation(EscalationConfig(end_session_after_failed_turns=1))
    assert one.record_turn(False) is False and one.record_turn(True) is True
    never = Escalation(EscalationConfig(end_session_after_failed_turns=0))
    assert not any(never.record_turn(True) for _ in range(100))


def test_a_lost_response_is_decided_like_a_timeout() -> None:
    """A lost response (the stream ended without a terminal state) cannot be told from a
    timeout: decided as upstream-timeout whatever the code says, and not retried at all when
    timeouts are not (retry_on_timeout = false)."""
    on = policy()
    assert decide(on, "auth", 1, ending=Ending.LOST) == Decision(True, 0.25, "retry")
    off = policy(RetryConfig(retry_on_timeout=False))
    assert decide(off, "upstream-timeout", 1, ending=Ending.LOST) == Decision(
        False, 0.0, "not-retryable")
