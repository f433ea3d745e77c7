"""Retry budgets: exact thresholds, window expiry, the SRE formula and the breaker's transitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtalab.sim.policy import (
    AdaptiveThrottle,
    AdaptiveThrottleConfig,
    BudgetConfig,
    CircuitBreaker,
    CircuitBreakerConfig,
    FinagleBudget,
    FinagleBudgetConfig,
    TokenBucket,
    TokenBucketConfig,
    make_budget,
)

RNG = np.random.default_rng(0)  # only for budgets that never draw; the tests below check that


def count_allowed(budget: FinagleBudget, now_s: float, limit: int = 10_000) -> int:
    """How many retries in a row the budget grants at ``now_s``."""
    n = 0
    while n < limit and budget.allow_retry(now_s, RNG):
        n += 1
    return n


# --------------------------------------------------------------------------- token bucket


def test_token_bucket_threshold_exact_counts() -> None:
    tb = TokenBucket(TokenBucketConfig(enabled=True, max_tokens=10, token_ratio=0.1))
    assert tb.tokens == 10 and tb.allow_retry(0, RNG) and tb.allow_first(0, RNG)
    for _ in range(4):
        tb.on_failure(0)
    assert tb.tokens == 6 and tb.allow_retry(0, RNG)
    tb.on_failure(0)
    assert tb.tokens == 5 and not tb.allow_retry(0, RNG)  # needs tokens > max/2, strictly
    assert tb.allow_first(0, RNG)  # never limits first sends
    tb.on_success(0)
    assert tb.tokens == 5.1 and tb.allow_retry(0, RNG)


def test_token_bucket_floor_cap_and_recovery() -> None:
    tb = TokenBucket(TokenBucketConfig(enabled=True, max_tokens=10, token_ratio=0.1))
    for _ in range(25):
        tb.on_failure(0)
    assert tb.tokens == 0  # floored at 0
    for _ in range(50):
        tb.on_success(0)
    assert tb.tokens == 5.0 and not tb.allow_retry(0, RNG)  # 50 * 0.1 exactly, no float drift
    tb.on_success(0)
    assert tb.allow_retry(0, RNG)
    for _ in range(1000):
        tb.on_success(0)
    assert tb.state() == {"tokens": 10.0}


def test_token_bucket_allow_retry_does_not_spend_tokens() -> None:
    tb = TokenBucket(TokenBucketConfig(enabled=True, max_tokens=3, token_ratio=1))
    assert all(tb.allow_retry(0, RNG) for _ in range(100)) and tb.tokens == 3


# --------------------------------------------------------------------------- Finagle


def finagle(ttl_s: float = 10.0, min_per_s: float = 10.0, pct: float = 0.2) -> FinagleBudget:
    """A Finagle budget with the given parameters."""
    return FinagleBudget(FinagleBudgetConfig(enabled=True, ttl_s=ttl_s,
                                             min_retries_per_s=min_per_s, percent_can_retry=pct))


def test_finagle_allows_reserve_plus_percent_of_requests() -> None:
    fb = finagle()
    for _ in range(50):
        fb.on_attempt(0.0, is_retry=False)
    for _ in range(30):
        fb.on_attempt(0.1, is_retry=True)  # retries deposit nothing
    assert fb.balance(0.2) == 10 * 10 + 0.2 * 50
    assert count_allowed(fb, 0.5) == 110
    assert fb.state() == {"finagle_retries_left": 0}


def test_finagle_recovers_after_ttl() -> None:
    fb = finagle()
    for _ in range(50):
        fb.on_attempt(0.0, is_retry=False)
    assert count_allowed(fb, 0.5) == 110
    assert not fb.allow_retry(9.99, RNG)  # withdrawals still inside the window
    assert count_allowed(fb, 10.0) == 100  # deposits and withdrawals both expired
    assert count_allowed(fb, 15.0) == 0
    assert count_allowed(fb, 20.0) == 100


def test_finagle_percent_only_and_reserve_only() -> None:
    fb = finagle(min_per_s=0.0, pct=0.2)
    assert count_allowed(fb, 0.0) == 0
    for _ in range(10):
        fb.on_attempt(0.0, is_retry=False)
    assert count_allowed(fb, 0.0) == 2
    fb = finagle(ttl_s=5.0, min_per_s=3.0, pct=0.0)
    for _ in range(100):
        fb.on_attempt(0.0, is_retry=False)
    assert count_allowed(fb, 0.0) == 15


def test_finagle_window_memory_is_bounded() -> None:
    fb = finagle(ttl_s=10.0)
    for i in range(100_000):
        now = i * 0.01
        fb.on_attempt(now, is_retry=False)
        fb.allow_retry(now, RNG)
    assert len(fb._win) <= 10
    # steady state: 100 requests/s * 10 s * 20 % + 100 reserve; all spent by the retries
    assert fb.state(1000.0)["finagle_retries_left"] <= 300


# --------------------------------------------------------------------------- adaptive throttling


def adaptive(k: float = 2.0, window_s: float = 120.0, first: bool = False) -> AdaptiveThrottle:
    """An SRE adaptive throttle."""
    return AdaptiveThrottle(AdaptiveThrottleConfig(enabled=True, k=k, window_s=window_s,
                                                   apply_to_first=first))


def loaded(requests: int, accepts: int, **kw: float | bool) -> AdaptiveThrottle:
    """A throttle that has seen ``requests`` attempts and ``accepts`` successes at t = 0."""
    at = adaptive(**kw)  # type: ignore[arg-type]
    for _ in range(requests):
        at.on_attempt(0.0, is_retry=False)
    for _ in range(accepts):
        at.on_success(0.0)
    return at


@pytest.mark.parametrize(("requests", "accepts", "k"),
                         [(0, 0, 2.0), (10, 5, 2.0), (10, 3, 2.0), (100, 0, 2.0),
                          (40, 10, 1.5), (7, 7, 1.0)])
def test_adaptive_probability_is_the_formula(requests: int, accepts: int, k: float) -> None:
    at = loaded(requests, accepts, k=k)
    expected = max(0.0, (requests - k * accepts) / (requests + 1))
    assert at.reject_probability(1.0) == pytest.approx(expected)
    assert at.state(1.0)["adaptive_p_reject"] == pytest.approx(expected)


def test_adaptive_rejection_rate_matches_formula() -> None:
    requests, accepts, n = 10, 3, 20_000
    p = (requests - 2 * accepts) / (requests + 1)  # 4/11
    rng = np.random.default_rng(42)
    rejected = sum(not loaded(requests, accepts).allow_retry(1.0, rng) for _ in range(n))
    assert abs(rejected - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_adaptive_counts_local_rejections_and_forgets_after_window() -> None:
    at = loaded(100, 0, window_s=10.0)
    rng = np.random.default_rng(1)
    outcomes = [at.allow_retry(1.0, rng) for _ in range(50)]
    assert outcomes.count(False) == at.requests - 100  # each local rejection is a request
    rejected = outcomes.count(False)
    assert at.reject_probability(10.0) == pytest.approx(rejected / (rejected + 1))  # t=0 gone
    assert at.reject_probability(11.0) == 0.0  # and now t = 1 too
    assert at.state()["adaptive_requests"] == 0


def test_adaptive_draws_no_random_number_when_p_is_zero() -> None:
    at = loaded(10, 5)
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    assert all(at.allow_retry(1.0, rng) for _ in range(100))
    assert rng.bit_generator.state == before


def test_adaptive_first_sends_only_when_configured() -> None:
    rng = np.random.default_rng(2)
    assert all(loaded(1000, 0).allow_first(1.0, rng) for _ in range(20))
    assert not all(loaded(1000, 0, first=True).allow_first(1.0, rng) for _ in range(20))


# --------------------------------------------------------------------------- circuit breaker


def breaker(threshold: int = 3, open_s: float = 5.0, probes: int = 2) -> CircuitBreaker:
    """A circuit breaker."""
    return CircuitBreaker(CircuitBreakerConfig(enabled=True, failure_threshold=threshold,
                                               open_s=open_s, half_open_probes=probes))


def test_breaker_state_machine_exact_transitions() -> None:
    cb = breaker()
    log: list[tuple[float, str, bool | None, str]] = []

    def step(t: float, what: str) -> None:
        result: bool | None = None
        if what == "first":
            result = cb.allow_first(t, RNG)
        elif what == "retry":
            result = cb.allow_retry(t, RNG)
        elif what == "ok":
            cb.on_success(t)
        else:
            cb.on_failure(t)
        log.append((t, what, result, cb.state()["breaker"]))

    for t, what in [(0, "fail"), (1, "fail"), (1.5, "ok"), (2, "fail"), (3, "fail"), (4, "fail"),
                    (5, "first"), (8.9, "retry"), (9, "ok"), (9, "first"), (9, "retry"),
                    (9.5, "first"), (10, "fail"), (11, "first"), (15, "retry"), (16, "ok"),
                    (16, "first"), (16, "retry")]:
        step(t, what)
    assert log == [
        (0, "fail", None, "closed"), (1, "fail", None, "closed"),
        (1.5, "ok", None, "closed"),  # a success resets the run
        (2, "fail", None, "closed"), (3, "fail", None, "closed"), (4, "fail", None, "open"),
        (5, "first", False, "open"),  # open rejects first sends too
        (8.9, "retry", False, "open"),
        (9, "ok", None, "open"),  # a late reply while open is ignored
        (9, "first", True, "half-open"), (9, "retry", True, "half-open"),  # 2 probes
        (9.5, "first", False, "half-open"),  # probes used up
        (10, "fail", None, "open"),  # a probe failure re-opens (at t = 10)
        (11, "first", False, "open"),
        (15, "retry", True, "half-open"),
        (16, "ok", None, "closed"),  # a probe success closes
        (16, "first", True, "closed"), (16, "retry", True, "closed"),
    ]
    assert cb.opens == 2 and cb.opened_at_s == 10


def test_breaker_state_with_time_moves_to_half_open() -> None:
    cb = breaker(threshold=1, open_s=1.0)
    cb.on_failure(0.0)
    assert cb.state(0.5)["breaker"] == "open"
    assert cb.state(1.0) == {"breaker": "half-open", "breaker_failures": 0, "breaker_opens": 1,
                             "breaker_probes_in_flight": 0}


# --------------------------------------------------------------------------- combinations


def test_no_budget_enabled_always_allows() -> None:
    b = make_budget(BudgetConfig())
    for t in range(100):
        b.on_attempt(t, is_retry=bool(t % 2))
        b.on_failure(t)
    assert b.allow_first(100, RNG) and b.allow_retry(100, RNG)
    assert b.state() == {}


def test_combined_veto_charges_nothing() -> None:
    cfg = BudgetConfig(token_bucket=TokenBucketConfig(enabled=True, max_tokens=2),
                       finagle=FinagleBudgetConfig(enabled=True, min_retries_per_s=1, ttl_s=10))
    b = make_budget(cfg)
    assert [p.name for p in b.parts] == ["token_bucket", "finagle"]
    assert b.allow_retry(0, RNG)  # 10 reserve -> 9
    b.on_failure(0)  # 2 tokens -> 1: not > 1
    assert not b.allow_retry(0, RNG) and b.vetoed_by == "token_bucket"
    st_ = b.state()
    assert st_ == {"tokens": 1.0, "vetoes_token_bucket": 1,
                   "finagle_retries_left": 9, "vetoes_finagle": 0}
    b.on_success(0)  # 1.1 tokens
    assert sum(b.allow_retry(0, RNG) for _ in range(20)) == 9
    assert b.vetoed_by == "finagle" and b.state()["vetoes_finagle"] == 11


def test_combined_breaker_blocks_first_sends() -> None:
    cfg = BudgetConfig(circuit_breaker=CircuitBreakerConfig(enabled=True, failure_threshold=1),
                       adaptive=AdaptiveThrottleConfig(enabled=True))
    b = make_budget(cfg)
    b.on_attempt(0, is_retry=False)
    b.on_failure(0)
    assert not b.allow_first(1, RNG) and b.vetoed_by == "circuit_breaker"
    assert set(b.state()) == {
        "breaker", "breaker_failures", "breaker_opens", "breaker_probes_in_flight",
        "vetoes_circuit_breaker",
        "adaptive_requests", "adaptive_accepts", "adaptive_p_reject", "vetoes_adaptive"}


@settings(max_examples=100, deadline=None)
@given(events=st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from("fsr")), max_size=300),
       pct=st.floats(0.0, 2.0), min_per_s=st.floats(0.0, 5.0))
def test_property_finagle_grants_only_what_it_holds(events: list[tuple[float, str]], pct: float,
                                                   min_per_s: float) -> None:
    ttl = 3.0
    fb = finagle(ttl_s=ttl, min_per_s=min_per_s, pct=pct)
    now = 0.0
    firsts = granted = 0
    for dt, kind in events:
        now += dt
        if kind == "f":
            fb.on_attempt(now, is_retry=False)
            firsts += 1
        elif kind == "r":
            before = fb.balance(now)
            if fb.allow_retry(now, RNG):
                granted += 1
                assert before >= 1.0 and fb.balance(now) == pytest.approx(before - 1.0)
                fb.on_attempt(now, is_retry=True)
            else:
                assert before < 1.0
    # over the whole run: at most one reserve per ttl period plus the share of first sends
    periods = math.floor(now / ttl) + 1
    assert granted <= periods * math.floor(min_per_s * ttl + 1e-9) + pct * firsts * 1.001 + 1
