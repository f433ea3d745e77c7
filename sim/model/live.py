"""The Live layer: calls (sessions), their turns, and each turn's attempts under the retry policy.

The turn logic itself (identifiers, continuation, barge-in, the budget's calls, the retry
decision, every ending, the turn row's policy cells) is :mod:`rtalab.sim.policy.turn`'s sans-IO
:class:`~rtalab.sim.policy.turn.TurnMachine`, shared with the Locust Live user
(:mod:`rtalab.loadtests.live.call`); this module drives it from callbacks on the SimPy clock and
models what it does not own: negotiation, links, timers, the reorder buffer, the records.

A call is served by Live-layer instance ``call_id % live.instances`` (round
robin); each instance owns one retry budget (:func:`rtalab.sim.policy.make_budget`)
and one :class:`rtalab.sim.policy.RetryPolicy`; each call owns an
:class:`rtalab.sim.policy.Escalation`.  A call plays ``ceil(turns_per_call)`` turns
(at least 1); the first starts when the extension negotiation (below) is
settled, each next one ``think_time_s`` after the previous turn ended.  A turn
is a side-effect turn with probability ``side_effect_share`` and a handoff turn
with probability ``handoff_share``.

**Negotiation.**  When a call arrives the Live layer sends the upgrade with
``A2A-Extensions`` (uplink) and the Reasoner echoes the activated extension
(downlink); both messages meet the links' latency, loss and outages (drawn from
their own random streams).  An echo within ``timeouts.negotiation_s`` activates
the profile at its arrival; otherwise the session falls back to degraded core
A2A at ``negotiation_s`` (errors.md §5): its requests carry no ``rta/*``
metadata, so the Reasoner cannot deduplicate them (no requestGuid, no turnId)
and sends no ``progress`` directive (only chunks or the terminal state satisfy
the turn-response timeout); FAILED still carries its code.  ``negotiation_s =
0`` leaves the negotiation out of the model: every session is active at once.

**Attempts.**  Each attempt is one request message (:class:`Request`).  The
first attempt of a phase asks the budget ``allow_first`` (refused: the turn
fails with end reason ``budget``); every sent attempt is reported with
``on_attempt`` (a first send is a call started), and every end of an attempt —
before the retry decision — through the one call ``end_attempt`` with its
:class:`rtalab.sim.policy.budget.Ending`: success (COMPLETED or INPUT_REQUIRED; says
whether it was a retry granted after a timeout), not retryable, a retryable
failure, a timeout, a lost response, cancelled by a barge-in, or a granted retry
dropped in its backoff by a barge-in (see :mod:`rtalab.sim.policy.budget`).  A retry
takes a new requestGuid if ``retry.new_request_guid``
(else repeats the previous one), and a new taskId/turnId if ``retry.new_turn_id``
and the failed attempt ended in a FAILED state (errors.md §4); a retry after a
timeout or a lost response (no terminal state seen) keeps the taskId (§3).
The contextId is client-minted (= the call) if ``live.client_context_id``;
otherwise the call has none until the Live layer *receives* a message of some
attempt (progress, chunk or terminal), which carries the server's contextId —
so a first message retried before any answer arrived opens a second session.

**Timeouts.**  The turn-response timer (``timeouts.turn_response_s``, from send)
is satisfied by the first message of any kind for the attempt; the optional
total timer (``turn_total_s``, from send) needs the terminal state.  Timers are
fixed-length, so they are armed in deadline order: one
:class:`rtalab.sim.model.clock.Deadlines` queue per kind holds them with a single
pending event; the callback checks the attempt is still open (never polled,
never cancelled).  A terminal event lost at random is noticed at the end of the
stream; one lost in a partition (scheduled outage) is never noticed, so
only the timers end the attempt (see :meth:`rtalab.sim.model.network.Link.terminal`).
Either way, like a timeout, it is an
outcome the Live layer cannot know: decided as ``upstream-timeout`` with
``timeout=True``.  When an attempt ends the Live layer stops listening to it;
the Reasoner is not told (no ``CancelTask``) and keeps working on it.

**Reorder buffer.**  The Live layer reorders a stream by sequenceId: the
attempt completes when the terminal state *and* every delivered chunk are
present (``complete_s = max(terminal, last chunk)``); a chunk lost on the way
is skipped (the caller hears a gap; counted in ``chunks_lost``) — the terminal
state is authoritative (errors.md §6).  Time to first chunk is the arrival of
the earliest delivered chunk.

**Outcomes.**  ``completed`` — COMPLETED received; ``failed`` — the policy
refused a retry (not retryable, attempts exhausted, deadline, budget);
``abandoned`` — a handoff turn whose caller did not answer within
``timeouts.handoff_s`` (the turn ends then); ``unfinished`` — still open when the
run ended.  After each turn the call's escalation rule may end the session: it
counts ``failed`` turns in a row (an ``abandoned`` or completed turn resets it).
The retry ``deadline_s`` runs from the first send of the phase (a continuation's
deadline does not include the caller's time to answer).

**Handoffs.**  A handoff turn has two phases: the ``initial`` request is
answered with INPUT_REQUIRED; the caller answers after ``caller_response_time_s``
and the Live layer sends the ``continuation`` on the same taskId (new
requestGuid); it is retried like any request, its attempts numbered from 1 (a
retry with a new taskId, ``retry.new_turn_id``, is a new task carrying the
caller's answer, not a continuation).  The side effect (if any) runs in the
phase that completes the turn.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Protocol

import numpy as np
import simpy

from rtalab.sim.model.clock import ENTRY_PRIORITY, Deadlines, pusher, scheduler, sim_time
from rtalab.sim.model.messages import COMPLETED, INPUT_REQUIRED, NO_CONTEXT, Request
from rtalab.sim.model.network import DROPPED, REFUSED, Link
from rtalab.sim.model.playout import playout
from rtalab.sim.model.rand import Streams
from rtalab.sim.model.recorder import Table, code_of, row_writer
from rtalab.sim.policy import RetryBudget, RetryPolicy, make_budget
from rtalab.sim.policy.codes import ErrorCode
from rtalab.sim.policy.turn import (
    CANCEL,
    END,
    IGNORE,
    SEND,
    WAIT,
    Action,
    CallMachine,
    TurnMachine,
    TurnRules,
)
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.schema import (
    ATTEMPT_OUTCOMES,
    ATTEMPTS_TABLE,
    CALL_END_REASONS,
    CALLS_TABLE,
    DECISIONS,
    END_REASONS,
    ERROR_CODES,
    TURN_OUTCOMES,
    TURNS_TABLE,
)
from rtalab.sim.vocab import AttemptOutcome, CallEndReason

NAN = float("nan")
INF = float("inf")
_new = object.__new__
_turn_init = TurnMachine.__init__
_call_init = CallMachine.__init__
UPSTREAM_TIMEOUT = ErrorCode.UPSTREAM_TIMEOUT.value
_CODE = code_of(ERROR_CODES)
_DECISION = code_of(DECISIONS)
_AO = code_of(ATTEMPT_OUTCOMES)
_TO = code_of(TURN_OUTCOMES)
_ER = code_of(END_REASONS)
_CE = code_of(CALL_END_REASONS)
A_COMPLETED, A_INPUT, A_FAILED = (_AO[AttemptOutcome.COMPLETED],
                                  _AO[AttemptOutcome.INPUT_REQUIRED], _AO[AttemptOutcome.FAILED])
A_TIMEOUT, A_TOTAL, A_LOST, A_UNFINISHED = (
    _AO[AttemptOutcome.TIMEOUT], _AO[AttemptOutcome.TOTAL_TIMEOUT],
    _AO[AttemptOutcome.RESPONSE_LOST], _AO[AttemptOutcome.UNFINISHED])
A_CANCELLED = _AO[AttemptOutcome.CANCELLED]
_COMPLETED, _INPUT = AttemptOutcome.COMPLETED, AttemptOutcome.INPUT_REQUIRED

# The record rows the Live layer writes, cell by cell (rtalab.sim.model.recorder.row_writer)
ATTEMPT_ROW = ("req, end_s, outcome, code, decision", {
    S.CALL_ID: "req.call_id",
    S.TURN_INDEX: "t.index",
    S.INTERACTION_ID: "req.interaction_id",
    S.LIVE_INSTANCE: "t.session.instance.index",
    S.PHASE: "req.phase",
    S.ATTEMPT: "req.attempt",
    S.REQUEST_GUID: "req.request_guid",
    S.TASK_ID: "req.task_id",
    S.CONTEXT_ID: "req.context_id",
    S.DELAY_BEFORE_S: "req.delay_before_s",
    S.SEND_S: "req.send_s",
    S.FIRST_RESPONSE_S: "fr if fr <= end_s else NAN",  # what arrived before the attempt ended
    S.FIRST_CHUNK_S: "fc if fc <= end_s else NAN",
    S.END_S: "end_s",
    S.OUTCOME: "outcome",
    S.ERROR_CODE: "_CODE[code]",
    S.RETRY_AFTER_MS: "NAN if ra is None else ra",
    S.DECISION: "_DECISION[decision]",
    S.REPLAYED: "req.replayed",
    S.REQUEST_DUPLICATED: "req.duplicated",
    S.REQUEST_LOST: "req.lost",
    S.CHUNKS_LOST: "req.chunks_lost",
}, "t = req.turn; fr = req.first_response_s; fc = req.first_chunk_s; ra = req.retry_after_ms")
TURN_ROW = ("t, end_s, outcome, reason, code, ttfc_s, completion_s, escalated", {
    S.CALL_ID: "s.call_id",
    S.TURN_INDEX: "t.index",
    S.INTERACTION_ID: "t.uid",
    S.LIVE_INSTANCE: "s.instance.index",
    S.START_S: "t.start_s",
    S.END_S: "end_s",
    S.OUTCOME: "_TO[outcome]",
    S.END_REASON: "_ER[reason]",
    S.ERROR_CODE: "_CODE[code]",
    S.ATTEMPTS: "t.attempts",
    S.RETRIES: "t.attempts - t.first_sends",
    S.TTFC_S: "ttfc_s",
    S.COMPLETION_S: "completion_s",
    S.SIDE_EFFECT: "t.side_effect",
    S.HANDOFF: "t.handoff",
    S.HANDOFF_WAIT_S: "t.handoff_wait_s",
    S.ESCALATED: "escalated",
}, "s = t.session")
CALL_ROW = ("s, end_s, reason", {
    S.CALL_ID: "s.call_id",
    S.LIVE_INSTANCE: "s.instance.index",
    S.ARRIVAL_S: "s.arrival_s",
    S.END_S: "end_s",
    S.TURNS_PLANNED: "s.turns_planned",
    S.TURNS_STARTED: "s.turns_started",
    S.END_REASON: "_CE[reason]",
    S.DEGRADED: "s.degraded",
})


#: a timer's attempt is still open (the Live layer still listens to it); C-level
_is_open = attrgetter("open")


def _ignore(value: Any) -> None:
    """A network duplicate of a CancelTask: the task is already cancelled (or not cancellable)."""


class Instance:
    """One Live-layer process: its retry policy and its retry budget (None: no budget enabled);
    ``rules`` (the turns' :class:`rtalab.sim.policy.turn.TurnRules`) is set by
    :class:`LiveLayer`."""

    __slots__ = ("budget", "index", "policy", "rules")

    def __init__(self, index: int, scenario: Scenario) -> None:
        self.index = index
        budget = make_budget(scenario.live.budget)
        self.budget: RetryBudget | None = budget if budget.parts else None
        self.policy = RetryPolicy(scenario.live, self.budget)
        self.rules: TurnRules


class Session(CallMachine):
    """One call: a Live-layer session with a sequence of turns (its escalation and turn count
    in :class:`rtalab.sim.policy.turn.CallMachine`).

    Built by :meth:`LiveLayer.on_call`, its one maker, as :class:`Turn` is: the machine's
    initialiser called on ``object.__new__(Session)``, then its own slots (no ``__init__``)."""

    __slots__ = ("arrival_s", "call_id", "context_id", "degraded", "instance", "turn")

    call_id: int
    degraded: bool  # no A2A-Extensions echo in time: core A2A, no rta/* metadata
    instance: Instance
    arrival_s: float
    context_id: int
    turn: Turn | None


class Turn(TurnMachine):
    """One logical turn (one interactionId): the sans-IO :class:`rtalab.sim.policy.turn.TurnMachine`
    plus what the simulator keeps per turn.  ``turn_id`` is the simulator's task identity
    (the Reasoner's ``task_id``), minted by the instance's rules.

    Built by the machine's initialiser, ``TurnMachine.__init__(t, rules, start_s, side_effect,
    handoff)`` on ``object.__new__(Turn)`` (no ``__init__`` of its own: one Python call less per
    turn), and its own slots set at once by :meth:`LiveLayer._start_turn`, its one maker."""

    __slots__ = ("index", "req", "session", "uid")

    session: Session
    index: int  # the turn's index in its call
    uid: int  # the simulator's interactionId
    req: Request | None  # the attempt in flight (None: none yet, or the turn ended)


class Backend(Protocol):
    """What the Live layer sends to: a :class:`~rtalab.sim.model.reasoner.Reasoner` or a fleet."""

    @property
    def on_request(self) -> Callable[[Request], None]: ...
    @property
    def on_copy(self) -> Callable[[Request], None]: ...
    @property
    def on_cancel(self) -> Callable[[Request], None]: ...
    def end_call(self, call_id: int, context_id: int) -> None: ...


class LiveLayer:
    """All Live-layer instances of the run and the calls they serve."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, streams: Streams,
                 uplink: Link, reasoner: Backend,
                 negotiation: tuple[Link, Link] | None = None) -> None:
        self.env = env
        self._later = scheduler(env)  # call_later bound to env
        self._push, self._next_id = pusher(env)  # the next turn's start: no call frame
        live, wl = scenario.live, scenario.workload
        self.uplink = uplink
        self.reasoner = reasoner
        self.instances = [Instance(i, scenario) for i in range(live.instances)]
        self.escalation_cfg = live.escalation
        self.t_response_s = live.timeouts.turn_response_s
        self.t_total_s = live.timeouts.turn_total_s
        self.t_handoff_s = live.timeouts.handoff_s
        self.t_negotiation_s = live.timeouts.negotiation_s if negotiation is not None else 0.0
        self.negotiation = negotiation
        self.client_context = live.client_context_id
        self.gap_s = live.reorder_gap_s
        self.barge_share = wl.barge_in_share
        self.barge_after = streams.sampler("barge_in_after", wl.barge_in_after_s)
        self.u_barge = streams.uniform("barge_in")
        self.cancels_sent = 0
        self.turns_per_call = streams.sampler("turns_per_call", wl.turns_per_call)
        self.think = streams.sampler("think_time", wl.think_time_s)
        self.caller_response = streams.sampler("caller_response", wl.caller_response_time_s)
        self.u_side = streams.uniform("side_effect")
        self.u_handoff = streams.uniform("handoff")
        self.side_share = wl.side_effect_share
        self.handoff_share = wl.handoff_share
        self.rng: np.random.Generator = streams.rng("policy")
        # one requestGuid and one task-id sequence for the whole layer (C-level counters)
        mint_guid, mint_task = itertools.count().__next__, itertools.count().__next__
        for inst in self.instances:
            inst.rules = TurnRules(live, inst.policy, inst.budget, self.rng, mint_guid, mint_task)
        self.attempts = Table(ATTEMPTS_TABLE)
        self.turns = Table(TURNS_TABLE)
        self.calls = Table(CALLS_TABLE)
        # one writer per table, its cells named (rtalab.sim.shared.schema order checked when built)
        self._record = row_writer(self.attempts, globals(), *ATTEMPT_ROW)
        self._record_turn = row_writer(self.turns, globals(), *TURN_ROW)
        self._record_call = row_writer(self.calls, globals(), *CALL_ROW)
        self.sessions: dict[int, Session] = {}  # open calls
        self.in_progress = 0
        self._next_uid = 0
        #: id of the first turn started at or after the warm-up (-1: none yet); turn ids grow
        #: with start time, so the turns counted by the summary are the ids >= it
        self.first_counted_uid = -1
        self._count_from_s = scenario.run.warmup_s
        # bound once: used per event
        self.on_terminal = self._on_terminal
        # fixed-length timers, armed in deadline order: one pending event per kind (clock.py)
        self._response_timers = Deadlines(env, self._on_response_timer, _is_open)
        self._total_timers = Deadlines(env, self._on_total_timer, _is_open)
        self._retry_cb = self._on_retry_due
        self._answer_cb = self._on_caller_answer
        self._abandon_cb = self._on_handoff_timeout
        self._next_turn_cb = self._start_turn  # called with the session alone: now is the clock's
        self._barge_cb = self._on_barge_in
        self._refused_cb = self._on_refused
        self._on_request, self._on_copy = reasoner.on_request, reasoner.on_copy
        #: the uplink's constant latency when it is fast (no faults): requests sent inline
        self._up_latency = uplink.const_latency if uplink.fast else None
        # the first timer of every attempt: the turn-response timer if it fires first, else
        # the total timer (the response timer then arms the total one), else none
        tr, tt = self.t_response_s, self.t_total_s
        self._arm: Callable[[float, Request], None] | None = None
        self._arm_s = 0.0
        if tr > 0.0 and (tt <= 0.0 or tr < tt):
            self._arm, self._arm_s = self._response_timers.add, tr
        elif tt > 0.0:
            self._arm, self._arm_s = self._total_timers.add, tt
        # a reset / reasoner-down outage cuts every open attempt when it starts
        for start_s, _ in uplink.refusing:
            self._later(start_s, self._cut_open, None)

    # ------------------------------------------------------------------ calls and turns

    def on_call(self, call_id: int) -> None:
        """A call arrives now: open its session and start its first turn."""
        now = sim_time(self.env)
        inst = self.instances[call_id % len(self.instances)]
        n = max(1, math.ceil(self.turns_per_call()))
        ctx = call_id if self.client_context else NO_CONTEXT
        s = _new(Session)  # see the class: no class call, no __init__ frame
        _call_init(s, n, self.escalation_cfg)
        s.call_id = call_id
        s.degraded = False
        s.instance = inst
        s.arrival_s = now
        s.context_id = ctx
        s.turn = None
        self.sessions[call_id] = s
        if self.t_negotiation_s > 0.0:
            wait = self._negotiate(s, now)
            if wait > 0.0:
                self._later(wait, self._next_turn_cb, s)
                return
        self._start_turn(s, now)

    def _negotiate(self, s: Session, now: float) -> float:
        """Extension negotiation at the start of the call; returns the wait before turn 1.

        The upgrade request crosses the uplink and the ``A2A-Extensions`` echo the downlink
        (each subject to latency, loss and outages).  Echo within ``negotiation_s``: the
        profile is active from its arrival.  Otherwise the Live layer falls back to degraded
        core A2A at ``negotiation_s`` (errors.md §5, spec §9).
        """
        up, down = self.negotiation  # type: ignore[misc]  # called only when negotiation links exist
        limit = self.t_negotiation_s
        d_up = up.transit(now)
        if d_up >= 0.0:
            d_down = down.transit(now + d_up)
            if d_down >= 0.0 and d_up + d_down <= limit:
                return d_up + d_down
        s.degraded = True
        return limit

    def _start_turn(self, s: Session, now: float | None = None) -> None:
        """Start the next turn of ``s`` at ``now`` (None: the clock's time, as a callback)."""
        if now is None:
            now = sim_time(self.env)
        uid = self._next_uid
        self._next_uid = uid + 1
        if self.first_counted_uid < 0 and now >= self._count_from_s:
            self.first_counted_uid = uid
        # hot path: the instance's callables are read into locals before they are called
        # (``self.f()`` on an instance attribute misses CPython 3.11's LOAD_METHOD
        # specialisation, ~0.1 k instructions a call)
        u_side, u_handoff = self.u_side, self.u_handoff
        t = _new(Turn)  # built by the machine's initialiser, called as a function: a class
        # call with a Python __init__ costs ~0.3 k instructions more (type_call, slot_tp_init)
        _turn_init(t, s.instance.rules, now, u_side() < self.side_share,
                   u_handoff() < self.handoff_share)
        t.session = s  # Turn's own slots (it has no __init__: see the class)
        t.index = s.turns_started
        t.uid = uid
        t.req = None
        s.turns_started += 1
        s.turn = t
        self.in_progress += 1
        if self.barge_share > 0.0 and self.u_barge() < self.barge_share:
            self._later(self.barge_after(), self._barge_cb, t)
        if t.send(now) == SEND:  # as _act, without its call: send() answers SEND or END
            self._send(t, now)
        else:  # the budget refused the first attempt
            self._end_turn(t, now, now)

    def _end_turn(self, t: Turn, now: float, end_s: float,
                  next_after_s: float | None = None) -> None:
        """Record turn ``t`` (ended at ``end_s``; its ending is the machine's) and start the next
        turn ``next_after_s`` later (default: the caller's think time) or end the call."""
        s = t.session
        ttfc, completion = t.timings(end_s)
        escalate, call_end = s.turn_ended(t.outcome)  # type: ignore[arg-type]  # an ended turn has its outcome
        record_turn = self._record_turn  # locals: see _start_turn
        record_turn(t, end_s, t.outcome, t.reason, t.code, ttfc, completion, escalate)
        s.turn = None  # no reference cycles: finished turns are freed by refcounting alone
        t.req = None
        self.in_progress -= 1
        if call_end is not None:
            self._end_call(s, end_s, call_end)
        else:
            think, push, eid = self.think, self._push, self._next_id
            wait = think() if next_after_s is None else next_after_s
            # as later((end_s - now) + wait, ...): the same time, bit for bit
            push((now + ((end_s - now) + wait), ENTRY_PRIORITY, eid(), self._next_turn_cb, s))

    def _end_call(self, s: Session, end_s: float, reason: str) -> None:
        del self.sessions[s.call_id]
        self._record_call(s, end_s, reason)
        self.reasoner.end_call(s.call_id, s.context_id)

    # ------------------------------------------------------------------ cancellation

    def _cancel(self, req: Request) -> None:
        """Send ``CancelTask`` for ``req``'s task over the uplink (subject to its faults)."""
        self.cancels_sent += 1
        self.uplink.send(req, self.reasoner.on_cancel, _ignore)

    def _on_barge_in(self, t: Turn) -> None:
        """The caller interrupts turn ``t`` now: if it is still in flight (an attempt
        open or a retry pending; not while the caller owes a handoff answer) the Live layer
        cancels its task and starts the next turn at once."""
        now = sim_time(self.env)
        action = t.barge_in(now)
        if action == IGNORE:
            return
        if action == CANCEL:
            req = t.req
            self._close(req, now)  # type: ignore[arg-type]  # CANCEL comes only with a request in flight
            self._record(req, now, A_CANCELLED, None, None)
            self._cancel(req)  # type: ignore[arg-type]  # CANCEL comes only with a request in flight
        self._end_turn(t, now, now, 0.0)

    # ------------------------------------------------------------------ attempts

    def _act(self, t: Turn, now: float, action: Action) -> None:
        """Carry out the machine's answer to a send event: the attempt, or the turn's end."""
        if action == SEND:
            self._send(t, now)
        elif action == END:  # the budget refused the phase's first attempt
            self._end_turn(t, now, now)

    def _send(self, t: Turn, now: float) -> None:
        s = t.session
        phase = t.phase
        wants_input = t.handoff and phase == 0
        # the attempt's Request, as Request(t, s.call_id, t.uid, t.guid, t.turn_id, s.context_id,
        # phase, side_effect, wants_input, t.phase_attempts, now, t.delay_s) would build it, the
        # session's degraded flag and the continuation's resumes_task set at once: a class call
        # with a Python __init__ costs ~0.5 k instructions more (tests/test_model_components.py
        # checks that both give the same slots)
        req = _new(Request)
        req.turn = t
        req.call_id = s.call_id
        req.interaction_id = t.uid
        req.request_guid = t.guid  # type: ignore[assignment]  # the model mints int ids (TurnRules: Hashable)
        req.task_id = t.turn_id  # type: ignore[assignment]  # as above
        req.context_id = s.context_id
        req.phase = phase
        req.side_effect = t.side_effect and not wants_input
        req.wants_input = wants_input
        req.resumes_task = t.turn_id == t.input_turn_id if phase else False
        req.attempt = t.phase_attempts
        req.send_s = now
        req.delay_before_s = t.delay_s
        req.degraded = s.degraded
        req.open = True
        req.lost = False
        req.duplicated = False
        req.replayed = False
        req.first_response_s = INF
        req.first_chunk_s = INF
        req.chunk_arrivals = None
        req.complete_s = INF
        req.terminal_lost = False
        req.chunks_lost = 0
        req.status = -1
        req.error_code = None
        req.retry_after_ms = None
        req.server_context_id = NO_CONTEXT
        t.req = req
        uplink = self.uplink
        lat = self._up_latency
        if lat is not None:  # a fast uplink (constant latency, no faults): Link.send, inlined
            uplink.sent += 1
            push, eid = self._push, self._next_id  # locals: see _start_turn
            push((now + lat, ENTRY_PRIORITY, eid(), self._on_request, req))
        else:
            r = uplink.send(req, self._on_request, self._on_copy)
            if r:
                if r == DROPPED:
                    req.lost = True
                elif r == REFUSED:  # connection refused / reset: the attempt fails at once
                    req.lost = True
                    self._later(0.0, self._refused_cb, req)
                else:
                    req.duplicated = True
        arm = self._arm  # the attempt's first timer (see __init__); a local: see _start_turn
        if arm is not None:
            arm(now + self._arm_s, req)

    def _on_refused(self, req: Request) -> None:
        if req.open:  # as the Live users account it: a broken stream, response-lost
            self._attempt_failed(req, sim_time(self.env), A_LOST, UPSTREAM_TIMEOUT, None)

    def _cut_open(self, _: Any) -> None:
        """A refusing outage starts: every open attempt's connection is cut (response-lost)."""
        now = sim_time(self.env)
        for s in list(self.sessions.values()):
            t = s.turn
            req = None if t is None else t.req
            if req is not None and req.open:
                self._attempt_failed(req, now, A_LOST, UPSTREAM_TIMEOUT, None)

    def _on_response_timer(self, req: Request) -> None:
        if not req.open:
            return
        now = sim_time(self.env)
        if req.first_response_s <= now:
            if self.t_total_s > 0.0:
                self._total_timers.add(req.send_s + self.t_total_s, req)
            return
        self._attempt_failed(req, now, A_TIMEOUT, UPSTREAM_TIMEOUT, None)

    def _on_total_timer(self, req: Request) -> None:
        if req.open:
            self._attempt_failed(req, sim_time(self.env), A_TOTAL, UPSTREAM_TIMEOUT, None)

    def _on_terminal(self, req: Request) -> None:
        """The terminal state of ``req`` arrives now (or the end of its stream without one)."""
        if not req.open:
            return
        now = sim_time(self.env)
        if req.terminal_lost:
            self._attempt_failed(req, now, A_LOST, UPSTREAM_TIMEOUT, None)
        elif req.status != COMPLETED:
            if req.status == INPUT_REQUIRED:
                self._input_required(req, now)
            else:
                self._attempt_failed(req, now, A_FAILED, req.error_code, req.retry_after_ms)
        else:  # completed: the attempt and the turn end (inlined here, once per turn)
            req.open = False  # _close, inlined
            t = req.turn
            if req.first_response_s <= now:
                s = t.session
                if s.context_id == NO_CONTEXT:
                    s.context_id = req.server_context_id
            t.attempt_ended(now, _COMPLETED)
            # what the caller hears: the reorder buffer plays the chunks out (errors.md §6);
            # without arrival times (a fast link) they came in order, each playable on arrival
            arrivals = req.chunk_arrivals
            if arrivals is None:
                first, done = req.first_chunk_s, req.complete_s
            else:
                first, done, req.chunks_lost = playout(arrivals, now, self.gap_s)
                req.first_chunk_s = first
            end_s = done if done > now else now
            record = self._record  # a local: see _start_turn
            record(req, end_s, A_COMPLETED, None, None)
            t.first_chunk_s = first
            self._end_turn(t, now, end_s)

    def _close(self, req: Request, now: float) -> None:
        """Stop listening to ``req``; learn the server's contextId if a message of it arrived."""
        req.open = False
        if req.first_response_s <= now:
            s = req.turn.session
            if s.context_id == NO_CONTEXT:
                s.context_id = req.server_context_id

    def _attempt_failed(self, req: Request, now: float, outcome: int, code: str | None,
                        retry_after_ms: float | None) -> None:
        self._close(req, now)
        t = req.turn
        action = t.attempt_ended(now, ATTEMPT_OUTCOMES[outcome], code, retry_after_ms)
        self._record(req, now, outcome, t.code, t.decision)
        if t.cancel:  # cancel_on_timeout: CancelTask for the abandoned attempt
            self._cancel(req)
        if action == WAIT:
            if t.delay_s > 0.0:
                self._later(t.delay_s, self._retry_cb, t)
            else:
                self._act(t, now, t.retry_due(now))
        else:
            self._end_turn(t, now, now)

    def _on_retry_due(self, t: Turn) -> None:
        now = sim_time(self.env)
        self._act(t, now, t.retry_due(now))  # IGNORE: ended meanwhile (barge-in)

    def _input_required(self, req: Request, now: float) -> None:
        self._close(req, now)
        t = req.turn
        t.attempt_ended(now, _INPUT)
        self._record(req, now, A_INPUT, None, None)
        if t.caller_wait(self.caller_response(), self.t_handoff_s):
            self._later(t.handoff_wait_s, self._abandon_cb, t)
        else:
            self._later(t.handoff_wait_s, self._answer_cb, t)

    def _on_handoff_timeout(self, t: Turn) -> None:
        now = sim_time(self.env)
        if t.caller_gone(now) == END:
            self._end_turn(t, now, now)

    def _on_caller_answer(self, t: Turn) -> None:
        now = sim_time(self.env)
        self._act(t, now, t.caller_answered(now))

    # ------------------------------------------------------------------ end of run

    def flush(self, every: Callable[[], None] | None = None, n: int = 4096) -> None:
        """Record every turn, attempt and call still open when the run ends (``unfinished``);
        ``every()`` after each ``n`` calls (a bounded-memory run folds the rows meanwhile)."""
        for i, s in enumerate(list(self.sessions.values())):
            if every is not None and i and i % n == 0:
                every()
            t = s.turn
            if t is not None:
                req = t.req
                if req is not None and req.open:
                    req.open = False
                    self._record(req, NAN, A_UNFINISHED, None, None)
                t.stop(None)  # the run's clock ended: no budget is told
                self._record_turn(t, NAN, t.outcome, t.reason, None, NAN, NAN, False)
                s.turn = None
                t.req = None
                self.in_progress -= 1
            self._end_call(s, NAN, CallEndReason.END_OF_RUN)

    def counters(self) -> dict[str, Any]:
        """Totals for the run's ``counters`` dict."""
        out: dict[str, Any] = {"calls": len(self.calls) + len(self.sessions),
                               "turns": self._next_uid, "attempts": len(self.attempts),
                               "cancels_sent": self.cancels_sent}
        for inst in self.instances:
            if inst.budget is not None:
                for k, v in inst.budget.state(sim_time(self.env)).items():
                    out[f"budget.{inst.index}.{k}"] = v
        return out
