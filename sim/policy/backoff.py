"""Backoff strategies: the delay before retry n (n = 1 for the first retry).

All strategies share the capped exponential step
``expo(n) = min(cap_s, base_s * multiplier**(n-1))``:

=====================  =====================================  ==========================
strategy               delay before retry n                   support
=====================  =====================================  ==========================
none                   0                                      {0}
exponential            expo(n)                                {expo(n)}
full_jitter            U(0, expo(n))                          [0, expo(n)]
equal_jitter           expo(n)/2 + U(0, expo(n)/2)            [expo(n)/2, expo(n)]
decorrelated_jitter    min(cap, U(base, 3*prev))              [base, min(cap, 3*prev)]
grpc                   expo(n) * U(1-jitter, 1+jitter)        [expo(n)(1-j), expo(n)(1+j)]
=====================  =====================================  ==========================

Notes on two of them:

* ``decorrelated_jitter`` is the AWS Architecture Blog definition ("Exponential
  Backoff And Jitter"): ``prev`` is ``base_s`` for the first retry and the
  previous delay (``prev_delay_s``, floored at ``base_s``) afterwards; it ignores
  ``multiplier``.
* ``grpc`` follows gRPC's connection-backoff.md and its implementations (grpc-core
  ``BackOff``, grpc-go): the step is capped first and the jitter applied *after*
  the cap, so a delay may exceed ``cap_s`` by up to ``jitter * cap_s``.  We keep
  that on purpose: re-capping would put half the mass exactly on ``cap_s`` and
  re-synchronise clients at the cap, which is what jitter exists to prevent.
  (gRPC's *retry* design, A6, uses full jitter instead: pick ``full_jitter``.)

Jittered strategies draw exactly one ``rng.random()`` per delay; ``none`` and
``exponential`` draw nothing.  Nothing here allocates per call.
"""

from __future__ import annotations

import math

import numpy as np

from rtalab.sim.policy.config import BackoffConfig


def _step(base_s: float, multiplier: float, retry: int) -> float:
    """Uncapped step ``base_s * multiplier**(retry-1)`` (``inf`` on overflow)."""
    try:
        return base_s * multiplier ** (retry - 1)
    except OverflowError:
        return math.inf


def _saturation_retry(base_s: float, multiplier: float, cap_s: float) -> float:
    """Smallest retry n with base*multiplier**(n-1) >= cap (``inf`` if it never gets there)."""
    if base_s >= cap_s:
        return 1
    if base_s <= 0.0 or multiplier <= 1.0:
        return math.inf
    n = 1 + math.ceil((math.log(cap_s) - math.log(base_s)) / math.log(multiplier))
    while n > 1 and _step(base_s, multiplier, n - 1) >= cap_s:  # undo float rounding, if any
        n -= 1
    while _step(base_s, multiplier, n) < cap_s:
        n += 1
    return n


class Backoff:
    """Base class: capped exponential step plus a strategy-specific delay distribution."""

    name: str = ""

    def __init__(self, cfg: BackoffConfig) -> None:
        self.base_s = cfg.base_s
        self.multiplier = cfg.multiplier
        self.cap_s = cfg.cap_s
        self.jitter = cfg.jitter
        self._mult = cfg.multiplier if cfg.base_s > 0.0 else 1.0  # 0 * m**n: avoid overflow
        self._saturation = _saturation_retry(self.base_s, self._mult, self.cap_s)

    def expo_s(self, retry: int) -> float:
        """The capped exponential step ``min(cap_s, base_s * multiplier**(retry-1))``."""
        if retry < 1:
            raise ValueError(f"retry must be >= 1, got {retry}")
        if retry >= self._saturation:
            return self.cap_s
        try:
            return self.base_s * self._mult ** (retry - 1)
        except OverflowError:  # only for absurd base/cap ratios (e.g. a denormal base)
            return self.cap_s

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """Sample the delay before retry ``retry``."""
        raise NotImplementedError

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """Support ``(lo, hi)`` of the delay before retry ``retry``."""
        raise NotImplementedError

    def mean_s(self, retry: int) -> float | None:
        """Analytic mean of the delay before retry ``retry`` (None where undefined)."""
        raise NotImplementedError

    def variance_s2(self, retry: int) -> float | None:
        """Analytic variance of the delay before retry ``retry`` (None where undefined)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(base_s={self.base_s!r}, multiplier={self.multiplier!r}, "
                f"cap_s={self.cap_s!r}, jitter={self.jitter!r})")


class NoBackoff(Backoff):
    """Retry immediately."""

    name = "none"

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """Always 0."""
        return 0.0

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """(0, 0)."""
        return (0.0, 0.0)

    def mean_s(self, retry: int) -> float | None:
        """0."""
        return 0.0

    def variance_s2(self, retry: int) -> float | None:
        """0."""
        return 0.0


class ExponentialBackoff(Backoff):
    """Deterministic capped exponential: ``expo(n)``."""

    name = "exponential"

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """``expo(retry)``, no randomness."""
        return self.expo_s(retry)

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """(expo, expo)."""
        e = self.expo_s(retry)
        return (e, e)

    def mean_s(self, retry: int) -> float | None:
        """expo."""
        return self.expo_s(retry)

    def variance_s2(self, retry: int) -> float | None:
        """0."""
        return 0.0


class FullJitterBackoff(Backoff):
    """AWS "full jitter": ``U(0, expo(n))``."""

    name = "full_jitter"

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """``U(0, expo(retry))``."""
        return self.expo_s(retry) * rng.random()

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """(0, expo)."""
        return (0.0, self.expo_s(retry))

    def mean_s(self, retry: int) -> float | None:
        """expo / 2."""
        return self.expo_s(retry) / 2.0

    def variance_s2(self, retry: int) -> float | None:
        """expo² / 12."""
        return self.expo_s(retry) ** 2 / 12.0


class EqualJitterBackoff(Backoff):
    """AWS "equal jitter": ``expo(n)/2 + U(0, expo(n)/2)``."""

    name = "equal_jitter"

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """``expo/2 + U(0, expo/2)``."""
        half = self.expo_s(retry) / 2.0
        return half + half * rng.random()

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """(expo/2, expo)."""
        e = self.expo_s(retry)
        return (e / 2.0, e)

    def mean_s(self, retry: int) -> float | None:
        """3·expo / 4."""
        return 0.75 * self.expo_s(retry)

    def variance_s2(self, retry: int) -> float | None:
        """expo² / 48."""
        return self.expo_s(retry) ** 2 / 48.0


class DecorrelatedJitterBackoff(Backoff):
    """AWS "decorrelated jitter": ``min(cap, U(base, 3*prev))``, prev = base for the first retry."""

    name = "decorrelated_jitter"

    def _prev(self, retry: int, prev_delay_s: float) -> float:
        """``prev`` of the formula: base for retry 1, else the previous delay floored at base."""
        if retry < 1:
            raise ValueError(f"retry must be >= 1, got {retry}")
        return self.base_s if retry == 1 or prev_delay_s < self.base_s else prev_delay_s

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """``min(cap, U(base, 3*prev))``."""
        lo = self.base_s
        d = lo + (3.0 * self._prev(retry, prev_delay_s) - lo) * rng.random()
        return d if d < self.cap_s else self.cap_s

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """(min(cap, base), min(cap, 3*prev)); retry > 1 without ``prev_delay_s``: (base, cap)."""
        lo = min(self.cap_s, self.base_s)
        if retry > 1 and prev_delay_s is None:
            return (lo, self.cap_s)
        return (lo, min(self.cap_s, 3.0 * self._prev(retry, prev_delay_s or 0.0)))

    def mean_s(self, retry: int) -> float | None:
        """None: the marginal law depends on the whole delay history."""
        return None

    def variance_s2(self, retry: int) -> float | None:
        """None (see :meth:`mean_s`)."""
        return None


class GrpcBackoff(Backoff):
    """gRPC connection backoff: ``expo(n) * U(1-jitter, 1+jitter)`` (jitter after the cap)."""

    name = "grpc"

    def delay_s(self, retry: int, prev_delay_s: float, rng: np.random.Generator) -> float:
        """``expo * U(1-j, 1+j)``; may exceed cap_s by up to ``j * cap_s``."""
        j = self.jitter
        return self.expo_s(retry) * (1.0 - j + 2.0 * j * rng.random())

    def bounds_s(self, retry: int, prev_delay_s: float | None = None) -> tuple[float, float]:
        """(expo·(1-j), expo·(1+j))."""
        e = self.expo_s(retry)
        return (e * (1.0 - self.jitter), e * (1.0 + self.jitter))

    def mean_s(self, retry: int) -> float | None:
        """expo."""
        return self.expo_s(retry)

    def variance_s2(self, retry: int) -> float | None:
        """expo² · j² / 3 (uniform of width 2·j·expo)."""
        return (self.expo_s(retry) * self.jitter) ** 2 / 3.0


STRATEGIES: dict[str, type[Backoff]] = {
    cls.name: cls
    for cls in (NoBackoff, ExponentialBackoff, FullJitterBackoff, EqualJitterBackoff,
                DecorrelatedJitterBackoff, GrpcBackoff)
}


def make_backoff(cfg: BackoffConfig) -> Backoff:
    """Build the backoff strategy named by ``cfg.strategy``."""
    try:
        cls = STRATEGIES[cfg.strategy]
    except KeyError:
        raise ValueError(f"unknown backoff strategy {cfg.strategy!r}; "
                         f"expected one of {sorted(STRATEGIES)}") from None
    return cls(cfg)
