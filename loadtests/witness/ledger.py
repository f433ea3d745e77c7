"""The witness's durable ledger: one SQLite row per side effect that happened.

WAL mode with ``synchronous=NORMAL``: a recorded execution is committed to the
WAL before the witness answers, so it survives a SIGKILL of the witness (not
an OS crash).  Writes and reads go through one :class:`DbThread`, which
group-commits the executions recorded at the same moment.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from rtalab.loadtests.dedup.dbthread import DbThread

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    context_id     TEXT NOT NULL,
    turn_id        TEXT,              -- NULL: the request carried none
    request_guid   TEXT,              -- NULL: the request carried none
    interaction_id TEXT,
    task_id        TEXT,
    principal      TEXT,
    server         TEXT,              -- the Reasoner's --instance (a fleet's replica), or NULL
    t_start        REAL NOT NULL,
    t_end          REAL NOT NULL,
    outcome        TEXT NOT NULL      -- 'ok' | 'slow-success'
);
CREATE INDEX IF NOT EXISTS executions_guid ON executions (context_id, request_guid);
CREATE INDEX IF NOT EXISTS executions_turn ON executions (context_id, turn_id, request_guid);
"""
_COLUMNS = ("id, context_id, turn_id, request_guid, interaction_id, task_id, principal, "
            "server, t_start, t_end, outcome")
_KEYS = ("id", "contextId", "turnId", "requestGuid", "interactionId", "taskId", "principal",
         "server", "tStart", "tEnd", "outcome")
MAX_PAGE = 10_000


class Ledger:
    """Async access to the executions table."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._thread: DbThread | None = None

    async def open(self) -> None:
        """Create the file and schema, switch to WAL."""
        self._thread = DbThread(lambda: self._conn, name="witness-ledger")
        await self._thread.call(self._open_sync, alone=True)

    def _open_sync(self) -> None:
        """Open the connection (on the ledger thread)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        if "server" not in {r[1] for r in conn.execute("PRAGMA table_info(executions)")}:
            conn.execute("ALTER TABLE executions ADD COLUMN server TEXT")  # an older file
        self._conn = conn

    async def close(self) -> None:
        """Close the connection and stop the thread."""
        if self._thread is None:
            return
        await self._thread.call(self._close_sync, alone=True)
        await self._thread.stop()
        self._thread = None

    def _close_sync(self) -> None:
        """Close the connection (on the ledger thread)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _db(self) -> sqlite3.Connection:
        """The open connection."""
        if self._conn is None:
            raise RuntimeError("ledger is closed")
        return self._conn

    async def _call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn`` on the ledger thread."""
        if self._thread is None:
            raise RuntimeError("ledger is not open")
        return await self._thread.call(fn, *args)

    # ------------------------------------------------------------------ operations

    async def record(self, ids: dict[str, str | None], t_start: float, t_end: float,
                     outcome: str) -> int:
        """Append one execution (``ids`` keyed like the JSON rows); its id once committed."""
        values = (ids["contextId"], ids.get("turnId"), ids.get("requestGuid"),
                  ids.get("interactionId"), ids.get("taskId"), ids.get("principal"),
                  ids.get("server"), t_start, t_end, outcome)
        result: int = await self._call(self._record_sync, values)
        return result

    def _record_sync(self, values: tuple[Any, ...]) -> int:
        """INSERT one row."""
        cur = self._db().execute(
            "INSERT INTO executions (context_id, turn_id, request_guid, interaction_id, "
            "task_id, principal, server, t_start, t_end, outcome) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            values)
        assert cur.lastrowid is not None
        return cur.lastrowid

    async def rows(self, since: int = 0, context_id: str | None = None,
                   limit: int = 1000) -> list[dict[str, Any]]:
        """Executions with ``id > since`` (optionally of one context), oldest first."""
        result: list[dict[str, Any]] = await self._call(self._rows_sync, since, context_id,
                                                        min(limit, MAX_PAGE))
        return result

    def _rows_sync(self, since: int, context_id: str | None, limit: int) -> list[dict[str, Any]]:
        """SELECT a page."""
        if context_id is None:
            cur = self._db().execute(f"SELECT {_COLUMNS} FROM executions WHERE id > ? "
                                     "ORDER BY id LIMIT ?", (since, limit))
        else:
            cur = self._db().execute(f"SELECT {_COLUMNS} FROM executions WHERE id > ? AND "
                                     "context_id = ? ORDER BY id LIMIT ?",
                                     (since, context_id, limit))
        return [dict(zip(_KEYS, r, strict=True)) for r in cur.fetchall()]

    async def summary(self, context_id: str | None = None) -> dict[str, Any]:
        """Counts of executions and of the two duplicate hazards."""
        result: dict[str, Any] = await self._call(self._summary_sync, context_id)
        return result

    def _summary_sync(self, context_id: str | None) -> dict[str, Any]:
        """The summary queries (rows without a requestGuid / turnId are not grouped)."""
        db = self._db()

        def one(sql: str, *conds: str) -> int:
            where = ([] if context_id is None else ["context_id = ?"]) + list(conds)
            sql = sql.replace("{where}", f"WHERE {' AND '.join(where)}" if where else "")
            args = () if context_id is None else (context_id,)
            return int(db.execute(sql, args).fetchone()[0] or 0)

        guid, turn = "request_guid IS NOT NULL", "turn_id IS NOT NULL"
        with_guid = one("SELECT count(*) FROM executions {where}", guid)
        guids = one("SELECT count(*) FROM (SELECT DISTINCT context_id, request_guid "
                    "FROM executions {where})", guid)
        return {
            "executions": one("SELECT count(*) FROM executions {where}"),
            "executionsWithoutRequestGuid": one("SELECT count(*) FROM executions {where}",
                                                "request_guid IS NULL"),
            "distinctRequestGuids": guids,
            "duplicateExecutions": with_guid - guids,
            "requestGuidsExecutedMoreThanOnce": one(
                "SELECT count(*) FROM (SELECT 1 FROM executions {where} "
                "GROUP BY context_id, request_guid HAVING count(*) > 1)", guid),
            "distinctTurns": one("SELECT count(*) FROM (SELECT DISTINCT context_id, turn_id "
                                 "FROM executions {where})", turn),
            "turnsExecutedUnderMultipleRequestGuids": one(
                "SELECT count(*) FROM (SELECT 1 FROM executions {where} "
                "GROUP BY context_id, turn_id HAVING count(DISTINCT request_guid) > 1)",
                turn, guid),
            "interactionsExecutedUnderMultipleRequestGuids": one(
                "SELECT count(*) FROM (SELECT 1 FROM executions {where} "
                "GROUP BY context_id, interaction_id HAVING count(DISTINCT request_guid) > 1)",
                "interaction_id IS NOT NULL", guid),
            "slowSuccesses": one("SELECT count(*) FROM executions {where}",
                                 "outcome = 'slow-success'"),
            "lastId": one("SELECT max(id) FROM executions {where}"),
        }

    async def clear(self) -> int:
        """Delete every row (ids keep increasing); how many were deleted."""
        result: int = await self._call(self._clear_sync)
        return result

    def _clear_sync(self) -> int:
        """DELETE all rows."""
        return int(self._db().execute("DELETE FROM executions").rowcount)
