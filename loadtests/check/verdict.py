"""The verdict of ``rtalab check``: one :class:`RuleResult` per rule, rendered as JSON and text.

``verdict.json`` (LEDGER.md): ``{"ok", "rules": [{"name", "section", "kind", "status",
"count", "examples", "detail", "rate_per_1k_turns"}], "stats": {...}}``.  ``status`` is
``pass`` | ``fail`` | ``not-checked``; ``kind`` is ``violation`` (a MUST of errors.md or
the delivery contract: any occurrence fails) or ``hazard`` (a rate that is reported and
fails only above a limit the user set).  ``ok`` is true when no rule failed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["pass", "fail", "not-checked"]
Kind = Literal["violation", "hazard"]
PASS: Status = "pass"
FAIL: Status = "fail"
NOT_CHECKED: Status = "not-checked"
MAX_EXAMPLES = 5


def per_1k(count: float, turns: float) -> float | None:
    """``count`` per 1,000 turns; ``None`` when there were no turns (never a division by 0)."""
    if turns <= 0 or not math.isfinite(turns):
        return None
    return 1000.0 * float(count) / float(turns)


@dataclass(frozen=True)
class RuleResult:
    """The outcome of one rule."""

    name: str
    section: str
    kind: Kind
    status: Status
    count: int = 0
    examples: tuple[str, ...] = ()
    detail: str = ""
    rate_per_1k_turns: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["examples"] = list(self.examples)
        return d


def examples_of(values: Sequence[Any] | Any, n: int = MAX_EXAMPLES) -> tuple[str, ...]:
    """Up to ``n`` distinct example ids as strings, in first-seen order."""
    out: list[str] = []
    for v in values:
        s = str(v)
        if s not in out:
            out.append(s)
            if len(out) == n:
                break
    return tuple(out)


@dataclass
class Verdict:
    """Every rule's result plus the run's counts."""

    rules: list[RuleResult]
    stats: dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""
    coverage: list[Any] = field(default_factory=list)  # loadtests.check.coverage.Exercise

    @property
    def ok(self) -> bool:
        """True when no rule failed."""
        return not any(r.status == FAIL for r in self.rules)

    @property
    def failed(self) -> list[str]:
        """Names of the failed rules."""
        return [r.name for r in self.rules if r.status == FAIL]

    def rule(self, name: str) -> RuleResult:
        """The result of rule ``name`` (KeyError if unknown)."""
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The verdict.json content."""
        return {"ok": self.ok, "run_dir": self.run_dir, "failed": self.failed,
                "rules": [r.to_dict() for r in self.rules], "stats": self.stats,
                "coverage": [e.to_dict() for e in self.coverage]}

    def to_text(self) -> str:
        """A human-readable table (verdict.txt)."""
        head = "PASS" if self.ok else f"FAIL ({', '.join(self.failed)})"
        lines = [f"verdict: {head}", ""]
        width = max((len(r.name) for r in self.rules), default=4)
        for r in self.rules:
            rate = "" if r.rate_per_1k_turns is None else f"  {r.rate_per_1k_turns:.3g}/1k turns"
            lines.append(f"{r.status.upper():<11} {r.name:<{width}}  {r.kind:<9} "
                         f"count={r.count}{rate}  [{r.section}]")
            if r.detail:
                lines.append(f"{'':<11} {'':<{width}}  {r.detail}")
            if r.examples and r.status != PASS:
                lines.append(f"{'':<11} {'':<{width}}  e.g. {', '.join(r.examples)}")
        if self.stats:
            lines += ["", "stats:"]
            lines += [f"  {k}: {v}" for k, v in self.stats.items()]
        if self.coverage:
            from loadtests.check.coverage import coverage_text

            lines += ["", *coverage_text(self.coverage)]
        return "\n".join(lines) + "\n"

    def write(self, run_dir: str | Path) -> tuple[Path, Path]:
        """Write ``verdict.json`` and ``verdict.txt`` into ``run_dir``."""
        run = Path(run_dir)
        j, t = run / "verdict.json", run / "verdict.txt"
        j.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n",
                     encoding="utf-8")
        t.write_text(self.to_text(), encoding="utf-8")
        return j, t
