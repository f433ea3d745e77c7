"""Record tables: rows appended as plain tuples, compacted into numpy columns now and then.

Appending a tuple is the cheapest thing the hot path can do; holding millions of
tuples of boxed floats is not (~400 B a row).  Every cell must be a number
(bool, int below 2**53, float; NaN for a missing float).  :meth:`Table.compact` turns the
pending rows into one numpy array per column (8 B a value) once ``chunk_rows``
have accumulated; it is called from the once-a-second tick, so 1M turns stay
well under 1 GB.  Categorical columns are appended as integer codes (index into
their category tuple, -1 = missing) and become pandas categoricals at the end.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.schema import REPLICATION, ColumnSpec

_NUMPY_KIND = {"f8": np.float64, "i8": np.int64, "bool": np.bool_}


def _dtype(kind: str | tuple[str, ...]) -> type:
    return np.int16 if isinstance(kind, tuple) else _NUMPY_KIND[kind]


def code_of(categories: Sequence[str]) -> dict[str | None, int]:
    """Map category -> integer code (None -> -1), for appending categoricals as codes."""
    out: dict[str | None, int] = {c: i for i, c in enumerate(categories)}
    out[None] = -1
    return out


class Table:
    """One record table: ``add(tuple)`` in the hot path, :meth:`frame` once at the end."""

    def __init__(self, spec: Sequence[ColumnSpec], chunk_rows: int = 1 << 16) -> None:
        self.spec = tuple(spec)
        self.rows: list[tuple] = []
        self.add = self.rows.append
        self.chunk_rows = chunk_rows
        self._chunks: list[list[np.ndarray]] = []
        self._n_compacted = 0

    def __len__(self) -> int:
        return self._n_compacted + len(self.rows)

    def compact(self, force: bool = False) -> None:
        """Move pending rows into numpy column chunks (if at least ``chunk_rows`` or ``force``)."""
        rows = self.rows
        if not rows or (len(rows) < self.chunk_rows and not force):
            return
        # every cell is a number (bool, int < 2**53, float): one C-level pass to float64 is
        # exact and ~2x faster than transposing the tuples in Python
        block = np.array(rows, dtype=np.float64).reshape(len(rows), len(self.spec))
        self._chunks.append([block[:, j].astype(_dtype(kind))
                             for j, (_, kind) in enumerate(self.spec)])
        self._n_compacted += len(rows)
        rows.clear()  # the same list: ``self.add`` stays bound to it

    def columns(self) -> list[np.ndarray]:
        """One numpy array per column (all rows, in order); the table is empty afterwards."""
        self.compact(force=True)
        chunks, self._chunks = self._chunks, []
        self._n_compacted = 0
        out = []
        for j, (_, kind) in enumerate(self.spec):
            parts = [c[j] for c in chunks]
            for c in chunks:
                c[j] = None  # type: ignore[call-overload]  # free each part once joined
            if not parts:
                out.append(np.empty(0, dtype=_dtype(kind)))
            else:
                out.append(parts[0] if len(parts) == 1 else np.concatenate(parts))
        return out

    def frame(self, replication: int, order_by: Sequence[str] = ()) -> pd.DataFrame:
        """The table as a DataFrame, ``replication`` first, categoricals decoded, rows sorted
        (stably) by the columns ``order_by``; the table is empty afterwards.

        Built column by column so that at most one extra column is alive at a time.
        """
        cols = self.columns()
        names = [name for name, _ in self.spec]
        order = None
        if order_by:
            keys = [cols[names.index(k)] for k in reversed(order_by)]
            order = np.lexsort(keys)
            if (order[1:] > order[:-1]).all():
                order = None  # already in order
        n = len(cols[0])
        data: dict[str, object] = {REPLICATION: np.full(n, replication, dtype=np.int64)}
        for j, (name, kind) in enumerate(self.spec):
            arr = cols[j]
            cols[j] = None  # type: ignore[call-overload]
            data[name] = as_column(arr if order is None else arr[order], kind)
        return pd.DataFrame(data, copy=False)


def as_column(arr: np.ndarray, kind: str | tuple[str, ...]) -> object:
    """A numpy column as stored in a DataFrame (categorical codes decoded)."""
    if isinstance(kind, tuple):
        return pd.Categorical.from_codes(arr.astype(np.int16), categories=list(kind))
    return arr
