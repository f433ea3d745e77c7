"""The retry budgets people run, each against its published definition (docs/budgets.md).

AWS SDK standard-mode retry quota (botocore ``RetryQuotaChecker`` / ``RetryQuota``),
Envoy ``retry_budget`` (``ResourceManagerImpl::RetryBudgetImpl`` + ``RetryStateImpl``),
and Marc Brooker's retry token bucket and retry-only breaker (``retry_sim`` of
``mbrooker/simulator_example``), the last two also against exact reference ports.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtalab.sim.config import ConfigError
from rtalab.sim.policy import (
    AdaptiveThrottle,
    AdaptiveThrottleConfig,
    AwsRetryQuota,
    AwsRetryQuotaConfig,
    BudgetConfig,
    CallBucket,
    CallBucketConfig,
    Ending,
    EnvoyRetryBudget,
    EnvoyRetryBudgetConfig,
    FinagleBudget,
    FinagleBudgetConfig,
    LivePolicyConfig,
    RetryBreaker,
    RetryBreakerConfig,
    RetryPolicy,
    TokenBucketConfig,
    make_budget,
)
from rtalab.sim.scenario import Scenario

RNG = np.random.default_rng(0)  # none of these budgets draws random numbers


def grants(budget: object, now_s: float = 0.0, timeout: bool = False, limit: int = 10_000) -> int:
    """How many retries in a row the budget grants at ``now_s``."""
    n = 0
    while n < limit and budget.allow_retry(now_s, RNG, timeout):  # type: ignore[attr-defined]
        n += 1
    return n


# --------------------------------------------------------------------------- AWS retry quota


def aws(**kw: int) -> AwsRetryQuota:
    """An AWS retry quota (botocore defaults unless overridden)."""
    return AwsRetryQuota(AwsRetryQuotaConfig(enabled=True, **kw))


def test_aws_defaults_are_the_sdk_constants() -> None:
    c = AwsRetryQuotaConfig()
    assert (c.initial_tokens, c.retry_cost, c.timeout_retry_cost, c.no_retry_increment) == \
        (500, 5, 10, 1)


def test_aws_quota_drains_by_cost_and_refuses_when_cost_exceeds_what_is_left() -> None:
    q = aws()
    assert grants(q) == 100 and q.tokens == 0  # 500 / 5
    q = aws()
    assert grants(q, timeout=True) == 50 and q.tokens == 0  # 500 / 10
    q = aws(initial_tokens=9)
    assert not q.allow_retry(0.0, RNG, timeout=True) and q.tokens == 9  # 10 > 9: refused, free
    assert q.allow_retry(0.0, RNG) and q.tokens == 4
    assert not q.allow_retry(0.0, RNG) and q.tokens == 4  # 5 > 4
    q = aws(initial_tokens=10)
    assert q.allow_retry(0.0, RNG, timeout=True) and q.tokens == 0  # cost == left: allowed


def test_aws_refunds_success_without_retry_one_and_successful_retry_its_cost() -> None:
    q = aws()
    q.on_success(0.0)
    assert q.tokens == 500  # never above the initial quota
    assert grants(q) == 100
    q.on_success(0.0)
    assert q.tokens == 1  # success without retry: +1
    q.on_success(0.0, retried=True)
    assert q.tokens == 6  # successful retry: its cost (5)
    q.on_success(0.0, retried=True, after_timeout=True)
    assert q.tokens == 16  # a retry after a timeout cost 10: 10 back
    q.on_not_retryable(0.0)
    q.on_failure(0.0)
    assert q.tokens == 16  # error answers and failures return nothing
    q = aws(initial_tokens=500)
    assert q.allow_retry(0.0, RNG) and q.tokens == 495
    q.on_success(0.0, retried=True, after_timeout=True)
    assert q.tokens == 500  # refund capped at the initial quota


def test_aws_never_limits_first_sends() -> None:
    q = aws(initial_tokens=5)
    assert grants(q) == 1
    assert all(q.allow_first(0.0, RNG) for _ in range(10)) and q.tokens == 0


def test_retry_policy_passes_the_timeout_to_the_budget() -> None:
    q = aws(initial_tokens=100)
    policy = RetryPolicy(LivePolicyConfig(), q)
    assert policy.decide("upstream-timeout", 1, 0.0, 0.0, RNG, ending=Ending.TIMEOUT).retry
    assert q.tokens == 90  # a Live-side timeout costs 10 (botocore: connect/read timeout)
    assert policy.decide("upstream-timeout", 1, 0.0, 0.0, RNG, ending=Ending.LOST).retry
    assert q.tokens == 85  # a lost response costs 5: not a connect/read timeout
    q.tokens = 90
    assert policy.decide("internal", 1, 0.0, 0.0, RNG).retry
    assert q.tokens == 85  # an error answer costs 5, even upstream-timeout from the server
    assert policy.decide("upstream-timeout", 1, 0.0, 0.0, RNG).retry
    assert q.tokens == 80


# --------------------------------------------------------------------------- Envoy retry budget


def envoy(pct: float = 20.0, floor: int = 3) -> EnvoyRetryBudget:
    """An Envoy retry budget."""
    return EnvoyRetryBudget(EnvoyRetryBudgetConfig(enabled=True, budget_percent=pct,
                                                   min_retry_concurrency=floor))


def active(budget: EnvoyRetryBudget, n: int) -> EnvoyRetryBudget:
    """``n`` first sends in flight."""
    for _ in range(n):
        budget.on_attempt(0.0, is_retry=False)
    return budget


def test_envoy_defaults_are_envoys() -> None:
    c = EnvoyRetryBudgetConfig()
    assert (c.budget_percent, c.min_retry_concurrency) == (20.0, 3)


@pytest.mark.parametrize(("requests", "expected"), [
    (0, 3), (1, 3), (14, 3), (15, 3), (19, 3), (20, 4), (24, 4), (25, 5), (100, 20), (101, 20)])
def test_envoy_limit_is_max_of_floor_and_truncated_percent(requests: int, expected: int) -> None:
    b = active(envoy(), requests)
    assert b.max_retries() == expected
    assert grants(b) == expected  # granted retries stay active (backoff): the limit binds
    assert b.active_retries == expected


def test_envoy_retry_is_active_until_its_attempt_ends() -> None:
    b = active(envoy(), 10)
    assert grants(b) == 3
    b.on_attempt(0.0, is_retry=True)  # the granted retry is sent: one more active request
    assert b.active_requests == 11 and not b.allow_retry(0.0, RNG)
    b.on_attempt_end(0.0, is_retry=True)  # ... and ends: its grant is released
    assert b.active_requests == 10 and b.active_retries == 2
    assert b.allow_retry(0.0, RNG) and not b.allow_retry(0.0, RNG)
    b.on_attempt_end(0.0, is_retry=True, sent=False)  # a granted retry dropped unsent
    assert b.active_requests == 10 and b.active_retries == 2
    b.on_attempt_end(0.0, is_retry=False)  # a first send ending frees no retry
    assert b.active_requests == 9 and b.active_retries == 2


def test_envoy_percent_and_floor_parameters() -> None:
    assert grants(active(envoy(pct=100.0, floor=0), 7)) == 7
    assert grants(active(envoy(pct=0.0, floor=0), 50)) == 0
    assert grants(active(envoy(pct=50.0, floor=1), 3)) == 1  # floor(1.5) = 1
    b = active(envoy(), 0)
    assert all(b.allow_first(0.0, RNG) for _ in range(100))  # first sends never limited


# --------------------------------------------------------------------------- Brooker's bucket


def bucket(**kw: float) -> CallBucket:
    """Brooker's retry token bucket (his simulation's parameters unless overridden)."""
    return CallBucket(CallBucketConfig(enabled=True, **kw))


class BrookerBucket:
    """Exact port of ``AdaptiveRetryStrategy`` (retry_strategy.py), with Fraction arithmetic."""

    def __init__(self, fill: Fraction, size: Fraction) -> None:
        self.fill, self.size, self.bucket = fill, size, size

    def start(self) -> None:
        self.bucket = min(self.bucket + self.fill, self.size)

    def should_retry(self) -> bool:
        if self.bucket > 1:
            self.bucket -= 1
            return True
        return False


def test_call_bucket_defaults_are_brookers() -> None:
    c = CallBucketConfig()
    assert (c.fill_per_call, c.max_tokens, c.retry_cost) == (0.1, 5.0, 1.0)


def test_call_bucket_needs_more_than_one_token_and_refills_per_call_started() -> None:
    b = bucket()
    assert b.tokens == 5.0 and grants(b) == 4 and b.tokens == 1.0  # 1.0 is not > 1
    for _ in range(3):
        b.on_failure(0.0)
        b.on_success(0.0)
        b.on_attempt(0.0, is_retry=True)  # outcomes and retries do not refill it
    assert b.tokens == 1.0 and not b.allow_retry(0.0, RNG)
    for _ in range(10):
        b.on_attempt(0.0, is_retry=False)  # 10 calls started: +1.0
    assert b.tokens == 2.0 and grants(b) == 1 and b.tokens == 1.0
    for _ in range(1000):
        b.on_attempt(0.0, is_retry=False)
    assert b.tokens == 5.0  # capped
    assert all(b.allow_first(0.0, RNG) for _ in range(10))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.sampled_from(["start", "retry"]), max_size=300))
def test_call_bucket_agrees_with_brookers_code(ops: list[str]) -> None:
    ours, ref = bucket(), BrookerBucket(Fraction(1, 10), Fraction(5))
    for op in ops:
        if op == "start":
            ours.on_attempt(0.0, is_retry=False)
            ref.start()
        else:
            assert ours.allow_retry(0.0, RNG) == ref.should_retry()
        assert Fraction(ours.tokens).limit_denominator(1000) == ref.bucket


# --------------------------------------------------------------------------- Brooker's breaker


def breaker(ratio: float = 0.1, window_s: float = 10.0) -> RetryBreaker:
    """Brooker's retry-only breaker."""
    return RetryBreaker(RetryBreakerConfig(enabled=True, max_failure_ratio=ratio,
                                           window_s=window_s))


class BrookerBreaker:
    """Exact port of ``CircuitBreakerRetryStrategy`` / ``CircuitBreakerRetryCall`` (the N-retries
    limit it wraps is the RetryPolicy's job here)."""

    def __init__(self, max_rate: Fraction) -> None:
        self.max_rate, self.calls, self.failures = max_rate, 0, 0

    def start(self) -> None:
        self.calls += 1

    def should_retry(self) -> bool:
        self.failures += 1
        return not Fraction(self.failures, self.calls) > self.max_rate


def test_retry_breaker_trips_above_the_ratio_and_never_refuses_first_sends() -> None:
    b = breaker()
    for _ in range(10):
        b.on_attempt(0.0, is_retry=False)
    b.on_failure(0.0)
    assert b.allow_retry(0.0, RNG)  # 1/10 is not > 10 %
    b.on_attempt(0.0, is_retry=True)
    b.on_failure(0.0)  # the retry failed too: failures count per failed attempt
    assert not b.allow_retry(0.0, RNG) and b.state(0.0)["retry_breaker_tripped"]
    assert all(b.allow_first(0.0, RNG) for _ in range(100))  # first sends always go out
    for _ in range(10):
        b.on_attempt(0.0, is_retry=False)
    assert b.allow_retry(0.0, RNG)  # 2/20: calls started dilute the ratio again
    b.on_success(0.0)
    b.on_not_retryable(0.0)
    assert b.state(0.0)["retry_breaker_failures"] == 2  # successes change nothing


def test_retry_breaker_window_forgets_and_zero_window_does_not() -> None:
    for window_s, recovers in ((10.0, True), (0.0, False)):
        b = breaker(window_s=window_s)
        b.on_attempt(0.0, is_retry=False)
        b.on_failure(0.0)
        assert not b.allow_retry(0.5, RNG)
        b.on_attempt(11.0, is_retry=False)
        assert b.allow_retry(11.0, RNG) is recovers  # 0/1 in the window vs 1/2 since start


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.sampled_from(["start", "fail"]), max_size=300))
def test_retry_breaker_agrees_with_brookers_code(ops: list[str]) -> None:
    ours, ref = breaker(window_s=0.0), BrookerBreaker(Fraction(1, 10))
    started = False
    for op in ops:
        if op == "start":
            started = True
            ours.on_attempt(0.0, is_retry=False)
            ref.start()
        elif started:  # a failure always belongs to a started call
            ours.on_failure(0.0)
            assert ours.allow_retry(0.0, RNG) == ref.should_retry()


# --------------------------------------------------------------------------- combined


def test_new_budgets_combine_and_a_veto_charges_nothing() -> None:
    cfg = BudgetConfig(aws_quota=AwsRetryQuotaConfig(enabled=True),
                       envoy=EnvoyRetryBudgetConfig(enabled=True),
                       call_bucket=CallBucketConfig(enabled=True),
                       retry_breaker=RetryBreakerConfig(enabled=True))
    b = make_budget(cfg)
    assert [p.name for p in b.parts] == ["retry_breaker", "call_bucket", "aws_quota", "envoy"]
    for _ in range(100):
        b.on_attempt(0.0, is_retry=False)
    assert grants(b) == 4  # the call bucket binds: full at 5, 4 retries leave 1.0 (not > 1)
    s = b.state(0.0)
    assert s["aws_tokens"] == 480 and s["envoy_active_retries"] == 4
    assert s["vetoes_call_bucket"] == 1 and s["call_bucket_tokens"] == 1.0
    assert not b.allow_retry(0.0, RNG)
    assert b.state(0.0)["aws_tokens"] == 480  # vetoed by the bucket: AWS and Envoy not charged
    b.on_attempt_end(0.0, is_retry=True)
    b.on_success(0.0, retried=True)
    s = b.state(0.0)
    assert s["aws_tokens"] == 485 and s["envoy_active_retries"] == 3


def test_new_budget_sections_parse_and_validate_in_scenarios() -> None:
    from rtalab.sim.config import ConfigError
    from rtalab.sim.scenario import Scenario

    sc = Scenario().with_overrides({
        "live.budget.aws_quota.enabled": True, "live.budget.aws_quota.initial_tokens": 50,
        "live.budget.envoy.enabled": True, "live.budget.envoy.budget_percent": 25.0,
        "live.budget.call_bucket.enabled": True, "live.budget.retry_breaker.window_s": 0.0})
    b = sc.live.budget
    assert (b.aws_quota.initial_tokens, b.envoy.budget_percent, b.retry_breaker.window_s) == \
        (50, 25.0, 0.0)
    assert [p.name for p in make_budget(b).parts] == ["call_bucket", "aws_quota", "envoy"]
    for key, bad in (("live.budget.envoy.budget_percent", 120.0),
                     ("live.budget.aws_quota.initial_tokens", 0),
                     ("live.budget.call_bucket.max_tokens", 0.0),
                     ("live.budget.retry_breaker.window_s", -1.0)):
        with pytest.raises(ConfigError, match=key.rsplit(".", 1)[1]):
            Scenario().with_overrides({key: bad})


# --------------------------------------------------------------------------- issue 16 fixes


def test_grpc_non_retryable_status_changes_no_tokens() -> None:
    """gRFC A6: only retryable failures (-1) and successes (+token_ratio) move the tokens."""
    b = make_budget(BudgetConfig(token_bucket=TokenBucketConfig(enabled=True)))
    for _ in range(3):
        b.end_attempt(0.0, Ending.FAILURE)
    assert b.state()["tokens"] == 7.0
    b.end_attempt(0.0, Ending.NOT_RETRYABLE)
    assert b.state()["tokens"] == 7.0
    b.end_attempt(0.0, Ending.SUCCESS)
    assert b.state()["tokens"] == 7.1


def test_finagle_truncates_the_retry_cost() -> None:
    """percent 0.7: a retry costs int(1000 / 0.7) = 1428 (rounding would give 1429), so 10
    requests (10 000) pay for 7 retries, not 6."""
    b = FinagleBudget(FinagleBudgetConfig(enabled=True, ttl_s=10.0, min_retries_per_s=0.0,
                                          percent_can_retry=0.7))
    for _ in range(10):
        b.on_attempt(0.0, False)
    assert grants(b) == 7


@pytest.mark.parametrize(("now_s", "allowed"), [(29.9, True), (30.0, False), (31.0, False)])
def test_finagle_keeps_ten_slices_whatever_the_ttl(now_s: float, allowed: bool) -> None:
    """ttl 30 s = 10 slices of 3 s: a deposit at 2.5 s (slice [0, 3)) expires at 30 s, when
    its slice leaves the window (1-s slices would keep it until 32 s)."""
    b = FinagleBudget(FinagleBudgetConfig(enabled=True, ttl_s=30.0, min_retries_per_s=0.0,
                                          percent_can_retry=1.0))
    b.on_attempt(2.5, False)
    assert b.allow_retry(now_s, RNG) is allowed


def test_adaptive_default_counts_retryable_errors_as_not_accepted() -> None:
    b = AdaptiveThrottle(AdaptiveThrottleConfig(enabled=True, k=2.0))
    for _ in range(10):
        b.on_attempt(0.0, False)
        b.end_attempt(0.0, Ending.FAILURE)
    assert (b.requests, b.accepts) == (10, 0)
    assert b.reject_probability(0.0) == 10 / 11
    assert b.allow_first(0.0, RNG)  # retries only


def test_adaptive_sre_book_counts_overload_only_and_throttles_every_request() -> None:
    """The book: accepts = requests the backend did not reject for overload; every request
    (first sends too) is throttled."""
    b = AdaptiveThrottle(AdaptiveThrottleConfig(enabled=True, k=2.0, variant="sre_book"))
    for _ in range(10):
        b.on_attempt(0.0, False)
        b.end_attempt(0.0, Ending.FAILURE)  # answered with an error: accepted
    assert (b.requests, b.accepts) == (10, 10)
    assert b.reject_probability(0.0) == 0.0
    for e in (Ending.OVERLOADED, Ending.TIMEOUT, Ending.LOST):
        for _ in range(10):
            b.on_attempt(0.0, False)
            b.end_attempt(0.0, e)
    assert (b.requests, b.accepts) == (40, 10)
    assert b.reject_probability(0.0) == 20 / 41
    assert b.apply_to_first
    for seed in range(20):  # a first send is refused exactly when its draw falls under 20/41
        u = np.random.default_rng(seed).random()
        fresh = AdaptiveThrottle(AdaptiveThrottleConfig(enabled=True, variant="sre_book"))
        fresh._win = b._win.__class__(120.0)
        fresh._win.add(0.0, 40, 10)
        assert fresh.allow_first(0.0, np.random.default_rng(seed)) is (u >= 20 / 41)


def test_adaptive_sre_book_variant_parses_and_rejects_unknown() -> None:
    sc = Scenario().with_overrides({"live.budget.adaptive.variant": "sre_book"})
    assert sc.live.budget.adaptive.variant == "sre_book"
    with pytest.raises(ConfigError, match="variant"):
        Scenario().with_overrides({"live.budget.adaptive.variant": "book"})
