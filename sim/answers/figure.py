"""The answers' figures: a matplotlib ``Figure`` made without pyplot (the caller's backend
and pyplot's figure list are left alone), laid out and written in one call."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


def new_figure(width_in: float, height_in: float) -> Figure:
    """A ``width_in`` x ``height_in`` inch figure at :data:`DPI`, not known to pyplot."""
    # lazy: +428 ms (matplotlib) off importing figure
    from matplotlib.figure import Figure  # imported when drawing, not with the answers

    return Figure(figsize=(width_in, height_in), dpi=DPI)


def save_figure(fig: Figure, path: Path | str, **layout: Any) -> Path:
    """Lay ``fig`` out (``tight_layout(**layout)``) and write it to ``path``; the path."""
    fig.tight_layout(**layout)
    path = Path(path)
    fig.savefig(path)
    return path
