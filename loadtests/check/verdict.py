"""The verdict of a load run: one :class:`Verdict` data object, written as ``verdict.json``.

Every place that shows a verdict (the terminal at the end of ``rtalab load run``,
``rtalab check``, ``verdict.txt``, ``report.html``, ``meta.json``'s ``verdict_ok`` and
the exit status) reads this one object, so they cannot disagree.

``verdict.json``::

    {"ok", "verdict": "PASS" | "FAIL" | "INTERRUPTED", "run_status", "failed": [names],
     "rules": [{"name", "section", "kind", "status", "count", "examples", "detail",
                "rate_per_1k_turns"}],
     "indeterminate": {class: {"count", "examples", "detail"}},
     "warnings": [text], "figures": {name: value}, "stats": {...},
     "coverage": [{...}] | null, "overhead": {...} | null}

``status`` of a rule is ``pass`` | ``fail`` | ``not-checked``.  ``kind``:

* ``violation`` -- a MUST of errors.md or the delivery contract: any occurrence fails;
* ``hazard`` -- a rate reported per 1,000 turns, failing only above a limit the user set;
* ``integrity`` -- a named run-integrity check (ledger gathered, server and witness agree
  with the ledger once the indeterminate executions are explained);
* ``gate`` -- a release gate of the run: ``availability``, ``auth`` and one ``slo`` rule
  per ``--slo``.

``ok`` is true when no rule failed and the run was not interrupted.  Rules are a flat
list so that other rule sets (and a ``coverage`` table) add to the verdict without
changing how it is rendered or judged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from rtalab.loadtests.check.coverage import coverage_text

Status = Literal["pass", "fail", "not-checked"]
Kind = Literal["violation", "hazard", "integrity", "gate"]
PASS: Status = "pass"
FAIL: Status = "fail"
NOT_CHECKED: Status = "not-checked"
MAX_EXAMPLES = 5
INTERRUPTED = "interrupted"
# the key figures shown at the end of every run: (summary.json metric, label, unit)
KEY_FIGURES = (
    ("success_rate", "success", ""),
    ("ttfc_s.p50", "TTFC p50", "s"), ("ttfc_s.p99", "TTFC p99", "s"),
    ("completion_s.p50", "completion p50", "s"), ("completion_s.p99", "completion p99", "s"),
    ("attempts_per_turn", "attempts/turn", ""),
)


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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RuleResult:
        """The inverse of :meth:`to_dict`."""
        return cls(name=d["name"], section=d.get("section", ""), kind=d.get("kind", "violation"),
                   status=d["status"], count=int(d.get("count") or 0),
                   examples=tuple(d.get("examples") or ()), detail=d.get("detail") or "",
                   rate_per_1k_turns=d.get("rate_per_1k_turns"))


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


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "n/a"
        return f"{v:.3g}{unit}" if unit else f"{v:.4g}"
    return f"{v}{unit}"


@dataclass
class Verdict:
    """Every rule's result, the indeterminate executions, warnings and the run's figures."""

    rules: list[RuleResult]
    stats: dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""
    indeterminate: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    run_status: str | None = None  # meta.json status when judged (None: not a load run folder)
    coverage: list[dict[str, Any]] | None = None  # added by a coverage builder, if any
    overhead: dict[str, Any] | None = None  # wall-clock parts of a load run beyond its load

    @property
    def interrupted(self) -> bool:
        """True when the run was stopped by a signal before its end."""
        return self.run_status == INTERRUPTED

    @property
    def ok(self) -> bool:
        """True when no rule failed and the run ran to its end."""
        return not self.interrupted and not any(r.status == FAIL for r in self.rules)

    @property
    def failed(self) -> list[str]:
        """Names of the failed rules."""
        return [r.name for r in self.rules if r.status == FAIL]

    @property
    def headline(self) -> str:
        """``PASS``, ``FAIL`` or ``INTERRUPTED``."""
        if self.interrupted:
            return "INTERRUPTED"
        return "PASS" if self.ok else "FAIL"

    def rule(self, name: str) -> RuleResult:
        """The result of rule ``name`` (KeyError if unknown)."""
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)

    def add(self, results: Sequence[RuleResult]) -> None:
        """Append more rule results (another rule set)."""
        self.rules.extend(results)

    def verdict_line(self) -> str:
        """One line: the verdict and the failed rules."""
        if self.interrupted:
            extra = f"; failed so far: {', '.join(self.failed)}" if self.failed else ""
            return f"verdict: INTERRUPTED (partial ledger, judged as far as gathered{extra})"
        return "verdict: PASS" if self.ok else f"verdict: FAIL ({', '.join(self.failed)})"

    def to_dict(self) -> dict[str, Any]:
        """The verdict.json content."""
        return {"ok": self.ok, "verdict": self.headline, "run_status": self.run_status,
                "run_dir": self.run_dir, "failed": self.failed,
                "rules": [r.to_dict() for r in self.rules],
                "indeterminate": self.indeterminate, "warnings": self.warnings,
                "figures": self.figures, "stats": self.stats, "coverage": self.coverage,
                "overhead": self.overhead}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        """A Verdict from verdict.json content."""
        return cls(rules=[RuleResult.from_dict(r) for r in d.get("rules", [])],
                   stats=d.get("stats") or {}, run_dir=d.get("run_dir") or "",
                   indeterminate=d.get("indeterminate") or {},
                   warnings=list(d.get("warnings") or []), figures=d.get("figures") or {},
                   run_status=d.get("run_status"), coverage=d.get("coverage"),
                   overhead=d.get("overhead"))

    @classmethod
    def read(cls, run_dir: str | Path) -> Verdict | None:
        """The verdict.json of ``run_dir`` (None if there is none)."""
        path = Path(run_dir) / "verdict.json"
        if not path.is_file():
            return None
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))

    def failure_lines(self) -> list[str]:
        """One line per failed rule: name, section, count, examples."""
        out = []
        for r in self.rules:
            if r.status == FAIL:
                ex = f"; e.g. {', '.join(r.examples[:3])}" if r.examples else ""
                out.append(f"  FAILED {r.name} [{r.section}]: {r.detail or r.count}{ex}")
        return out

    def figure_line(self) -> str:
        """The key figures in one line."""
        f = self.figures
        parts = [f"{label} {_fmt(f.get(key), unit)}" for key, label, unit in KEY_FIGURES]
        parts.append(f"hazards/1k turns {_fmt(f.get('hazards_per_1k_turns'))}")
        return "  " + ", ".join(parts)

    def binding_lines(self) -> list[str]:
        """One line per binding of a run over several (``stats.by_binding``): its turns,
        success, geometric-mean TTFC and completion, and the delivery rules it failed."""
        out = []
        for b, f in (self.stats.get("by_binding") or {}).items():
            parts = [f"{f.get('turns', 0)} turns"]
            if f.get("success") is not None:
                parts.append(f"success {f['success']:.1%}")
            for key, label in (("ttfc_geomean_s", "TTFC"), ("completion_geomean_s",
                                                              "completion")):
                if f.get(key) is not None:
                    parts.append(f"{label} {f[key] * 1000:.0f} ms")
            failed = f.get("failed_rules") or []
            parts.append(f"failed: {', '.join(failed)}" if failed else "delivery rules pass")
            out.append(f"    {b}: " + ", ".join(parts))
        return (["  by binding (geometric means):", *out]) if out else []

    def summary_text(self) -> str:
        """The end-of-run lines for the terminal: verdict, failed rules, key figures."""
        lines = [self.verdict_line(), *self.failure_lines()]
        if self.figures:
            lines.append(self.figure_line())
        lines += self.binding_lines()
        ind = {k: v for k, v in self.indeterminate.items() if v.get("count")}
        if ind:
            lines.append("  indeterminate (not violations): " + ", ".join(
                f"{k} {v['count']}" for k, v in ind.items()))
        lines += [f"  warning: {w}" for w in self.warnings]
        if self.overhead and self.overhead.get("overhead_s") is not None:
            lines.append(f"  {overhead_line(self.overhead)}")
        return "\n".join(lines) + "\n"

    def to_text(self) -> str:
        """A human-readable table (verdict.txt)."""
        lines = [self.verdict_line(), ""]
        width = max((len(r.name) for r in self.rules), default=4)
        for r in self.rules:
            rate = "" if r.rate_per_1k_turns is None else f"  {r.rate_per_1k_turns:.3g}/1k turns"
            lines.append(f"{r.status.upper():<11} {r.name:<{width}}  {r.kind:<9} "
                         f"count={r.count}{rate}  [{r.section}]")
            if r.detail:
                lines.append(f"{'':<11} {'':<{width}}  {r.detail}")
            if r.examples and r.status != PASS:
                lines.append(f"{'':<11} {'':<{width}}  e.g. {', '.join(r.examples)}")
        if self.indeterminate:
            lines += ["", "indeterminate (reported, never a violation):"]
            for k, v in self.indeterminate.items():
                ex = f"  e.g. {', '.join(v.get('examples') or [])}" if v.get("examples") else ""
                lines.append(f"  {k}: {v.get('count', 0)}  {v.get('detail', '')}{ex}")
        if self.warnings:
            lines += ["", "warnings:"] + [f"  {w}" for w in self.warnings]
        if self.figures:
            lines += ["", "key figures:", self.figure_line()]
        if self.binding_lines():
            lines += ["", *self.binding_lines()]
        if self.stats:
            lines += ["", "stats:"]
            lines += [f"  {k}: {v}" for k, v in self.stats.items()]
        if self.overhead:
            lines += ["", overhead_line(self.overhead)]
        if self.coverage is not None:  # last: what this verdict proved

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


def overhead_line(o: dict[str, Any]) -> str:
    """``overhead: X s beyond duration + drain (start .., gather .., check .., report ..)``."""
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in o.get("parts", {}).items())
    return (f"overhead: {o.get('overhead_s', 0.0):.1f} s beyond duration + drain "
            f"({o.get('load_s', 0.0):.1f} s)" + (f" ({parts})" if parts else ""))
