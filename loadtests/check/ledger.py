"""Read a load run's raw ledgers (``ledger/*.jsonl``, see docs/ledger.md) into pandas DataFrames.

Fast path: DuckDB's JSON Lines reader (multi-threaded C++, about 2x less CPU than
``pyarrow.json`` on the checker's ledgers) with an explicit column list per
ledger, returned as an Arrow table.  Unknown fields are ignored, absent fields
are null.  Values are brought to the contract's types as :func:`coerce_value`
defines them, whichever reader ran: an id written as a number becomes its JSON
text (``7`` -> ``"7"``, ``7.0`` -> ``"7.0"``), a number column accepts ints,
floats, booleans and numeric strings (``sequence_id`` is a float whatever its
JSON type, 0- or 1-based), an integer column stays int64 while every value is
a whole number and present (else float64, as pandas does), a bool column
accepts ``true``/``false``, numbers (non-zero = true) and the strings
``"true"``/``"false"``.

When the fast reader refuses a file (a line that is not JSON, a value it cannot
cast: ``"x"`` in a number column) the file is re-read line by line with
:mod:`json` (:func:`read_reference`), which reports the first bad line and
turns uncastable values into nulls.  Both readers give identical frames
(tests/check/test_ledger_reader.py).

A missing or unreadable file, a line that is not a JSON object, or an attempts
ledger without its key columns raises :class:`LedgerError` (one line naming the
file and line): the checker's "unusable input".
"""

from __future__ import annotations

import json
import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

STR, F64, I64, BOOL = pa.string(), pa.float64(), pa.int64(), pa.bool_()

SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    # only the fields the rules read (the JSON reader skips the others: docs/ledger.md has them all)
    "attempts": {
        "call_id": STR, "turn_index": I64, "interaction_id": STR, "phase": STR,
        "request_guid": STR, "context_id": STR, "context_id_learned": STR, "injected": STR,
        "side_effect": BOOL, "send_s": F64, "end_s": F64, "outcome": STR, "error_code": STR,
        "retry_after_ms": F64,
        "decision": STR, "echo": BOOL, "events": I64, "events_without_seq": I64,
        "order_violations": I64, "task_id": STR, "task_id_learned": STR, "http_status": F64,
        "task_id_answered": STR,
        "side_effect_reported": STR,
        "turn_id": STR, "attempt": I64, "active": BOOL, "binding": STR,
    },
    "events": {
        "request_guid": STR, "attempt_key": STR, "recv_s": F64, "kind": STR,
        "sequence_id": F64, "played_index": F64,
    },
    "turns": {
        "call_id": STR, "turn_index": I64, "interaction_id": STR, "side_effect": BOOL,
        "outcome": STR, "end_reason": STR, "told_caller": STR, "handoff": BOOL,
        "input_required": BOOL, "binding": STR, "ttfc_s": F64, "completion_s": F64,
    },
    "witness": {
        "id": I64, "contextId": STR, "requestGuid": STR, "interactionId": STR,
    },
    "chaos": {"kind": STR, "request_guid": STR, "t": F64, "delay_s": F64, "first": BOOL},
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
    """The raw ledgers of one run; ``None`` where the file does not exist.

    ``events`` may still be parsing in the background when the object is made
    (see :func:`read_ledgers`): reading the attribute waits for it, and a
    :class:`LedgerError` in that file is raised there.
    """

    attempts: pd.DataFrame
    turns: pd.DataFrame | None
    witness: pd.DataFrame | None
    chaos: pd.DataFrame | None
    pending_events: Future[Events] | Events | None = field(default=None, repr=False)

    @property
    def events(self) -> Events | None:
        """The events ledger (waits for its parse to finish)."""
        if isinstance(self.pending_events, Future):
            self.pending_events = self.pending_events.result()
        return self.pending_events

    @property
    def rows(self) -> int:
        """Rows read over all ledgers."""
        return sum(len(df) for df in (self.attempts, self.events, self.turns, self.witness,
                                      self.chaos) if df is not None)


def _empty(name: str) -> pd.DataFrame:
    """An empty frame with the columns of ledger ``name``."""
    return pa.schema(list(SCHEMAS[name].items())).empty_table().to_pandas()


def _number(v: object) -> float:
    """A JSON value as a float (NaN when it is not a number, a bool or a numeric string)."""
    if isinstance(v, (bool, int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return math.nan
    return math.nan


def coerce_value(v: object, typ: pa.DataType) -> object:
    """One JSON value in a column of type ``typ`` (the reference for both readers)."""
    if v is None:
        return None if typ in (STR, BOOL) else math.nan
    if typ == STR:
        if isinstance(v, str):
            return v
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    if typ == BOOL:
        if isinstance(v, bool):
            return v
        if isinstance(v, (int, float)):
            return v != 0
        if isinstance(v, str):
            return {"true": True, "false": False}.get(v.strip().lower())
        return None
    return _number(v)


def normalise(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The contract's columns in a stable order and dtype, whichever reader made ``df``.

    Strings: object (None for null).  Bools: bool when no value is null, else
    object.  Floats: float64.  Integers: int64 when every value is present and
    whole, else float64.
    """
    out = {}
    for col, typ in SCHEMAS[name].items():
        s = df[col] if col in df.columns else pd.Series([None] * len(df), dtype=object)
        if typ == STR:
            s = s.astype(object).where(s.notna(), None)  # type: ignore[call-overload]  # pandas-stubs: where() takes no None
        elif typ == BOOL:
            s = s.astype(object).where(s.notna(), None)  # type: ignore[call-overload]  # pandas-stubs: where() takes no None
            if not s.isna().any():
                s = s.astype(bool)
        else:
            s = pd.to_numeric(s, errors="coerce").astype("float64")
            if typ == I64 and not s.isna().any() and np.all(np.mod(s.to_numpy(), 1) == 0):
                s = s.astype(np.int64)
        out[col] = s.reset_index(drop=True)
    return pd.DataFrame(out)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """Every non-blank line of ``path`` as a dict; LedgerError on the first line that is not one."""
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
    return rows


def read_reference(path: Path, name: str) -> pd.DataFrame:
    """The line-by-line reader (plain :func:`json.loads`): the fallback and the reference."""
    rows = _json_lines(path) if _size(path) else []
    cols = {col: [coerce_value(r.get(col), typ) for r in rows]
            for col, typ in SCHEMAS[name].items()}
    return normalise(pd.DataFrame(cols) if rows else _empty(name), name)


DUCK_TYPES = {STR: "VARCHAR", F64: "DOUBLE", I64: "DOUBLE", BOOL: "BOOLEAN"}


def _read_table(path: Path, name: str) -> pa.Table | None:
    """The fast path: an Arrow table, or None when the file needs the line-by-line path."""
    # lazy: +89 ms (duckdb) off importing ledger
    import duckdb

    cols = ", ".join(f"{json.dumps(c)}: '{DUCK_TYPES[t]}'" for c, t in SCHEMAS[name].items())
    query = (f"SELECT * FROM read_json(?, format = 'newline_delimited', records = true, "
             f"columns = {{{cols}}})")
    try:
        with duckdb.connect() as con:
            return cast("pa.Table | None", con.sql(query, params=[str(path)]).to_arrow_table())
    except duckdb.IOException as e:
        raise LedgerError(f"{path}: cannot read ({str(e).splitlines()[0]})") from None
    except duckdb.Error:
        return None


def _size(path: Path) -> int:
    """File size (LedgerError if unreadable)."""
    try:
        return path.stat().st_size
    except OSError as e:
        raise LedgerError(f"{path}: cannot read ({e.strerror or e})") from None


def events_from_frame(df: pd.DataFrame) -> Events:
    """:class:`Events` from a frame of the reference reader."""
    codes, names = pd.factorize(df["attempt_key"].fillna(df["request_guid"]))
    task = df["kind"].isin(UNSEQUENCED_KINDS).to_numpy()
    num = {c: df[c].to_numpy(dtype=np.float64) for c in ("sequence_id", "played_index", "recv_s")}
    return Events(pd.DataFrame({"stream": codes.astype(np.int64), "task": task, **num}),
                  np.asarray(names, dtype=object))


def events_from_table(table: pa.Table) -> Events:
    """:class:`Events` from the fast reader's table (stream ids dictionary-encoded in Arrow)."""
    key = pc.coalesce(table["attempt_key"], table["request_guid"]).combine_chunks()
    enc = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(key))
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    task = pc.is_in(table["kind"], pa.array(UNSEQUENCED_KINDS)).fill_null(False).to_numpy()
    num = {c: table[c].to_numpy() if table[c].null_count == 0 else
           table[c].to_pandas().to_numpy(dtype=np.float64)
           for c in ("sequence_id", "played_index", "recv_s")}
    return Events(pd.DataFrame({"stream": codes, "task": task, **num}),
                  np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object))


def read_events(path: Path) -> Events:
    """The events ledger as :class:`Events`."""
    table = _read_table(path, "events") if _size(path) else None
    if table is None:
        return events_from_frame(read_reference(path, "events"))
    return events_from_table(table)


def read_jsonl(path: Path, name: str) -> pd.DataFrame:
    """One JSONL ledger as a DataFrame with the contract's columns (see :func:`normalise`)."""
    if _size(path) == 0:
        return normalise(_empty(name), name)
    table = _read_table(path, name)
    return read_reference(path, name) if table is None else _frame(table, name)


def _frame(table: pa.Table, name: str) -> pd.DataFrame:
    """The fast reader's table as :func:`normalise` would make it, without per-column copies.

    Integer columns arrive as doubles; they become int64 when all present and whole.
    """
    for col, typ in SCHEMAS[name].items():
        c = table[col]
        if typ != I64 or c.null_count or pc.all(pc.equal(pc.floor(c), c)).as_py() is False:
            continue
        try:
            table = table.set_column(table.schema.get_field_index(col), col, pc.cast(c, I64))
        except pa.ArrowInvalid:  # beyond int64: stays float64, as pd.to_numeric leaves it
            continue
    return table.to_pandas(deduplicate_objects=False)


def read_ledgers(run_dir: str | Path, witness_since: int = 0) -> Ledgers:
    """All ledgers of ``run_dir`` (``ledger/`` inside it, or the folder itself).

    Witness rows with ``id <= witness_since`` (a witness reused across runs: the
    rows before this run started) are left out.

    The files are parsed concurrently (DuckDB and Arrow work without the GIL).
    The events ledger, the largest, is returned still parsing: the rules that do
    not need it run meanwhile (:attr:`Ledgers.events` waits for it).
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
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rtalab-ledger")
    try:
        futures: dict[str, Future[Any]] = {
            name: pool.submit(read_events if name == "events" else read_jsonl, path,
                              *(() if name == "events" else (name,)))
                   for name, path in paths.items() if path.exists()}
        attempts = read_jsonl(attempts_path, "attempts")
        got = {name: f.result() for name, f in futures.items() if name != "events"}
    finally:
        pool.shutdown(wait=False)  # the events parse, if any, goes on in its thread
    if attempts.empty:
        raise LedgerError(f"{attempts_path}: no attempts recorded (nothing to judge)")
    missing = [c for c in ATTEMPT_KEYS if attempts[c].isna().all()]
    if missing:
        raise LedgerError(f"{attempts_path}: no values for {', '.join(missing)}")
    witness = got.get("witness")
    if witness is not None and witness_since > 0:
        witness = witness[~(witness["id"] <= witness_since)].reset_index(drop=True)
    return Ledgers(attempts=attempts, turns=got.get("turns"), witness=witness,
                   chaos=got.get("chaos"), pending_events=futures.get("events"))
