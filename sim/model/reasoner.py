"""The Reasoner (A2A server): admission, worker pool, service, tool calls, failures, replies.

A request copy arriving from the uplink goes through, in order:

1. the dedup store (:mod:`rtalab.sim.model.dedup`): a repeat joins the in-flight
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
and the execution completes without it (see :mod:`rtalab.sim.model.dedup`).  Injected
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

from rtalab.sim.dist import Const
from rtalab.sim.model.clock import ENTRY_PRIORITY, pusher, scheduler, sim_time
from rtalab.sim.model.dedup import DedupStore, Entry, fingerprint
from rtalab.sim.model.intsets import IntCounts, IntSet
from rtalab.sim.model.messages import COMPLETED, FAILED, INPUT_REQUIRED, NO_CONTEXT, Request
from rtalab.sim.model.network import Link
from rtalab.sim.model.rand import Streams
from rtalab.sim.model.recorder import Table, code_of, row_writer
from rtalab.sim.model.witness import Witness
from rtalab.sim.policy.codes import ErrorCode, is_retryable
from rtalab.sim.scenario import ReasonerConfig
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.schema import DISPOSITIONS, ERROR_CODES, EXECUTIONS_TABLE

NAN = float("nan")
INF = float("inf")
_DISP = code_of(DISPOSITIONS)
_CODE = code_of(ERROR_CODES)
EXECUTED, REPLAYED, JOINED = _DISP["executed"], _DISP["replayed"], _DISP["joined"]
RATE_LIMITED_D, QUEUE_FULL_D = _DISP["rate-limited"], _DISP["queue-full"]
NO_SESSION_D, UNSERVED = _DISP["session-not-found"], _DISP["unserved"]
QUEUE_TIMEOUT_D, KEY_CONFLICT_D = _DISP["queue-timeout"], _DISP["key-conflict"]
CANCEL_DROPPED_D, CANCEL_STOPPED_D = _DISP["cancel-dropped"], _DISP["cancel-stopped"]
CANCEL_ROLLED_D, CANCEL_LATE_D = _DISP["cancel-rolled-forward"], _DISP["cancel-too-late"]
UPSTREAM_TIMEOUT = ErrorCode.UPSTREAM_TIMEOUT.value
RATE_LIMITED = ErrorCode.RATE_LIMITED.value
SESSION_NOT_FOUND = ErrorCode.SESSION_NOT_FOUND.value
SCHEMA_VALIDATION = ErrorCode.SCHEMA_VALIDATION.value
INTERNAL = ErrorCode.INTERNAL.value

# the executions row, cell by cell (rtalab.sim.model.recorder.row_writer)
EXECUTION_ROW = ("req, ctx, dup, arrival_s, disposition, start_s=NAN, end_s=NAN, status=-1, "
                 "code=None", {
                     S.CALL_ID: "req.call_id",
                     S.INTERACTION_ID: "req.interaction_id",
                     S.REQUEST_GUID: "req.request_guid",
                     S.TASK_ID: "req.task_id",
                     S.PHASE: "req.phase",
                     S.CONTEXT_ID: "ctx",
                     S.NETWORK_DUPLICATE: "dup",
                     S.ARRIVAL_S: "arrival_s",
                     S.DISPOSITION: "disposition",
                     S.SERVICE_START_S: "start_s",
                     S.SERVICE_END_S: "end_s",
                     S.STATUS: "status",
                     S.ERROR_CODE: "_CODE[code]",
                 })


def _no_listener(req: Any) -> None:
    raise RuntimeError("Reasoner.deliver is not connected to a Live layer")


QUEUED, RUNNING, DONE, DROPPED = 0, 1, 2, 3  # Job.state


class Job:
    """One request copy admitted for execution, built by :meth:`Reasoner.arrive` (its one maker;
    no ``__init__``: a class call with a Python ``__init__`` costs ~0.5 k instructions more than
    ``object.__new__`` and the stores).  ``start_s``, ``status`` and ``error_code`` are set when
    it starts (:meth:`Reasoner._start`; nothing reads them before): a queued job never started
    has none."""

    __slots__ = ("arrival_s", "cancelled", "committed", "context_id", "dup", "entry",
                 "error_code", "guard", "key", "req", "start_s", "state", "status", "step_s",
                 "tkey", "tool_end_s")

    req: Request
    dup: bool
    arrival_s: float
    context_id: int
    key: Any  # dedup-store key (None: not in the store)
    entry: Entry | None  # the execution's entry (store and/or task index), None if neither
    tkey: Any  # task-index key (None: not indexed)
    state: int
    guard: tuple[Any, Entry] | None  # turn mode: the side-effect claim it holds
    cancelled: bool  # stopped by a CancelTask before its side effect ran
    committed: bool  # the side-effecting tool call has started (cannot be undone)
    step_s: float  # end of reasoning = start of the tool call
    tool_end_s: float
    start_s: float
    status: int
    error_code: str | None


_new = object.__new__


class Reasoner:
    """The A2A server of the model; set ``deliver`` to the Live layer's terminal-event callback."""

    def __init__(self, env: simpy.Environment, cfg: ReasonerConfig, streams: Streams,
                 downlink: Link, witness: Witness, peak_from_s: float,
                 cancellable: bool = False) -> None:
        """``cancellable``: CancelTask messages may arrive (the Live layer sends them), so the
        Reasoner indexes its jobs by task and defers each side effect to its own step."""
        self.env = env
        self._later = scheduler(env)  # call_later bound to env
        self._push, self._next_id = pusher(env)  # an execution's end and a reply: no call frame
        self.cfg = cfg
        self.downlink = downlink
        self.witness = witness
        self.deliver: Callable[[Any], None] = _no_listener
        self.workers = cfg.workers
        self.capacity = cfg.workers
        self.busy = 0
        self.queue: deque[Job] = deque()
        self.q_dead = 0  # cancelled jobs still in ``queue`` (dropped lazily when reached)
        self.lifo = cfg.queue_discipline == "lifo"
        self.queue_timeout_s = cfg.queue_timeout_s
        self.queue_limit = cfg.queue_limit
        self.store = (None if cfg.dedup == "none" else
                      DedupStore(cfg.dedup, cfg.dedup_window_s, cfg.dedup_entry_bytes, peak_from_s))
        self.reasoning = streams.sampler("reasoning", cfg.reasoning_time_s)
        self.tool = streams.sampler("tool", cfg.tool_latency_s)
        self.first_chunk = streams.sampler("first_chunk", cfg.first_chunk_s)
        #: a constant first-chunk delay, drawn without a call (its sampler draws nothing)
        fc = cfg.first_chunk_s
        self._first_chunk_s = float(fc.value) if isinstance(fc, Const) else None
        #: the downlink's constant latency when it is fast (no faults): arrivals computed inline
        self._dl_latency = downlink.const_latency if downlink.fast else None
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
        # errors.md §4 / docs/decisions.md D2: a known taskId is a retry of its turn.
        # Turn mode keys its store by task already; the other modes keep a task index per session.
        self.task_rule = cfg.known_task == "retry" and not self.by_turn
        self.tasks: dict[int, dict[tuple[int, int], Entry]] = {}  # context -> (task, phase)
        self.minted: dict[int, dict[int, int]] = {}  # D1: call -> requestGuid -> minted context
        self.cancellable = cancellable
        self.jobs_by_task: dict[int, list[Job]] = {}  # cancellable: live jobs of each task
        self.known_contexts = IntSet()  # every session opened (compact: rtalab.sim.model.intsets)
        self.sessions_opened = IntCounts()  # call -> sessions it opened
        self._next_context = 0
        self._context_step = 1  # a fleet's replicas mint interleaved contextIds
                                # (rtalab.sim.model.fleet)
        self.buckets: dict[int, list[float]] = {}
        self.awaiting_input: dict[int, dict[int, float]] = {}  # context -> task -> deadline
        self.executions = Table(EXECUTIONS_TABLE)
        self._log = row_writer(self.executions, globals(), *EXECUTION_ROW)
        self.requests = 0
        self.started = 0
        self.on_request = self.arrive  # bound once: used per message
        self.on_copy = self._on_copy
        self.on_cancel = self._on_cancel
        self._on_done_cb = self._on_done
        self._on_step_cb = self._on_step

    # ------------------------------------------------------------------ arrival

    def _on_copy(self, req: Request) -> None:
        self.arrive(req, True)

    def _context_of(self, req: Request) -> int:
        """The server contextId of ``req``; mints (and opens) a session when needed.

        docs/decisions.md D1: a message without a contextId gets the contextId minted for the FIRST
        copy of its requestGuid in its call, so a resend of that message (byte-identical, or
        carrying the contextId the Live layer learned since) lands in the original session.
        """
        ctx = req.context_id
        if ctx == NO_CONTEXT:
            by_guid = self.minted.get(req.call_id)
            if by_guid is None:
                by_guid = self.minted[req.call_id] = {}
            known = by_guid.get(req.request_guid)
            if known is not None:
                return known
            ctx = self._next_context
            self._next_context += self._context_step
            by_guid[req.request_guid] = ctx
        elif ctx in self.known_contexts:
            return ctx
        self.known_contexts.add(ctx)  # the session opens (once per call: no helper call)
        self.sessions_opened.incr(req.call_id)
        return ctx

    def arrive(self, req: Request, dup: bool = False) -> None:
        """A copy of the request ``req`` (``dup``: the network's extra copy) reaches the
        server now (the uplink's delivery callback)."""
        now = sim_time(self.env)
        self.requests += 1
        ctx = req.context_id
        # else _context_of's answer; __contains__ called as a method: ``in`` on a Python-level
        # __contains__ goes through the type slot (~0.2 k instructions more)
        if ctx == NO_CONTEXT or not self.known_contexts.__contains__(ctx):
            ctx = self._context_of(req)
        if not dup:
            req.server_context_id = ctx
        store = self.store
        profile = not req.degraded  # degraded: no requestGuid / turnId to key on
        key = None
        if store is not None and profile:
            key = store.key(req, ctx)
            # store.lookup's answer; for the one dict only when it holds the key (the rare case)
            e = store.lookup(key, now) if not store.one_table or key in store.entries else None
            if e is not None:
                if store.conflicts(e, fingerprint(req)):  # the key reused by another request
                    self._refuse(req, dup, now, ctx, KEY_CONFLICT_D, SCHEMA_VALIDATION, None)
                    return
                self._repeat(req, dup, now, e)
                return
        tkey = None
        if self.task_rule and profile:
            tkey = (req.task_id, req.phase)
            tasks = self.tasks.get(ctx)
            e = tasks.get(tkey) if tasks is not None else None
            if e is not None:
                self._repeat(req, dup, now, e)
                return
        if req.resumes_task:
            tasks_waiting = self.awaiting_input.get(ctx)
            deadline = tasks_waiting.get(req.task_id) if tasks_waiting else None
            if deadline is None or deadline < now:
                self._refuse(req, dup, now, ctx, NO_SESSION_D, SESSION_NOT_FOUND, None)
                return
        if self.rate > 0.0 and self._rate_limited(req, dup, now, ctx):
            return
        if self.busy >= self.capacity and len(self.queue) - self.q_dead >= self.queue_limit:
            self._refuse(req, dup, now, ctx, QUEUE_FULL_D, self.queue_full_code,
                         self.queue_full_retry_ms)
            return
        # admitted (inlined: once per execution): the job, its dedup entry and the task index
        entry = None
        if key is not None:
            entry = store.open(key, now, ctx, fingerprint(req))  # type: ignore[union-attr]  # a dedup key implies the store
        if tkey is not None:
            if entry is None:
                entry = Entry(ctx)
            tasks = self.tasks.get(ctx)
            if tasks is None:
                tasks = self.tasks[ctx] = {}
            tasks[tkey] = entry
        job = _new(Job)  # Job's fields (see the class), without a class call's __init__
        job.req = req
        job.dup = dup
        job.arrival_s = now
        job.context_id = ctx
        job.key = key
        job.entry = entry
        job.tkey = tkey
        job.state = QUEUED
        job.guard = None
        job.cancelled = False
        job.committed = False
        job.step_s = NAN
        job.tool_end_s = NAN
        if self.cancellable:
            jobs = self.jobs_by_task.get(req.task_id)
            if jobs is None:
                self.jobs_by_task[req.task_id] = [job]
            else:
                jobs.append(job)
        if self.busy < self.capacity:
            self._start(job, now)
        else:
            self.queue.append(job)

    def _rate_limited(self, req: Request, dup: bool, now: float, ctx: int) -> bool:
        """The per-context token bucket: take a token, or refuse ``req`` (True) with
        ``rate-limited`` and the wait for the next token as its ``retryAfterMs``."""
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
            return True
        b[0] = tokens - 1.0
        return False

    def _repeat(self, req: Request, dup: bool, now: float, e: Entry) -> None:
        """A repeated key: replay the stored outcome, or join the execution in flight."""
        if e.done:
            self._log(req, e.context_id, dup, now, REPLAYED, NAN, NAN, e.status, e.error_code)
            if not dup:
                req.replayed = True
                t1 = now if e.status == COMPLETED else 0.0
                self._respond(req, now, e.status, e.error_code, None, e.context_id, t1, 0.0)
            return
        self._log(req, e.context_id, dup, now, JOINED)
        if e.waiters is None:
            e.waiters = []
        e.waiters.append((req, dup))
        if not dup:
            req.replayed = True
            if e.started:  # the stream is already WORKING
                self._progress(req, now)

    def _refuse(self, req: Request, dup: bool, now: float, ctx: int, disposition: int,
                code: str, retry_after_ms: float | None) -> None:
        self._log(req, ctx, dup, now, disposition, NAN, NAN, FAILED, code)
        if not dup:
            self._respond(req, now, FAILED, code, retry_after_ms, ctx, 0.0, 0.0)

    # ------------------------------------------------------------------ service

    def _pump(self, now: float) -> None:
        """Free workers take waiting jobs (FIFO or LIFO); cancelled ones are skipped, and with
        ``queue_timeout_s`` a job that waited longer is refused like a full queue (D3)."""
        q = self.queue
        limit = self.queue_timeout_s
        while q and self.busy < self.capacity:
            job = q.pop() if self.lifo else q.popleft()
            if job.state != QUEUED:  # dropped by a CancelTask
                self.q_dead -= 1
                continue
            if limit > 0.0 and now - job.arrival_s > limit:
                self._shed(job, now)
                continue
            self._start(job, now)

    def _shed(self, job: Job, now: float) -> None:
        """Refuse a job that waited longer than ``queue_timeout_s`` (no worker time spent)."""
        job.state = DROPPED
        if self.cancellable:
            self._forget(job)
        req = job.req
        code, ra = self.queue_full_code, self.queue_full_retry_ms
        self._log(req, job.context_id, job.dup, job.arrival_s, QUEUE_TIMEOUT_D, NAN, now,
                  FAILED, code)
        self._release(job, now, FAILED, code, ra)
        if not job.dup:
            self._respond(req, now, FAILED, code, ra, job.context_id, 0.0, 0.0)

    def _start(self, job: Job, now: float) -> None:
        self.busy += 1
        self.started += 1
        job.state = RUNNING
        job.start_s = now
        req = job.req
        # load latency: k x requests in flight at the Reasoner (in service incl. this one + queued)
        # hot path: the instance's callables are read into locals before they are called
        # (``self.f()`` on an instance attribute misses CPython 3.11's LOAD_METHOD
        # specialisation, ~0.1 k instructions a call)
        reasoning = self.reasoning
        end = now + reasoning() + self.base_s
        if self.k_s:
            end += self.k_s * (self.busy + len(self.queue) - self.q_dead)
        status, code = COMPLETED, None
        u_err = self.u_err
        if self.p_error and (u := u_err()) < self.p_error:
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
            if self.cancellable:  # the side effect is committed at its step (see _on_step)
                job.step_s = end
                job.tool_end_s = end + tool_s
                self._later(end - now, self._on_step_cb, job)
            else:
                job.committed = True
                self.witness.record(end + tool_s, req, job.context_id)
            if 0.0 < self.upstream_timeout_s < tool_s:
                end += self.upstream_timeout_s
                status, code = FAILED, UPSTREAM_TIMEOUT
            else:
                end += tool_s
        job.status = status
        job.error_code = code
        log = self._log
        log(req, job.context_id, job.dup, job.arrival_s, EXECUTED, now, end, status, code)
        e = job.entry
        if e is not None:
            e.started = True
            if e.waiters:
                for w, wdup in e.waiters:
                    if not wdup:
                        self._progress(w, now)
        if not job.dup and self.progress and req.open and not req.degraded:  # _progress, inlined
            lat = self._dl_latency
            t = now + lat if lat is not None else self.downlink.arrival(now)
            if t < req.first_response_s:
                req.first_response_s = t
        # as later(end - now, ...): the same time, bit for bit (now is the clock's time)
        push, eid = self._push, self._next_id
        push((now + (end - now), ENTRY_PRIORITY, eid(), self._on_done_cb, job))

    def _claim(self, job: Job, now: float) -> bool:
        """Turn mode: claim the side effect of ``job``'s logical turn; False if it already ran
        (or is running) within the dedup window — the tool call is then skipped."""
        store = self.store
        req = job.req
        gkey = ("side-effect", job.context_id, req.task_id)  # scoped by the server session
        if store.lookup(gkey, now) is not None:  # type: ignore[union-attr]  # turn mode: the store is set
            return False
        job.guard = (gkey, store.open(gkey, now, job.context_id))  # type: ignore[union-attr]  # turn mode: the store is set
        return True

    def _progress(self, req: Request, now: float) -> None:
        """The ``progress`` directive sent at ``now`` (if enabled) on ``req``'s stream; a
        degraded (core A2A) session gets a plain WORKING status instead, which is no progress."""
        if self.progress and req.open and not req.degraded:
            t = self.downlink.arrival(now)
            if t < req.first_response_s:
                req.first_response_s = t

    def _on_step(self, job: Job) -> None:
        """End of reasoning of a side-effect job (cancellable runs): stop here if cancelled,
        else the tool call starts — from now on the side effect cannot be undone."""
        if job.cancelled:
            self._stop(job, sim_time(self.env))
            return
        job.committed = True
        self.witness.record(job.tool_end_s, job.req, job.context_id)

    def _on_done(self, job: Job) -> None:
        if job.state != RUNNING:
            return  # stopped at its step by a CancelTask
        now = sim_time(self.env)
        if job.cancelled:
            self._stop(job, now)
            return
        self.busy -= 1
        job.state = DONE
        if self.cancellable:
            self._forget(job)
        status, code, ctx = job.status, job.error_code, job.context_id
        if status == INPUT_REQUIRED:
            tasks = self.awaiting_input.get(ctx)
            if tasks is None:
                tasks = self.awaiting_input[ctx] = {}
            tasks[job.req.task_id] = now + self.handoff_timeout_s
        if status == COMPLETED:
            fc = self._first_chunk_s
            t1 = now + (fc if fc is not None else self.first_chunk())
        else:
            t1 = 0.0
        store = self.store
        if job.guard is not None:  # settled when the tool call returned (or timed out)
            gkey, g = job.guard
            store.close(gkey, g, now, COMPLETED, None, ctx)  # type: ignore[union-attr]  # a guard implies the store
        e = job.entry
        if e is not None:
            waiters = e.waiters
            if job.key is None:  # task index only (dedup none)
                e.done, e.status, e.error_code, e.context_id, e.waiters = (True, status, code,
                                                                           ctx, None)
            elif self.by_turn and status == FAILED and is_retryable(code):  # type: ignore[arg-type]  # FAILED carries a code
                store.release(job.key, e)  # type: ignore[union-attr]  # a dedup key implies the store
            else:
                store.close(job.key, e, now, status, code, ctx)  # type: ignore[union-attr]  # a dedup key implies the store
            if waiters:
                for w, wdup in waiters:
                    if not wdup:
                        self._respond(w, now, status, code, None, ctx, t1, self.interval_s)
        if not job.dup:
            self._respond(job.req, now, status, code, None, ctx, t1, self.interval_s)
        if self.queue:
            self._pump(now)

    # ------------------------------------------------------------------ cancellation

    def _on_cancel(self, req: Request) -> None:
        """A ``CancelTask`` for the task of the request ``req`` arrives now.

        Queued work of the task is dropped (never executes); running work stops at its next
        step (the end of reasoning) unless its side effect already started — then the task
        rolls forward (errors.md §4, spec §8: nothing is undone).  One ``executions`` row per
        job affected, or one ``cancel-too-late`` row if the task has no live job.
        """
        now = sim_time(self.env)
        jobs = self.jobs_by_task.pop(req.task_id, None)
        if not jobs:
            self._log(req, req.server_context_id, False, now, CANCEL_LATE_D)
            return
        for job in jobs:
            r = job.req
            if job.state == QUEUED:
                job.state = DROPPED
                self.q_dead += 1
                self._log(r, job.context_id, job.dup, now, CANCEL_DROPPED_D)
                self._release(job, now, FAILED, INTERNAL, None)
            elif job.committed:
                self._log(r, job.context_id, job.dup, now, CANCEL_ROLLED_D, job.start_s)
            else:
                job.cancelled = True
                # service_end_s: the step it stops at (NaN: reasoning is its only step)
                self._log(r, job.context_id, job.dup, now, CANCEL_STOPPED_D, job.start_s,
                          job.step_s)

    def _stop(self, job: Job, now: float) -> None:
        """A cancelled running job stops now: its worker is freed, nothing is delivered."""
        self.busy -= 1
        job.state = DONE
        if job.guard is not None:
            gkey, g = job.guard
            self.store.release(gkey, g)  # type: ignore[union-attr]  # the tool never ran
        self._release(job, now, FAILED, INTERNAL, None)
        self._pump(now)

    def _forget(self, job: Job) -> None:
        """Drop ``job`` from the task's live jobs (cancellable runs only)."""
        jobs = self.jobs_by_task.get(job.req.task_id)
        if jobs is not None:
            if job in jobs:
                jobs.remove(job)
            if not jobs:
                del self.jobs_by_task[job.req.task_id]

    def _release(self, job: Job, now: float, status: int, code: str,
                 retry_after_ms: float | None) -> None:
        """Forget ``job``'s execution (nothing stored: a later repeat executes again) and answer
        the requests that joined it with FAILED ``code`` (a cancelled task: ``internal``)."""
        e = job.entry
        if e is None:
            return
        waiters = e.waiters
        if job.key is not None:
            self.store.release(job.key, e)  # type: ignore[union-attr]  # a dedup key implies the store
        else:
            e.done, e.waiters, e.expires_s = True, None, -INF
        if job.tkey is not None:
            tasks = self.tasks.get(job.context_id)
            if tasks is not None and tasks.get(job.tkey) is e:
                del tasks[job.tkey]
        if waiters:
            for w, wdup in waiters:
                if not wdup:
                    self._respond(w, now, status, code, retry_after_ms, job.context_id, 0.0, 0.0)

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
        lat = self._dl_latency
        if status == COMPLETED:
            n = self.chunks
            if lat is not None:  # a fast link: constant latency, no faults, in order, each
                # chunk playable on arrival (Link.terminal's answer, without its call)
                arrival, tlost = first_chunk_send_s + (n - 1) * interval_s + lat, False
                first = first_chunk_send_s + lat
                last = first + (n - 1) * interval_s
                req.first_chunk_s = first
                req.complete_s = arrival if arrival > last else last
            else:  # the Live layer's reorder buffer plays them out (rtalab.sim.model.playout)
                arrival, tlost = dl.terminal(first_chunk_send_s + (n - 1) * interval_s)
                arrivals = dl.chunks(first_chunk_send_s, interval_s, n)
                req.chunk_arrivals = arrivals
                first = min(arrivals)  # any message satisfies the turn-response timer
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
        push, eid = self._push, self._next_id  # locals: see _start
        push((now + (arrival - now), ENTRY_PRIORITY, eid(), self.deliver, req))  # see _start

    # ------------------------------------------------------------------ capacity, sessions

    def set_capacity(self, workers: int) -> None:
        """Change the number of workers now; waiting requests start if workers are free."""
        self.capacity = workers
        self._pump(sim_time(self.env))

    def end_call(self, call_id: int, context_id: int) -> None:
        """The call ``call_id`` (session ``context_id``, NO_CONTEXT if the Live layer never
        learned it) ended: drop its rate-limit, handoff, task-index and minted-context state."""
        self.minted.pop(call_id, None)
        if context_id != NO_CONTEXT:
            self.buckets.pop(context_id, None)
            self.awaiting_input.pop(context_id, None)
            self.tasks.pop(context_id, None)

    def flush(self) -> None:
        """Record the requests still waiting when the run ends (disposition ``unserved``)."""
        for job in self.queue:
            if job.state == QUEUED:
                self._log(job.req, job.context_id, job.dup, job.arrival_s, UNSERVED)

    def gauges(self, now: float) -> tuple[int, int, int, int]:
        """(in flight, queue length, busy workers, capacity) at ``now``."""
        q = len(self.queue) - self.q_dead
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
