"""The Reasoner's view of its dedup store when the store fails: profile errors, health, retries.

:class:`GuardedStore` wraps the configured :class:`~rtalab.loadtests.dedup.base.DedupStore`.  Every
operation that fails because the store is down, frozen, full (the backend's
:meth:`~rtalab.loadtests.dedup.base.DedupStore.failure_cause`) raises
:class:`~rtalab.loadtests.dedup.base.StoreUnavailable` instead of the backend's error (whose text
may name the store's address), is counted in ``rta_reasoner_store_failures_total{op,cause}`` and
logged as one WARNING line per operation and cause at most every second (no traceback).  Any
other exception is a bug and propagates unchanged.  The handler answers ``StoreUnavailable``
as FAILED ``internal`` (retryable) with ``retryAfterMs`` = :data:`RETRY_AFTER_MS` when the
cause is transient (down, timeout, busy, loading), without one when an operator must act
(full, read-only, io, error).

Health.  The wrapper keeps the outcome of the last operation: unhealthy from a failure until
an operation succeeds (a ``full`` store only by a successful *write*: reads still work on a
full disk).  ``/readyz`` probes the store (:meth:`GuardedStore.probe`, at most every
:data:`PROBE_EVERY_S`, each bounded by :data:`PROBE_TIMEOUT_S`) and answers 503 while it is
unhealthy; ``/healthz`` reports the same in its body (200: the process is alive).

Deferred settlement (errors.md §4, docs/reasoner.md).  An owner that cannot store a turn's
outcome (or release a claim that ran nothing) retries it in the background
(:meth:`GuardedStore.defer`: 50 ms doubling to 1 s, for at most the store's lease) so a
duplicate waiting for the key gets the definite outcome as soon as the store is back — not
"still in progress" until the lease ends; meanwhile a retry that reaches the same worker is
answered from the outcome it holds, even while the store is down.  A claim that timed out or
lost its connection may still have been applied by the server: its owner-checked ``abandon``
is deferred the same way (a no-op unless the claim took effect).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rtalab.loadtests.dedup.base import Claim, DedupStore, StoreStats, StoreUnavailable
from rtalab.loadtests.reasoner import metrics
from rtalab.sim.shared.dedup_rule import conflicts

log = logging.getLogger("rtalab.reasoner")
T = TypeVar("T")

RETRY_AFTER_MS = 1000  # the hint for a transient failure: about one probe period
TRANSIENT = ("down", "timeout", "busy", "loading")
PROBE_EVERY_S = 0.5
PROBE_TIMEOUT_S = 1.0
LOG_EVERY_S = 1.0
DEFER_MIN_S, DEFER_MAX_S = 0.05, 1.0
MAX_DEFERRED = 10_000  # background settlements kept at once (beyond: dropped, counted)
WRITES = ("claim", "complete", "progress", "abandon", "bind", "purge")


class StoreHealth:
    """Healthy or not, since when, why (this worker's view)."""

    def __init__(self) -> None:
        self.healthy = True
        self.cause: str | None = None
        self.op: str | None = None
        self.since = time.time()
        self._pending: Counter[tuple[str, str]] = Counter()
        self._last_log: dict[tuple[str, str], float] = {}

    def failed(self, op: str, cause: str) -> None:
        """Book one failure: metric, state, one throttled log line."""
        metrics.STORE_FAILURES.labels(op, cause).inc()
        if self.healthy:
            self.healthy, self.since = False, time.time()
            metrics.STORE_HEALTHY.set(0)
        self.cause, self.op = cause, op
        key = (op, cause)
        self._pending[key] += 1
        now = time.monotonic()
        if now - self._last_log.get(key, -LOG_EVERY_S) >= LOG_EVERY_S:
            n, self._pending[key] = self._pending[key], 0
            self._last_log[key] = now
            log.warning("dedup store unavailable: %d %s failure(s), cause %s (answered FAILED "
                        "internal; nothing started without its record)", n, op, cause)

    def ok(self, op: str) -> None:
        """An operation succeeded: healthy again (a full store only after a write)."""
        if self.healthy or (self.cause == "full" and op not in WRITES):
            return
        log.warning("dedup store available again after %.1fs (%s)", time.time() - self.since,
                    self.cause)
        self.healthy, self.cause, self.op, self.since = True, None, None, time.time()
        metrics.STORE_HEALTHY.set(1)

    def as_json(self) -> dict[str, Any]:
        """For /healthz and /readyz."""
        body: dict[str, Any] = {"healthy": self.healthy, "sinceS": round(self.since, 3)}
        if not self.healthy:
            body.update(cause=self.cause, op=self.op)
        return body


class GuardedStore(DedupStore):
    """A dedup store whose failures are :class:`StoreUnavailable` (see the module docstring)."""

    def __init__(self, inner: DedupStore):
        super().__init__(inner.window_s, lease_s=inner.lease_s, on_stale=inner.on_stale)
        self.inner = inner
        self.name, self.durable, self.shared = inner.name, inner.durable, inner.shared
        self.health = StoreHealth()
        self._deferred: set[asyncio.Task[None]] = set()
        # outcomes this worker holds but could not store yet: (scope, key) -> (outcome,
        # fingerprint); a retry that reaches this worker while the store fails replays it
        self._unstored: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        self._probe: asyncio.Task[None] | None = None
        self._probed_at = -PROBE_EVERY_S
        metrics.STORE_HEALTHY.set(1)

    def unavailable(self, op: str, exc: BaseException) -> StoreUnavailable | None:
        """The profile error for a backend failure (booked), or None for a bug."""
        if isinstance(exc, StoreUnavailable):
            return exc
        cause = self.inner.failure_cause(exc)
        if cause is None:
            return None
        self.health.failed(op, cause)
        return StoreUnavailable(op, cause, RETRY_AFTER_MS if cause in TRANSIENT else None)

    async def _do(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one operation of the inner store, translating its failures."""
        try:
            result = await call()
        except Exception as e:
            err = self.unavailable(op, e)
            if err is None:
                raise
            raise err from None
        self.health.ok(op)
        return result

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the inner store."""
        await self.inner.start()

    async def close(self) -> None:
        """Give deferred settlements a moment, then stop them; close the inner store."""
        if self._deferred:
            _, late = await asyncio.wait(set(self._deferred), timeout=2.0)
            for task in late:
                task.cancel()
        if self._probe is not None:
            self._probe.cancel()
        await self.inner.close()

    # ------------------------------------------------------------------ operations

    async def claim(self, context_id: str, key: str, owner: str, now_s: float,
                    dead_owner: str | None = None, fingerprint: str = "") -> Claim:
        """Claim; an outcome this worker holds but could not store yet answers at once (even
        if the store is down, or came back without the entry); if the store failed after the
        command may have reached it, defer an owner-checked abandon (a no-op unless the claim
        was applied)."""
        held = self._unstored.get((context_id, key))
        if held is not None:
            # the held outcome is the key's entry meanwhile: the fingerprint rule applies to
            # it (a request reusing its key for another meaning must not reach a store that
            # lost the entry and run again)
            if conflicts(held[1], fingerprint):
                return Claim("conflict")
            metrics.STORE_DEFERRED.labels("claim", "replayed").inc()
            return Claim("done", held[0])
        try:
            return await self._do("claim", lambda: self.inner.claim(
                context_id, key, owner, now_s, dead_owner=dead_owner, fingerprint=fingerprint))
        except StoreUnavailable as e:
            if e.cause in ("timeout", "down"):
                self.defer("abandon", lambda: self.inner.abandon(context_id, key, owner=owner))
            raise

    async def complete(self, context_id: str, key: str, outcome: dict[str, Any],
                       now_s: float, owner: str | None = None, fingerprint: str = "") -> bool:
        """Store an outcome."""
        return await self._do("complete", lambda: self.inner.complete(
            context_id, key, outcome, now_s, owner=owner, fingerprint=fingerprint))

    async def progress(self, context_id: str, key: str, owner: str, value: str) -> bool:
        """Record the side effect's progress."""
        return await self._do("progress", lambda: self.inner.progress(context_id, key, owner,
                                                                      value))

    async def abandon(self, context_id: str, key: str, owner: str | None = None) -> bool:
        """Forget an in-flight entry."""
        return await self._do("abandon", lambda: self.inner.abandon(context_id, key,
                                                                    owner=owner))

    async def bind(self, context_id: str, principal: str, now_s: float) -> str:
        """Bind a context."""
        return await self._do("bind", lambda: self.inner.bind(context_id, principal, now_s))

    async def wait(self, context_id: str, key: str, timeout_s: float) -> dict[str, Any] | None:
        """Wait for an outcome."""
        return await self._do("wait", lambda: self.inner.wait(context_id, key, timeout_s))

    async def purge(self, now_s: float) -> int:
        """Drop expired entries."""
        return await self._do("purge", lambda: self.inner.purge(now_s))

    async def stats(self) -> StoreStats:
        """The inner store's stats, with the deferred settlements pending."""
        st = await self._do("stats", self.inner.stats)
        st.extra["deferred_pending"] = len(self._deferred)
        return st

    async def ping(self) -> None:
        """One round trip."""
        await self._do("ping", self.inner.ping)

    def failure_cause(self, exc: BaseException) -> str | None:
        """The inner store's classification."""
        return self.inner.failure_cause(exc)

    # ------------------------------------------------------------------ health and deferral

    async def probe(self) -> dict[str, Any]:
        """The store's health for /readyz: a ping at most every :data:`PROBE_EVERY_S` (shared
        by concurrent callers), bounded by :data:`PROBE_TIMEOUT_S`."""
        now = time.monotonic()
        if self._probe is None and now - self._probed_at >= PROBE_EVERY_S:
            self._probed_at = now
            self._probe = asyncio.create_task(self._ping_once())
        if self._probe is not None:
            await asyncio.wait((self._probe,))
        return self.health.as_json()

    async def _ping_once(self) -> None:
        try:
            await asyncio.wait_for(self.ping(), PROBE_TIMEOUT_S)
        except StoreUnavailable:
            pass
        except TimeoutError:
            self.health.failed("ping", "timeout")
        finally:
            self._probe = None

    def defer(self, op: str, call: Callable[[], Awaitable[Any]]) -> asyncio.Task[None] | None:
        """Retry ``call`` (an owner-checked complete / abandon of the inner store) in the
        background until it is done, or the lease is over; the task (None: dropped)."""
        if len(self._deferred) >= MAX_DEFERRED:
            metrics.STORE_DEFERRED.labels(op, "dropped").inc()
            return None
        metrics.STORE_DEFERRED.labels(op, "queued").inc()
        task = asyncio.create_task(self._retry(op, call))
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)
        return task

    def defer_write(self, op: str, context_id: str, key: str, owner: str,
                    outcome: dict[str, Any] | None = None, fingerprint: str = "") -> None:
        """Defer an owner-checked ``complete`` (with ``outcome``, held here for retries
        meanwhile) or ``abandon`` that failed
        (:class:`rtalab.loadtests.reasoner.idempotency.Ticket`)."""
        inner = self.inner
        if op == "complete":
            assert outcome is not None
            entry = (context_id, key)
            self._unstored[entry] = (outcome, fingerprint)

            async def complete() -> Any:
                ok = await inner.complete(context_id, key, outcome, time.time(), owner=owner)
                if not ok and inner.on_stale == "fail":
                    # the entry is gone (a store that lost its data) or lost: this outcome
                    # is the truth for the key (at-most-once), so it is written anyway
                    ok = await inner.complete(context_id, key, outcome, time.time(),
                                              fingerprint=fingerprint)
                return ok

            def forget(_: Any = None) -> None:
                if self._unstored.get(entry, (None,))[0] is outcome:
                    del self._unstored[entry]

            task = self.defer(op, complete)
            if task is None:
                forget()
            else:
                task.add_done_callback(forget)
        else:
            self.defer(op, lambda: inner.abandon(context_id, key, owner=owner))

    async def _retry(self, op: str, call: Callable[[], Awaitable[Any]]) -> None:
        deadline = time.monotonic() + self.lease_s
        delay = DEFER_MIN_S
        while True:
            await asyncio.sleep(delay)
            try:
                await call()
            except Exception as e:
                if self.inner.failure_cause(e) is None:
                    log.error("deferred %s failed: %s", op, type(e).__name__)
                    metrics.STORE_DEFERRED.labels(op, "failed").inc()
                    return
                if time.monotonic() + delay >= deadline:
                    metrics.STORE_DEFERRED.labels(op, "expired").inc()
                    return
                delay = min(delay * 2, DEFER_MAX_S)
                continue
            self.health.ok(op)
            metrics.STORE_DEFERRED.labels(op, "done").inc()
            return
