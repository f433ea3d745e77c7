"""Redis dedup store (``redis.asyncio``): shared by every worker on every host.

One hash per entry at ``rta:dedup:{context}:{key}`` (``:``, ``%``, ``{`` and ``}``
in the identifiers are percent-encoded, so two ``(context, key)`` pairs never
share a Redis key).  Fields: ``s`` state (``i`` in flight / ``d`` done),
``o`` owner, ``c`` claimed_at, ``t`` completed_at, ``r`` outcome JSON, ``f`` the
claiming request's fingerprint (absent or empty: never conflicts).

Claim.  The claim is ``SET NX`` with a lease, done inside a Lua script so that
"insert if absent", "replay if done", "past the window" and the stale-lease rule
(:mod:`rtalab.loadtests.dedup.base`) are one atomic round trip and use the same rule
as the other backends (:func:`rtalab.sim.shared.dedup_rule.judge`; a parity test proves it).  Key
TTLs garbage-collect entries in real time: an in-flight key lives ``lease_s +
window_s``, a finished one ``window_s``; ``purge`` therefore only trims the
in-flight index (a sorted set used by ``stats``) of owners that vanished.

Bindings.  A context binding (:meth:`RedisStore.bind`) is a string key
``rta:dedup~bind:{context}`` holding the principal, set with ``SET NX PX window``
(else read) in one script; its TTL is the window.

Waiting.  A waiter in the completing process is woken by a local future; waiters
in other processes poll the hash with exponential backoff (2 ms doubling to
50 ms).  Polling was chosen over pub/sub: it needs no dedicated connection or
subscriber task per worker, survives reconnects without lost notifications,
and concurrent duplicates are rare enough that the extra latency is marginal.

Connections.  A plain connection pool of ``max_connections`` behind an
``asyncio.Semaphore`` of the same size: callers beyond it queue instead of
failing, at a fraction of ``BlockingConnectionPool``'s cost per command.  A
claim whose caller is cancelled is followed by an owner-checked ``abandon``
(a no-op unless the script ran and made the caller the owner).

Durability is Redis's: entries survive a SIGKILL of any Reasoner worker; they
survive a Redis restart only with Redis persistence (AOF) configured.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from rtalab.loadtests.dedup._common import PeekState, PollingStore
from rtalab.loadtests.dedup.base import Claim, StoreStats

# rtalab.sim.shared.dedup_rule.judge in Lua (closed window: expired at now > completed + window; a
# live entry whose fingerprint differs from the claim's is a conflict; stale at now - claimed >
# lease, or when the in-flight owner is the dead owner named by the caller).
# KEYS: entry, in-flight index.  ARGV: mode (claim|peek), owner, now, lease_s, window_s,
# on_stale, in-flight ttl ms, done ttl ms, dead owner ('' = none), fingerprint ('' = none).
# Returns {verdict, outcome-or-'', owner-or-''}.
_CLAIM = """
local e = redis.call('HMGET', KEYS[1], 's', 'o', 'c', 't', 'r', 'f')
local now = tonumber(ARGV[3])
local peek = ARGV[1] == 'peek'
local function conflict()
  return e[6] and e[6] ~= '' and ARGV[10] ~= '' and e[6] ~= ARGV[10]
end
local function take()
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 's', 'i', 'o', ARGV[2], 'c', ARGV[3], 'f', ARGV[10])
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
end
if not e[1] then
  if peek then return {'gone', '', ''} end
  take()
  return {'new', '', ''}
end
if e[1] == 'd' then
  if now > tonumber(e[4]) + tonumber(ARGV[5]) then
    if peek then return {'gone', '', ''} end
    take()
    return {'new', '', ''}
  end
  if conflict() then return {'conflict', '', e[2]} end
  return {'done', e[5], e[2]}
end
if conflict() then return {'conflict', '', e[2]} end
if now - tonumber(e[3]) > tonumber(ARGV[4]) or (ARGV[9] ~= '' and e[2] == ARGV[9]) then
  if ARGV[6] == 'reclaim' then
    if peek then return {'gone', '', ''} end
    local f = e[6] or ''
    take()
    redis.call('HSET', KEYS[1], 'f', f ~= '' and f or ARGV[10])
    return {'reclaimed', '', e[2]}
  end
  local t = {['rta.dedup.lost'] = true, errorCode = 'internal', owner = e[2],
             claimedAtS = tonumber(e[3]), lostAtS = now}
  if e[5] and e[5] ~= '' then t['sideEffect'] = e[5] end  -- the owner's progress record
  local lost = cjson.encode(t)
  redis.call('HSET', KEYS[1], 's', 'd', 't', ARGV[3], 'r', lost)
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  redis.call('ZREM', KEYS[2], KEYS[1])
  return {'lost', lost, e[2]}
end
return {'in_flight', '', e[2]}
"""

# KEYS: entry, index.  ARGV: owner ('' = any), now, outcome JSON, done ttl ms.  Returns 1 / 0.
_COMPLETE = """
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'd', 't', ARGV[2], 'r', ARGV[3])
redis.call('HSETNX', KEYS[1], 'o', '')
redis.call('HSETNX', KEYS[1], 'c', ARGV[2])
if ARGV[5] ~= '' and (redis.call('HGET', KEYS[1], 'f') or '') == '' then
  redis.call('HSET', KEYS[1], 'f', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
"""

# KEYS: entry.  ARGV: owner, value.  In flight, the outcome field holds the progress record.
_PROGRESS = """
local e = redis.call('HMGET', KEYS[1], 's', 'o')
if e[1] ~= 'i' or e[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'r', ARGV[2])
return 1
"""

# KEYS: entry, index.  ARGV: owner ('' = any).  Returns 1 / 0.
_ABANDON = """
local e = redis.call('HMGET', KEYS[1], 's', 'o')
if e[1] ~= 'i' then return 0 end
if ARGV[1] ~= '' and e[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
"""

# KEYS: binding.  ARGV: principal, ttl ms.  Returns the bound principal.
_BIND = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return ARGV[1] end
return redis.call('GET', KEYS[1])
"""

# A command unanswered this long fails with cause "timeout" (a frozen or unreachable server);
# without it a SIGSTOPped Redis held every request forever.
DEFAULT_TIMEOUT_S = 2.0
_ESCAPES = str.maketrans({"%": "%25", ":": "%3A", "{": "%7B", "}": "%7D"})
_STATS_SCAN_LIMIT = 1_000_000  # stats() stops counting keys here and flags the count approximate


def _esc(part: str) -> str:
    """Percent-encode the characters that would make scoped keys ambiguous."""
    return part.translate(_ESCAPES)


class RedisStore(PollingStore):
    """Entries as Redis hashes with TTLs; claim/complete/abandon are Lua scripts."""

    name = "redis"
    durable = True  # w.r.t. the Reasoner process (Redis itself: see module docstring)
    shared = True

    def __init__(self, url: str, window_s: float = 300.0, *, prefix: str = "rta:dedup",
                 max_connections: int = 64, timeout_s: float = DEFAULT_TIMEOUT_S,
                 **kwargs: Any):
        super().__init__(window_s, **kwargs)
        self.url = url
        self.timeout_s = float(timeout_s)
        self.max_connections = int(max_connections)
        self.prefix = prefix
        self._index = f"{prefix}:~in_flight"
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self._slots = asyncio.Semaphore(self.max_connections)
        self._inflight_ttl_ms = max(1, int((self.lease_s + self.window_s) * 1000))
        self._done_ttl_ms = max(1, int(self.window_s * 1000))

    def entry_key(self, context_id: str, key: str) -> str:
        """The Redis key of one entry: ``rta:dedup:{context}:{key}``."""
        return f"{self.prefix}:{_esc(context_id)}:{_esc(key)}"

    def binding_key(self, context_id: str) -> str:
        """The Redis key of a context binding: ``rta:dedup~bind:{context}`` (outside the
        ``rta:dedup:`` entry namespace, so it neither collides with nor counts as an entry)."""
        return f"{self.prefix}~bind:{_esc(context_id)}"

    async def start(self) -> None:
        """Connect, check the server answers, register the scripts."""
        if self._client is not None:
            return
        # A plain pool is ~30 µs/command cheaper than BlockingConnectionPool; the semaphore
        # makes callers beyond max_connections queue instead of failing.
        pool = aioredis.ConnectionPool.from_url(
            self.url, max_connections=self.max_connections, decode_responses=False,
            socket_connect_timeout=min(5.0, self.timeout_s), socket_timeout=self.timeout_s,
            health_check_interval=30)
        client = aioredis.Redis.from_pool(pool)  # the client owns (and closes) the pool
        try:
            await client.ping()
        except Exception:
            await client.aclose()
            raise
        self._client = client
        self._scripts = {name: client.register_script(src) for name, src in
                         (("claim", _CLAIM), ("complete", _COMPLETE), ("abandon", _ABANDON),
                          ("progress", _PROGRESS),
                          ("bind", _BIND))}

    async def close(self) -> None:
        """Finish background abandons, close the connection pool."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=5.0)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _call(self, script: str, context_id: str, key: str, *args: Any) -> Any:
        """Run one of the Lua scripts on an entry."""
        if self._client is None:
            raise RuntimeError("RedisStore used before start() or after close()")
        async with self._slots:
            return await self._scripts[script](
                keys=[self.entry_key(context_id, key), self._index], args=list(args))

    async def _claim_or_peek(self, mode: str, context_id: str, key: str, owner: str,
                             now_s: float, dead_owner: str | None = None, fingerprint: str = ""
                             ) -> tuple[str, bytes, str]:
        """Run the claim script in ``claim`` or ``peek`` mode."""
        verdict, outcome, prev = await self._call(
            "claim", context_id, key, mode, owner, repr(float(now_s)), repr(self.lease_s),
            repr(self.window_s), self.on_stale, self._inflight_ttl_ms, self._done_ttl_ms,
            dead_owner or "", fingerprint)
        return verdict.decode(), outcome, prev.decode()

    async def claim(self, context_id: str, key: str, owner: str, now_s: float,
                    dead_owner: str | None = None, fingerprint: str = "") -> Claim:
        """Atomically register ``key`` as in flight for ``owner`` unless already known."""
        try:
            verdict, outcome, prev = await self._claim_or_peek("claim", context_id, key, owner,
                                                               now_s, dead_owner, fingerprint)
        except asyncio.CancelledError:
            # The script may have run: abandon the entry if (and only if) it is ours.
            self._abandon_orphan(context_id, key, owner)
            raise
        if verdict == "new":
            claim = Claim("new")
        elif verdict == "reclaimed":
            claim = Claim("new", owner=prev, stale=True)
        elif verdict == "in_flight":
            claim = Claim("in_flight", owner=prev)
        elif verdict == "conflict":
            claim = Claim("conflict", owner=prev)
        else:  # done / lost
            claim = Claim("done", json.loads(outcome), owner=prev, stale=verdict == "lost")
            if claim.stale:
                self._wakeups.notify((context_id, key))
        self._count_claim(claim)
        return claim

    def failure_cause(self, exc: BaseException) -> str | None:
        """``timeout`` (no answer within ``timeout_s``), ``loading``, ``down`` (refused, reset,
        closed), ``full`` (OOM), ``read-only`` or ``error`` for a Redis failure; None else."""
        if isinstance(exc, redis_errors.TimeoutError | asyncio.TimeoutError | TimeoutError):
            return "timeout"
        if isinstance(exc, redis_errors.BusyLoadingError):
            return "loading"
        if isinstance(exc, redis_errors.ConnectionError | ConnectionError):
            return "down"
        if isinstance(exc, redis_errors.ReadOnlyError):
            return "read-only"
        if isinstance(exc, redis_errors.ResponseError) and str(exc).startswith("OOM"):
            return "full"
        if isinstance(exc, redis_errors.RedisError | OSError):
            return "error" if isinstance(exc, redis_errors.RedisError) else "down"
        return None

    async def ping(self) -> None:
        """``PING``."""
        if self._client is None:
            raise RuntimeError("RedisStore used before start() or after close()")
        async with self._slots:
            await self._client.ping()

    def _abandon_orphan(self, context_id: str, key: str, owner: str) -> None:
        """After a cancelled claim: owner-checked abandon (a no-op unless the claim was won)."""

        async def run() -> None:
            if await self.abandon(context_id, key, owner=owner):
                self._counters["orphan_claims_abandoned"] += 1

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Future[Any]) -> None:
        """Forget a finished background task, counting its failure."""
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._counters["background_errors"] += 1

    async def complete(self, context_id: str, key: str, outcome: dict[str, Any],
                       now_s: float, owner: str | None = None, fingerprint: str = "") -> bool:
        """Store the outcome for ``window_s``; refused (False) if ``owner`` lost the entry."""
        ok = bool(await self._call("complete", context_id, key, owner or "",
                                   repr(float(now_s)), json.dumps(outcome), self._done_ttl_ms,
                                   fingerprint))
        self._counters["completes" if ok else "completes_refused"] += 1
        if ok:
            self._wakeups.notify((context_id, key))
        return ok

    async def progress(self, context_id: str, key: str, owner: str, value: str) -> bool:
        """Keep ``value`` in the in-flight entry's outcome field (if ``owner`` holds it)."""
        if self._client is None:
            raise RuntimeError("RedisStore used before start() or after close()")
        async with self._slots:
            return bool(await self._scripts["progress"](keys=[self.entry_key(context_id, key)],
                                                        args=[owner, value]))

    async def abandon(self, context_id: str, key: str, owner: str | None = None) -> bool:
        """Delete an in-flight entry (owned by ``owner`` if given); waiters get ``None``."""
        ok = bool(await self._call("abandon", context_id, key, owner or ""))
        if ok:
            self._counters["abandons"] += 1
            self._wakeups.notify((context_id, key))
        return ok

    async def bind(self, context_id: str, principal: str, now_s: float) -> str:
        """Bind ``context_id`` to ``principal`` unless bound (``SET NX`` with the window as
        TTL, else ``GET``, in one script); the bound principal."""
        if self._client is None:
            raise RuntimeError("RedisStore used before start() or after close()")
        for _ in range(3):
            async with self._slots:
                raw = await self._scripts["bind"](keys=[self.binding_key(context_id)],
                                                  args=[principal, self._done_ttl_ms])
            if raw is not None:  # (nil only if the key expired inside the script: never)
                break
        else:
            raise RuntimeError(f"binding of {context_id!r} did not settle")
        owner = raw.decode() if isinstance(raw, bytes) else str(raw)
        self._counters["binds" if owner == principal else "binds_foreign"] += 1
        return owner

    async def _peek(self, context_id: str, key: str) -> tuple[PeekState, dict[str, Any] | None]:
        """A waiter's view of the entry now; resolves a stale lease under policy ``fail``."""
        verdict, outcome, _ = await self._claim_or_peek("peek", context_id, key, "", time.time())
        if verdict in ("done", "lost"):
            return "done", json.loads(outcome)
        return ("in_flight", None) if verdict == "in_flight" else ("gone", None)

    async def purge(self, now_s: float) -> int:
        """Entries expire by TTL; drop index entries of owners gone past lease + window."""
        if self._client is None:
            raise RuntimeError("RedisStore used before start() or after close()")
        cutoff = now_s - self.window_s - self.lease_s
        async with self._slots:
            n = int(await self._client.zremrangebyscore(self._index, "-inf", f"({cutoff!r}"))
        self._counters["purged"] += n
        return n

    async def stats(self) -> StoreStats:
        """Entries counted by SCAN (capped), in-flight from the index, server memory."""
        if self._client is None:
            raise RuntimeError("RedisStore used before start() or after close()")
        entries = 0
        approximate = False
        async with self._slots:  # one connection for the whole scan
            async for _ in self._client.scan_iter(match=f"{_esc_glob(self.prefix)}:*",
                                                  count=1000):
                entries += 1
                if entries >= _STATS_SCAN_LIMIT:
                    approximate = True
                    break
        async with self._slots:
            in_flight = int(await self._client.zcard(self._index))
            memory = await self._client.info("memory")
        entries -= 1 if in_flight else 0  # the index itself matches the pattern
        return self._stats(max(entries, 0), in_flight, entries_approximate=approximate,
                           redis_used_memory_bytes=int(memory.get("used_memory", 0)))


def _esc_glob(text: str) -> str:
    """Escape glob metacharacters for SCAN MATCH."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
