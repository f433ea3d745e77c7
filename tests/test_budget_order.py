"""``make_budget``: each ``[live.budget.<name>]`` section enabled builds its own budget,
with its own settings, checked in the documented order (docs/budgets.md)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from rtalab.sim.policy import make_budget
from rtalab.sim.policy.config import BudgetConfig

ORDER = ["circuit_breaker", "retry_breaker", "token_bucket", "call_bucket", "aws_quota",
         "envoy", "finagle", "adaptive"]
CLASSES = {"circuit_breaker": "CircuitBreaker", "retry_breaker": "RetryBreaker",
           "token_bucket": "TokenBucket", "call_bucket": "CallBucket",
           "aws_quota": "AwsRetryQuota", "envoy": "EnvoyRetryBudget",
           "finagle": "FinagleBudget", "adaptive": "AdaptiveThrottle"}


def _enabled(*names: str, **settings: dict[str, Any]) -> BudgetConfig:
    cfg = BudgetConfig()
    return replace(cfg, **{n: replace(getattr(cfg, n), enabled=True, **settings.get(n, {}))
                           for n in names})


def test_every_section_has_a_budget() -> None:
    assert sorted(f.name for f in fields(BudgetConfig)) == sorted(ORDER)


def test_all_enabled_are_checked_in_the_documented_order() -> None:
    assert [p.name for p in make_budget(_enabled(*ORDER)).parts] == ORDER
    assert [p.name for p in make_budget(_enabled("adaptive", "circuit_breaker")).parts] == [
        "circuit_breaker", "adaptive"]


def test_none_enabled_is_an_empty_composite() -> None:
    assert make_budget(BudgetConfig()).parts == ()


def test_each_section_alone_builds_its_own_class() -> None:
    for name, cls in CLASSES.items():
        assert [type(p).__name__ for p in make_budget(_enabled(name)).parts] == [cls], name


def test_a_budget_takes_its_own_sections_settings() -> None:
    b = make_budget(_enabled("token_bucket", "aws_quota", "circuit_breaker",
                             token_bucket={"max_tokens": 4.0},
                             aws_quota={"initial_tokens": 7},
                             circuit_breaker={"failure_threshold": 9}))
    breaker, bucket, quota = b.parts
    assert bucket.state() == {"tokens": 4.0}
    assert quota.state() == {"aws_tokens": 7}
    assert breaker.failure_threshold == 9
