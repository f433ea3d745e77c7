"""Statistical assertions that hold on any seed, and the seed offset that proves it.

A check compares the mean of per-replication values with the expected value
in standard errors (SE = sample sd / √n): it passes within ``K = 4`` SE, so a
correct model fails it on about 1 seed in 1,000 (Student t, 19 df: 0.08 %).
A check that *can fail* names a wrong answer (one server more, one retry
fewer, ...) that must lie at least ``2K = 8`` SE from the expected value (else
the test is too weak to tell them apart and says so) and more than ``K`` SE
from the observed mean.

``seed(base)`` adds ``$RTALAB_TEST_SEED_OFFSET`` (default 0) to a test's seed,
so ``tests/oneoff/seeds.py`` can run the statistical tests on other seeds;
``make test`` always uses offset 0.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

K_SE = 4.0
SEED_OFFSET_ENV = "RTALAB_TEST_SEED_OFFSET"


def seed(base: int) -> int:
    """``base`` plus the seed offset of this test session."""
    return base + int(os.environ.get(SEED_OFFSET_ENV, "0"))


@dataclass(frozen=True)
class Estimate:
    """Mean and standard error of per-replication values."""

    mean: float
    se: float
    n: int

    def z(self, value: float) -> float:
        """Distance from ``value`` in SE (inf if the values are constant and differ)."""
        d = abs(self.mean - value)
        if self.se == 0.0:
            return 0.0 if d <= 1e-12 * max(1.0, abs(value)) else math.inf
        return d / self.se


def estimate(values: Sequence[float | None]) -> Estimate:
    """Mean and SE of the defined values (at least two are needed)."""
    x = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(x) < 2:
        raise AssertionError(f"need >= 2 replications with a value, got {len(x)}")
    m = math.fsum(x) / len(x)
    var = math.fsum((v - m) ** 2 for v in x) / (len(x) - 1)
    return Estimate(m, math.sqrt(var / len(x)), len(x))


def assert_close(values: Sequence[float | None], expected: float, what: str = "",
                 k: float = K_SE) -> Estimate:
    """The mean of ``values`` lies within ``k`` SE of ``expected``."""
    e = estimate(values)
    assert e.z(expected) <= k, (
        f"{what}: mean {e.mean:.6g} is {e.z(expected):.1f} SE (SE {e.se:.3g}) from {expected:.6g}")
    return e


def assert_rejects(values: Sequence[float | None], expected: float, wrong: float,
                   what: str = "", k: float = K_SE) -> Estimate:
    """A wrong answer ``wrong`` is ≥ 2k SE from ``expected`` and > k SE from the mean."""
    e = estimate(values)
    gap = abs(expected - wrong) / e.se if e.se > 0 else math.inf
    assert gap >= 2 * k, (
        f"{what}: the wrong answer {wrong:.6g} is only {gap:.1f} SE from the expected "
        f"{expected:.6g}: the check cannot tell them apart (need >= {2 * k:g} SE)")
    assert e.z(wrong) > k, (
        f"{what}: mean {e.mean:.6g} is within {k:g} SE of the wrong answer {wrong:.6g}")
    return e
