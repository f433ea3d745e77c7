"""Result tables readable in an 80-column terminal: one block ("card") per row.

A wide table (tune candidates, capacity levels, storm strategies, sweep points) has
more columns than a terminal has room for, and cutting parameter names
(``param.li…``) makes it useless.  Transposed, each row becomes a card::

    trial 9 — recommended
      live.timeouts.turn_response_s                  0.75
      caller_completion_s.p99 (s)                    2.14 [2.04, 2.24]

every field on its own line with its full name, its unit and, for a metric, its 95 %
CI; a name too long for the label column puts its value on the next line.  Nothing is
ever cut.  Pure text: the CLI prints it, tests read it.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

WIDTH = 80
LABEL_MAX = 46  # label column width at most; longer names get their own line


def number(v: Any) -> str:
    """A cell: 4 significant digits, ``inf``, ``–`` when undefined."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else f"{v:.4g}"
    return str(v)


def render(cards: Sequence[tuple[str, Sequence[tuple[str, str]]]], title: str = "",
           width: int = WIDTH) -> str:
    """``cards``: (heading, [(label, text), ...]) each; every line at most ``width`` wide
    (a single word longer than that is the only exception)."""
    labels = [label for _, fields in cards for label, _ in fields]
    label_w = min(LABEL_MAX, max((len(s) for s in labels), default=0))
    lines = textwrap.wrap(title, width) if title else []
    indent = " " * (4 + label_w)
    for heading, fields in cards:
        if lines:
            lines.append("")
        lines.extend(textwrap.wrap(heading, width) or [""])
        for label, text in fields:
            if len(label) <= label_w:
                first = f"  {label:<{label_w}}  "
                lines.extend(textwrap.wrap(text, width, initial_indent=first,
                                           subsequent_indent=indent) or [first.rstrip()])
            else:
                lines.extend(textwrap.wrap(label, width, initial_indent="  ",
                                           subsequent_indent="    "))
                lines.extend(textwrap.wrap(text, width, initial_indent=indent,
                                           subsequent_indent=indent))
    return "\n".join(lines)


def frame_cards(df: pd.DataFrame, heading: Callable[[pd.Series], str],
                unit: Callable[[str], str] = lambda name: "",
                skip: Sequence[str] = (), prefix_strip: str = "param.",
                ) -> list[tuple[str, list[tuple[str, str]]]]:
    """Cards of a DataFrame: one per row, headed by ``heading(row)``; a column ``c`` with
    ``c.ci_low`` / ``c.ci_high`` beside it shows as ``m [lo, hi]`` (``X.change`` with
    ``X.diff_ci_low`` / ``X.diff_ci_high`` likewise); ``prefix_strip`` is
    dropped from column names (``param.live.x`` → ``live.x``); ``unit(name)`` is appended
    in parentheses when not empty; columns in ``skip`` are left out."""
    cols = [c for c in df.columns if c not in skip
            and not c.endswith((".ci_low", ".ci_high", ".diff_ci_low", ".diff_ci_high"))]
    out = []
    for _, row in df.iterrows():
        fields = []
        for c in cols:
            v = row[c]
            missing = v is None or (isinstance(v, float) and math.isnan(v))
            if missing and ((prefix_strip and c.startswith(prefix_strip))
                            or c.endswith((".change", ".p"))):
                continue  # a parameter the row does not set; no comparison with itself
            text = number(v)
            if f"{c}.ci_low" in df.columns:
                text += f" [{number(row[c + '.ci_low'])}, {number(row[c + '.ci_high'])}]"
            base = c[:-len(".change")] if c.endswith(".change") else None
            if base is not None and f"{base}.diff_ci_low" in df.columns:
                text += (f" [{number(row[base + '.diff_ci_low'])}, "
                         f"{number(row[base + '.diff_ci_high'])}]")
            name = c[len(prefix_strip):] if prefix_strip and c.startswith(prefix_strip) else c
            if name.endswith(".p"):
                fields.append((f"{name[:-2]} p-value", text))
                continue
            u = unit(name[:-len(".change")] if base is not None else name)
            if base is not None:
                name = f"{base} change"
            fields.append((f"{name} ({u})" if u else name, text))
        out.append((heading(row), fields))
    return out
