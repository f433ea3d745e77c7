"""The turn, once: the Live layer's turn logic as a sans-IO state machine.

Like h11 or wsproto hold a protocol with no I/O, :class:`TurnMachine` holds one logical
turn (one interactionId) with no clock, no network, no SimPy and no gevent: the driver
feeds it *events* (an attempt may be sent, an attempt ended, the retry's backoff is over,
the caller answered or did not, the caller barged in, the run stopped) with the time they
happen on the driver's clock, and it answers with an *action* (an ``int``: :data:`SEND`,
:data:`WAIT`, :data:`AWAIT_CALLER`, :data:`CANCEL`, :data:`END` or :data:`IGNORE`) whose
details are the machine's attributes.  Two drivers use it:

* the simulator, :mod:`rtalab.sim.model.live`, from callbacks on the SimPy clock;
* the Locust Live user, :mod:`rtalab.loadtests.live.call`, from its greenlets and channels (every
  binding of :mod:`rtalab.loadtests.live.bindings`).

What it owns (the rules of ``rtalab.sim.model.live``'s docstring):

* **identifiers** — ``guid`` (requestGuid: new per phase, and per attempt if
  ``retry.new_request_guid``), ``turn_id`` (minted at the first send; new after an attempt
  that ended its task if ``retry.new_turn_id``) and ``task_id`` (the server's task, learned
  by the driver with :meth:`TurnMachine.learn_task`; forgotten once the task ended in a
  FAILED state or by a CancelTask, errors.md §4; a continuation goes on the INPUT_REQUIRED
  task).  The driver mints the values (``mint_guid`` / ``mint_turn_id`` of
  :class:`TurnRules`): integers in the simulator, strings on the wire.
* **the retry policy and budget** — ``allow_first``/``on_attempt`` before a send, the one
  ``end_attempt`` call per attempt end with its :class:`Ending`, the retry decision
  (:meth:`rtalab.sim.policy.RetryPolicy.decide`), the AWS quota's timeout cost, and a granted
  retry dropped in its backoff (barge-in, stopped run);
* **continuation, barge-in and handoff abandonment**, and every **ending** of the turn
  (``outcome``, ``reason``, ``code``);
* **the turn row's policy cells** — ``attempts``, ``first_sends`` (retries = the
  difference), ``handoff_wait_s``, ``decision`` (of the latest attempt), and
  :meth:`TurnMachine.timings` (time to first chunk, completion); :class:`CallMachine` the
  escalation and the call's end reason.

The draws of ``rng`` happen in the order the budget and the policy make them, so a driver
that feeds the same events gets the same numbers, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from enum import IntEnum
from typing import Final

import numpy as np

from rtalab.sim.policy.budget import RetryBudget, ending_of
from rtalab.sim.policy.codes import ErrorCode, is_retryable
from rtalab.sim.policy.config import EscalationConfig, LivePolicyConfig
from rtalab.sim.policy.decide import Escalation, RetryPolicy
from rtalab.sim.vocab import (
    AttemptOutcome,
    CallEndReason,
    Ending,
    EndReason,
    Phase,
    TurnOutcome,
)


class Action(IntEnum):
    """What the driver does after an event (the details are the machine's attributes)."""

    SEND = 0  # send an attempt now: ids in guid / turn_id / task_id, delay_s before it
    WAIT = 1  # a retry is granted: retry_due() delay_s later (0: now)
    AWAIT_CALLER = 2  # INPUT_REQUIRED: the caller owes an answer (caller_wait)
    CANCEL = 3  # barge-in during an attempt: stop it, record it cancelled, send CancelTask
    END = 4  # the turn ended: outcome, reason, code
    IGNORE = 5  # the event does not apply (the turn ended meanwhile, or owes nothing now)


SEND, WAIT, AWAIT_CALLER, CANCEL, END, IGNORE = Action

# states
_IDLE, _SENT, _BACKOFF, _CALLER, _ENDED = range(5)
INF: Final = float("inf")
NAN: Final = float("nan")
UPSTREAM_TIMEOUT: Final = ErrorCode.UPSTREAM_TIMEOUT.value
_COMPLETED, _INPUT, _CANCELLED, _FAILED = (AttemptOutcome.COMPLETED,
                                           AttemptOutcome.INPUT_REQUIRED,
                                           AttemptOutcome.CANCELLED, AttemptOutcome.FAILED)
_NO_DECISION: Final = frozenset((_COMPLETED, _INPUT, _CANCELLED))  # attempt endings not decided
# the members the methods below name, bound once: reading a member off its Enum class costs
# ~0.9 k instructions more than a module constant on CPython 3.11 (EnumType.__getattr__ puts
# every class attribute read through a slot hook), and the turn did several per turn
_CE_ALL_TURNS_DONE: Final = CallEndReason.ALL_TURNS_DONE
_CE_ESCALATED: Final = CallEndReason.ESCALATED
_E_CANCELLED: Final = Ending.CANCELLED
_E_DROPPED: Final = Ending.DROPPED
_E_SUCCESS: Final = Ending.SUCCESS
_E_TIMEOUT: Final = Ending.TIMEOUT
_PH_CONTINUATION: Final = Phase.CONTINUATION
_PH_INITIAL: Final = Phase.INITIAL
_R_BARGE_IN: Final = EndReason.BARGE_IN
_R_BUDGET: Final = EndReason.BUDGET
_R_COMPLETED: Final = EndReason.COMPLETED
_R_END_OF_RUN: Final = EndReason.END_OF_RUN
_R_HANDOFF_TIMEOUT: Final = EndReason.HANDOFF_TIMEOUT
_T_ABANDONED: Final = TurnOutcome.ABANDONED
_T_CANCELLED: Final = TurnOutcome.CANCELLED
_T_COMPLETED: Final = TurnOutcome.COMPLETED
_T_FAILED: Final = TurnOutcome.FAILED
_T_UNFINISHED: Final = TurnOutcome.UNFINISHED


class TurnRules:
    """What the turns of one Live instance (or one Locust call) share: the policy, the budget,
    the random stream, the identifier rules and how identifiers are minted.

    ``t0`` is subtracted from the driver's clock before the budget and the policy see it (the
    simulator: 0; the Locust user: its run's start, so that the budget counts from 0).
    ``extra_retryable``: TEST ONLY codes the policy retries although they are not retryable
    (the negative control of :class:`rtalab.loadtests.live.call.UnsafeTestRetryPolicy`)."""

    __slots__ = ("budget", "cancel_on_timeout", "extra_retryable", "mint_guid", "mint_turn_id",
                 "new_guid", "new_turn_id", "policy", "rng", "t0")

    def __init__(self, live: LivePolicyConfig, policy: RetryPolicy, budget: RetryBudget | None,
                 rng: np.random.Generator, mint_guid: Callable[[], Hashable],
                 mint_turn_id: Callable[[], Hashable], t0: float = 0.0,
                 extra_retryable: tuple[str, ...] = ()) -> None:
        self.policy = policy
        self.budget = budget
        self.rng = rng
        self.new_guid = live.retry.new_request_guid
        self.new_turn_id = live.retry.new_turn_id
        self.cancel_on_timeout = live.cancel_on_timeout
        self.mint_guid = mint_guid
        self.mint_turn_id = mint_turn_id
        self.t0 = t0
        self.extra_retryable = extra_retryable


class TurnMachine:
    """One logical turn across its phases and attempts (see the module docstring).

    Drivers subclass it to add their own per-turn state (``__slots__``)."""

    __slots__ = ("attempts", "cancel", "code", "decision", "delay_s", "first_chunk_s",
                 "first_sends", "guid", "handoff", "handoff_wait_s", "input_task_id",
                 "input_turn_id", "outcome", "phase", "phase_attempts", "phase_start_s", "reason",
                 "renew", "retry_after_timeout", "rules", "side_effect", "start_s", "state",
                 "task_id", "turn_id")

    def __init__(self, rules: TurnRules, start_s: float, side_effect: bool, handoff: bool,
                 turn_id: Hashable = None) -> None:
        self.rules = rules
        self.start_s = start_s
        self.side_effect = side_effect
        self.handoff = handoff
        self.state = _IDLE
        self.phase = 0  # 0: initial, 1: continuation (Phase by index)
        self.phase_start_s = start_s
        self.phase_attempts = 0
        self.attempts = 0
        self.first_sends = 0
        self.guid: Hashable = None
        self.turn_id = turn_id  # None: minted at the first send
        self.task_id: Hashable = None
        self.input_task_id: Hashable = None  # the task that went INPUT_REQUIRED
        self.input_turn_id: Hashable = None
        self.renew = False  # the last attempt ended its task (FAILED or CancelTask)
        self.retry_after_timeout = False  # the pending retry was granted after a timeout
        self.cancel = False  # the last failed attempt is to be cancelled (cancel_on_timeout)
        self.delay_s = 0.0  # the backoff before the pending / latest attempt
        self.decision: str | None = None  # the retry decision about the latest attempt
        self.handoff_wait_s = 0.0
        self.first_chunk_s = NAN  # set by the driver: the first playable chunk's time
        self.outcome: TurnOutcome | None = None
        self.reason: EndReason | str | None = None
        self.code: str | None = None

    # ------------------------------------------------------------------ queries
    @property
    def phase_name(self) -> Phase:
        """The current phase as its record value."""
        return _PH_CONTINUATION if self.phase else _PH_INITIAL

    @property
    def wants_input(self) -> bool:
        """The request of this phase asks for INPUT_REQUIRED (a handoff's first phase)."""
        return self.handoff and self.phase == 0

    @property
    def ended(self) -> bool:
        return self.state == _ENDED

    @property
    def in_flight(self) -> bool:
        """An attempt is open or a granted retry waits out its backoff."""
        return self.state == _SENT or self.state == _BACKOFF

    def timings(self, end_s: float) -> tuple[float, float]:
        """(time to first chunk, completion time) of a turn that ended at ``end_s`` — NaN
        unless it completed; both from the caller's answer for a handoff."""
        if self.outcome != _T_COMPLETED:
            return NAN, NAN
        base = self.start_s + self.handoff_wait_s
        first = self.first_chunk_s
        # NaN or inf: every chunk was skipped (nothing playable)
        return (first - base if first < INF else NAN), end_s - base

    # ------------------------------------------------------------------ events
    def send(self, now: float) -> Action:
        """An attempt of the current phase may go out now: :data:`SEND` (ids set) or
        :data:`END` (the budget refused the phase's first attempt)."""
        r = self.rules
        first = self.phase_attempts == 0
        budget = r.budget
        if budget is not None:
            at = now - r.t0
            if first and not budget.allow_first(at, r.rng):
                return self._end(_T_FAILED, _R_BUDGET, None)
            budget.on_attempt(at, not first)
        self.phase_attempts += 1
        self.attempts += 1
        if first:
            self.first_sends += 1
            self.delay_s = 0.0
        if first or r.new_guid or self.guid is None:
            self.guid = r.mint_guid()
        if self.renew:  # the last attempt ended its task: the retry is a new task (§4)
            self.task_id = None
            if r.new_turn_id:
                self.turn_id = r.mint_turn_id()
            self.renew = False
        if self.turn_id is None:
            self.turn_id = r.mint_turn_id()
        if first and self.phase:  # the continuation goes on the INPUT_REQUIRED task
            self.task_id = self.input_task_id
        self.decision = None
        self.state = _SENT
        return SEND

    def learn_task(self, task_id: Hashable) -> None:
        """The server named the task of the open attempt."""
        self.task_id = task_id

    def attempt_ended(self, now: float, outcome: str, code: str | None = None,
                      retry_after_ms: float | None = None) -> Action:
        """The open attempt ended with ``outcome`` (an :class:`AttemptOutcome`): the budget is
        told, a failure is decided.  :data:`END`, :data:`AWAIT_CALLER` or :data:`WAIT`
        (``cancel``: send CancelTask for the abandoned attempt; ``decision``: for its row)."""
        r = self.rules
        budget = r.budget
        is_retry = self.phase_attempts > 1
        if outcome in _NO_DECISION:
            if budget is not None:
                budget.end_attempt(now - r.t0, _E_CANCELLED if outcome == _CANCELLED
                                   else _E_SUCCESS, is_retry, self.retry_after_timeout)
            if outcome == _COMPLETED:  # _end, inlined (once per completed turn)
                self.state = _ENDED
                self.outcome = _T_COMPLETED
                self.reason = _R_COMPLETED
                self.code = None
                return END
            if outcome == _CANCELLED:
                return self._end(_T_CANCELLED, _R_BARGE_IN, None)
            self.input_task_id = self.task_id
            self.input_turn_id = self.turn_id
            self.state = _CALLER
            return AWAIT_CALLER
        self.code = code = code or UPSTREAM_TIMEOUT
        ending = ending_of(outcome, code, is_retryable(code) or code in r.extra_retryable)
        at = now - r.t0
        if budget is not None:
            budget.end_attempt(at, ending, is_retry, self.retry_after_timeout)
        d = r.policy.decide(code, self.phase_attempts, now - self.phase_start_s, at, r.rng,
                            retry_after_ms, self.delay_s, ending)
        self.decision = d.reason
        self.cancel = cancel = r.cancel_on_timeout and ending == _E_TIMEOUT
        if d.retry:
            self.renew = outcome == _FAILED or cancel
            self.retry_after_timeout = ending == _E_TIMEOUT  # the budget's timeout cost
            self.delay_s = d.delay_s
            self.state = _BACKOFF
            return WAIT
        return self._end(_T_FAILED, d.reason, code)

    def retry_due(self, now: float) -> Action:
        """The granted retry's backoff is over: :meth:`send`, or :data:`IGNORE` if the turn
        ended meanwhile (barge-in)."""
        if self.state != _BACKOFF:
            return IGNORE
        return self.send(now)

    def caller_wait(self, wait_s: float, limit_s: float) -> bool:
        """The caller answers ``wait_s`` after INPUT_REQUIRED; True if that is beyond the
        handoff timeout ``limit_s`` (> 0): the driver calls :meth:`caller_gone` then, else
        :meth:`caller_answered` after :attr:`handoff_wait_s`."""
        if 0.0 < limit_s < wait_s:
            self.handoff_wait_s = limit_s
            return True
        self.handoff_wait_s = wait_s
        return False

    def caller_answered(self, now: float) -> Action:
        """The caller answered: the continuation's first attempt (:meth:`send`)."""
        if self.state != _CALLER:
            return IGNORE
        self.phase = 1
        self.phase_attempts = 0
        self.phase_start_s = now
        return self.send(now)

    def caller_gone(self, now: float) -> Action:
        """The handoff timeout passed without an answer: the turn is abandoned."""
        if self.state != _CALLER:
            return IGNORE
        return self._end(_T_ABANDONED, _R_HANDOFF_TIMEOUT, None)

    def barge_in(self, now: float) -> Action:
        """The caller interrupts the turn: :data:`CANCEL` (an attempt was open), :data:`END` (a
        granted retry is dropped in its backoff) or :data:`IGNORE` (ended, or the caller owes
        a handoff answer)."""
        state = self.state
        if state != _SENT and state != _BACKOFF:
            return IGNORE
        budget = self.rules.budget
        if budget is not None:
            if state == _SENT:
                budget.end_attempt(now - self.rules.t0, _E_CANCELLED, self.phase_attempts > 1,
                                   self.retry_after_timeout)
            else:
                budget.end_attempt(now - self.rules.t0, _E_DROPPED, True,
                                   self.retry_after_timeout)
        self._end(_T_CANCELLED, _R_BARGE_IN, None)
        return CANCEL if state == _SENT else END

    def stop(self, now: float | None) -> None:
        """The run stops: a granted retry waiting in its backoff is dropped (the budget is
        told, unless ``now`` is None: the simulator's clock ended); the turn is
        ``unfinished``."""
        if now is not None and self.state == _BACKOFF and self.rules.budget is not None:
            self.rules.budget.end_attempt(now - self.rules.t0, _E_DROPPED, True,
                                          self.retry_after_timeout)
        self._end(_T_UNFINISHED, _R_END_OF_RUN, None)

    def _end(self, outcome: TurnOutcome, reason: str, code: str | None) -> Action:
        self.state = _ENDED
        self.outcome = outcome
        self.reason = reason
        self.code = code
        return END


class CallMachine:
    """One call's turn count and escalation (sans-IO): what happens after each turn."""

    __slots__ = ("escalation", "turns_planned", "turns_started")

    def __init__(self, turns_planned: int, escalation: EscalationConfig) -> None:
        self.turns_planned = turns_planned
        self.turns_started = 0
        self.escalation = Escalation(escalation)

    def turn_ended(self, outcome: str) -> tuple[bool, CallEndReason | None]:
        """(escalated, the call's end reason or None: the next turn follows)."""
        if self.escalation.record_turn(outcome == _T_FAILED):  # abandoned: no failure
            return True, _CE_ESCALATED
        if self.turns_started >= self.turns_planned:
            return False, _CE_ALL_TURNS_DONE
        return False, None
