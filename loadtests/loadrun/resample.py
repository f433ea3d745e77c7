"""Draws of a load run's calls, with replacement, as tables: the bootstrap's inner loop.

The bootstrap over calls (:mod:`rtalab.loadtests.loadrun.uncertainty`) rebuilds every table of
a run from a draw of its calls a few hundred times per run, and each draw is read by the
simulator's ``replication_metrics``.  Done with a pandas merge on string ids per draw, that
was most of the CPU a load run spends after its load ends (about 9 of 19 CPU-seconds of a
56-s release-gate run).  :class:`CallResampler` prepares the tables once:

- every identifier column (:data:`ID_COLUMNS`) is coded as ``int64``, one code space per
  column across all tables (the simulator's own representation of ids; a missing id gets a
  code of its own, so "same id" means what it meant on the strings);
- the columns ``replication_metrics`` compares with names (:data:`CATEGORY_COLUMNS`)
  become categoricals (its fast path);
- each table's rows are grouped by call.

A draw then takes the rows of each drawn call (``numpy.repeat`` of row positions), and the
``j``-th copy of a call drawn several times gets ids of its own (``code + j * M``, ``M``
the number of codes of the column), so a call drawn twice is two calls, never one call
whose requests ran twice, while the first copies keep the ids they shared with other calls
(a server that answered two calls with one task still did so in every draw).  Rows come in
the order of the calls, each copy's rows in the table's order.  The time series is rebuilt
from the drawn tables by the caller's ``series``.

``draw(arange(n))`` gives the run itself: ``replication_metrics`` of it equals that of the
original tables (a test), so the codes change nothing but speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from rtalab.sim.shared import schema as S

#: identifiers a drawn copy of a call gets its own of
ID_COLUMNS = (S.CALL_ID, S.INTERACTION_ID, S.REQUEST_GUID, S.TASK_ID, S.CONTEXT_ID)
#: columns compared with names by ``replication_metrics``: categoricals, its fast path
CATEGORY_COLUMNS = (S.OUTCOME, S.END_REASON, S.ERROR_CODE, S.DISPOSITION, S.PHASE)
TABLES = ("attempts", "turns", "calls", "executions", "side_effects")

#: builds a run's time series from its tables and its end (``tables.timeseries``)
Series = Callable[[Any, float], pd.DataFrame]


@dataclass(frozen=True)
class _Table:
    frame: pd.DataFrame  # coded, rows grouped by call (call order), table order within
    call: np.ndarray  # the call index of each row of ``frame``
    ids: tuple[tuple[str, int], ...]  # (column, number of codes) of the coded id columns
    # (column, its array, its number of codes if it is a coded id column): a draw takes the
    # arrays and builds one frame from them (a DataFrame.take, then setting the id columns,
    # copied every column twice; the same frame, a third less CPU a draw)
    columns: tuple[tuple[str, Any, int | None], ...]


class CallResampler:
    """``out``'s tables prepared once; :meth:`draw` gives the tables of a draw of calls."""

    def __init__(self, out: Any, series: Series):
        self.out = out
        self.series = series
        self.end_s = float(out.counters.get("end_s") or len(out.timeseries) or out.duration_s)
        calls = out.calls[S.CALL_ID].astype(str).to_numpy()
        self.n_calls = len(calls)
        index = pd.Index(calls)
        codes = self._id_codes(out)
        self.tables: dict[str, _Table | None] = {}
        for name in TABLES:
            df = getattr(out, name)
            if len(df) == 0 or S.CALL_ID not in df.columns:
                self.tables[name] = None
                continue
            call = index.get_indexer(df[S.CALL_ID].astype(str).to_numpy())
            rows = np.flatnonzero(call >= 0)  # rows of a call the run has (as a merge keeps)
            rows = rows[np.argsort(call[rows], kind="stable")]
            frame = df.iloc[rows].reset_index(drop=True)
            ids = []
            for col, (per_table, m) in codes.items():
                if col in frame.columns:
                    frame[col] = per_table[name][rows]
                    ids.append((col, m))
            for col in CATEGORY_COLUMNS:
                if col in frame.columns and frame[col].dtype == object:
                    frame[col] = frame[col].astype("category")
            codes_of = dict(ids)
            self.tables[name] = _Table(frame, call[rows], tuple(ids),
                                       tuple((c, frame[c].array, codes_of.get(c))
                                             for c in frame.columns))

    @staticmethod
    def _id_codes(out: Any) -> dict[str, tuple[dict[str, np.ndarray], int]]:
        """Per id column: its int64 codes in each table (one code space), and their number."""
        result = {}
        for col in ID_COLUMNS:
            parts = {name: getattr(out, name)[col] for name in TABLES
                     if col in getattr(out, name).columns and len(getattr(out, name))}
            if not parts:
                continue
            joined = pd.concat([s.astype(object) for s in parts.values()], ignore_index=True)
            codes, uniques = pd.factorize(joined, use_na_sentinel=False)
            per_table, at = {}, 0
            for name, s in parts.items():
                per_table[name] = codes[at:at + len(s)].astype(np.int64)
                at += len(s)
            result[col] = (per_table, max(1, len(uniques)))
        return result

    def draw(self, draw: np.ndarray) -> Any:
        """The run's records with the calls ``draw`` (indices into its calls, repeats
        allowed), the time series rebuilt from them."""
        counts = np.bincount(draw, minlength=self.n_calls)
        tables = {}
        for name in TABLES:
            t = self.tables[name]
            if t is None:
                tables[name] = getattr(self.out, name)
                continue
            reps = counts[t.call]
            pos = np.repeat(np.arange(len(t.frame)), reps)
            # copy number of each repeated row: 0 .. reps - 1
            copy = np.arange(len(pos)) - np.repeat(np.cumsum(reps) - reps, reps)
            # calls in order, each copy's rows together, in the table's order
            order = np.lexsort((pos, copy, t.call[pos]))
            pos, copy = pos[order], copy[order]
            data = {}
            for col, values, m in t.columns:
                data[col] = values.take(pos) if m is None else values.to_numpy()[pos] + copy * m
            tables[name] = pd.DataFrame(data, copy=False)
        new = replace(self.out, **tables)
        return replace(new, timeseries=self.series(new, self.end_s))
