"""The pieces a report section is made of: a folder's files read (a damaged one raises
:class:`RunFolderError`), tables, figures (base64 PNG) and the section dict the template takes.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rtalab.sim.shared.compare import RunFolderError
from rtalab.sim.shared.fmt import fmt_value

FIG_DPI = 100

def read_json(path: Path) -> dict[str, Any]:
    """A folder's JSON object; unreadable or not an object: RunFolderError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RunFolderError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise RunFolderError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: not a JSON object")
    return data


def read_csv(path: Path) -> list[dict[str, str]]:
    """A folder's CSV file as rows; unreadable: RunFolderError."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise RunFolderError(f"{path}: cannot read: {e}") from None


def read_text(path: Path) -> str:
    """A folder's text file (empty when absent); unreadable: RunFolderError."""
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as e:
        raise RunFolderError(f"{path}: cannot read: {e}") from None


# --------------------------------------------------------------------------- pieces


def b64_file(path: Path) -> str:
    """A file's bytes in base64."""
    return base64.b64encode(path.read_bytes()).decode("ascii")


def file_figure(path: Path, caption: str) -> dict[str, str]:
    """A figure of the template from a PNG file."""
    return {"caption": caption, "data": b64_file(path), "svg": ""}


def png_data(fig: Any) -> str:
    """A matplotlib figure as a base64 PNG (a section's or a ``lead``'s figure); the figure is
    closed."""
    # lazy: +866 ms (matplotlib) off importing pieces
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    # fast zlib level: a report's PNGs are a little larger, rendered about twice as fast
    fig.savefig(buf, format="png", dpi=FIG_DPI, pil_kwargs={"compress_level": 1})
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


_NUMBER_TEXT = re.compile(r"^(–|[−\-+<>]?\s?\d[\d.,]*\s?(%|ms|s|pp|B|KiB|MiB|×)?"
                          r"(\s\[.*\](\s?(%|ms|s|pp))?)?( ≠)?)$")


def _is_number_text(c: str) -> bool:
    """True for a cell that is a number (with unit and CI), left for right-alignment."""
    return bool(_NUMBER_TEXT.match(c.strip()))


def text_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
           note: str = "") -> dict[str, Any]:
    """A table for the template (and a ``lead``'s tables): cells as text; ``left`` marks the
    text (non-number) columns, which are left-aligned and may wrap (a column of mostly "–" is
    judged by its other cells: a long list of ids among dashes must wrap, not widen the
    table)."""
    cells = [[c if isinstance(c, str) else fmt_value(c) for c in r] for r in rows]

    def text_column(i: int) -> bool:
        col = [r[i] for r in cells if i < len(r) and r[i].strip() != "–"]
        return sum(not _is_number_text(c) for c in col) * 2 > len(col)

    left = [i == 0 or text_column(i) for i in range(len(headers))]
    ident = [[bool(_IDENT.match(c)) for c in r] for r in cells]
    return {"title": title, "headers": list(headers), "rows": cells, "note": note, "left": left,
            "ident": ident}




# a name such as a rule's (``continuation-answered-twice``): kept on one line, never broken at
# its hyphens
_IDENT = re.compile(r"^[a-z][a-z0-9]*([-_.][a-z0-9]+)+$")


def new_section(kind: str, label: str, path: Path, **kw: Any) -> dict[str, Any]:
    """A section dict of the template: every key present, ``kw`` over the defaults."""
    base: dict[str, Any] = {
        "kind": kind, "label": label, "path": str(path), "facts": [],
        "answer": {"status": "info", "headline": "", "lines": [], "table": None, "chips": []},
        "figures": [], "notes": [], "tables": [], "appendix": [], "toml": ""}
    answer = {**base["answer"], **kw.pop("answer", {})}
    base.update(kw, answer=answer)
    return base


def fact_rows(pairs: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """The (key, text) facts of a section, empty values left out."""
    return [(k, str(v)) for k, v in pairs if v is not None and v != ""]


def as_float(v: Any) -> float | None:
    """``v`` as a finite float, else None."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None

