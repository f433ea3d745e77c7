"""Record tables: rows packed into a byte buffer as they happen, compacted into numpy columns.

A row is written as ``table.write(table.pack(c1, c2, ...))``: one C-level
``struct`` pack of its cells, in the order of the table's columns in
:mod:`rtalab.sim.shared.schema`, each in its column's type (``f8``: float64, ``i8``: int64,
``bool``: one byte, categorical: int16 code), appended to a ``bytearray`` — at
most 8 B a cell from the start, where a tuple of boxed objects held ~400 B a row
and cost ~3x as much to turn into numpy columns later.  A cell of the wrong type
(``None`` anywhere, a float in an integer column) raises ``struct.error`` at
once, in the writer that wrote it, and so does a row with the wrong number of
cells; a bool column takes any value's truth.  :meth:`Table.compact` turns the
pending bytes into one numpy array per column (with the column's dtype) once
``chunk_rows`` rows have accumulated; it is called from the once-a-second tick.
Categorical columns are written as integer codes (index into their category
tuple, -1 = missing) and become pandas categoricals at the end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from rtalab.sim.shared.schema import REPLICATION, ColumnSpec

_NUMPY_KIND = {"f8": np.float64, "i8": np.int64, "bool": np.bool_}
_STRUCT_CODE = {"f8": "d", "i8": "q", "bool": "?"}  # categorical codes: "h" (int16)


def _dtype(kind: str | tuple[str, ...]) -> type:
    return np.int16 if isinstance(kind, tuple) else _NUMPY_KIND[kind]


def _struct_code(kind: str | tuple[str, ...]) -> str:
    return "h" if isinstance(kind, tuple) else _STRUCT_CODE[kind]


def code_of(categories: Sequence[str]) -> dict[str | None, int]:
    """Map category -> integer code (None -> -1), for appending categoricals as codes."""
    out: dict[str | None, int] = {c: i for i, c in enumerate(categories)}
    out[None] = -1
    return out


class Table:
    """One record table: ``write(pack(*cells))`` in the hot path, :meth:`frame` once at the end."""

    def __init__(self, spec: Sequence[ColumnSpec], chunk_rows: int = 1 << 16) -> None:
        self.spec = tuple(spec)
        #: with a sink, each compacted chunk's columns go to ``sink(columns)``, which returns
        #: the columns of the rows to keep (or None: keep none) — bounded-memory runs
        self.sink: Callable[[list[np.ndarray]], list[np.ndarray] | None] | None = None
        layout = struct.Struct("=" + "".join(_struct_code(kind) for _, kind in self.spec))
        self.row_bytes = layout.size
        #: ``pack(c1, c2, ...)`` -> the row's bytes (each cell in its column's type, in order)
        self.pack = layout.pack
        # the same packed layout as a numpy record (no padding on either side)
        self._record = np.dtype([(f"c{j}", _dtype(kind)) for j, (_, kind) in enumerate(self.spec)])
        assert self._record.itemsize == self.row_bytes
        self._buf = bytearray()
        #: ``write(pack(...))`` appends a packed row
        self.write = self._buf.extend
        self.chunk_rows = chunk_rows
        self._chunks: list[list[np.ndarray]] = []
        self._n_compacted = 0

    def add(self, row: Sequence[float | int | bool]) -> None:
        """Append one row given as a sequence of cells (off the hot path)."""
        self.write(self.pack(*row))

    @property
    def pending(self) -> int:
        """Rows written since the last compaction."""
        return len(self._buf) // self.row_bytes

    def __len__(self) -> int:
        return self._n_compacted + self.pending

    def compact(self, force: bool = False) -> None:
        """Move pending rows into numpy column chunks (if at least ``chunk_rows`` or ``force``)."""
        n = self.pending
        if not n or (n < self.chunk_rows and not force):
            return
        block = np.frombuffer(self._buf, dtype=self._record)
        # np.array copies: nothing keeps a view of the buffer, which is then emptied in place
        cols = [np.array(block[f"c{j}"]) for j in range(len(self.spec))]
        del block
        if self.sink is not None:
            kept = self.sink(cols)
            if kept is not None and len(kept[0]):
                self._chunks.append(kept)
        else:
            self._chunks.append(cols)
        self._n_compacted += n
        self._buf.clear()  # the same bytearray: ``self.write`` stays bound to it

    def columns(self) -> list[np.ndarray]:
        """One numpy array per column (all rows, in order); the table is empty afterwards."""
        self.compact(force=True)
        chunks, self._chunks = self._chunks, []
        self._n_compacted = 0
        out: list[np.ndarray] = []
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
            cols[j] = None  # type: ignore[call-overload]  # frees the column (the list is dropped after)
            data[name] = as_column(arr if order is None else arr[order], kind)
        return pd.DataFrame(data, copy=False)


def as_column(arr: np.ndarray, kind: str | tuple[str, ...]) -> object:
    """A numpy column as stored in a DataFrame (categorical codes decoded)."""
    if isinstance(kind, tuple):
        codes, categories = arr.astype(np.int16), list(kind)
        # pandas-stubs types codes only as Sequence[int] and categories only as Index
        return pd.Categorical.from_codes(codes, categories=categories)  # type: ignore[arg-type]  # see above
    return arr


def row_writer(table: Table, namespace: Mapping[str, Any], params: str,
               cells: Mapping[str, str], prelude: str = "") -> Callable[..., None]:
    """A function ``f(<params>)`` that writes one row of ``table``, its cells NAMED.

    ``cells`` maps every column of the table (names from :mod:`rtalab.sim.shared.schema`) to the
    Python expression that computes it from ``params`` (and names in ``namespace``, e.g. the
    calling module's ``globals()``); ``prelude`` is optional statements run first.  The
    function is compiled once, as :func:`collections.namedtuple` and :mod:`dataclasses`
    compile theirs: it packs the cells in the schema's column order, so a writer can
    neither miss a column, name an unknown one, nor put one in the wrong place — all three
    raise here, when the writer is built — and it costs exactly a hand-written
    ``table.write(table.pack(...))``.
    """
    names = [name for name, _ in table.spec]
    missing = [n for n in names if n not in cells]
    unknown = [n for n in cells if n not in names]
    if missing or unknown:
        raise ValueError(f"row writer for columns {names}: missing {missing}, unknown {unknown}")
    body = "".join(f"    {line.strip()}\n" for line in prelude.strip().splitlines())
    args = "".join(f"        {cells[n]},  # {n}\n" for n in names)
    src = f"def write_row({params}):\n{body}    _write(_pack(\n{args}    ))\n"
    scope = dict(namespace)
    scope.update(_write=table.write, _pack=table.pack)
    exec(compile(src, f"<row writer: {', '.join(names[:3])}, ...>", "exec"), scope)
    fn = scope["write_row"]
    fn.__doc__ = f"Write one row ({', '.join(names)}).\n\n{src}"
    return cast("Callable[..., None]", fn)
