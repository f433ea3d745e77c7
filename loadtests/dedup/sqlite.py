"""SQLite dedup store: one file shared by the worker processes of one host, survives SIGKILL.

Durability.  The database runs in WAL mode with ``synchronous=NORMAL``: a commit
appends the transaction to the ``-wal`` file with a ``write()`` before it
returns, without ``fsync``.  The data then sits in the OS page cache, which a
SIGKILL (or any crash) of the *process* does not lose, so a completed entry
is seen by the next process that opens the file.  Only an OS crash or power
loss can lose the last transactions (``?synchronous=full`` fsyncs every commit
instead, at about a millisecond each on ordinary disks).  The WAL is fsynced
at checkpoints, which run on the store's thread.

Checkpoints.  Every :data:`_CHECKPOINT_EVERY` inline commits the thread runs a
``PASSIVE`` checkpoint, concurrent with the inline writes, which copies the bulk
of the WAL into the database, then a ``RESTART`` checkpoint: it takes the write
lock (waiting at most :data:`_CHECKPOINT_BUSY_MS` for other processes'
writers, else it checkpoints what it can), copies the few frames left and
waits for the readers, so the next write starts the WAL over from its
beginning.  While it runs (``_restarting``, set on the thread) this process's
inline operations wait on the loop for its future instead of racing it for
the lock — racing, back-to-back inline writes made it give up now and then and
the WAL grew to ~75 MB — and other processes' writers meet ``SQLITE_BUSY`` and
back off (below).  Nothing is queued behind it on the thread.
(``PASSIVE`` checkpoints alone never caught up under sustained load: the WAL
grew by every commit, ~400 MB after 6,500 Reasoner turns, and a restart after a
crash would have had to replay it; one blocking checkpoint of the whole WAL
stalled the store for ~70 ms.)

Concurrency.  Every statement is its own autocommit transaction (or part of a
group commit on the thread, below).  A claim is ``INSERT ... ON CONFLICT DO
NOTHING`` (one statement, atomic across processes); when the row exists, the
decision (:func:`rtalab.sim.shared.dedup_rule.judge`) is applied with
compare-and-set ``UPDATE``\\ s naming the row's previous owner and time, so two
processes resolving the same stale row cannot both win.  A context binding
(:meth:`SqliteStore.bind`) is one upsert into the ``bindings`` table that only
overwrites an expired row, plus a read of the owner when it did not write.

Event loop.  Nothing that can block runs on the event loop.  Each operation
runs *inline* on a loop-side connection with ``busy_timeout = 0`` and automatic
checkpoints off: an uncontended statement costs ~20-30 µs (a ``write()`` into
the page cache, no fsync, no lock wait).  If the write lock is held (another
process's statement, this store's checkpoint or purge: ``SQLITE_BUSY``), the
operation is re-run from the start — safe, since a statement that failed
changed nothing, and every operation is a sequence of such statements that
returns at its first write — after an ``asyncio.sleep`` backing off from
:data:`_BUSY_MIN_S` to :data:`_BUSY_MAX_S`, for at most ``busy_timeout``.
Operations never move to the thread because of a lock: a thread's group commit
holds the write lock across several GIL hand-offs (up to 5 ms each while the
loop is busy), so the inline writes that meet it fail too, follow it to the
thread and keep it busy — measured at 50 concurrent turns, half the operations
took that path, each waiting ~40 ms and costing a thread hop plus GIL
contention.  With ``synchronous=full`` (an fsync per commit) or
``inline=False`` every operation goes to the store's dedicated thread
(:class:`rtalab.loadtests.dedup.dbthread.DbThread`), whose connection waits for locks
(``busy_timeout``) and group-commits whatever is queued; a claim whose caller
was cancelled while it ran there is abandoned.  The thread also runs the
checkpoints, ``purge`` and ``stats``.

Waiting.  A waiter in another process than the owner polls the row with
exponential backoff (``poll_min_s`` doubling to ``poll_max_s``: bounded,
server-side polling; duplicates that arrive concurrently on different workers
are rare); a waiter in the owner's process is woken at once by a local future.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from rtalab.loadtests.dedup._common import (
    PeekState,
    PollingStore,
    Row,
    judge,
    peek_view,
)
from rtalab.loadtests.dedup.base import Claim, StoreStats, lost_outcome
from rtalab.loadtests.dedup.dbthread import DbThread

T = TypeVar("T")
Synchronous = Literal["normal", "full"]
Db = sqlite3.Connection

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dedup (
    context_id   TEXT NOT NULL,
    key          TEXT NOT NULL,
    state        TEXT NOT NULL,   -- 'in_flight' | 'done'
    owner        TEXT NOT NULL,
    claimed_at   REAL NOT NULL,
    completed_at REAL,
    t            REAL NOT NULL,   -- claimed_at while in flight, completed_at when done
    outcome      TEXT,            -- JSON
    fingerprint  TEXT NOT NULL DEFAULT '',  -- of the claiming request
                                            -- (rtalab.sim.shared.dedup_rule)
    PRIMARY KEY (context_id, key)
);
CREATE INDEX IF NOT EXISTS dedup_state_t ON dedup (state, t);
CREATE TABLE IF NOT EXISTS bindings (  -- contextId -> principal (DedupStore.bind)
    context_id TEXT NOT NULL PRIMARY KEY,
    principal  TEXT NOT NULL,
    t          REAL NOT NULL          -- bound at (purged after the window; no index: one
) WITHOUT ROWID;                      -- b-tree written per bind, purge scans the table)
"""
_INSERT = ("INSERT INTO dedup (context_id, key, state, owner, claimed_at, t, fingerprint) "
           "VALUES (?, ?, 'in_flight', ?, ?, ?, ?) ON CONFLICT DO NOTHING")
_SELECT = ("SELECT state, owner, claimed_at, completed_at, outcome, fingerprint FROM dedup "
           "WHERE context_id = ? AND key = ?")
_RETAKE_DONE = ("UPDATE dedup SET state = 'in_flight', owner = ?, claimed_at = ?, t = ?, "
                "fingerprint = ?, completed_at = NULL, outcome = NULL "
                "WHERE context_id = ? AND key = ? "
                "AND state = 'done' AND completed_at = ?")
_RECLAIM = ("UPDATE dedup SET owner = ?, claimed_at = ?, t = ?, "
            "outcome = NULL, fingerprint = CASE fingerprint WHEN '' THEN ? ELSE fingerprint END "
            "WHERE context_id = ? AND key = ? "
            "AND state = 'in_flight' AND owner = ? AND claimed_at = ?")
_LOSE = ("UPDATE dedup SET state = 'done', completed_at = ?, t = ?, outcome = ? "
         "WHERE context_id = ? AND key = ? AND state = 'in_flight' AND owner = ? "
         "AND claimed_at = ?")
_COMPLETE_OWNED = ("UPDATE dedup SET state = 'done', completed_at = ?, t = ?, outcome = ? "
                   "WHERE context_id = ? AND key = ? AND owner = ?")
_COMPLETE_ANY = ("INSERT INTO dedup (context_id, key, state, owner, claimed_at, completed_at, t, "
                 "outcome, fingerprint) VALUES (?, ?, 'done', '', ?, ?, ?, ?, ?) ON CONFLICT DO "
                 "UPDATE SET state = 'done', completed_at = excluded.completed_at, "
                 "t = excluded.t, outcome = excluded.outcome, fingerprint = CASE "
                 "dedup.fingerprint WHEN '' THEN excluded.fingerprint ELSE dedup.fingerprint END")
_PROGRESS = ("UPDATE dedup SET outcome = ? WHERE context_id = ? AND key = ? "
             "AND state = 'in_flight' AND owner = ?")  # in flight: the outcome slot holds it
_ABANDON = "DELETE FROM dedup WHERE context_id = ? AND key = ? AND state = 'in_flight'"
# Bind unless bound: insert, or take over a binding past the window (last parameters:
# window, now); changes nothing (rowcount 0) when a live binding exists.
_BIND = ("INSERT INTO bindings (context_id, principal, t) VALUES (?, ?, ?) "
         "ON CONFLICT (context_id) DO UPDATE SET principal = excluded.principal, t = excluded.t "
         "WHERE bindings.t + ? < ?")
_BOUND = "SELECT principal FROM bindings WHERE context_id = ?"
_MAX_ROUNDS = 16  # compare-and-set retries of one claim; each lost race means progress elsewhere
_CHECKPOINT_EVERY = 500  # inline commits between two checkpoints on the thread
_CHECKPOINT_BUSY_MS = 100  # how long a checkpoint waits for other writers/readers
_BUSY_MIN_S = 0.0005  # first back-off of an inline operation that met a lock
_BUSY_MAX_S = 0.016  # longest back-off (the lock holders' statements take ~30 µs)


def _is_busy(e: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds a lock."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(e) or "busy" in str(e)


def _add_fingerprint_column(db: Db) -> None:
    """A file made before request fingerprints gets the column (old rows: '', never
    conflicting)."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(dedup)")}
    if "fingerprint" not in columns:
        db.execute("ALTER TABLE dedup ADD COLUMN fingerprint TEXT NOT NULL DEFAULT ''")


def _select(db: Db, context_id: str, key: str) -> Row | None:
    """Read one row."""
    r = db.execute(_SELECT, (context_id, key)).fetchone()
    return None if r is None else Row(*r)


def _lose(db: Db, context_id: str, key: str, row: Row, now_s: float) -> dict[str, Any] | None:
    """CAS a stale row to done with the lost outcome; ``None`` if the race is lost."""
    outcome = lost_outcome(row.owner, row.claimed_at, now_s, row.outcome)
    n = db.execute(_LOSE, (now_s, now_s, json.dumps(outcome), context_id, key, row.owner,
                           row.claimed_at)).rowcount
    return outcome if n == 1 else None


def _ping_sync(db: Db) -> None:
    """One trivial statement (readiness)."""
    db.execute("SELECT 1").fetchone()


class SqliteStore(PollingStore):
    """WAL-mode SQLite file; statements inline on the event loop (backing off while locked),
    or on a dedicated thread with ``synchronous=full`` / ``inline=False``."""

    name = "sqlite"
    durable = True
    shared = True  # by the processes of one host

    def __init__(self, path: str | Path, window_s: float = 300.0, *,
                 synchronous: Synchronous = "normal", busy_timeout_ms: int = 10_000,
                 inline: bool = True, **kwargs: Any):
        super().__init__(window_s, **kwargs)
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', got {synchronous!r}")
        self.path = Path(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.inline = bool(inline) and synchronous == "normal"
        self._conn: Db | None = None  # the thread's connection
        self._inline_conn: Db | None = None  # the loop's connection (busy_timeout 0)
        self._checkpoint_conn: Db | None = None  # the thread's, for checkpoints (short timeout)
        self._thread: DbThread | None = None
        self._inline_commits = 0
        self._checkpoint_pending = False  # a checkpoint is queued or running on the thread
        self._restarting = False  # its RESTART step runs (set on the thread): inline ops wait
        self._restart: asyncio.Future[Any] | None = None  # ... for this, the RESTART's call

    # ------------------------------------------------------------------ plumbing

    def _connect(self, busy_timeout_ms: int, autocheckpoint: bool) -> Db:
        """A connection in autocommit mode with this store's pragmas."""
        conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        if not autocheckpoint:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    def _open_sync(self) -> None:
        """Open the thread's connection, switch to WAL and create the schema (on the thread)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect(self.busy_timeout_ms, autocheckpoint=True)
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:  # switching to WAL needs a moment of exclusivity; retry while others open
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                conn.executescript(_SCHEMA)
                _add_fingerprint_column(conn)
                break
            except sqlite3.OperationalError as e:
                if not _is_busy(e) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            conn.close()
            raise RuntimeError(f"{self.path}: cannot switch to WAL mode (got {mode!r})")
        self._conn = conn
        if self.inline:  # the thread's checkpoints (see the module docstring)
            self._checkpoint_conn = self._connect(_CHECKPOINT_BUSY_MS, autocheckpoint=False)

    async def start(self) -> None:
        """Start the thread, open the file (WAL, schema), then the loop-side connection."""
        if self._thread is not None:
            return
        self._thread = DbThread(lambda: self._conn, name="dedup-sqlite")
        try:
            await self._thread.call(self._open_sync, alone=True)
        except BaseException:
            await self._thread.stop()
            self._thread = None
            raise
        if self.inline:
            self._inline_conn = self._connect(0, autocheckpoint=False)

    async def close(self) -> None:
        """Close both connections and stop the thread."""
        if self._thread is None:
            return
        if self._inline_conn is not None:
            self._inline_conn.close()
            self._inline_conn = None
        await self._thread.call(self._close_sync, alone=True)
        await self._thread.stop()
        self._thread = None

    def _close_sync(self) -> None:
        """Checkpoint and close the thread's connection (on the thread)."""
        conn, self._conn = self._conn, None
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
            self._checkpoint_conn = None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            conn.close()

    def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(connection, *args)`` on the thread."""
        if self._conn is None:
            raise RuntimeError("SqliteStore is closed")
        return fn(self._conn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any, write: bool = True,
                    on_orphan: Callable[[T], None] | None = None) -> T:
        """``fn(db, *args)`` inline (backing off while the database is locked), or on the
        thread when this store has no inline connection."""
        conn = self._inline_conn
        if conn is None:
            if self._thread is None:
                raise RuntimeError("SqliteStore used before start() or after close()")
            self._counters["threaded"] += 1
            result_t: T = await self._thread.call(self._on_thread, fn, *args,
                                                  on_orphan=on_orphan)
            return result_t
        delay = _BUSY_MIN_S
        deadline: float | None = None
        while True:
            restart = self._restart
            if self._restarting and restart is not None:
                # This store's RESTART checkpoint runs: leave it the lock, resume when it
                # is over (its future resolves on this loop; no polling).
                self._counters["inline_checkpoint_waits"] += 1
                await asyncio.wait((restart,))
            else:
                try:
                    result = fn(conn, *args)
                    break
                except sqlite3.OperationalError as e:
                    if not _is_busy(e):
                        raise
                    # Nothing was written (see the module docstring): wait, run it again.
                    self._counters["inline_busy"] += 1
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self.busy_timeout_ms / 1000
                    elif now >= deadline:
                        raise
                    await asyncio.sleep(min(delay, deadline - now))
                    delay = min(delay * 2, _BUSY_MAX_S)
            conn = self._inline_conn
            if conn is None:
                raise RuntimeError("SqliteStore used after close()")
        self._counters["inline"] += 1
        if write:
            self._inline_commits += 1
            if self._inline_commits >= _CHECKPOINT_EVERY:
                self._inline_commits = 0
                self._checkpoint()
        return result

    def _background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Fire and forget ``fn(db, *args)`` on the thread (failures are counted)."""
        if self._thread is None:
            return
        fut = self._thread.call(self._on_thread, fn, *args)

        def done(f: Any) -> None:
            if not f.cancelled() and f.exception() is not None:
                self._counters["background_errors"] += 1

        fut.add_done_callback(done)

    def _checkpoint(self) -> None:
        """Queue a ``PASSIVE`` then a ``RESTART`` checkpoint on the thread (unless one is
        already queued); inline operations go on during the first, wait for the second."""
        if self._thread is None or self._checkpoint_pending:
            return
        self._checkpoint_pending = True
        self._counters["checkpoints"] += 1
        self._thread.call(self._checkpoint_sync, "PASSIVE",
                          alone=True).add_done_callback(self._count_failure)
        self._restart = self._thread.call(self._checkpoint_sync, "RESTART", alone=True)
        self._restart.add_done_callback(self._count_failure)

    def _count_failure(self, f: asyncio.Future[Any]) -> None:
        """Done-callback of background work: count a failure."""
        if not f.cancelled() and f.exception() is not None:
            self._counters["background_errors"] += 1

    def _checkpoint_sync(self, mode: Literal["PASSIVE", "RESTART"]) -> None:
        """``PRAGMA wal_checkpoint(mode)`` on the checkpoint connection (on the thread); its
        busy timeout bounds the wait for other connections to ``_CHECKPOINT_BUSY_MS``.

        ``PASSIVE`` copies the bulk of the WAL while writers go on; ``RESTART`` takes the
        write lock for the few frames left and waits for the readers, so the next write
        starts the WAL over.  During ``RESTART`` this process's inline operations wait for
        it (``_restarting``): racing it, they would often make it give up."""
        try:
            if self._checkpoint_conn is None:
                raise RuntimeError("SqliteStore is closed")
            if mode == "RESTART":
                self._restarting = True
            self._checkpoint_conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        finally:  # cleared here, not on the loop: works even if the loop never yields
            if mode == "RESTART":
                self._restarting = self._checkpoint_pending = False

    # ------------------------------------------------------------------ operations (sync)

    def _claim_sync(self, db: Db, context_id: str, key: str, owner: str, now_s: float,
                    dead_owner: str | None = None, fingerprint: str = "") -> Claim:
        """The claim algorithm."""
        for _ in range(_MAX_ROUNDS):
            if db.execute(_INSERT, (context_id, key, owner, now_s, now_s,
                                    fingerprint)).rowcount == 1:
                return Claim("new")
            row = _select(db, context_id, key)
            if row is None:
                continue  # abandoned or purged in between: insert again
            verdict = judge(row, now_s, self.window_s, self.lease_s, self.on_stale, dead_owner,
                            fingerprint)
            if verdict == "conflict":
                return Claim("conflict", owner=row.owner)
            if verdict == "insert":  # finished and past the window
                if db.execute(_RETAKE_DONE, (owner, now_s, now_s, fingerprint, context_id, key,
                                             row.completed_at)).rowcount == 1:
                    return Claim("new")
            elif verdict == "done":
                assert row.outcome is not None
                return Claim("done", json.loads(row.outcome), owner=row.owner)
            elif verdict == "in_flight":
                return Claim("in_flight", owner=row.owner)
            elif verdict == "reclaim":
                if db.execute(_RECLAIM, (owner, now_s, now_s, fingerprint, context_id, key,
                                         row.owner, row.claimed_at)).rowcount == 1:
                    return Claim("new", owner=row.owner, stale=True)
            else:
                outcome = _lose(db, context_id, key, row, now_s)
                if outcome is not None:
                    return Claim("done", outcome, owner=row.owner, stale=True)
        raise RuntimeError(f"dedup claim of {key!r} did not settle after {_MAX_ROUNDS} rounds")

    @staticmethod
    def _complete_sync(db: Db, context_id: str, key: str, outcome_json: str, now_s: float,
                       owner: str | None, fingerprint: str = "") -> bool:
        """Store an outcome (only for ``owner`` if given; else keeping ``fingerprint`` on a
        row without one)."""
        if owner is None:
            db.execute(_COMPLETE_ANY, (context_id, key, now_s, now_s, now_s, outcome_json,
                                       fingerprint))
            return True
        return db.execute(_COMPLETE_OWNED, (now_s, now_s, outcome_json, context_id, key,
                                            owner)).rowcount == 1

    @staticmethod
    def _abandon_sync(db: Db, context_id: str, key: str, owner: str | None) -> bool:
        """Delete an in-flight row (only ``owner``'s if given)."""
        if owner is None:
            return db.execute(_ABANDON, (context_id, key)).rowcount == 1
        return db.execute(_ABANDON + " AND owner = ?", (context_id, key, owner)).rowcount == 1

    def _bind_sync(self, db: Db, context_id: str, principal: str, now_s: float) -> str:
        """Bind ``context_id`` to ``principal`` unless bound (and not expired); the owner."""
        for _ in range(_MAX_ROUNDS):
            if db.execute(_BIND, (context_id, principal, now_s, self.window_s,
                                  now_s)).rowcount == 1:
                return principal
            r = db.execute(_BOUND, (context_id,)).fetchone()
            if r is not None:
                return str(r[0])
            # purged in between: bind again
        raise RuntimeError(f"binding of {context_id!r} did not settle after {_MAX_ROUNDS} rounds")

    def _peek_sync(self, db: Db, context_id: str, key: str,
                   now_s: float) -> tuple[PeekState, dict[str, Any] | None]:
        """A waiter's view of a row; resolves a stale lease under policy ``fail``."""
        for _ in range(_MAX_ROUNDS):
            row = _select(db, context_id, key)
            view = peek_view(row, judge(row, now_s, self.window_s, self.lease_s, self.on_stale))
            if view is not None:
                return view
            assert row is not None
            outcome = _lose(db, context_id, key, row, now_s)
            if outcome is not None:
                return "done", outcome
        return "in_flight", None

    def _purge_sync(self, db: Db, now_s: float) -> int:
        """Delete done rows and bindings past the window, in-flight rows past lease + window."""
        # ``t + window < now``: the arithmetic of rtalab.sim.shared.dedup_rule.expired
        # (IEEE doubles in both)
        w, lw = self.window_s, self.lease_s + self.window_s
        n = db.execute("DELETE FROM dedup WHERE state = 'done' AND t + ? < ?",
                       (w, now_s)).rowcount
        n += db.execute("DELETE FROM dedup WHERE state = 'in_flight' AND t + ? < ?",
                        (lw, now_s)).rowcount
        return n + db.execute("DELETE FROM bindings WHERE t + ? < ?", (w, now_s)).rowcount

    def _stats_sync(self, db: Db) -> tuple[dict[str, int], int, int]:
        """Rows per state, bindings and the file sizes in bytes."""
        by_state = dict(db.execute("SELECT state, count(*) FROM dedup GROUP BY state").fetchall())
        bindings = db.execute("SELECT count(*) FROM bindings").fetchone()[0]
        page_count = db.execute("PRAGMA page_count").fetchone()[0]
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        wal = Path(f"{self.path}-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        return by_state, bindings, page_count * page_size + wal_bytes

    # ------------------------------------------------------------------ async API

    async def claim(self, context_id: str, key: str, owner: str, now_s: float,
                    dead_owner: str | None = None, fingerprint: str = "") -> Claim:
        """Atomically register ``key`` as in flight for ``owner`` unless already known."""

        def orphan(claim: Claim) -> None:  # the caller was cancelled: nobody will complete
            if claim.state == "new":
                self._counters["orphan_claims_abandoned"] += 1
                self._background(self._abandon_sync, context_id, key, owner)

        claim = await self._call(self._claim_sync, context_id, key, owner, now_s, dead_owner,
                                 fingerprint, on_orphan=orphan)
        self._count_claim(claim)
        if claim.stale and claim.state == "done":
            self._wakeups.notify((context_id, key))
        return claim

    async def complete(self, context_id: str, key: str, outcome: dict[str, Any],
                       now_s: float, owner: str | None = None, fingerprint: str = "") -> bool:
        """Store the outcome; refused (False) if ``owner`` no longer owns the entry."""
        ok = await self._call(self._complete_sync, context_id, key, json.dumps(outcome), now_s,
                              owner, fingerprint)
        self._counters["completes" if ok else "completes_refused"] += 1
        if ok:
            self._wakeups.notify((context_id, key))
        return ok

    async def progress(self, context_id: str, key: str, owner: str, value: str) -> bool:
        """Keep ``value`` in the in-flight row's outcome column (if ``owner`` holds it)."""
        return bool(await self._call(self._progress_sync, context_id, key, owner, value))

    @staticmethod
    def _progress_sync(db: Db, context_id: str, key: str, owner: str, value: str) -> bool:
        return db.execute(_PROGRESS, (value, context_id, key, owner)).rowcount == 1

    async def abandon(self, context_id: str, key: str, owner: str | None = None) -> bool:
        """Delete an in-flight entry (owned by ``owner`` if given); waiters get ``None``."""
        ok = await self._call(self._abandon_sync, context_id, key, owner)
        if ok:
            self._counters["abandons"] += 1
            self._wakeups.notify((context_id, key))
        return ok

    async def bind(self, context_id: str, principal: str, now_s: float) -> str:
        """Bind ``context_id`` to ``principal`` unless already bound; the bound principal."""
        owner = await self._call(self._bind_sync, context_id, principal, now_s)
        self._counters["binds" if owner == principal else "binds_foreign"] += 1
        return owner

    async def _peek(self, context_id: str, key: str) -> tuple[PeekState, dict[str, Any] | None]:
        """A waiter's view of the row at the current wall-clock time."""
        return await self._call(self._peek_sync, context_id, key, time.time(), write=False)

    def failure_cause(self, exc: BaseException) -> str | None:
        """``full`` (disk or database full), ``busy`` (locked past ``busy_timeout``), ``io``,
        ``read-only`` or ``error`` for a database error; None for anything else."""
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            if "full" in text:
                return "full"
            if "locked" in text or "busy" in text:
                return "busy"
            if "readonly" in text or "read-only" in text:
                return "read-only"
            if "i/o" in text or "disk" in text:
                return "io"
            return "error"
        if isinstance(exc, sqlite3.DatabaseError):
            return "error"
        if isinstance(exc, OSError):
            return "full" if exc.errno == errno.ENOSPC else "io"
        return None

    async def ping(self) -> None:
        """``SELECT 1`` on the store's connection."""
        await self._call(_ping_sync, write=False)

    async def purge(self, now_s: float) -> int:
        """Delete done rows older than the window and in-flight rows past lease + window."""
        if self._thread is None:
            raise RuntimeError("SqliteStore used before start() or after close()")
        n: int = await self._thread.call(self._on_thread, self._purge_sync, now_s)
        self._counters["purged"] += n
        return n

    async def stats(self) -> StoreStats:
        """Row counts of the shared file (all processes) and its size."""
        if self._thread is None:
            raise RuntimeError("SqliteStore used before start() or after close()")
        by_state, bindings, size = await self._thread.call(self._on_thread, self._stats_sync)
        return self._stats(sum(by_state.values()), by_state.get("in_flight", 0),
                           bindings=bindings, file_bytes=size, path=str(self.path))
