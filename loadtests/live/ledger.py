"""Ledger rows of one Locust process, and their gathering on the master without loss.

Every process appends rows to a :class:`Ledger` and ships them in numbered
batches with ``runner.send_message("rta_ledger", ...)`` (about once a second,
and a last batch after its users stopped), then ``rta_done`` with the number
of batches and rows it sent.  The master's :class:`Gatherer` appends each
batch to ``ledger/<table>.jsonl`` as it arrives and knows a process is
complete when it has every batch number below the announced count and the row
counts match.  A local (single-process) run uses the same path: Locust's
``LocalRunner.send_message`` calls the handler in process.  See docs/ledger.md.
"""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any

TABLES = ("attempts", "events", "turns", "calls")
MSG_LEDGER = "rta_ledger"
MSG_DONE = "rta_done"
MSG_IDLE = "rta_idle"
_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # built once
# Young-generation threshold of a process that holds rows (CPython's default is 700).
GC_GEN0_THRESHOLD = 10_000


def hold_rows_without_collecting() -> None:
    """Raise the collector's young-generation threshold to ``GC_GEN0_THRESHOLD`` (never lower it).

    Rows wait in the ledger until their batch is shipped (about a second).  Each is a dict of
    scalars: never part of a cycle, not even tracked by the collector, but its allocation
    still counts towards the young-generation threshold.  A Live user holds ~8 rows a turn,
    so at the default threshold (700) the process ran a collection every ~90 turns, each
    scanning every young object of every call in flight (~0.5 ms with 50 users): a few
    per cent of the Live user's CPU for nothing.  The older generations keep their
    thresholds, so cyclic garbage is still collected, only in larger batches.
    """
    t0, t1, t2 = gc.get_threshold()
    if t0 < GC_GEN0_THRESHOLD:
        gc.set_threshold(GC_GEN0_THRESHOLD, t1, t2)


def _clean(v: Any) -> Any:
    """NaN/inf to None (strict JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class Ledger:
    """Rows of one process, buffered until the next batch is shipped.

    Making one raises the process's young-generation collection threshold
    (:func:`hold_rows_without_collecting`)."""

    def __init__(self, process: str) -> None:
        hold_rows_without_collecting()
        self.process = process
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        self.sent = dict.fromkeys(TABLES, 0)
        self.batches = 0

    def attempt(self, row: dict[str, Any]) -> None:
        """An attempt (request sent), at its end."""
        self.rows["attempts"].append(row)

    def events(self, rows: list[dict[str, Any]]) -> None:
        """The received stream events of one request, in arrival order."""
        self.rows["events"].extend(rows)

    def turn(self, row: dict[str, Any]) -> None:
        """A logical turn, at its end."""
        self.rows["turns"].append(row)

    def call(self, row: dict[str, Any]) -> None:
        """A call, at its end."""
        self.rows["calls"].append(row)

    def pending(self) -> int:
        """Rows not shipped yet."""
        return sum(len(v) for v in self.rows.values())

    def take_batch(self) -> dict[str, Any]:
        """The next numbered batch (all buffered rows); the buffers are emptied."""
        batch: dict[str, Any] = {"process": self.process, "batch": self.batches}
        for t in TABLES:
            rows = self.rows[t]
            batch[t] = rows
            self.sent[t] += len(rows)
            self.rows[t] = []
        self.batches += 1
        return batch

    def done_message(self) -> dict[str, Any]:
        """What ``rta_done`` announces: batches and rows sent per table."""
        return {"process": self.process, "batches": self.batches, "rows": dict(self.sent)}


class Gatherer:
    """The master's side: write every batch as it arrives, check each process is complete."""

    def __init__(self, ledger_dir: Path) -> None:
        self.dir = Path(ledger_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.files = {t: open(self.dir / f"{t}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
                      for t in TABLES}  # open for the whole run; closed by close()
        self.received: dict[str, set[int]] = {}
        self.rows: dict[str, dict[str, int]] = {}
        self.done: dict[str, dict[str, Any]] = {}
        self.idle: set[str] = set()

    def on_batch(self, batch: dict[str, Any]) -> None:
        """Append a batch's rows to the ledger files."""
        p = str(batch["process"])
        self.received.setdefault(p, set()).add(int(batch["batch"]))
        counts = self.rows.setdefault(p, dict.fromkeys(TABLES, 0))
        for t in TABLES:
            rows = batch.get(t) or []
            counts[t] += len(rows)
            f = self.files[t]
            for r in rows:
                try:
                    line = _STRICT(r)
                except ValueError:  # a NaN slipped in: strict JSON wants null
                    line = json.dumps({k: _clean(v) for k, v in r.items()},
                                      separators=(",", ":"))
                f.write(line + "\n")
            f.flush()

    def on_done(self, msg: dict[str, Any]) -> None:
        """A process announced its last batch."""
        self.done[str(msg["process"])] = msg

    def complete(self, expected: int) -> bool:
        """Every one of ``expected`` processes said done and every batch and row arrived."""
        if len(self.done) < expected:
            return False
        return all(self.received.get(p, set()) == set(range(int(m["batches"])))
                   and self.rows.get(p) == {t: int(m["rows"][t]) for t in TABLES}
                   for p, m in self.done.items())

    def report(self, expected: int) -> dict[str, Any]:
        """``ledger/gather.json``: per process what was announced and what arrived."""
        return {"expected_processes": expected, "complete": self.complete(expected),
                "processes": {p: {"announced": self.done.get(p),
                                  "batches_received": len(self.received.get(p, ())),
                                  "rows_received": self.rows.get(p)}
                              for p in sorted(set(self.received) | set(self.done))}}

    def close(self) -> None:
        """Close the ledger files."""
        for f in self.files.values():
            f.close()
