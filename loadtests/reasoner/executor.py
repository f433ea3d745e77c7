"""The Reasoner's agent logic: one turn = progress directive, reasoning, tool, spoken chunks.

Timing and failures come from ``[reasoner]``, with the simulator's meaning
(``sim/model/reasoner.py``; docs/contracts.md "How each scenario key is
realised").  Per execution: a capacity slot (``workers``/``queue_limit``/
``queue_timeout_s``/``queue_discipline``; a full queue, or a wait past the
queue deadline, refuses with ``queue_full_code``), a ``progress`` directive,
``reasoning_time_s`` + ``load_latency_base_s`` + ``load_latency_k_s`` x (turns
in service + waiting when it starts), one injected error drawn from ``errors``
(or the ``rta/test.forceError`` hook), the tool call of a side-effect turn (the
worker is held through it, bounded by ``upstream_timeout_s``), then either a
``handoff`` directive at INPUT_REQUIRED or ``first_chunk_s`` + ``chunks`` spoken
chunks every ``chunk_interval_s`` and COMPLETED.  A continuation of an
INPUT_REQUIRED task runs the same pipeline on the same task, unless the handoff
expired (``session-not-found``).

Every execution measures itself (:class:`Timing`): intake, queue wait, service
and first-chunk delay travel on the event that ends the request's stream
(profile metadata, docs/reasoner.md "Per-turn timings"), into ``/metrics``
histograms and, for a non-streaming answer, a ``Server-Timing`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import Task, TaskState

from rtalab.loadtests.dedup.base import StoreUnavailable
from rtalab.loadtests.reasoner import metrics, unsafe
from rtalab.loadtests.reasoner.capacity import QueueFull, QueueTimeout
from rtalab.loadtests.reasoner.idempotency import (
    PROGRESS_OF_RESULT,
    SIDE_EFFECT_NOT_RUN,
    SIDE_EFFECT_STARTED,
    SideEffectGuard,
    Ticket,
)
from rtalab.loadtests.reasoner.intake import TurnRequest
from rtalab.loadtests.reasoner.runtime import Runtime
from rtalab.loadtests.reasoner.storeguard import RETRY_AFTER_MS as STORE_RETRY_AFTER_MS
from rtalab.loadtests.reasoner.tools import ToolCall
from rtalab.loadtests.reasoner.wire import (
    ROLLED_FORWARD,
    SIDE_EFFECT_UNKNOWN,
    Event,
    EventFactory,
    Keys,
    is_stream_end,
)
from rtalab.sim.policy.codes import ALL_CODES, ErrorCode
from rtalab.sim.shared.dedup_rule import may_start

PLAN_KEY = "rtalab.plan"
STORE_DETAIL = "The Reasoner's dedup store is unavailable; retry later."
UNRECORDED_DETAIL = ("The Reasoner's dedup store could not record the start of the side "
                     "effect, so it was not started: nothing of it ran.")
SIDE_EFFECT_OF = {"ok": ROLLED_FORWARD, "timeout": SIDE_EFFECT_UNKNOWN}  # tool result -> meta
log = logging.getLogger("rtalab.reasoner")
# The per-turn timing observations (docs/reasoner.md "Per-turn timings"): metadata key
# name (under the extension URI), Server-Timing metric name, Timing attribute.
TIMING_FIELDS = (("serverIntakeMs", "intake", "intake_s"),
                 ("serverQueueWaitMs", "queue", "queue_wait_s"),
                 ("serverServiceMs", "service", "service_s"),
                 ("serverFirstChunkDelayMs", "first-chunk", "first_chunk_delay_s"))


@dataclass
class Timing:
    """What one execution measured of itself (seconds; None = that step did not happen).

    ``intake_s``: request received by the handler -> queue entry (parsing, sessions,
    dedup store, the SDK's task set-up); ``queue_wait_s``: queue entry -> a worker
    (or the refusal); ``service_s``: the worker held (reasoning + load latency + the
    tool call of a side-effect turn); ``first_chunk_delay_s``: worker freed -> first
    spoken chunk handed to the stream.
    """

    intake_s: float | None = None
    queue_wait_s: float | None = None
    service_s: float | None = None
    first_chunk_delay_s: float | None = None

    def metadata(self, keys: Keys) -> dict[str, float]:
        """The profile metadata of the stream's end event (milliseconds, 3 decimals)."""
        return {keys(name): round(getattr(self, attr) * 1000.0, 3)
                for name, _, attr in TIMING_FIELDS if getattr(self, attr) is not None}

    def server_timing(self) -> str:
        """A ``Server-Timing`` header value (``intake;dur=1.2, queue;dur=0, ...``)."""
        return ", ".join(f"{metric};dur={getattr(self, attr) * 1000.0:.3f}"
                         for _, metric, attr in TIMING_FIELDS if getattr(self, attr) is not None)


@dataclass
class TurnPlan:
    """What the handler decided about one request; read by the executor via the call context."""

    principal: str
    request: TurnRequest
    scope: str  # dedup scope (principal + contextId)
    side_effect: bool
    received_s: float = field(default_factory=time.monotonic)  # request arrival
    refused: bool = False  # set when refused before any work (no dedup record)
    factory: EventFactory | None = None
    tool: asyncio.Task[str] | None = None  # the side effect's tool call, once started
    tickets: list[Ticket] = field(default_factory=list)  # the claims the turn runs under
    store_error: StoreUnavailable | None = None  # the side effect's start could not be recorded
    timing: Timing = field(default_factory=Timing)


def next_seq(task: Task | None, keys: Keys) -> int:
    """The next ``rta/sequenceId`` of a task (status metadata is merged into task metadata)."""
    if task is None:
        return 0
    v = task.metadata.fields.get(keys("sequenceId"))
    return int(v.number_value) + 1 if v is not None else 0


async def _record_progress(plan: TurnPlan, value: str) -> bool:
    """Record the side effect's progress with every claim of the turn; True if every claim
    recorded it (False: the store failed, or a claim is no longer this turn's)."""
    ok = True
    for ticket in plan.tickets:
        try:
            ok = await ticket.progress(value) and ok
        except StoreUnavailable:  # counted and logged by the store guard
            ok = False
    return ok


class _Emitter:
    """Enqueues events, dropping any after the stream ended (e.g. after a cancel).

    The event ending the stream carries the execution's :class:`Timing` (profile
    metadata, when the extension is active) and feeds the timing histograms."""

    def __init__(self, queue: EventQueue, factory: EventFactory, plan: TurnPlan | None = None):
        self.queue = queue
        self.factory = factory
        self.plan = plan
        self.timing = plan.timing if plan is not None else None
        self.closed = False
        self.cancelling = False  # a cancel is settling: only its CANCELED may follow

    async def __call__(self, ev: Event, cancel: bool = False) -> None:
        """Enqueue ``ev`` unless the stream already ended (or a cancel is settling)."""
        if self.closed or (self.cancelling and not cancel):
            return
        if is_stream_end(ev):
            self.closed = True
            if self.timing is not None:
                if self.factory.active:
                    ev.metadata.update(self.timing.metadata(self.factory.keys))
                metrics.observe_timing(self.timing)
        await self.queue.enqueue_event(ev)


class ReasonerExecutor(AgentExecutor):
    """AgentExecutor of the reference Reasoner."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self._emitters: dict[str, _Emitter] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run one request of a turn (new turn or INPUT_REQUIRED continuation)."""
        plan: TurnPlan = context.call_context.state[PLAN_KEY]
        task = context.current_task
        task_id, context_id = str(context.task_id), str(context.context_id)
        continuation = task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        factory = EventFactory(self.rt.keys, task_id, context_id, plan.request.active,
                               next_seq(task, self.rt.keys) if continuation else 0)
        plan.factory = factory
        emit = _Emitter(event_queue, factory, plan)
        self._emitters[task_id] = emit
        self.rt.in_flight += 1
        metrics.IN_FLIGHT.inc()
        try:
            if task is None:
                await emit(factory.submitted())
            if continuation and self._handoff_expired(task):
                await emit(factory.failed(ErrorCode.SESSION_NOT_FOUND.value,
                                          detail="The handoff expired."))
                return
            await self._turn(plan, task_id, context_id, emit)
        except StoreUnavailable as e:  # counted and logged (one line) by the store guard
            await emit(factory.failed(ErrorCode.INTERNAL.value, retry_after_ms=e.retry_after_ms,
                                      detail=STORE_DETAIL))
        except Exception:
            log.exception("turn crashed task=%s ctx=%s", task_id, context_id)
            await emit(factory.failed(ErrorCode.INTERNAL.value))
        finally:
            self.rt.in_flight -= 1
            metrics.IN_FLIGHT.dec()
            if self._emitters.get(task_id) is emit:
                del self._emitters[task_id]

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Emit CANCELED for a running or parked task; the SDK then cancels ``execute``.

        Truthful about the side effect (errors.md §4 roll-forward: nothing is undone): if
        the turn's tool call has started, it is never interrupted (it runs shielded); the
        cancel waits for its answer (bounded by ``upstream_timeout_s``) and CANCELED says
        ``rolled-forward`` (the tool confirmed it), ``unknown`` (no answer in time: it may
        have run) or nothing (the tool answered that it did not run)."""
        task_id = str(context.task_id)
        emit = self._emitters.pop(task_id, None)
        if emit is None:
            task = context.current_task
            active = task is not None and self.rt.keys("sequenceId") in task.metadata.fields
            factory = EventFactory(self.rt.keys, task_id, str(context.context_id), active,
                                   next_seq(task, self.rt.keys))
            emit = _Emitter(event_queue, factory)
        emit.cancelling = True
        tool = emit.plan.tool if emit.plan is not None else None
        side_effect = None
        if tool is not None:
            side_effect = SIDE_EFFECT_OF.get(await asyncio.shield(tool))
        await emit(emit.factory.canceled(side_effect), cancel=True)

    def _handoff_expired(self, task: Task | None) -> bool:
        """True if an INPUT_REQUIRED task waited longer than ``handoff_timeout_s``."""
        limit = self.rt.cfg.handoff_timeout_s
        if task is None or limit <= 0 or not task.status.HasField("timestamp"):
            return False
        return time.time() - task.status.timestamp.ToNanoseconds() / 1e9 > limit

    def _draw_error(self) -> str | None:
        """One injected failure per execution, per ``[reasoner].errors``."""
        errors = self.rt.cfg.errors
        if not errors:
            return None
        u = self.rt.rng.random()
        acc = 0.0
        for code in ALL_CODES:
            acc += errors.get(code, 0.0)
            if u < acc:
                return code
        return None

    def _failure(self, factory: EventFactory, code: str, detail: str = "") -> Event:
        """A FAILED event, with the retry hint for ``rate-limited``."""
        retry = self.rt.cfg.retry_after_ms if code == ErrorCode.RATE_LIMITED.value else None
        return factory.failed(code, retry_after_ms=retry, detail=detail)

    async def _turn(self, plan: TurnPlan, task_id: str, context_id: str, emit: _Emitter) -> None:
        """Capacity, directive, reasoning, error injection, tool, handoff or speech.

        The worker is held from service start through reasoning, the load latency and the
        tool call of a side-effect turn, as in the simulator (``Reasoner._start``)."""
        rt, cfg, req, f = self.rt, self.rt.cfg, plan.request, emit.factory
        timing = plan.timing
        t_queue = time.monotonic()
        timing.intake_s = max(0.0, t_queue - plan.received_s)
        cap = rt.capacity
        metrics.QUEUED.inc()
        try:
            in_system = await cap.admit()
        except QueueFull:
            metrics.QUEUED.dec()
            plan.refused = True
            timing.queue_wait_s = time.monotonic() - t_queue
            await emit(self._failure(f, cfg.queue_full_code, "The Reasoner is at capacity."))
            return
        except QueueTimeout:
            metrics.QUEUED.dec()
            plan.refused = True
            timing.queue_wait_s = time.monotonic() - t_queue
            await emit(self._failure(f, cfg.queue_full_code,
                                     "The request waited too long for the Reasoner."))
            return
        except BaseException:  # cancelled while waiting
            metrics.QUEUED.dec()
            raise
        metrics.QUEUED.dec()
        metrics.BUSY.inc()
        t_start = time.monotonic()
        timing.queue_wait_s = t_start - t_queue
        try:
            if req.active and cfg.progress_directive and (req.directives is None
                                                          or "progress" in req.directives):
                await emit(f.directive("progress", TaskState.TASK_STATE_WORKING,
                                       {"phase": "reasoning"}))
            else:
                await emit(f.working())
            delay = req.delay_s if req.delay_s is not None else cfg.reasoning_time_s.sample(rt.rng)
            # load latency: k x turns at the Reasoner (in service, this one included, + waiting)
            await asyncio.sleep(delay + cfg.load_latency_base_s
                                + cfg.load_latency_k_s * in_system)
            code = req.force_error or self._draw_error()
            if not code and plan.side_effect and not req.handoff:
                result = await self._side_effect(plan, task_id, context_id)
                if result != "ok":
                    code = (ErrorCode.UPSTREAM_TIMEOUT if result == "timeout"
                            else ErrorCode.INTERNAL).value
        finally:
            cap.release()
            metrics.BUSY.dec()
            timing.service_s = time.monotonic() - t_start
        if plan.store_error is not None:  # nothing ran: the claims are released, not stored
            plan.refused = True
            await emit(f.failed(ErrorCode.INTERNAL.value,
                                retry_after_ms=plan.store_error.retry_after_ms,
                                detail=UNRECORDED_DETAIL))
            return
        if code:
            await emit(self._failure(f, code))
            return
        if req.handoff and unsafe.pauses(rt.settings.unsafe_bugs):
            if req.directives is not None and "handoff" not in req.directives:
                await emit(self._failure(f, ErrorCode.UNSUPPORTED_DIRECTIVE.value))
                return
            await emit(f.directive("handoff", TaskState.TASK_STATE_INPUT_REQUIRED,
                                   {"fields": ["answer"], "timeoutS": cfg.handoff_timeout_s},
                                   text="Please provide the requested details."))
            return
        await self._speak(emit, time.monotonic())

    async def _side_effect(self, plan: TurnPlan, task_id: str, context_id: str) -> str:
        """Call the tool once per request (mode ``turn``: once per logical turn)."""
        req = plan.request
        try:
            guard = await self.rt.idem.guard_side_effect(plan.scope, req.turn_id)
        except StoreUnavailable as e:
            plan.store_error = e
            return "unrecorded"
        if not guard.run:
            metrics.SIDE_EFFECTS.labels("skipped").inc()
            return "ok"
        call = ToolCall(context_id=context_id, task_id=task_id, turn_id=req.turn_id,
                        request_guid=req.request_guid, interaction_id=req.interaction_id,
                        principal=plan.principal, server=self.rt.settings.instance)
        # Durably before the call (fail closed): a crash from here on is answered "may have
        # run"; a start that cannot be recorded is never made (docs/reasoner.md "Never claim
        # nothing ran without proof").
        recorded = await _record_progress(plan, SIDE_EFFECT_STARTED)
        if not may_start(unsafe.start_recorded(recorded, plan.tickets,
                                               self.rt.settings.unsafe_bugs)):
            metrics.SIDE_EFFECTS.labels("unrecorded").inc()
            plan.store_error = StoreUnavailable("progress", "unrecorded",
                                                STORE_RETRY_AFTER_MS)
            # best effort: if "started" reached the store, say it did not run after all (if
            # this fails too the record stays "started": answered "may have run", never a lie)
            await _record_progress(plan, SIDE_EFFECT_NOT_RUN)
            with contextlib.suppress(StoreUnavailable):  # a failed release is deferred
                await guard.settle(maybe_executed=False)
            return "unrecorded"
        # Shielded: a cancel (or a client gone) never interrupts a side effect in progress.
        plan.tool = asyncio.create_task(self._call_tool(plan, call, guard))
        return await asyncio.shield(plan.tool)

    async def _call_tool(self, plan: TurnPlan, call: ToolCall, guard: SideEffectGuard) -> str:
        """The tool call and its bookkeeping (runs to its end even if the turn is cancelled).
        A progress record or guard settlement the store refuses now is not fatal: the record
        stays "started" (answered "may have run") and the settlement is retried later."""
        result = await self.rt.tool.call(call)
        await _record_progress(plan, PROGRESS_OF_RESULT[result])
        with contextlib.suppress(StoreUnavailable):
            await guard.settle(maybe_executed=result != "error")
        metrics.SIDE_EFFECTS.labels(result).inc()
        return result

    async def _speak(self, emit: _Emitter, t_free: float) -> None:
        """First-chunk delay, the spoken chunks at their cadence, COMPLETED (right after the
        last chunk).  Chunk ``i`` is due ``first_chunk_s + i x chunk_interval_s`` after the
        worker was freed (``t_free``): deadlines, so event-loop lag does not accumulate."""
        cfg, f = self.rt.cfg, emit.factory
        first_due = t_free + cfg.first_chunk_s.sample(self.rt.rng)
        last = math.nan
        for i in range(cfg.chunks):
            wait = first_due + i * cfg.chunk_interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if i == 0 and emit.timing is not None:
                emit.timing.first_chunk_delay_s = time.monotonic() - t_free
            now = time.monotonic()
            if i > 0:
                metrics.CHUNK_GAP_SECONDS.observe(now - last)
            last = now
            metrics.CHUNKS.inc()
            await emit(f.chunk(i, cfg.chunks, f"Spoken chunk {i + 1} of {cfg.chunks}."))
        await emit(f.completed())
