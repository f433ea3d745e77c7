"""The Live layer's policy as configuration: the ``[live]`` section of a scenario.

These frozen objects are what a scenario file parses into and what both the
simulator and the Locust users build their policy from.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Literal

from rtalab.sim.config import ConfigError, num, prob
from rtalab.sim.policy.codes import ALL_CODES

AdaptiveVariant = Literal["retries", "sre_book"]
BackoffStrategy = Literal[
    "none", "exponential", "full_jitter", "equal_jitter", "decorrelated_jitter", "grpc"
]


@dataclass(frozen=True)
class BackoffConfig:
    """Delay before retry n (n = 1, 2, ...): expo = min(cap_s, base_s * multiplier**(n-1))."""

    strategy: BackoffStrategy = "full_jitter"
    base_s: float = num(0.1, ge=0.0, doc="first backoff step")
    multiplier: float = num(2.0, ge=1.0, doc="growth factor per attempt")
    cap_s: float = num(2.0, ge=0.0, doc="upper bound of one delay")
    jitter: float = prob(0.2, doc="grpc strategy: delay * U(1-jitter, 1+jitter)")


def _attempt_limits(d: dict[str, int] | None = None) -> types.MappingProxyType[str, int]:
    return types.MappingProxyType(dict(d or {"internal": 2}))


@dataclass(frozen=True)
class RetryConfig:
    """Which failures are retried and how many times (attempts include the first send)."""

    max_attempts: int = num(3, ge=1, doc="attempts per turn, first send included")
    max_attempts_by_code: dict[str, int] = field(
        default_factory=_attempt_limits,  # type: ignore[arg-type]  # read-only, as build() makes dicts
        metadata={"keys": ALL_CODES, "ge": 1}
    )
    retry_on_timeout: bool = True  # a turn-response timeout counts as upstream-timeout
    honour_retry_after: bool = True  # rate-limited: wait at least retryAfterMs
    deadline_s: float = num(0.0, ge=0.0, doc="give up retrying after this long; 0 = no deadline")
    new_request_guid: bool = True  # errors.md §3: a retry takes a new rta/requestGuid
    new_turn_id: bool = True  # errors.md §4 MUST: a retry after FAILED takes a new taskId/turnId


@dataclass(frozen=True)
class TokenBucketConfig:
    """gRPC retry throttling: tokens start full, -1 per failure, +token_ratio per success;
    retries allowed only while tokens > max_tokens / 2."""

    enabled: bool = False
    max_tokens: float = num(10.0, gt=0.0)
    token_ratio: float = num(0.1, gt=0.0)


@dataclass(frozen=True)
class FinagleBudgetConfig:
    """Finagle RetryBudget: retries <= min_retries_per_s * ttl_s + percent * requests in ttl_s."""

    enabled: bool = False
    ttl_s: float = num(10.0, gt=0.0)
    min_retries_per_s: float = num(10.0, ge=0.0)
    percent_can_retry: float = num(0.2, ge=0.0)


@dataclass(frozen=True)
class AdaptiveThrottleConfig:
    """SRE client-side throttling: P(reject) = max(0, (requests - k*accepts) / (requests + 1))
    over a sliding window.  ``variant = "retries"`` (default): every retryable error, timeout
    or lost response is "not accepted" and only retries are throttled (first sends too if
    ``apply_to_first``); ``"sre_book"``: only overload rejections (``rate-limited``), timeouts
    and lost responses are "not accepted" and every request is throttled.  docs/budgets.md."""

    enabled: bool = False
    k: float = num(2.0, gt=0.0)
    window_s: float = num(120.0, gt=0.0)
    apply_to_first: bool = False
    variant: AdaptiveVariant = "retries"


@dataclass(frozen=True)
class CircuitBreakerConfig:
    """Opens after ``failure_threshold`` consecutive failures; half-open after ``open_s``."""

    enabled: bool = False
    failure_threshold: int = num(5, ge=1)
    open_s: float = num(5.0, gt=0.0)
    half_open_probes: int = num(1, ge=1)


@dataclass(frozen=True)
class AwsRetryQuotaConfig:
    """AWS SDK standard retry mode's retry quota: ``initial_tokens`` (also the cap); a retry
    takes ``retry_cost`` (``timeout_retry_cost`` after a timeout) and is refused when that is
    more than is left; a success without retry returns ``no_retry_increment``, a successful
    retry returns its cost.  First sends are never limited.  See docs/budgets.md."""

    enabled: bool = False
    initial_tokens: int = num(500, ge=1, doc="starting quota, also its cap")
    retry_cost: int = num(5, ge=0, doc="tokens a retry takes")
    timeout_retry_cost: int = num(10, ge=0, doc="tokens a retry after a timeout takes")
    no_retry_increment: int = num(1, ge=0, doc="tokens a success without retry returns")


@dataclass(frozen=True)
class EnvoyRetryBudgetConfig:
    """Envoy ``retry_budget``: a retry is allowed while active retries <
    max(min_retry_concurrency, floor(budget_percent / 100 * active requests)).  A retry is
    active from its grant (backoff included) until its attempt ends.  See docs/budgets.md."""

    enabled: bool = False
    budget_percent: float = num(20.0, ge=0.0, le=100.0, doc="percent of active requests")
    min_retry_concurrency: int = num(3, ge=0, doc="floor of the active-retry limit")


@dataclass(frozen=True)
class CallBucketConfig:
    """Brooker's retry token bucket: +``fill_per_call`` per call started (first send), capped
    at ``max_tokens`` (starts full); a retry needs more than ``retry_cost`` tokens and takes
    ``retry_cost``.  Outcomes do not refill it.  See docs/budgets.md."""

    enabled: bool = False
    fill_per_call: float = num(0.1, ge=0.0, doc="tokens added per call started")
    max_tokens: float = num(5.0, gt=0.0, doc="capacity, also the starting level")
    retry_cost: float = num(1.0, gt=0.0, doc="tokens a retry takes (needs strictly more)")


@dataclass(frozen=True)
class RetryBreakerConfig:
    """Brooker's retry-only breaker: refuses retries (never first sends) while
    failures / calls started over the last ``window_s`` exceeds ``max_failure_ratio``.
    ``window_s = 0``: counted since the start, as in the original simulation."""

    enabled: bool = False
    max_failure_ratio: float = num(0.1, ge=0.0, doc="failures per call started that trips it")
    window_s: float = num(10.0, ge=0.0, doc="sliding window; 0 = since the start")


@dataclass(frozen=True)
class BudgetConfig:
    """Retry budgets; any combination may be enabled, a retry needs all enabled ones to agree."""

    token_bucket: TokenBucketConfig = TokenBucketConfig()
    finagle: FinagleBudgetConfig = FinagleBudgetConfig()
    adaptive: AdaptiveThrottleConfig = AdaptiveThrottleConfig()
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    aws_quota: AwsRetryQuotaConfig = AwsRetryQuotaConfig()
    envoy: EnvoyRetryBudgetConfig = EnvoyRetryBudgetConfig()
    call_bucket: CallBucketConfig = CallBucketConfig()
    retry_breaker: RetryBreakerConfig = RetryBreakerConfig()


@dataclass(frozen=True)
class TimeoutConfig:
    """The three timeouts of errors.md §5 (0 disables one)."""

    turn_response_s: float = num(2.0, ge=0.0, doc="accepted turn -> first chunk or progress")
    handoff_s: float = num(30.0, ge=0.0, doc="INPUT_REQUIRED outstanding, awaiting the caller")
    negotiation_s: float = num(1.0, ge=0.0, doc="wait for the A2A-Extensions echo")
    # finite by default: after a partition swallows the terminal state behind a
    # progress directive only this timer ends the attempt.  10 s = 5 x the turn-response
    # timeout: a turn that showed progress gets five times its time-to-first-sign-of-life
    # to finish; docs/metrics.md ("Timeouts") gives the derivation.
    turn_total_s: float = num(10.0, ge=0.0, doc="accepted turn -> terminal state; 0 = none")


@dataclass(frozen=True)
class EscalationConfig:
    """Client-side escalation: end the session after this many failed turns in a row (0 = never)."""

    end_session_after_failed_turns: int = num(2, ge=0)


@dataclass(frozen=True)
class LivePolicyConfig:
    """``[live]``: everything the Live layer decides."""

    client_context_id: bool = True  # first turn carries a client-minted contextId
    # send CancelTask (over the uplink, subject to its faults) for the task of an attempt the
    # Live layer abandons on a timeout; the retry then takes a new taskId (the task is CANCELED)
    cancel_on_timeout: bool = False
    instances: int = num(1, ge=1, doc="Live-layer processes; each keeps its own retry budget")
    reorder_gap_s: float = num(0.5, ge=0.0,
                               doc="reorder buffer: skip a missing chunk this long after a "
                                   "later one (or the terminal state) arrived")
    backoff: BackoffConfig = BackoffConfig()
    retry: RetryConfig = RetryConfig()
    budget: BudgetConfig = BudgetConfig()
    timeouts: TimeoutConfig = TimeoutConfig()
    escalation: EscalationConfig = EscalationConfig()

    def __post_init__(self) -> None:
        b = self.backoff
        if b.strategy != "none" and b.cap_s < b.base_s:
            raise ConfigError(
                "backoff.cap_s", f"must be >= backoff.base_s ({b.base_s:g}), got {b.cap_s:g}"
            )
