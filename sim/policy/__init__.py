"""The Live layer's error/retry policy, shared by the simulator and the Locust users.

Pure Python + numpy: no SimPy, no I/O, no global state.  See docs/ARCHITECTURE.md
("Policy API").
"""

from sim.policy.backoff import (
    Backoff,
    DecorrelatedJitterBackoff,
    EqualJitterBackoff,
    ExponentialBackoff,
    FullJitterBackoff,
    GrpcBackoff,
    NoBackoff,
    make_backoff,
)
from sim.policy.budget import (
    AdaptiveThrottle,
    CircuitBreaker,
    CompositeBudget,
    FinagleBudget,
    RetryBudget,
    TokenBucket,
    make_budget,
)
from sim.policy.codes import (
    ALL_CODES,
    CODES,
    RETRYABLE_CODES,
    CodeInfo,
    ErrorCode,
    Retryability,
    is_retryable,
)
from sim.policy.config import (
    AdaptiveThrottleConfig,
    BackoffConfig,
    BackoffStrategy,
    BudgetConfig,
    CircuitBreakerConfig,
    EscalationConfig,
    FinagleBudgetConfig,
    LivePolicyConfig,
    RetryConfig,
    TimeoutConfig,
    TokenBucketConfig,
)
from sim.policy.decide import REASONS, Decision, Escalation, Reason, RetryPolicy

__all__ = [
    "ALL_CODES",
    "CODES",
    "REASONS",
    "RETRYABLE_CODES",
    "AdaptiveThrottle",
    "AdaptiveThrottleConfig",
    "Backoff",
    "BackoffConfig",
    "BackoffStrategy",
    "BudgetConfig",
    "CircuitBreaker",
    "CircuitBreakerConfig",
    "CodeInfo",
    "CompositeBudget",
    "Decision",
    "DecorrelatedJitterBackoff",
    "EqualJitterBackoff",
    "ErrorCode",
    "Escalation",
    "EscalationConfig",
    "ExponentialBackoff",
    "FinagleBudget",
    "FinagleBudgetConfig",
    "FullJitterBackoff",
    "GrpcBackoff",
    "LivePolicyConfig",
    "NoBackoff",
    "Reason",
    "RetryBudget",
    "RetryConfig",
    "RetryPolicy",
    "Retryability",
    "TimeoutConfig",
    "TokenBucket",
    "TokenBucketConfig",
    "is_retryable",
    "make_backoff",
    "make_budget",
]
