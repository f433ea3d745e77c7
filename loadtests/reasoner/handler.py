"""The profile's request pipeline in front of the SDK's DefaultRequestHandler.

For every ``SendStreamingMessage`` / ``SendMessage`` (JSON-RPC, REST and
WebSocket all call this handler), in this order:

1. required fields (else JSON-RPC -32602), negotiation (``extension-inactive``),
   shape and size bounds (``schema-validation``);
2. a message naming a ``taskId`` must name one of the principal's tasks, in the
   same context (else ``session-not-found``); without the extension core A2A 1.0
   applies instead (:func:`core_task_check`: TaskNotFound, invalid params, and
   UnsupportedOperation for a finished task);
3. the contextId must belong to the principal (``session-not-found``); a first
   message without one gets a fresh contextId, and its dedup key is claimed in
   that minted context as well (docs/decisions.md D1: a resend that now carries the
   learned contextId joins or replays the original, never a second execution);
4. dedup (see :mod:`rtalab.loadtests.reasoner.idempotency`): replay or join a known key;
5. a named task that is not INPUT_REQUIRED is a retry of that turn: a finished
   task answers with its stored snapshot, a running one is joined (no
   re-execution); an INPUT_REQUIRED task is continued by the FIRST continuation
   only, which claims the pause in the shared dedup store (every dedup mode,
   all workers); any other continuation of it waits for and replays that
   continuation's outcome (errors.md §4, docs/decisions.md D2);
6. the per-context rate limit (``rate-limited`` + ``retryAfterMs``; not charged
   to replays);
7. execution by :class:`ReasonerExecutor` through the SDK.  A background pump
   drives the SDK stream, so the turn finishes and its outcome is stored even if
   the client goes away; the outcome is stored *before* the final event is sent.

Rejections (steps 1-6) are a fresh Task and its FAILED status, never recorded in
the dedup store (nothing was executed).
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from a2a.server.agent_execution import AgentExecutor
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.tasks import TaskStore
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import (
    AgentCard,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.message import DecodeError

from rtalab.loadtests.dedup.base import StoreUnavailable
from rtalab.loadtests.reasoner import metrics, otel, unsafe
from rtalab.loadtests.reasoner.executor import PLAN_KEY, STORE_DETAIL, TurnPlan, next_seq
from rtalab.loadtests.reasoner.idempotency import (
    OUTCOME_VERSION,
    SIDE_EFFECT_STARTED,
    SIDE_EFFECT_UNANSWERED,
    Replay,
    Ticket,
    request_fingerprint,
    scope_of,
)
from rtalab.loadtests.reasoner.intake import Rejection, TurnRequest, parse_turn
from rtalab.loadtests.reasoner.runtime import Runtime
from rtalab.loadtests.reasoner.wire import (
    BINDING_KEY,
    ROLLED_FORWARD,
    SIDE_EFFECT_UNKNOWN,
    TERMINAL_STATES,
    Event,
    EventFactory,
    error_code_of,
    is_stream_end,
    pack_event,
    unpack_event,
)
from rtalab.sim.policy.codes import ErrorCode, is_retryable
from rtalab.sim.shared.dedup_rule import known_side_effect

log = logging.getLogger("rtalab.reasoner")
_DONE = object()
KEY_CONFLICT_DETAIL = "The requestGuid (or turnId) was already used for a different request."
RECOVERED_UNKNOWN_DETAIL = ("The server restarted during this request's side effect; it may "
                            "have run: do not assume it did not.")
RECOVERED_NOT_RUN_DETAIL = ("The server restarted during this request, before any side effect; "
                            "nothing of it ran.")
CORE_TASK_NOT_FOUND = "Task not found."
CORE_CONTEXT_MISMATCH = "The message's contextId is not the context of the task it names."
CORE_TASK_TERMINAL = "The task is in a terminal state; a new message must start a new task."
_OUTCOME_NAMES = {
    TaskState.TASK_STATE_COMPLETED: "completed", TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled", TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input_required",
}


class BindingContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context builder that also records the binding (``state["binding"]``: the
    Live users' names, ``sse`` = JSON-RPC over HTTP, ``rest``, ``ws``, ``grpc``)."""

    def __init__(self, binding: str) -> None:
        self.binding = binding

    def build(self, request: Any) -> ServerCallContext:
        """The SDK's context, marked with this builder's binding."""
        context = super().build(request)
        context.state[BINDING_KEY] = self.binding
        return context


def binding_of(context: ServerCallContext) -> str:
    """The binding a request came in on (``""`` when its route did not say)."""
    return str(context.state.get(BINDING_KEY) or "")


def principal_of(context: ServerCallContext) -> str:
    """The authenticated principal (``anonymous`` when auth is disabled)."""
    user = context.user
    return user.user_name if user.is_authenticated and user.user_name else "anonymous"


def core_task_check(stored: Task | None, msg: Message) -> None:
    """Core A2A 1.0 for a message naming ``msg.task_id`` (the extension NOT negotiated).

    Raises the SDK's A2A error, which every binding's adapter answers in its
    canonical form (A2A §5.4; JSON-RPC code / REST status / gRPC status):

    - no such task for this principal (unknown, evicted or another principal's):
      ``TaskNotFoundError`` (-32001 / 404 / NOT_FOUND, §3.4.2);
    - the task belongs to another context: ``InvalidParamsError``
      (-32602 / 400 / INVALID_ARGUMENT, §3.4.3);
    - the task is in a terminal state: ``UnsupportedOperationError``
      (-32004 / 400 / FAILED_PRECONDITION, §3.1.1).

    The messages are fixed sentences (nothing of the request is echoed).  With
    the extension active errors.md applies instead (a FAILED task with a code;
    a repeated taskId is a retry of that turn).
    """
    if stored is None:
        raise TaskNotFoundError(message=CORE_TASK_NOT_FOUND)
    if msg.context_id and stored.context_id != msg.context_id:
        raise InvalidParamsError(message=CORE_CONTEXT_MISMATCH)
    if stored.status.state in TERMINAL_STATES:
        raise UnsupportedOperationError(message=CORE_TASK_TERMINAL)


def fold_event(task: Task | None, ev: Event) -> Task | None:
    """Apply one stream event to a Task snapshot (for the non-streaming SendMessage)."""
    if isinstance(ev, Task):
        snapshot = Task()
        snapshot.CopyFrom(ev)
        return snapshot
    if task is None:
        return None
    if isinstance(ev, TaskStatusUpdateEvent):
        task.status.CopyFrom(ev.status)
        task.metadata.MergeFrom(ev.metadata)
    elif isinstance(ev, TaskArtifactUpdateEvent):
        append_artifact_to_task(task, ev)
    return task


async def once_per_sequence(events: AsyncIterator[Event], key: str) -> AsyncIterator[Event]:
    """Forward ``events`` of a joined task, each ``sequenceId`` (metadata ``key``) once.

    The SDK taps a running task's queue before it reads the snapshot, so an event
    produced in between is in both: only events numbered after the highest already
    forwarded pass (events without a sequenceId, and the stream's end, always pass).
    """
    last = -1.0
    async for ev in events:
        v = ev.metadata.fields.get(key) if hasattr(ev, "metadata") else None
        if v is not None:
            if v.number_value <= last and not is_stream_end(ev):
                continue
            last = max(last, v.number_value)
        yield ev


class ProfileRequestHandler(DefaultRequestHandler):
    """DefaultRequestHandler with negotiation, validation, tenancy, dedup and rate limits."""

    task_store: TaskStore  # the plain store __init__ takes (the SDK's may also be versioned)

    def __init__(self, rt: Runtime, executor: AgentExecutor, task_store: TaskStore,
                 agent_card: AgentCard):
        super().__init__(agent_executor=executor, task_store=task_store, agent_card=agent_card,
                         interrupted_task_timeout=rt.cfg.handoff_timeout_s or None)
        self.rt = rt
        self._pumps: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ SDK entry points

    async def on_message_send_stream(
            self, params: SendMessageRequest, context: ServerCallContext,
    ) -> AsyncGenerator[Event, None]:
        """Streaming send: the events of the turn (or of its replay / rejection)."""
        gen = self._gate(params, context, "SendStreamingMessage")
        try:
            async for ev in gen:
                yield ev
        finally:
            await gen.aclose()

    async def on_message_send(
            self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        """Non-streaming send: the Task as of the end of this request's stream."""
        task: Task | None = None
        async for ev in self._gate(params, context, "SendMessage"):
            if task is None and not isinstance(ev, Task):  # a continuation: start from the store
                task = await self.task_store.get(params.message.task_id, context)
            task = fold_event(task, ev)
        if task is None:
            raise RuntimeError("turn produced no task")
        return task

    async def on_subscribe_to_task(
            self, params: SubscribeToTaskRequest, context: ServerCallContext,
    ) -> AsyncGenerator[Event, None]:
        """SubscribeToTask with the profile's stream-end rule: the stream ends at a terminal
        state or INPUT_REQUIRED (a subscription to a paused task gets the Task and ends,
        instead of staying open, silent, until someone answers the handoff)."""
        gen = DefaultRequestHandler.on_subscribe_to_task(self, params, context)
        try:
            async for ev in gen:
                yield ev
                if is_stream_end(ev):
                    return
        finally:
            await gen.aclose()

    # ------------------------------------------------------------------ the pipeline

    async def _gate(self, params: SendMessageRequest, context: ServerCallContext,
                    method: str) -> AsyncGenerator[Event, None]:
        """Steps 1-7 of the module docstring; a dedup store that fails before the turn starts
        is answered FAILED ``internal`` (retryable, ``retryAfterMs`` when the wait is known),
        with a safe text: never a JSON-RPC error, an HTTP 500 or the store's address."""
        gen = self._steps(params, context, method)
        started = False
        try:
            async for ev in gen:
                started = True
                yield ev
        except StoreUnavailable as e:
            if started:  # (store calls all come before the first event)
                raise
            async for ev in self._store_failed(e, context, params.message):
                yield ev
        finally:
            await gen.aclose()

    async def _steps(self, params: SendMessageRequest, context: ServerCallContext,
                     method: str) -> AsyncGenerator[Event, None]:
        """Steps 1-7 of the module docstring."""
        rt = self.rt
        received_s = time.monotonic()
        validate_proto_required_fields(params)
        principal = principal_of(context)
        active = rt.keys.uri in context.requested_extensions
        msg = params.message
        metrics.TURN_REQUESTS.inc()
        parsed = parse_turn(msg, keys=rt.keys, active=active, bounds=rt.bounds,
                            test_hooks=rt.settings.test_hooks)
        if isinstance(parsed, Rejection):
            async for ev in self._reject(parsed, context, msg, active):
                yield ev
            return
        if msg.task_id:
            stored = await self.task_store.get(msg.task_id, context)
            if not active:  # core A2A 1.0 when the profile is not negotiated
                core_task_check(stored, msg)
            if stored is None or (msg.context_id and stored.context_id != msg.context_id):
                async for ev in self._reject(Rejection(ErrorCode.SESSION_NOT_FOUND.value), context,
                                             msg, active, task_id=msg.task_id):
                    yield ev
                return
            if not msg.context_id:
                msg.context_id = stored.context_id
        client_context = msg.context_id
        if client_context and not await rt.sessions.admit(principal, client_context):
            async for ev in self._reject(Rejection(ErrorCode.SESSION_NOT_FOUND.value), context,
                                         msg, active):
                yield ev
            return
        scope = scope_of(principal, client_context)
        ticket: Ticket | None = None
        fingerprint = request_fingerprint(method, msg, parsed.side_effect, parsed.handoff)
        key = rt.idem.key_for(parsed.turn_id, parsed.request_guid, msg.task_id)
        if key is not None and binding_of(context) in rt.dedup_skipped:  # TEST ONLY (unsafe)
            key = None
        if key is not None:
            got = await rt.idem.enter(scope, *key, fingerprint)
            if isinstance(got, Replay):
                metrics.DEDUP.labels(got.kind).inc()
                async for ev in self._replay(got, context, msg, parsed):
                    yield ev
                return
            ticket = got
        try:
            async for ev in self._admit_and_run(params, context, parsed, principal, active,
                                                scope, client_context, ticket, received_s):
                yield ev
        except BaseException:
            if ticket is not None and not ticket.handed_over:
                self._background(ticket.release())  # never leave a claim in flight
            raise

    async def _admit_and_run(self, params: SendMessageRequest, context: ServerCallContext,
                             parsed: TurnRequest, principal: str, active: bool, scope: str,
                             client_context: str, ticket: Ticket | None, received_s: float
                             ) -> AsyncIterator[Event]:
        """Steps 5-7, holding the dedup claim (if any) until the pump takes it over."""
        rt, msg = self.rt, params.message
        tickets = [ticket] if ticket is not None else []
        if msg.task_id:  # re-read after the claim: a duplicate may have just finished it
            stored = await self.task_store.get(msg.task_id, context)
            claim: Ticket | Replay | None = None
            if stored is not None and stored.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                claim = await rt.idem.claim_continuation(scope, msg.task_id,
                                                         next_seq(stored, rt.keys))
            if not isinstance(claim, Ticket):  # a retry of the turn or of its continuation
                if ticket is not None:
                    ticket.handed_over = True
                    with contextlib.suppress(StoreUnavailable):  # deferred by the store
                        await ticket.release()
                if claim is None:
                    async for ev in self._known_task(stored, msg, context, active):
                        yield ev
                else:
                    metrics.DEDUP.labels("task").inc()
                    async for ev in self._replay(claim, context, msg, parsed):
                        yield ev
                return
            tickets.append(claim)
        if ticket is not None:
            metrics.DEDUP.labels("new").inc()
        try:
            async for ev in self._execute(params, context, parsed, principal, active, scope,
                                          client_context, tickets, received_s):
                yield ev
        except BaseException:
            for t in tickets:  # (the request's own ticket is also _gate's: release is idempotent)
                if t is not ticket and not t.handed_over:
                    self._background(t.release())
            raise

    async def _execute(self, params: SendMessageRequest, context: ServerCallContext,
                       parsed: TurnRequest, principal: str, active: bool, scope: str,
                       client_context: str, tickets: list[Ticket], received_s: float
                       ) -> AsyncIterator[Event]:
        """Steps 6-7 holding ``tickets`` (the request's dedup claim, the continuation claim)."""
        rt, msg = self.rt, params.message
        continuation = bool(msg.task_id)
        if not client_context:  # a new session: bind the context we open
            msg.context_id = uuid.uuid4().hex
            await rt.sessions.admit(principal, msg.context_id)
            own = tickets[0] if tickets and tickets[0].scope == scope else None
            if own is not None:  # D1: its key in the minted context too (a fresh scope: new)
                minted = await rt.idem.enter(scope_of(principal, msg.context_id), own.key,
                                             own.turn_key, own.fingerprint)
                if isinstance(minted, Ticket):
                    tickets.append(minted)
        if rt.rate is not None:
            wait_ms = rt.rate.take(scope_of(principal, msg.context_id), time.monotonic())
            if wait_ms:
                for t in tickets:
                    t.handed_over = True
                    with contextlib.suppress(StoreUnavailable):  # deferred by the store
                        await t.release()
                async for ev in self._reject(Rejection(ErrorCode.RATE_LIMITED.value,
                                                       retry_after_ms=wait_ms),
                                             context, msg, active):
                    yield ev
                return
        side_effect = parsed.side_effect
        if side_effect is None:
            side_effect = not continuation and rt.rng.random() < rt.workload.side_effect_share
        plan = TurnPlan(principal=principal, request=parsed, scope=scope, side_effect=side_effect,
                        received_s=received_s)
        context.state[PLAN_KEY] = plan
        async for ev in self._run(params, context, plan, tickets):
            yield ev

    def _background(self, coro: Any) -> None:
        """Run ``coro`` detached from the request (kept referenced until done); a store
        failure in it is already counted and its write deferred by the store guard."""

        async def quietly() -> None:
            with contextlib.suppress(StoreUnavailable):
                await coro

        task = asyncio.create_task(quietly())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

    async def _reject(self, rejection: Rejection, context: ServerCallContext, msg: Message,
                      active: bool, task_id: str | None = None) -> AsyncIterator[Event]:
        """A new Task and its FAILED status (saved for GetTask unless it names a foreign task)."""
        f = EventFactory(self.rt.keys, task_id or uuid.uuid4().hex,
                         msg.context_id or uuid.uuid4().hex, active)
        failed = f.failed(rejection.code, retry_after_ms=rejection.retry_after_ms,
                          detail=rejection.detail)
        metrics.TURNS.labels("failed", rejection.code).inc()
        log.info("rejected code=%s ctx=%s task=%s principal=%s", rejection.code, f.context_id,
                 f.task_id, principal_of(context))
        async for ev in self._fresh_task(f, failed, context, save=task_id is None):
            yield ev

    async def _fresh_task(self, f: EventFactory, final: TaskStatusUpdateEvent,
                          context: ServerCallContext, save: bool = True) -> AsyncIterator[Event]:
        """A new Task and its final status (saved for GetTask with ``save``)."""
        task = f.submitted()
        if save:
            snapshot = Task()
            snapshot.CopyFrom(task)
            snapshot.status.CopyFrom(final.status)
            await self._save_rejection(snapshot, context)
        yield task
        yield final

    async def _recovered(self, outcome: dict[str, Any] | None, context: ServerCallContext,
                         msg: Message, parsed: TurnRequest) -> AsyncIterator[Event]:
        """A duplicate of a request whose owner died (lost outcome): what is known of it, from
        the side-effect progress the owner recorded with its claim and, unless that is
        definite, the witness's ledger (THE rule: :func:`rtalab.sim.shared.dedup_rule.
        known_side_effect`; "nothing of it ran" only with proof)."""
        progress = (outcome or {}).get("sideEffect")
        witnessed = None
        if progress in (None, SIDE_EFFECT_STARTED, SIDE_EFFECT_UNANSWERED) and msg.context_id \
                and parsed.request_guid:  # ask the tool's own record
            witnessed = await self.rt.tool.executed(msg.context_id, parsed.request_guid)
        known = known_side_effect(progress, witnessed, self.rt.tool.ledger_url is not None)
        f = EventFactory(self.rt.keys, uuid.uuid4().hex, msg.context_id or uuid.uuid4().hex,
                         parsed.active)
        if known == "ran":
            final, code = f.completed(ROLLED_FORWARD), ""
        elif known == "unknown":
            code = ErrorCode.UPSTREAM_TIMEOUT.value
            final = f.failed(code, detail=RECOVERED_UNKNOWN_DETAIL,
                             side_effect=SIDE_EFFECT_UNKNOWN)
        else:
            code = ErrorCode.INTERNAL.value
            final = f.failed(code, detail=RECOVERED_NOT_RUN_DETAIL)
        metrics.TURNS.labels("completed" if not code else "failed", code).inc()
        log.info("recovered a lost request progress=%s known=%s code=%s ctx=%s guid=%s "
                 "principal=%s", progress or "-", known, code or "-", f.context_id,
                 parsed.request_guid, principal_of(context))
        async for ev in self._fresh_task(f, final, context):
            yield ev

    async def _store_failed(self, e: StoreUnavailable, context: ServerCallContext,
                            msg: Message) -> AsyncIterator[Event]:
        """FAILED ``internal`` for a request the dedup store could not check: whether an
        earlier copy of it ran is unknown, so a request that may have a side effect says
        ``sideEffect: unknown`` (never "nothing ran"); one that declares none does not."""
        active = self.rt.keys.uri in context.requested_extensions
        declared = msg.metadata.fields.get(self.rt.keys("sideEffect"))
        no_side_effect = declared is not None and declared.HasField("bool_value") \
            and not declared.bool_value
        f = EventFactory(self.rt.keys, uuid.uuid4().hex, msg.context_id or uuid.uuid4().hex,
                         active)
        final = f.failed(ErrorCode.INTERNAL.value, retry_after_ms=e.retry_after_ms,
                         detail=STORE_DETAIL,
                         side_effect=None if no_side_effect or not active else SIDE_EFFECT_UNKNOWN)
        metrics.TURNS.labels("failed", ErrorCode.INTERNAL.value).inc()
        async for ev in self._fresh_task(f, final, context):
            yield ev

    async def _save_rejection(self, task: Task, context: ServerCallContext) -> None:
        """Keep a rejection for GetTask, apart from executed tasks when the store can."""
        save = getattr(self.task_store, "save_rejection", None)
        await (save(task, context) if save is not None else self.task_store.save(task, context))

    async def _known_task(self, stored: Task | None, msg: Message, context: ServerCallContext,
                          active: bool) -> AsyncIterator[Event]:
        """A message naming a finished or running task: its snapshot, or join its stream."""
        if not active:  # evicted or finished meanwhile: core A2A's error, not a replay
            core_task_check(stored, msg)
        if stored is None:  # evicted meanwhile
            async for ev in self._reject(Rejection(ErrorCode.SESSION_NOT_FOUND.value), context,
                                         msg, active, task_id=msg.task_id):
                yield ev
            return
        metrics.DEDUP.labels("task").inc()
        if stored.status.state in TERMINAL_STATES:
            yield stored
            return
        request = SubscribeToTaskRequest(id=stored.id)
        async for ev in once_per_sequence(self.on_subscribe_to_task(request, context),
                                          self.rt.keys("sequenceId")):
            yield ev

    async def _replay(self, got: Replay, context: ServerCallContext, msg: Message,
                      parsed: TurnRequest) -> AsyncIterator[Event]:
        """The stored events of the original request, or FAILED internal if unknown (a reuse
        of the key by a different request: ``schema-validation``, nothing runs)."""
        if got.kind == "conflict":
            log.info("key reused by a different request ctx=%s task=%s guid=%s turn=%s",
                     msg.context_id, msg.task_id or "-", parsed.request_guid, parsed.turn_id)
            async for ev in self._reject(Rejection(ErrorCode.SCHEMA_VALIDATION.value,
                                                   KEY_CONFLICT_DETAIL), context, msg,
                                         parsed.active):
                yield ev
            return
        events: list[Event] = []
        if got.outcome is not None and got.kind in ("replay", "join"):
            try:
                events = [unpack_event(e) for e in got.outcome["events"]]
            except (KeyError, TypeError, ValueError, DecodeError, binascii.Error):
                log.error("unreadable stored outcome ctx=%s guid=%s", msg.context_id,
                          parsed.request_guid)
        if got.kind == "lost":
            async for ev in self._recovered(got.outcome, context, msg, parsed):
                yield ev
            return
        if not events:
            detail = ("A duplicate of this request is still in progress." if got.kind == "timeout"
                      else "The outcome of the original request is unknown.")
            async for ev in self._reject(Rejection(ErrorCode.INTERNAL.value, detail), context,
                                         msg, parsed.active):
                yield ev
            return
        log.debug("replay kind=%s ctx=%s guid=%s turn=%s", got.kind, msg.context_id,
                  parsed.request_guid, parsed.turn_id)
        for ev in unsafe.replayed(events, msg.context_id, self.rt.settings.unsafe_bugs):
            yield ev

    # ------------------------------------------------------------------ execution

    async def _run(self, params: SendMessageRequest, context: ServerCallContext, plan: TurnPlan,
                   tickets: list[Ticket]) -> AsyncIterator[Event]:
        """Execute through the SDK in a background pump; relay its events to this client."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        plan.tickets = tickets  # the executor records the side effect's progress with them
        for t in tickets:
            t.handed_over = True
        self._background(self._pump(params, context, plan, tickets, queue))
        while True:
            item = await queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def _pump(self, params: SendMessageRequest, context: ServerCallContext, plan: TurnPlan,
                    tickets: list[Ticket], queue: asyncio.Queue[Any]) -> None:
        """Drive the SDK stream to its end, settle the claims, feed the client queue."""
        events: list[Event] = []
        ended = False
        try:
            stream = DefaultRequestHandler.on_message_send_stream(self, params, context)
            async for ev in stream:
                if len(events) == 1:
                    metrics.FIRST_EVENT_SECONDS.observe(time.monotonic() - plan.received_s)
                events.append(ev)
                if is_stream_end(ev):
                    ended = True
                    await self._settle(plan, tickets, events)
                queue.put_nowait(ev)
            if not ended:
                raise RuntimeError("the turn's stream closed without a final state")
        except Exception as e:
            if ended:
                log.warning("error after the end of a turn: %r", e)
            elif not events:
                queue.put_nowait(e)
                for t in tickets:
                    try:
                        await t.release()
                    except StoreUnavailable:
                        pass  # counted and deferred by the store guard
                    except Exception:
                        log.exception("could not release a claim key=%s", t.key)
            else:
                first = events[0]
                factory = plan.factory or EventFactory(
                    self.rt.keys, first.id if isinstance(first, Task) else first.task_id,
                    first.context_id, plan.request.active)
                log.error("turn stream broke (%s) task=%s ctx=%s", type(e).__name__,
                          factory.task_id, factory.context_id, exc_info=e)
                ev = factory.failed(ErrorCode.INTERNAL.value)
                events.append(ev)
                await self._settle(plan, tickets, events)
                queue.put_nowait(ev)
        finally:
            queue.put_nowait(_DONE)

    async def _settle(self, plan: TurnPlan, tickets: list[Ticket], events: list[Event]) -> None:
        """Count the turn and store its outcome under every claim (or release them if it was
        refused)."""
        end = events[-1]
        state = end.status.state  # type: ignore[union-attr]  # the last event is a Task or status update
        code = error_code_of(end, self.rt.keys)
        outcome = _OUTCOME_NAMES.get(state, "other")
        metrics.TURNS.labels(outcome, code or "").inc()
        metrics.TURN_SECONDS.labels(outcome).observe(time.monotonic() - plan.received_s)
        otel.turn_done(plan, outcome, code, plan.factory.task_id if plan.factory else None,
                       plan.factory.context_id if plan.factory else None)
        req = plan.request
        level = logging.INFO if code else logging.DEBUG
        log.log(level, "turn outcome=%s code=%s task=%s turn=%s guid=%s interaction=%s "
                "principal=%s", outcome, code or "-", plan.factory.task_id if plan.factory else "-",
                req.turn_id, req.request_guid, req.interaction_id, plan.principal)
        if not tickets:
            return
        record = {"v": OUTCOME_VERSION, "state": TaskState.Name(state), "errorCode": code,
                  "events": [pack_event(e) for e in events]}
        for ticket in tickets:
            try:
                if plan.refused:
                    await ticket.release()
                else:
                    await ticket.complete(record, retryable_failure=code is not None
                                          and is_retryable(code))
            except StoreUnavailable:
                pass  # counted, logged and retried in the background by the store guard
            except Exception:
                log.exception("could not record the outcome key=%s guid=%s turn=%s", ticket.key,
                              req.request_guid, req.turn_id)

    async def aclose(self) -> None:
        """Drain the SDK's tasks, give the pumps a moment to settle their claims, stop them."""
        await super().aclose()
        pending = list(self._pumps)
        if pending:
            _, late = await asyncio.wait(pending, timeout=2.0)
            for task in late:
                task.cancel()
