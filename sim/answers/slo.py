"""SLO and objective expressions: ``'turn_completion_p99_s<=3'``, ``--minimize completion_s.p99``.

An SLO is ``METRIC OP TARGET`` with ``OP`` one of ``<=``, ``<``, ``>=``, ``>``.
``METRIC`` is a metric name of ``summary.json`` (see ``docs/metrics.md``) or one
of the user-facing aliases of :data:`ALIASES` (docs/decisions.md D5).

*Holding with confidence* (:meth:`Slo.holds`): the end of the metric's 95 % CI
on the unfavourable side meets the target, i.e. ``ci_high <= target`` for an
upper bound and ``ci_low >= target`` for a lower bound.  A metric without a CI
(one replication, or fewer than two defined values) never holds with
confidence; an undefined metric (``null``) never holds at all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from rtalab.sim.shared import schema as S

ALIASES: dict[str, str] = {
    # caller-perceived by default: a turn not served counts as +inf (docs/answers.md)
    "turn_completion_p99_s": "caller_completion_s.p99",
    "turn_completion_p95_s": "caller_completion_s.p95",
    "turn_completion_p50_s": "caller_completion_s.p50",
    "ttfc_p50_s": "caller_ttfc_s.p50",
    "ttfc_p99_s": "caller_ttfc_s.p99",
    # completed turns only (what a served turn took)
    "completed_turn_completion_p99_s": "completion_s.p99",
    "completed_turn_completion_p95_s": "completion_s.p95",
    "completed_turn_completion_p50_s": "completion_s.p50",
    "completed_ttfc_p50_s": "ttfc_s.p50",
    "completed_ttfc_p99_s": "ttfc_s.p99",
    "ghost_success_per_1k": "hazard.ghost_successes_per_1k_turns",
    "p_wait": "queue.p_wait",
    "utilisation": "worker_utilisation",
    "goodput": "goodput_turns_per_s",
}

Op = Literal["<=", "<", ">=", ">"]
_EXPR = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


class SloError(ValueError):
    """A malformed SLO, objective or unknown metric name (one line, for the CLI)."""


def _known_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(exact metric names, name prefixes) declared in :mod:`rtalab.sim.shared.schema` (``M_*``)."""
    exact: list[str] = []
    prefixes: list[str] = []
    for key, value in vars(S).items():
        if key.startswith("M_") and isinstance(value, str):
            (prefixes if value.endswith(".") else exact).append(value)
    return tuple(exact), tuple(prefixes)


def resolve_metric(name: str) -> str:
    """The ``summary.json`` name of ``name`` (alias resolved); :class:`SloError` if unknown."""
    metric = ALIASES.get(name.strip(), name.strip())
    exact, prefixes = _known_prefixes()
    if metric in exact or any(metric.startswith(p) and len(metric) > len(p) for p in prefixes):
        return metric
    raise SloError(f"unknown metric {name!r} (use a summary.json metric name, or one of "
                   f"{', '.join(sorted(ALIASES))})")


@dataclass(frozen=True)
class Slo:
    """``metric op target``; ``text`` is what the user wrote."""

    metric: str
    op: Op
    target: float
    text: str = ""

    @property
    def upper(self) -> bool:
        """True when the metric must stay below the target (``<=``/``<``)."""
        return self.op in ("<=", "<")

    def _meets(self, value: float) -> bool:
        return {"<=": value <= self.target, "<": value < self.target,
                ">=": value >= self.target, ">": value > self.target}[self.op]

    def bound(self, summary: dict[str, Any]) -> float | None:
        """The CI end on the unfavourable side (``ci_high`` for ``<=``, ``ci_low`` for ``>=``)."""
        m = summary["metrics"].get(self.metric) or {}
        return m.get("ci_high" if self.upper else "ci_low")

    def holds(self, summary: dict[str, Any]) -> bool:
        """True when the SLO holds with confidence in ``summary`` (see module docstring)."""
        b = self.bound(summary)
        return b is not None and math.isfinite(b) and self._meets(float(b))

    def violation(self, value: float | None) -> float:
        """Constraint value for Optuna: ``<= 0`` when ``value`` meets the target, else the gap
        (``inf`` when undefined)."""
        if value is None or not math.isfinite(value):
            return math.inf
        gap = value - self.target if self.upper else self.target - value
        if not self._meets(value):  # a strict SLO at its target: violated, by a hair
            return gap if gap > 0.0 else math.ulp(0.0)
        return min(gap, 0.0)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.target:g}"


def parse_slo(text: str) -> Slo:
    """Parse ``'METRIC<=X'`` (aliases allowed); :class:`SloError` on anything else."""
    m = _EXPR.match(text)
    if not m:
        raise SloError(f"bad SLO {text!r}: expected METRIC<=X, METRIC>=X, METRIC<X or METRIC>X")
    name, op, target = m.groups()
    try:
        value = float(target)
    except ValueError:
        raise SloError(f"bad SLO {text!r}: target {target!r} is not a number") from None
    if not math.isfinite(value):
        raise SloError(f"bad SLO {text!r}: target must be finite")
    return Slo(resolve_metric(name), op, value, text.strip())  # type: ignore[arg-type]  # op is one of the four (the pattern matched it)


def metric_value(summary: dict[str, Any], name: str) -> float | None:
    """The mean of metric ``name`` in a ``summary.json`` dict (None when absent or undefined)."""
    m = summary["metrics"].get(name) or {}
    v = m.get("mean")
    return None if v is None or not math.isfinite(v) else float(v)
