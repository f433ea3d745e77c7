"""Latency percentiles without keeping the values: a mergeable HDR histogram (``hdrhistogram``).

:class:`Sketch` holds the finite values of one latency (seconds, recorded as integer
microseconds) in an :class:`hdrh.histogram.HdrHistogram` with 3 significant digits, plus
the number of infinite values (turns not served).  Its percentile follows the exact
path's rule (:func:`rtalab.sim.shared.summary.percentile`, numpy's ``inverted_cdf``): the same
rank is looked up, and the value returned is the top of the histogram bucket holding the
exact answer, so it is within :data:`RELATIVE_ERROR` of it, plus :data:`ABSOLUTE_ERROR_S`
(the microsecond rounding):

    |sketch - exact| <= RELATIVE_ERROR * exact + ABSOLUTE_ERROR_S

Counts are exact.  Two sketches of the same latency merge exactly (bucket counts add), so
a run split over processes or Dask workers gives the same percentiles as one process
(:meth:`Sketch.merge`, :meth:`Sketch.encode` / :meth:`Sketch.decode` to ship one).
Values are bucketed with numpy (the histogram's own bucket formula, checked against the
library in tests/test_sketch.py) and recorded once per bucket, ~100x cheaper than one
``record_value`` call per value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

SIGNIFICANT_DIGITS = 3
#: the histogram covers 1 µs .. 10 days; a longer latency raises (none is that long)
HIGHEST_US = 10 * 24 * 3600 * 10**6
#: bucket width / value bound of 3 significant digits: 2 ** -10 (2048 sub-buckets)
RELATIVE_ERROR = 2.0 ** -10
#: microsecond rounding of the recorded values
ABSOLUTE_ERROR_S = 1e-6


def rank(n: int, q: float) -> int:
    """0-based index of the ``q``-th percentile of ``n`` sorted values under numpy's
    ``inverted_cdf`` (what :func:`rtalab.sim.shared.summary.percentile` returns)."""
    if n <= 0:
        raise ValueError("no values")
    # numpy's own rule (numpy.lib._function_base_impl._inverted_cdf) on float64 scalars, the
    # same operations in the same order -- identical rounding, whatever n and q -- without
    # the n-long array np.percentile(np.arange(n), q) would take (32 MB for 4 M turns)
    index = n * (float(q) / 100.0) - 1.0
    previous = math.floor(index)
    return max(0, previous if index == previous else previous + 1)


class Sketch:
    """Finite values in an HDR histogram plus a count of infinite ones (NaN is ignored)."""

    def __init__(self) -> None:
        self.hist = HdrHistogram(1, HIGHEST_US, SIGNIFICANT_DIGITS)
        self._shift_base = self.hist.sub_bucket_half_count_magnitude
        self.n_inf = 0

    @property
    def n_finite(self) -> int:
        return int(self.hist.get_total_count())

    def __len__(self) -> int:
        return self.n_finite + self.n_inf

    def add(self, seconds: np.ndarray) -> None:
        """Record an array of latencies in seconds (+inf counted apart, NaN ignored)."""
        x = np.asarray(seconds, dtype=np.float64)
        x = x[~np.isnan(x)]
        inf = np.isinf(x)
        if inf.any():
            self.n_inf += int(inf.sum())
            x = x[~inf]
        if not len(x):
            return
        us = np.rint(x * 1e6).astype(np.int64)
        if (us < 0).any() or (us > HIGHEST_US).any():
            raise ValueError("a latency outside [0, 10 days]")
        # the bucket's lowest value: clear the bits below the sub-bucket resolution
        _, exp = np.frexp(np.maximum(us, 1).astype(np.float64))  # exp = bit length
        shift = np.maximum(0, exp.astype(np.int64) - 1 - self._shift_base)
        low = (us >> shift) << shift
        values, counts = np.unique(low, return_counts=True)
        record = self.hist.record_value
        for v, c in zip(values.tolist(), counts.tolist(), strict=True):
            record(v, c)

    def merge(self, other: Sketch) -> None:
        """Add ``other``'s counts to this one (exact)."""
        self.hist.add(other.hist)
        self.n_inf += other.n_inf

    def percentile(self, q: float, served: bool = False,
                   n_inf: int | None = None) -> float | None:
        """The ``q``-th percentile in seconds, None when empty.

        ``served=False``: of the finite values only (:func:`rtalab.sim.shared.summary.percentile`).
        ``served=True``: infinite values count
        (:func:`rtalab.sim.shared.summary.percentile_served`): None when the percentile falls on an
        infinite value; ``n_inf`` overrides how many there are (the same finite values seen with
        another count of unserved turns).
        """
        inf = self.n_inf if n_inf is None else n_inf
        n = self.n_finite + (inf if served else 0)
        if n == 0:
            return None
        r = rank(n, q)
        if r >= self.n_finite:
            return None  # an infinite value
        # the histogram's bucket counts (its own array), cumulated: the bucket holding rank r
        counts = np.ctypeslib.as_array(self.hist.counts)
        index = int(np.searchsorted(np.cumsum(counts), r, side="right"))
        top = self.hist.get_highest_equivalent_value(self.hist.get_value_from_index(index))
        return float(top) / 1e6

    def encode(self) -> dict[str, Any]:
        """A picklable, JSON-able form (the histogram's compressed encoding)."""
        return {"hdr": self.hist.encode().decode("ascii") if self.n_finite else "",
                "n_inf": self.n_inf}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> Sketch:
        s = cls()
        if data["hdr"]:
            s.hist.add(HdrHistogram.decode(data["hdr"].encode("ascii")))
        s.n_inf = int(data["n_inf"])
        return s

    def __getstate__(self) -> dict[str, Any]:
        return self.encode()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]  # unpickling: reset the fresh instance
        if state["hdr"]:
            self.hist.add(HdrHistogram.decode(state["hdr"].encode("ascii")))
        self.n_inf = int(state["n_inf"])


def within_error(sketch_value: float | None, exact_value: float | None) -> bool:
    """True when a sketch percentile is within the stated error of the exact one."""
    if sketch_value is None or exact_value is None:
        return sketch_value is None and exact_value is None
    if not (math.isfinite(sketch_value) and math.isfinite(exact_value)):
        return sketch_value == exact_value
    return abs(sketch_value - exact_value) <= RELATIVE_ERROR * abs(exact_value) + ABSOLUTE_ERROR_S
