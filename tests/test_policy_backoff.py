"""Backoff strategies: exact steps, supports, and sample moments against the analytic ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtalab.sim.policy import BackoffConfig, make_backoff
from rtalab.sim.policy.backoff import STRATEGIES, DecorrelatedJitterBackoff, GrpcBackoff

N = 20_000
SIGMAS = 5.0
BASE, MULT, CAP, JITTER = 0.1, 2.0, 2.0, 0.2
RETRIES = range(1, 10)  # the step saturates at retry 6 (0.1 * 2**5 = 3.2 > 2)
ANALYTIC = ["none", "exponential", "full_jitter", "equal_jitter", "grpc"]
UNIFORM_WIDTH = {  # strategies whose delay is uniform on [lo, hi]: width as a function of expo
    "full_jitter": lambda e: e,
    "equal_jitter": lambda e: e / 2,
    "grpc": lambda e: 2 * JITTER * e,
}


def cfg(strategy: str, **kw: float) -> BackoffConfig:
    """A backoff config with the test defaults."""
    args = {"base_s": BASE, "multiplier": MULT, "cap_s": CAP, "jitter": JITTER} | kw
    return BackoffConfig(strategy=strategy, **args)  # type: ignore[arg-type]


def samples(strategy: str, retry: int, prev: float = 0.0, seed: int = 1, **kw: float) -> np.ndarray:
    """N delays for one retry number, through the public scalar API."""
    b = make_backoff(cfg(strategy, **kw))
    rng = np.random.default_rng(seed)
    return np.fromiter((b.delay_s(retry, prev, rng) for _ in range(N)), float, N)


def test_expo_steps_exact() -> None:
    b = make_backoff(cfg("exponential"))
    assert [b.expo_s(n) for n in range(1, 9)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert b.expo_s(100_000) == CAP  # no float overflow far beyond the cap
    with pytest.raises(ValueError):
        b.expo_s(0)


def test_expo_degenerate_configs() -> None:
    assert make_backoff(cfg("exponential", multiplier=1.0)).expo_s(50) == BASE
    zero = make_backoff(cfg("exponential", base_s=0.0))
    assert zero.expo_s(1) == 0.0 and zero.expo_s(5000) == 0.0
    assert make_backoff(cfg("exponential", cap_s=BASE)).expo_s(3) == BASE


def test_strategy_table_and_unknown_name() -> None:
    assert set(STRATEGIES) == {"none", "exponential", "full_jitter", "equal_jitter",
                               "decorrelated_jitter", "grpc"}
    for name, cls in STRATEGIES.items():
        assert isinstance(make_backoff(cfg(name)), cls)
    with pytest.raises(ValueError, match="unknown backoff strategy"):
        make_backoff(cfg("linear"))


@pytest.mark.parametrize("strategy", ANALYTIC)
@pytest.mark.parametrize("retry", RETRIES)
def test_samples_match_definition(strategy: str, retry: int) -> None:
    b = make_backoff(cfg(strategy))
    x = samples(strategy, retry)
    lo, hi = b.bounds_s(retry)
    expo = min(CAP, BASE * MULT ** (retry - 1))
    expected_bounds = {
        "none": (0.0, 0.0),
        "exponential": (expo, expo),
        "full_jitter": (0.0, expo),
        "equal_jitter": (expo / 2, expo),
        "grpc": (expo * (1 - JITTER), expo * (1 + JITTER)),
    }[strategy]
    assert (lo, hi) == pytest.approx(expected_bounds, rel=1e-12)
    assert x.min() >= lo and x.max() <= hi
    mean, var = b.mean_s(retry), b.variance_s2(retry)
    assert mean is not None and var is not None
    if var == 0.0:
        assert np.all(x == mean)
        return
    assert abs(x.mean() - mean) <= SIGMAS * math.sqrt(var / N)
    # uniform on [lo, hi]: check the spread too (Var of the sample variance = (mu4 - var²)/N)
    w = UNIFORM_WIDTH[strategy](expo)
    assert var == pytest.approx(w * w / 12)
    mu4 = w**4 / 80
    assert abs(x.var() - var) <= SIGMAS * math.sqrt((mu4 - var * var) / N)
    assert x.min() - lo < 0.01 * w and hi - x.max() < 0.01 * w  # the whole support is used


def test_grpc_jitter_applies_after_the_cap() -> None:
    x = samples("grpc", 9)
    assert x.max() > CAP  # documented choice: jitter after capping, as gRPC does
    assert x.max() <= CAP * (1 + JITTER)
    exact = samples("grpc", 3, jitter=0.0)
    assert np.all(exact == 0.4)


def _decorrelated_moments(base: float, cap: float, prev: float) -> tuple[float, float]:
    """Mean and variance of min(cap, U(base, 3*prev))."""
    hi = 3 * prev
    w = hi - base
    if hi <= cap:
        m1 = (base + hi) / 2
        m2 = (hi**3 - base**3) / (3 * w)
    else:
        m1 = (cap * cap - base * base) / (2 * w) + cap * (hi - cap) / w
        m2 = (cap**3 - base**3) / (3 * w) + cap * cap * (hi - cap) / w
    return m1, m2 - m1 * m1


@pytest.mark.parametrize("prev", [BASE, 0.3, 0.6, 1.0, 2.0])
def test_decorrelated_conditional_law(prev: float) -> None:
    b = make_backoff(cfg("decorrelated_jitter"))
    assert isinstance(b, DecorrelatedJitterBackoff)
    x = samples("decorrelated_jitter", 2, prev=prev)
    lo, hi = b.bounds_s(2, prev)
    assert (lo, hi) == pytest.approx((BASE, min(CAP, 3 * prev)))
    assert x.min() >= BASE and x.max() <= min(CAP, 3 * prev)
    mean, var = _decorrelated_moments(BASE, CAP, prev)
    assert abs(x.mean() - mean) <= SIGMAS * math.sqrt(var / N)
    assert b.mean_s(2) is None and b.variance_s2(2) is None


def test_decorrelated_chains() -> None:
    b = make_backoff(cfg("decorrelated_jitter"))
    rng = np.random.default_rng(7)
    saw_cap = False
    for _ in range(2_000):
        prev = 0.0
        for retry in range(1, 12):
            d = b.delay_s(retry, prev, rng)
            ceiling = 3 * (BASE if retry == 1 else prev)
            assert BASE <= d <= min(CAP, ceiling)
            saw_cap |= d == CAP
            prev = d
    assert saw_cap


def test_decorrelated_first_retry_ignores_prev_and_floors_prev_at_base() -> None:
    b = make_backoff(cfg("decorrelated_jitter"))
    rng = np.random.default_rng(3)
    assert all(b.delay_s(1, 5.0, rng) <= 3 * BASE for _ in range(1000))
    assert all(BASE <= b.delay_s(4, 0.0, rng) <= 3 * BASE for _ in range(1000))
    assert b.bounds_s(1, 5.0) == (BASE, pytest.approx(3 * BASE))
    assert b.bounds_s(4) == (BASE, CAP)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_same_seed_same_delays(strategy: str) -> None:
    a = samples(strategy, 3, prev=0.4, seed=11)[:100]
    b = samples(strategy, 3, prev=0.4, seed=11)[:100]
    assert np.array_equal(a, b)


@settings(max_examples=300, deadline=None)
@given(
    strategy=st.sampled_from(sorted(STRATEGIES)),
    base=st.floats(0.0, 5.0),
    mult=st.floats(1.0, 4.0),
    extra=st.floats(0.0, 50.0),
    jitter=st.floats(0.0, 1.0),
    retry=st.integers(1, 3000),
    prev=st.floats(0.0, 100.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_delay_within_bounds(strategy: str, base: float, mult: float, extra: float,
                                      jitter: float, retry: int, prev: float, seed: int) -> None:
    b = make_backoff(cfg(strategy, base_s=base, multiplier=mult, cap_s=base + extra,
                         jitter=jitter))
    e = b.expo_s(retry)
    assert base <= e <= base + extra and b.expo_s(retry + 1) >= e
    d = b.delay_s(retry, prev, np.random.default_rng(seed))
    lo, hi = b.bounds_s(retry, prev)
    tol = 1e-12 * max(1.0, hi)
    assert lo - tol <= d <= hi + tol
    if not isinstance(b, GrpcBackoff):
        assert d <= base + extra + tol  # only grpc may exceed the cap
