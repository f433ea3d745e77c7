"""Read a load run's raw ledgers (``ledger/*.jsonl``, see LEDGER.md) into pandas DataFrames.

Fast path: ``pyarrow.json`` with an explicit schema per ledger (multi-threaded C++
parsing; unknown fields ignored, absent fields null).  When a writer used other
types than the contract's (an id written as a number, an integer column holding
``1.0``) the file is re-read line by line with :mod:`json` and coerced, so a wire
detail the contract leaves open never breaks the checker.  ``sequence_id`` is
read as a float whatever its JSON type (0- or 1-based, int or float).

A missing or unreadable file, a line that is not a JSON object, or an attempts
ledger without its key columns raises :class:`LedgerError` (one line naming the
file and line): the checker's "unusable input".
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

STR, F64, I64, BOOL = pa.string(), pa.float64(), pa.int64(), pa.bool_()

SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    # only the fields the rules read (the JSON reader skips the others: LEDGER.md has them all)
    "attempts": {
        "call_id": STR, "turn_index": I64, "interaction_id": STR, "phase": STR,
        "request_guid": STR, "context_id": STR, "context_id_learned": STR, "injected": STR,
        "side_effect": BOOL, "send_s": F64, "end_s": F64, "outcome": STR, "error_code": STR,
        "retry_after_ms": F64,
        "decision": STR, "echo": BOOL, "events": I64, "events_without_seq": I64,
        "order_violations": I64,
    },
    "events": {
        "request_guid": STR, "attempt_key": STR, "recv_s": F64, "kind": STR,
        "sequence_id": F64, "played_index": F64,
    },
    "turns": {
        "call_id": STR, "turn_index": I64, "interaction_id": STR, "side_effect": BOOL,
        "outcome": STR, "end_reason": STR, "told_caller": STR,
    },
    "witness": {
        "id": I64, "contextId": STR, "requestGuid": STR, "interactionId": STR,
    },
    "chaos": {"kind": STR, "request_guid": STR},
}
# event kinds that carry no rta/sequenceId by design: the Task, and a JSON-RPC error frame
UNSEQUENCED_KINDS = ("task", "error")
# columns without which the attempts ledger cannot be judged at all
ATTEMPT_KEYS = ("call_id", "turn_index", "request_guid")


class LedgerError(Exception):
    """A ledger the checker cannot use (one line, names the file)."""


@dataclass
class Events:
    """The events ledger, compact: one stream code per row instead of its id strings.

    ``frame`` has ``stream`` (int64 code of ``attempt_key``, else ``request_guid``;
    -1 if both are missing), ``task`` (bool: a Task event or a JSON-RPC error frame,
    which carry no sequenceId by design), ``sequence_id``, ``played_index``, ``recv_s`` (NaN if
    absent); ``names[code]`` is the stream's id.
    """

    frame: pd.DataFrame
    names: np.ndarray

    def __len__(self) -> int:
        """Rows."""
        return len(self.frame)


@dataclass
class Ledgers:
    """The raw ledgers of one run; ``None`` where the file does not exist."""

    attempts: pd.DataFrame
    events: Events | None
    turns: pd.DataFrame | None
    witness: pd.DataFrame | None
    chaos: pd.DataFrame | None

    @property
    def rows(self) -> int:
        """Rows read over all ledgers."""
        return sum(len(df) for df in (self.attempts, self.events, self.turns, self.witness,
                                      self.chaos) if df is not None)


def _empty(name: str) -> pd.DataFrame:
    """An empty frame with the columns of ledger ``name``."""
    return pa.schema(list(SCHEMAS[name].items())).empty_table().to_pandas()


def _coerce(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Bring a line-by-line parsed frame to the contract's column types (ids as strings)."""
    out = {}
    for col, typ in SCHEMAS[name].items():
        if col not in df.columns:
            out[col] = pd.Series([None] * len(df), dtype="object" if typ in (STR, BOOL)
                                 else "float64")
            continue
        s = df[col]
        if typ == STR:
            out[col] = s.map(lambda v: None if v is None or (isinstance(v, float) and v != v)
                             else (v if isinstance(v, str) else json.dumps(v)
                                   if isinstance(v, (dict, list)) else str(v)))
        elif typ == BOOL:
            out[col] = s.map(lambda v: None if v is None else bool(v))
        else:
            out[col] = pd.to_numeric(s, errors="coerce").astype("float64")
    return pd.DataFrame(out, index=df.index)


def _read_slow(path: Path, name: str) -> pd.DataFrame:
    """Line-by-line fallback; raises LedgerError on the first line that is not a JSON object."""
    rows = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                raise LedgerError(f"{path}: line {n} is not valid JSON") from None
            if not isinstance(row, dict):
                raise LedgerError(f"{path}: line {n} is not a JSON object")
            rows.append(row)
    if not rows:
        return _empty(name)
    return _coerce(pd.DataFrame.from_records(rows), name)


def _read_table(path: Path, name: str) -> pa.Table | None:
    """The fast path: a pyarrow Table, or None when the file needs the line-by-line path."""
    schema = pa.schema(list(SCHEMAS[name].items()))
    try:
        return pajson.read_json(
            path, read_options=pajson.ReadOptions(block_size=16 << 20),
            parse_options=pajson.ParseOptions(explicit_schema=schema,
                                              unexpected_field_behavior="ignore",
                                              newlines_in_values=False))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    except OSError as e:
        raise LedgerError(f"{path}: cannot read ({e})") from None


def _size(path: Path) -> int:
    """File size (LedgerError if unreadable)."""
    try:
        return path.stat().st_size
    except OSError as e:
        raise LedgerError(f"{path}: cannot read ({e.strerror or e})") from None


def read_events(path: Path) -> Events:
    """The events ledger as :class:`Events` (stream ids dictionary-encoded in Arrow)."""
    table = _read_table(path, "events") if _size(path) else None
    if table is None:
        df = _read_slow(path, "events") if _size(path) else _empty("events")
        codes, names = pd.factorize(df["attempt_key"].fillna(df["request_guid"]))
        task = df["kind"].isin(UNSEQUENCED_KINDS).to_numpy()
        num = {c: pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64)
               for c in ("sequence_id", "played_index", "recv_s")}
        return Events(pd.DataFrame({"stream": codes.astype(np.int64), "task": task, **num}),
                      np.asarray(names, dtype=object))
    key = pc.coalesce(table["attempt_key"], table["request_guid"]).combine_chunks()
    enc = pc.dictionary_encode(key)
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    task = pc.fill_null(pc.is_in(table["kind"], pa.array(UNSEQUENCED_KINDS)), False).to_numpy()
    num = {c: table[c].to_numpy() if table[c].null_count == 0 else
           table[c].to_pandas().to_numpy(dtype=np.float64)
           for c in ("sequence_id", "played_index", "recv_s")}
    return Events(pd.DataFrame({"stream": codes, "task": task, **num}),
                  enc.dictionary.to_numpy(zero_copy_only=False))


def read_jsonl(path: Path, name: str) -> pd.DataFrame:
    """One JSONL ledger as a DataFrame with (at least) the contract's columns."""
    if _size(path) == 0:
        return _empty(name)
    table = _read_table(path, name)
    return _read_slow(path, name) if table is None else table.to_pandas()


def read_ledgers(run_dir: str | Path) -> Ledgers:
    """All ledgers of ``run_dir`` (``ledger/`` inside it, or the folder itself).

    The files are read concurrently (pyarrow parses without the GIL), so one
    file's conversion to pandas overlaps another's parsing.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise LedgerError(f"{run}: no such run folder")
    folder = run / "ledger" if (run / "ledger").is_dir() else run
    attempts_path = folder / "attempts.jsonl"
    if not attempts_path.exists():
        raise LedgerError(f"{run}: no ledger/attempts.jsonl (not a load run folder?)")
    paths = {name: folder / f"{name}.jsonl" for name in ("events", "turns", "witness", "chaos")}
    if not paths["chaos"].exists():
        paths["chaos"] = run / "chaos.jsonl"
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(read_events if name == "events" else read_jsonl, path,
                                     *(() if name == "events" else (name,)))
                   for name, path in paths.items() if path.exists()}
        attempts = read_jsonl(attempts_path, "attempts")
        got = {name: f.result() for name, f in futures.items()}
    if attempts.empty:
        raise LedgerError(f"{attempts_path}: no attempts recorded (nothing to judge)")
    missing = [c for c in ATTEMPT_KEYS if attempts[c].isna().all()]
    if missing:
        raise LedgerError(f"{attempts_path}: no values for {', '.join(missing)}")
    return Ledgers(attempts=attempts, events=got.get("events"), turns=got.get("turns"),
                   witness=got.get("witness"), chaos=got.get("chaos"))
