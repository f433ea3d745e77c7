"""Probability distributions used by scenarios: objects with ``sample(rng)`` and analytic moments.

A scenario writes a distribution as a number (a constant) or as an inline table::

    reasoning_time_s = 0.8                                 # constant
    reasoning_time_s = { dist = "exp", mean = 0.8 }
    reasoning_time_s = { dist = "uniform", low = 0.2, high = 1.0 }
    reasoning_time_s = { dist = "lognormal", mean = 0.8, cv = 0.5 }
    reasoning_time_s = { dist = "gamma", mean = 0.8, cv = 0.5 }
    reasoning_time_s = { dist = "empirical", values = [0.3, 0.5, 2.0] }

All randomness comes from the ``numpy.random.Generator`` passed in; nothing here is global.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


class DistError(ValueError):
    """A distribution spec is malformed; the message names the problem."""


@dataclass(frozen=True)
class Dist:
    """Base class: a non-negative continuous distribution."""

    kind: ClassVar[str] = ""

    @property
    def mean(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def variance(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def sample(self, rng: np.random.Generator) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_toml(self) -> Any:
        """The value to write back into a resolved scenario file."""
        d = {"dist": self.kind}
        d.update({k: v for k, v in self.__dict__.items()})
        return d


@dataclass(frozen=True)
class Const(Dist):
    value: float
    kind: ClassVar[str] = "const"

    @property
    def mean(self) -> float:
        return self.value

    @property
    def variance(self) -> float:
        return 0.0

    def sample(self, rng: np.random.Generator) -> float:
        return self.value

    def to_toml(self) -> Any:
        return self.value


@dataclass(frozen=True)
class Exp(Dist):
    mean_: float
    kind: ClassVar[str] = "exp"

    @property
    def mean(self) -> float:
        return self.mean_

    @property
    def variance(self) -> float:
        return self.mean_**2

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(self.mean_)) if self.mean_ > 0 else 0.0

    def to_toml(self) -> Any:
        return {"dist": "exp", "mean": self.mean_}


@dataclass(frozen=True)
class Uniform(Dist):
    low: float
    high: float
    kind: ClassVar[str] = "uniform"

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def variance(self) -> float:
        return (self.high - self.low) ** 2 / 12

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class _MeanCv(Dist):
    """A distribution given by its mean and coefficient of variation."""

    mean_: float
    cv: float

    @property
    def mean(self) -> float:
        return self.mean_

    @property
    def variance(self) -> float:
        return (self.cv * self.mean_) ** 2

    def to_toml(self) -> Any:
        return {"dist": self.kind, "mean": self.mean_, "cv": self.cv}


@dataclass(frozen=True)
class LogNormal(_MeanCv):
    """Log-normal given its mean and coefficient of variation (heavy right tail)."""

    kind: ClassVar[str] = "lognormal"

    def sample(self, rng: np.random.Generator) -> float:
        if self.mean_ <= 0:
            return 0.0
        s2 = math.log1p(self.cv**2)
        mu = math.log(self.mean_) - s2 / 2
        return float(rng.lognormal(mu, math.sqrt(s2)))


@dataclass(frozen=True)
class Gamma(_MeanCv):
    """Gamma given its mean and coefficient of variation (cv=1 is exponential)."""

    kind: ClassVar[str] = "gamma"

    def sample(self, rng: np.random.Generator) -> float:
        if self.mean_ <= 0:
            return 0.0
        if self.cv == 0:
            return self.mean_
        shape = 1.0 / self.cv**2
        return float(rng.gamma(shape, self.mean_ / shape))


@dataclass(frozen=True)
class Empirical(Dist):
    """Uniform choice among observed values (e.g. measured latencies)."""

    values: tuple[float, ...]
    kind: ClassVar[str] = "empirical"

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def variance(self) -> float:
        return float(np.var(self.values))

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.values[int(rng.integers(len(self.values)))])

    def to_toml(self) -> Any:
        return {"dist": "empirical", "values": list(self.values)}


def _num(spec: dict, key: str, *, positive: bool = False) -> float:
    if key not in spec:
        raise DistError(f"missing '{key}'")
    v = spec[key]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise DistError(f"'{key}' must be a number, got {v!r}")
    v = float(v)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise DistError(f"'{key}' must be {'> 0' if positive else '>= 0'}, got {v!r}")
    return v


_KEYS = {
    "const": {"value"},
    "exp": {"mean"},
    "uniform": {"low", "high"},
    "lognormal": {"mean", "cv"},
    "gamma": {"mean", "cv"},
    "empirical": {"values"},
}


def parse_dist(spec: Any) -> Dist:
    """Build a :class:`Dist` from a number or an inline table; raise :class:`DistError`."""
    if isinstance(spec, Dist):
        return spec
    if isinstance(spec, bool):
        raise DistError(f"expected a number or a distribution table, got {spec!r}")
    if isinstance(spec, int | float):
        v = float(spec)
        if not math.isfinite(v) or v < 0:
            raise DistError(f"must be a finite number >= 0, got {spec!r}")
        return Const(v)
    if not isinstance(spec, dict):
        raise DistError(f"expected a number or a distribution table, got {spec!r}")
    kind = spec.get("dist")
    if kind not in _KEYS:
        raise DistError(f"'dist' must be one of {sorted(_KEYS)}, got {kind!r}")
    extra = set(spec) - _KEYS[kind] - {"dist"}
    if extra:
        raise DistError(f"unknown key(s) {sorted(extra)} for dist '{kind}'")
    if kind == "const":
        return Const(_num(spec, "value"))
    if kind == "exp":
        return Exp(_num(spec, "mean"))
    if kind == "uniform":
        lo, hi = _num(spec, "low"), _num(spec, "high")
        if hi < lo:
            raise DistError(f"'high' ({hi}) must be >= 'low' ({lo})")
        return Uniform(lo, hi)
    if kind in ("lognormal", "gamma"):
        cls = LogNormal if kind == "lognormal" else Gamma
        return cls(_num(spec, "mean"), _num(spec, "cv"))
    vals = spec.get("values")
    if not isinstance(vals, list) or not vals:
        raise DistError("'values' must be a non-empty list of numbers")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or not math.isfinite(v):
            raise DistError(f"'values' must hold finite numbers >= 0, got {v!r}")
        out.append(float(v))
    return Empirical(tuple(out))
