"""Helpers shared by the benchmark commands (``rtalab sim bench``, ``rtalab serve bench``).

pyperf style: every report names the host it was measured on, each figure is
repeated, and a spread above :data:`UNSTABLE_SPREAD` prints a warning with the
remedy.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

UNSTABLE_SPREAD = 0.10


@dataclass(frozen=True)
class Measurement:
    """Repeated rate measurements (items per second) of one benchmark."""

    name: str
    unit: str
    rates: tuple[float, ...]
    items: int

    @property
    def mean(self) -> float:
        """Mean rate."""
        return statistics.fmean(self.rates)

    @property
    def median(self) -> float:
        """Median rate."""
        return statistics.median(self.rates)

    @property
    def stdev(self) -> float:
        """Sample standard deviation of the rate (0 for one repeat)."""
        return statistics.stdev(self.rates) if len(self.rates) > 1 else 0.0

    @property
    def spread(self) -> float:
        """(max − min) ÷ median of the rates: the instability pyperf warns about."""
        return (max(self.rates) - min(self.rates)) / statistics.median(self.rates)

    def line(self) -> str:
        """``name: mean ± sd unit/s (k runs of n items; min..max)``."""
        rel = self.stdev / self.mean if self.mean else 0.0
        lo, hi = min(self.rates), max(self.rates)
        return (f"{self.name}: {self.mean:,.0f} {self.unit}/s ± {rel:.1%} "
                f"({len(self.rates)} runs of {self.items:,} {self.unit}; "
                f"min {lo:,.0f}, max {hi:,.0f})")


def load_avg() -> tuple[float, float, float] | None:
    """The 1/5/15-minute load averages, or None where the OS has none."""
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def host_line(versions: Mapping[str, str | None]) -> str:
    """One line naming the machine, then ``name version`` of each entry of ``versions``."""
    from rtalab.sim.shared.results import host_info

    h = host_info()
    load = load_avg()
    load_text = ", ".join(f"{x:.2f}" for x in load) if load is not None else "n/a"
    soft = " | ".join(f"{name} {version or 'n/a'}" for name, version in versions.items())
    return (f"host: {h['hostname']} | {h['cpu_model'] or h['machine']} | "
            f"{h['cpu_usable']}/{h['cpu_count']} CPUs | {platform.system()} {platform.release()} | "
            f"{soft} | load avg {load_text}")


def warn_if_busy(out: Callable[[str], None]) -> bool:
    """Print a warning when the 1-minute load average exceeds half the CPUs; True if so."""
    ncpu = os.cpu_count() or 1
    load = load_avg()
    if load is not None and load[0] > 0.5 * ncpu:
        out(f"WARNING: the system is busy (load avg {load[0]:.2f} on {ncpu} CPUs); "
            "figures will be low and noisy. Rerun on an idle machine.")
        return True
    return False


def warn_unstable(m: Measurement, out: Callable[[str], None], remedy: str) -> bool:
    """Print a pyperf-style warning when ``m`` varies by more than 10 %; return True if so."""
    if len(m.rates) > 1 and m.spread > UNSTABLE_SPREAD:
        out(f"WARNING: {m.name} is unstable: spread {m.spread:.0%} > {UNSTABLE_SPREAD:.0%} "
            f"between runs. {remedy}")
        return True
    return False


def warn_unstable_all(ms: Sequence[Measurement], out: Callable[[str], None], remedy: str) -> bool:
    """One warning naming every measurement whose spread exceeds 10 %; True if any."""
    bad = [m for m in ms if len(m.rates) > 1 and m.spread > UNSTABLE_SPREAD]
    if bad:
        names = ", ".join(f"{m.name} {m.spread:.0%}" for m in bad)
        out(f"WARNING: unstable between runs (spread > {UNSTABLE_SPREAD:.0%}): {names}. {remedy}")
    return bool(bad)
