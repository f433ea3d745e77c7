"""The verdict on a terminal (``rtalab check``, the end of ``rtalab load run``): readable at
80 columns -- one line per rule with a marker, its count and rate, the detail wrapped
under it, examples for failures, and a footer saying what the markers mean.  What the
verdict says is :class:`rtalab.loadtests.check.Verdict`'s; this module only lays it out."""

from __future__ import annotations

import shutil
import textwrap
from typing import Any

MARKS = {"pass": "✔", "fail": "✘", "not-checked": "–"}
FOOTER = ("✔ pass   ✘ fail   – not checked (nothing to judge in this run).  count = "
          "occurrences; /1k = per 1,000 turns after warm-up.  Each rule's errors.md "
          "section: verdict.txt; for CI: --junit FILE.")


def terminal_width(default: int = 80) -> int:
    """The terminal's width (``COLUMNS`` first), at least 60."""
    return max(60, shutil.get_terminal_size((default, 24)).columns)


def _num(v: Any) -> str:
    if v is None:
        return "–"
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if x == int(x) and abs(x) < 1e9:
        return f"{int(x):,}"
    return f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.4f}"


def verdict_lines(data: dict[str, Any], width: int | None = None) -> list[str]:
    """``verdict.json`` as terminal lines no wider than ``width``."""
    width = width or terminal_width()
    failed = [str(f) for f in data.get("failed") or []]
    head = f"verdict: {data.get('verdict') or ('PASS' if data.get('ok') else 'FAIL')}"
    lines = [head + (f" ({', '.join(failed)})" if failed else "")]
    rules = [r for r in data.get("rules") or [] if isinstance(r, dict)]
    name_w = min(26, max((len(str(r.get("name", ""))) for r in rules), default=4))
    lines.append(f"  {'rule':<{name_w}} {'kind':<10} {'count':>7} {'/1k':>7}")
    wrap = textwrap.TextWrapper(width=width, initial_indent=" " * 4,
                                subsequent_indent=" " * 4, break_on_hyphens=False)
    for r in rules:
        status = str(r.get("status", "?"))
        rate = r.get("rate_per_1k_turns")
        lines.append(f"{MARKS.get(status, '?')} {r.get('name', '?')!s:<{name_w}} "
                     f"{r.get('kind', '')!s:<10} {_num(r.get('count')):>7} "
                     f"{'' if rate is None else _num(rate):>7}")
        if r.get("detail"):
            lines += wrap.wrap(str(r["detail"]))
        if status == "fail" and r.get("examples"):
            lines += wrap.wrap("examples: " + ", ".join(str(e) for e in r["examples"][:5]))
    ind = {k: v for k, v in (data.get("indeterminate") or {}).items()
           if isinstance(v, dict) and v.get("count")}
    if ind:
        lines += textwrap.wrap("indeterminate (reported, never a violation): " + ", ".join(
            f"{k} {v['count']}" for k, v in ind.items()), width=width, subsequent_indent="  ")
    for w in data.get("warnings") or []:
        lines += textwrap.wrap(f"warning: {w}", width=width, subsequent_indent="  ")
    lines += textwrap.wrap(FOOTER, width=width)
    return lines


def wrap_text(text: str, width: int | None = None) -> str:
    """Lines of ``text`` wrapped to the terminal, continuation lines indented 4 more."""
    width = width or terminal_width()
    out = []
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        out += textwrap.wrap(line, width=width, subsequent_indent=" " * (indent + 4),
                             break_on_hyphens=False) or [""]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
