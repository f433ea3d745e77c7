"""Probability distributions used by scenarios: objects with ``sample(rng)`` and analytic moments.

A scenario writes a distribution as a number (a constant) or as an inline table::

    reasoning_time_s = 0.8                                 # constant
    reasoning_time_s = { dist = "exp", mean = 0.8 }
    reasoning_time_s = { dist = "uniform", low = 0.2, high = 1.0 }
    reasoning_time_s = { dist = "lognormal", mean = 0.8, cv = 0.5 }
    reasoning_time_s = { dist = "gamma", mean = 0.8, cv = 0.5 }
    reasoning_time_s = { dist = "weibull", shape = 1.5, scale = 0.9 }
    reasoning_time_s = { dist = "empirical", values = [0.3, 0.5, 2.0] }
    reasoning_time_s = { dist = "empirical", file = "samples.csv", column = "reasoning_s" }
    reasoning_time_s = { dist = "histogram", le = [0.1, 0.5, 1, 2.5, "+Inf"],
                         counts = [12, 340, 810, 990, 1000] }

``empirical`` draws uniformly among observed values, given inline or as one column of a
CSV or Parquet file (a relative path is relative to the scenario file; the values are read
when the scenario is loaded and the file is named again when the scenario is written back).
``histogram`` is a Prometheus histogram pasted as it is exported: cumulative counts per
upper bound ``le``, strictly increasing bounds >= 0 ending with ``"+Inf"`` (or TOML
``inf``).  It is sampled by inverse transform with ``histogram_quantile``'s rule: linear
interpolation inside a bucket, the first bucket starting at 0, and the ``+Inf`` bucket's
mass placed at the highest finite bound (a histogram says nothing beyond it).

All randomness comes from the ``numpy.random.Generator`` passed in; nothing here is global.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

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
class Weibull(Dist):
    """Weibull with ``shape`` k and ``scale`` lambda: P(X > x) = exp(-(x / lambda)^k)."""

    shape: float
    scale: float
    kind: ClassVar[str] = "weibull"

    @property
    def mean(self) -> float:
        return self.scale * math.gamma(1 + 1 / self.shape)

    @property
    def variance(self) -> float:
        g1, g2 = math.gamma(1 + 1 / self.shape), math.gamma(1 + 2 / self.shape)
        return self.scale**2 * (g2 - g1 * g1)

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.scale * rng.weibull(self.shape))

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws at once (the same law as ``sample``)."""
        return self.scale * rng.weibull(self.shape, n)


@dataclass(frozen=True)
class Empirical(Dist):
    """Uniform choice among observed values (e.g. measured latencies).

    ``file``/``column`` name where the values were read from (empty when given inline).
    """

    values: tuple[float, ...]
    file: str = ""
    column: str = ""
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
        if self.file:
            return {"dist": "empirical", "file": self.file, "column": self.column}
        return {"dist": "empirical", "values": list(self.values)}


INF_LABEL = "+Inf"


@dataclass(frozen=True)
class Histogram(Dist):
    """Cumulative Prometheus buckets: ``counts[i]`` observations <= ``le[i]``; ``le[-1]`` = inf."""

    le: tuple[float, ...]
    counts: tuple[float, ...]
    kind: ClassVar[str] = "histogram"

    def _pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lower bound, upper bound, probability) of each piece; the +Inf piece is a point."""
        bounds = np.asarray(self.le[:-1], dtype=float)
        cum = np.asarray(self.counts, dtype=float)
        p = np.diff(cum, prepend=0.0) / cum[-1]
        lo = np.concatenate(([0.0], bounds))
        hi = np.concatenate((bounds, [bounds[-1]]))
        return lo, hi, p

    @property
    def mean(self) -> float:
        lo, hi, p = self._pieces()
        return float((p * (lo + hi) / 2).sum())

    @property
    def variance(self) -> float:
        lo, hi, p = self._pieces()
        m2 = float((p * (lo * lo + lo * hi + hi * hi) / 3).sum())
        return max(0.0, m2 - self.mean**2)

    def quantile(self, q: np.ndarray | float) -> np.ndarray:
        """Prometheus ``histogram_quantile(q)`` for each ``q`` in [0, 1]."""
        bounds = np.asarray(self.le, dtype=float)
        cum = np.asarray(self.counts, dtype=float)
        rank = np.asarray(q, dtype=float) * cum[-1]
        b = np.searchsorted(cum, rank, side="left")
        b = np.minimum(b, len(cum) - 1)
        start = np.where(b > 0, bounds[np.maximum(b - 1, 0)], 0.0)
        below = np.where(b > 0, cum[np.maximum(b - 1, 0)], 0.0)
        count = cum[b] - below
        end = bounds[b]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(count > 0, (rank - below) / count, 0.0)
            x = start + (end - start) * frac
        return cast("np.ndarray", np.where(b == len(cum) - 1, bounds[-2], x))

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.quantile(rng.random()))

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws at once (the same values as ``n`` calls of ``sample``)."""
        return self.quantile(rng.random(n))

    def to_toml(self) -> Any:
        le: list[Any] = [float(v) for v in self.le[:-1]] + [INF_LABEL]
        counts = [int(c) if float(c).is_integer() else float(c) for c in self.counts]
        return {"dist": "histogram", "le": le, "counts": counts}


def scaled(d: Dist, factor: float) -> Dist:
    """``d`` with every value multiplied by ``factor`` > 0 (the law of ``factor · X``): the mean
    scales by ``factor``, the cv and the shape stay.  An empirical law read from a file is
    written back inline (the file holds the unscaled values)."""
    if not (math.isfinite(factor) and factor > 0):
        raise DistError(f"a scale factor must be a finite number > 0, got {factor!r}")
    if isinstance(d, Const):
        return Const(d.value * factor)
    if isinstance(d, Exp):
        return Exp(d.mean_ * factor)
    if isinstance(d, Uniform):
        return Uniform(d.low * factor, d.high * factor)
    if isinstance(d, _MeanCv):
        return type(d)(d.mean_ * factor, d.cv)
    if isinstance(d, Weibull):
        return Weibull(d.shape, d.scale * factor)
    if isinstance(d, Empirical):
        return Empirical(tuple(v * factor for v in d.values))
    if isinstance(d, Histogram):
        return Histogram((*(b * factor for b in d.le[:-1]), d.le[-1]), d.counts)
    raise DistError(f"cannot scale a {type(d).__name__}")


def _num(spec: dict[str, Any], key: str, *, positive: bool = False) -> float:
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
    "weibull": {"shape", "scale"},
    "empirical": {"values", "file", "column"},
    "histogram": {"le", "counts"},
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
    if kind == "weibull":
        return Weibull(_num(spec, "shape", positive=True), _num(spec, "scale", positive=True))
    if kind == "histogram":
        return _histogram(spec)
    return _empirical(spec)


def _empirical(spec: dict[str, Any]) -> Empirical:
    """``values = [...]`` inline, or ``file`` + ``column`` (CSV or Parquet)."""
    if "file" in spec or "column" in spec:
        if "values" in spec:
            raise DistError("give either 'values' or 'file' and 'column', not both")
        file, column = spec.get("file"), spec.get("column")
        if not isinstance(file, str) or not file:
            raise DistError(f"'file' must be a path (CSV or Parquet), got {file!r}")
        if not isinstance(column, str) or not column:
            raise DistError(f"'column' must name a column of {file}, got {column!r}")
        return Empirical(_read_column(file, column), file, column)
    vals = spec.get("values")
    if not isinstance(vals, list) or not vals:
        raise DistError("'values' must be a non-empty list of numbers")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or not math.isfinite(v):
            raise DistError(f"'values' must hold finite numbers >= 0, got {v!r}")
        out.append(float(v))
    return Empirical(tuple(out))


def _read_column(file: str, column: str) -> tuple[float, ...]:
    """The finite, non-negative numbers of one column of a CSV or Parquet file."""
    # lazy: +704 ms (pandas, pyarrow) off importing rtalab.sim.dist
    import pandas as pd  # only scenarios that name a samples file pay for the import

    path = Path(file)
    if not path.is_file():
        raise DistError(f"'file' {file} does not exist")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            # lazy: +80 ms (pyarrow) off importing rtalab.sim.dist
            import pyarrow.parquet as pq

            names = pq.read_schema(path).names
            if column not in names:
                raise DistError(f"'column' {column!r} is not in {file} (columns: {names})")
            data = pq.read_table(path, columns=[column]).column(0).to_pandas()
        else:
            frame = pd.read_csv(path)
            if column not in frame.columns:
                raise DistError(f"'column' {column!r} is not in {file} "
                                f"(columns: {list(frame.columns)})")
            data = frame[column]
    except DistError:
        raise
    except Exception as e:  # any unreadable file: one line naming it
        raise DistError(f"'file' {file} cannot be read: "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    values = pd.to_numeric(data, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DistError(f"column {column!r} of {file} must hold finite numbers >= 0; "
                        f"row {i + 1} is {_show(data.iloc[i])}")
    if not len(values):
        raise DistError(f"column {column!r} of {file} is empty")
    return tuple(values.tolist())


def _show(v: Any) -> str:
    """A cell as the user wrote it (numbers plain, text quoted)."""
    if isinstance(v, str):
        return repr(v)
    f = float(v)
    return f"{f:g}"


def _bound(v: Any) -> float:
    """One ``le`` bound: a number or the string ``+Inf``."""
    if isinstance(v, str) and v.strip().lower() in ("+inf", "inf"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
        raise DistError(f"'le' must hold numbers ending with \"+Inf\", got {v!r}")
    return float(v)


def _histogram(spec: dict[str, Any]) -> Histogram:
    """Cumulative buckets, validated: bounds >= 0 increasing to +Inf, counts non-decreasing."""
    le, counts = spec.get("le"), spec.get("counts")
    if not isinstance(le, list) or len(le) < 2:
        raise DistError("'le' must list at least one finite upper bound and \"+Inf\"")
    bounds = [_bound(v) for v in le]
    if bounds[-1] != math.inf:
        raise DistError(f"'le' must end with \"+Inf\", got {le[-1]!r}")
    finite = bounds[:-1]
    if any(not math.isfinite(b) for b in finite):
        raise DistError("'le' may hold \"+Inf\" only as its last bound")
    if finite[0] < 0:
        raise DistError(f"'le' bounds must be >= 0, got {le[0]!r}")
    if any(b <= a for a, b in itertools.pairwise(finite)):
        raise DistError(f"'le' bounds must increase strictly, got {le}")
    if not isinstance(counts, list) or len(counts) != len(bounds):
        raise DistError(f"'counts' must list one cumulative count per 'le' bound ({len(bounds)})")
    cum = []
    for c in counts:
        if isinstance(c, bool) or not isinstance(c, int | float) or not math.isfinite(c) or c < 0:
            raise DistError(f"'counts' must hold finite numbers >= 0, got {c!r}")
        cum.append(float(c))
    if any(b < a for a, b in itertools.pairwise(cum)):
        raise DistError(f"'counts' must be cumulative (non-decreasing), got {counts}")
    if cum[-1] <= 0:
        raise DistError("'counts' must end with a total > 0")
    return Histogram(tuple(bounds), tuple(cum))
