"""The Reasoner (A2A server): admission, worker pool, service, tool calls, failures, replies.

A request copy arriving from the uplink goes through, in order:

1. the dedup store (:mod:`sim.model.dedup`): a repeat joins the in-flight
   execution or gets the stored outcome replayed, and stops here.  A request of
   a degraded (core A2A) session carries no ``rta/requestGuid`` / ``rta/turnId``:
   it is never deduplicated;
2. the session: a message without a contextId opens a new server session (the
   server mints the contextId); a client-minted contextId opens one the first
   time it is seen.  A continuation (after INPUT_REQUIRED) of a task that never
   went INPUT_REQUIRED in this session — or has waited longer than
   ``handoff_timeout_s`` — is refused with ``session-not-found``;
3. the per-context rate limit (token bucket): refused with ``rate-limited`` and
   ``retryAfterMs`` = time until the next token;
4. the queue: a free worker starts it, else it waits (FIFO) unless ``queue_limit``
   requests already wait: refused with ``queue_full_code``.

An execution holds a worker for ``reasoning_time_s + load_latency_base_s +
load_latency_k_s * in flight`` (requests in service, this one included, plus
those queued when it starts), then — for the phase of a side-effect turn that
completes it — for the tool call, at most ``upstream_timeout_s``: a slower tool
fails the attempt with ``upstream-timeout`` at the timeout, but the tool still
finishes and the witness records the side effect then.  In dedup mode ``turn``
the side effect is guarded per logical turn (taskId, server session): if it
already ran (or is running) inside the dedup window the tool call is skipped
and the execution completes without it (see :mod:`sim.model.dedup`).  Injected
errors (``errors``, probability per execution) happen at the end of reasoning,
before any tool call.  A worker sends a ``progress`` directive when it starts
(a degraded session gets a plain WORKING status, which is no progress); after
the work, the spoken chunks follow ``first_chunk_s`` later at
``chunk_interval_s`` and the terminal state right after the last chunk (the
worker is free by then).  Every ``rate-limited`` FAILED carries
``rta/retryAfterMs``: the token bucket's wait for the per-context limit,
``retry_after_ms`` otherwise (injected, queue full, replayed).  Refusals and
replays answer at once with no worker.  Responses to a network duplicate of a
request are never delivered to the Live layer.  Capacity drops lower the number
of workers; running executions finish, waiting ones start when a worker frees up.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import simpy

from sim.model.clock import call_later
from sim.model.dedup import DedupStore, Entry
from sim.model.messages import COMPLETED, FAILED, INPUT_REQUIRED, NO_CONTEXT, Request
from sim.model.network import Link
from sim.model.rand import Streams
from sim.model.recorder import Table, code_of
from sim.model.witness import Witness
from sim.policy.codes import ErrorCode, is_retryable
from sim.scenario import ReasonerConfig
from sim.schema import DISPOSITIONS, ERROR_CODES, EXECUTIONS_TABLE

NAN = float("nan")
INF = float("inf")
_DISP = code_of(DISPOSITIONS)
_CODE = code_of(ERROR_CODES)
EXECUTED, REPLAYED, JOINED = _DISP["executed"], _DISP["replayed"], _DISP["joined"]
RATE_LIMITED_D, QUEUE_FULL_D = _DISP["rate-limited"], _DISP["queue-full"]
NO_SESSION_D, UNSERVED = _DISP["session-not-found"], _DISP["unserved"]
UPSTREAM_TIMEOUT = ErrorCode.UPSTREAM_TIMEOUT.value
RATE_LIMITED = ErrorCode.RATE_LIMITED.value
SESSION_NOT_FOUND = ErrorCode.SESSION_NOT_FOUND.value


def _no_listener(ev: Any) -> None:
    raise RuntimeError("Reasoner.deliver is not connected to a Live layer")


class Job:
    """One request copy admitted for execution."""

    __slots__ = ("arrival_s", "context_id", "dup", "entry", "error_code", "guard", "key", "req",
                 "status")

    def __init__(self, req: Request, dup: bool, arrival_s: float, context_id: int, key: Any,
                 entry: Entry | None) -> None:
        self.req = req
        self.dup = dup
        self.arrival_s = arrival_s
        self.context_id = context_id
        self.key = key
        self.entry = entry
        self.status = -1
        self.error_code: str | None = None
        self.guard: tuple[Any, Entry] | None = None  # turn mode: the side-effect claim it holds


class Reasoner:
    """The A2A server of the model; set ``deliver`` to the Live layer's terminal-event callback."""

    def __init__(self, env: simpy.Environment, cfg: ReasonerConfig, streams: Streams,
                 downlink: Link, witness: Witness, peak_from_s: float) -> None:
        self.env = env
        self.cfg = cfg
        self.downlink = downlink
        self.witness = witness
        self.deliver: Callable[[Any], None] = _no_listener
        self.workers = cfg.workers
        self.capacity = cfg.workers
        self.busy = 0
        self.queue: deque[Job] = deque()
        self.queue_limit = cfg.queue_limit
        self.store = (None if cfg.dedup == "none" else
                      DedupStore(cfg.dedup, cfg.dedup_window_s, cfg.dedup_entry_bytes, peak_from_s))
        self.reasoning = streams.sampler("reasoning", cfg.reasoning_time_s)
        self.tool = streams.sampler("tool", cfg.tool_latency_s)
        self.first_chunk = streams.sampler("first_chunk", cfg.first_chunk_s)
        self.u_err = streams.uniform("errors")
        cum, table = 0.0, []
        for code in ERROR_CODES:  # fixed order: the same draw maps to the same code
            p = cfg.errors.get(code, 0.0)
            if p > 0.0:
                cum += p
                table.append((cum, code))
        self.p_error = cum
        self.error_table = tuple(table)
        self.base_s = cfg.load_latency_base_s
        self.k_s = cfg.load_latency_k_s
        self.upstream_timeout_s = cfg.upstream_timeout_s
        self.progress = cfg.progress_directive
        self.chunks = cfg.chunks
        self.interval_s = cfg.chunk_interval_s
        self.rate = cfg.context_rate_per_s
        self.burst = float(cfg.context_burst)
        self.handoff_timeout_s = cfg.handoff_timeout_s if cfg.handoff_timeout_s > 0 else INF
        self.queue_full_code = cfg.queue_full_code
        self.retry_after_ms = float(cfg.retry_after_ms)  # hint of every other rate-limited
        self.queue_full_retry_ms = (self.retry_after_ms if cfg.queue_full_code == RATE_LIMITED
                                    else None)
        # turn mode: release the turn's key after a retryable failure (errors.md §3) and guard
        # the side effect per turn instead, as the reference Reasoner does
        self.by_turn = cfg.dedup == "turn"
        self.known_contexts: set[int] = set()
        self.sessions_opened: dict[int, int] = {}
        self._next_context = 0
        self.buckets: dict[int, list[float]] = {}
        self.awaiting_input: dict[int, dict[int, float]] = {}  # context -> task -> deadline
        self.executions = Table(EXECUTIONS_TABLE)
        self._row = self.executions.add
        self.requests = 0
        self.started = 0
        self.on_request = self._on_request  # bound once: used per message
        self.on_copy = self._on_copy
        self._on_done_cb = self._on_done

    # ------------------------------------------------------------------ arrival

    def _on_request(self, ev: Any) -> None:
        self.arrive(ev._value, False)

    def _on_copy(self, ev: Any) -> None:
        self.arrive(ev._value, True)

    def arrive(self, req: Request, dup: bool) -> None:
        """A copy of ``req`` (``dup``: the network's extra copy) reaches the server now."""
        now = self.env._now
        self.requests += 1
        store = self.store
        key = None
        if store is not None and not req.degraded:  # degraded: no requestGuid / turnId to key on
            key = store.key(req)
            e = store.lookup(key, now)
            if e is not None:
                self._repeat(req, dup, now, e)
                return
        ctx = req.context_id
        if ctx == NO_CONTEXT:
            ctx = self._next_context
            self._next_context += 1
            self._open_session(ctx, req.call_id)
        elif ctx not in self.known_contexts:
            self._open_session(ctx, req.call_id)
        if not dup:
            req.server_context_id = ctx
        if req.resumes_task:
            tasks = self.awaiting_input.get(ctx)
            deadline = tasks.get(req.task_id) if tasks else None
            if deadline is None or deadline < now:
                self._refuse(req, dup, now, ctx, NO_SESSION_D, SESSION_NOT_FOUND, None)
                return
        if self.rate > 0.0:
            b = self.buckets.get(ctx)
            if b is None:
                b = self.buckets[ctx] = [self.burst, now]
            tokens = b[0] + (now - b[1]) * self.rate
            if tokens > self.burst:
                tokens = self.burst
            b[1] = now
            if tokens < 1.0:
                b[0] = tokens
                wait_ms = float(math.ceil((1.0 - tokens) / self.rate * 1000.0))
                self._refuse(req, dup, now, ctx, RATE_LIMITED_D, RATE_LIMITED, wait_ms)
                return
            b[0] = tokens - 1.0
        if self.busy < self.capacity:
            entry = store.open(key, now, ctx) if key is not None else None  # type: ignore[union-attr]
            self._start(Job(req, dup, now, ctx, key, entry), now)
        elif len(self.queue) < self.queue_limit:
            entry = store.open(key, now, ctx) if key is not None else None  # type: ignore[union-attr]
            self.queue.append(Job(req, dup, now, ctx, key, entry))
        else:
            self._refuse(req, dup, now, ctx, QUEUE_FULL_D, self.queue_full_code,
                         self.queue_full_retry_ms)

    def _open_session(self, ctx: int, call_id: int) -> None:
        self.known_contexts.add(ctx)
        self.sessions_opened[call_id] = self.sessions_opened.get(call_id, 0) + 1

    def _repeat(self, req: Request, dup: bool, now: float, e: Entry) -> None:
        """A repeated key: replay the stored outcome, or join the execution in flight."""
        if e.done:
            self._row((req.call_id, req.interaction_id, req.request_guid, req.task_id, req.phase,
                       e.context_id, dup, now, REPLAYED, NAN, NAN, e.status, _CODE[e.error_code]))
            if not dup:
                req.replayed = True
                t1 = now if e.status == COMPLETED else 0.0
                self._respond(req, now, e.status, e.error_code, None, e.context_id, t1, 0.0)
            return
        self._row((req.call_id, req.interaction_id, req.request_guid, req.task_id, req.phase,
                   e.context_id, dup, now, JOINED, NAN, NAN, -1, -1))
        if e.waiters is None:
            e.waiters = []
        e.waiters.append((req, dup))
        if not dup:
            req.replayed = True
            if e.started:  # the stream is already WORKING
                self._progress(req, now)

    def _refuse(self, req: Request, dup: bool, now: float, ctx: int, disposition: int,
                code: str, retry_after_ms: float | None) -> None:
        self._row((req.call_id, req.interaction_id, req.request_guid, req.task_id, req.phase,
                   ctx, dup, now, disposition, NAN, NAN, FAILED, _CODE[code]))
        if not dup:
            self._respond(req, now, FAILED, code, retry_after_ms, ctx, 0.0, 0.0)

    # ------------------------------------------------------------------ service

    def _start(self, job: Job, now: float) -> None:
        self.busy += 1
        self.started += 1
        req = job.req
        # load latency: k x requests in flight at the Reasoner (in service incl. this one + queued)
        end = now + self.reasoning() + self.base_s + self.k_s * (self.busy + len(self.queue))
        status, code = COMPLETED, None
        if self.p_error and (u := self.u_err()) < self.p_error:
            status = FAILED
            for cum, c in self.error_table:
                if u < cum:
                    code = c
                    break
            else:  # float rounding at the top of the table
                code = self.error_table[-1][1]
        elif req.wants_input:
            status = INPUT_REQUIRED
        elif req.side_effect and (not self.by_turn or req.degraded or self._claim(job, now)):
            tool_s = self.tool()
            self.witness.record(end + tool_s, req, job.context_id)
            if 0.0 < self.upstream_timeout_s < tool_s:
                end += self.upstream_timeout_s
                status, code = FAILED, UPSTREAM_TIMEOUT
            else:
                end += tool_s
        job.status = status
        job.error_code = code
        self._row((req.call_id, req.interaction_id, req.request_guid, req.task_id, req.phase,
                   job.context_id, job.dup, job.arrival_s, EXECUTED, now, end, status, _CODE[code]))
        e = job.entry
        if e is not None:
            e.started = True
            if e.waiters:
                for w, wdup in e.waiters:
                    if not wdup:
                        self._progress(w, now)
        if not job.dup:
            self._progress(req, now)
        call_later(self.env, end - now, self._on_done_cb, job)

    def _claim(self, job: Job, now: float) -> bool:
        """Turn mode: claim the side effect of ``job``'s logical turn; False if it already ran
        (or is running) within the dedup window — the tool call is then skipped."""
        store = self.store
        req = job.req
        gkey = ("side-effect", job.context_id, req.task_id)  # scoped by the server session
        if store.lookup(gkey, now) is not None:  # type: ignore[union-attr]
            return False
        job.guard = (gkey, store.open(gkey, now, job.context_id))  # type: ignore[union-attr]
        return True

    def _progress(self, req: Request, now: float) -> None:
        """The ``progress`` directive sent at ``now`` (if enabled) on ``req``'s stream; a
        degraded (core A2A) session gets a plain WORKING status instead, which is no progress."""
        if self.progress and req.open and not req.degraded:
            t = self.downlink.arrival(now)
            if t < req.first_response_s:
                req.first_response_s = t

    def _on_done(self, ev: Any) -> None:
        job: Job = ev._value
        now = self.env._now
        self.busy -= 1
        status, code, ctx = job.status, job.error_code, job.context_id
        if status == INPUT_REQUIRED:
            tasks = self.awaiting_input.get(ctx)
            if tasks is None:
                tasks = self.awaiting_input[ctx] = {}
            tasks[job.req.task_id] = now + self.handoff_timeout_s
        t1 = now + self.first_chunk() if status == COMPLETED else 0.0
        store = self.store
        if job.guard is not None:  # settled when the tool call returned (or timed out)
            gkey, g = job.guard
            store.close(gkey, g, now, COMPLETED, None, ctx)  # type: ignore[union-attr]
        e = job.entry
        if e is not None:
            waiters = e.waiters
            if self.by_turn and status == FAILED and is_retryable(code):  # type: ignore[arg-type]
                store.release(job.key, e)  # type: ignore[union-attr]
            else:
                store.close(job.key, e, now, status, code, ctx)  # type: ignore[union-attr]
            if waiters:
                for w, wdup in waiters:
                    if not wdup:
                        self._respond(w, now, status, code, None, ctx, t1, self.interval_s)
        if not job.dup:
            self._respond(job.req, now, status, code, None, ctx, t1, self.interval_s)
        q = self.queue
        while q and self.busy < self.capacity:
            self._start(q.popleft(), now)

    def _respond(self, req: Request, now: float, status: int, code: str | None,
                 retry_after_ms: float | None, ctx: int, first_chunk_send_s: float,
                 interval_s: float) -> None:
        """Stream the outcome to ``req``: compute arrival times, schedule the terminal event."""
        if not req.open:
            return  # the Live layer stopped listening (timeout): nothing is delivered
        dl = self.downlink
        req.status = status
        req.error_code = code
        if retry_after_ms is None and code == RATE_LIMITED:
            retry_after_ms = self.retry_after_ms  # injected, joined or replayed rate-limited
        req.retry_after_ms = retry_after_ms
        req.server_context_id = ctx
        if status == COMPLETED:
            n = self.chunks
            first, last, lost = dl.chunks(first_chunk_send_s, interval_s, n)
            arrival, tlost = dl.terminal(first_chunk_send_s + (n - 1) * interval_s)
            req.first_chunk_s = first
            req.chunks_lost = lost
            req.complete_s = arrival if arrival > last else last
            if first < req.first_response_s:
                req.first_response_s = first
        else:
            arrival, tlost = dl.terminal(now)
        if tlost:
            req.terminal_lost = True
            if arrival == INF:  # partitioned: silence; the Live layer's timers decide
                return
        elif arrival < req.first_response_s:
            req.first_response_s = arrival
        call_later(self.env, arrival - now, self.deliver, req)

    # ------------------------------------------------------------------ capacity, sessions

    def set_capacity(self, workers: int) -> None:
        """Change the number of workers now; waiting requests start if workers are free."""
        self.capacity = workers
        now = self.env._now
        q = self.queue
        while q and self.busy < self.capacity:
            self._start(q.popleft(), now)

    def end_session(self, context_id: int) -> None:
        """The call using ``context_id`` ended: drop its rate-limit and handoff state."""
        self.buckets.pop(context_id, None)
        self.awaiting_input.pop(context_id, None)

    def flush(self) -> None:
        """Record the requests still waiting when the run ends (disposition ``unserved``)."""
        for job in self.queue:
            r = job.req
            self._row((r.call_id, r.interaction_id, r.request_guid, r.task_id, r.phase,
                       job.context_id, job.dup, job.arrival_s, UNSERVED, NAN, NAN, -1, -1))

    def gauges(self, now: float) -> tuple[int, int, int, int]:
        """(in flight, queue length, busy workers, capacity) at ``now``."""
        q = len(self.queue)
        return self.busy + q, q, self.busy, self.capacity

    def counters(self) -> dict[str, Any]:
        """Totals for the run's ``counters`` dict."""
        out: dict[str, Any] = {"server_requests": self.requests, "server_executions": self.started,
                               "server_sessions": len(self.known_contexts)}
        if self.store is not None:
            out.update(self.store.state())
        else:
            out.update({"dedup_peak_entries": 0, "dedup_peak_bytes": 0})
        return out
