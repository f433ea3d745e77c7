"""One call of the Live layer: its turns, each turn's attempts, retries and injected faults.

This is the Locust counterpart of :mod:`rtalab.sim.model.live` and follows its rules
(read its docstring): both drive the one sans-IO turn machine
(:class:`rtalab.sim.policy.turn.TurnMachine`: ids, continuation, barge-in, budget calls, the retry
decision, every ending) — this module from the call's greenlet and the channel of its
binding; the same :class:`rtalab.sim.policy.RetryPolicy`, retry budget
(:func:`rtalab.sim.policy.make_budget`, one per Live instance = Locust process) and
:class:`rtalab.sim.policy.Escalation` (one per call) make every decision; turn counts,
think times, side-effect and handoff draws, caller answers and handoff
abandonment use the scenario's ``[workload]`` and ``[live]`` values.

Wire-level choices (docs/load.md):

* **contextId** — client-minted (``live.client_context_id``) or learned from the
  first event that carries the server's one (a first message retried before any
  answer opens a second session: the measured hazard).
* **ids** — every attempt has a fresh ``messageId``; ``requestGuid`` is new per
  attempt if ``retry.new_request_guid``; ``turnId`` is new after a FAILED state
  if ``retry.new_turn_id``; ``taskId`` is sent for a continuation and for a
  retry after a timeout or a lost response once the task is known (errors.md §3;
  docs/decisions.md D2: the Reasoner joins it), never after a FAILED state (a new task).
* **timeouts** — turn-response (first directive, chunk or end state),
  total (end state), handoff (caller answer), negotiation (WebSocket upgrade;
  on HTTP/SSE the first request's ``A2A-Extensions`` echo).  A broken stream or
  one that ends without an end state is ``response-lost``; both are decided as
  ``upstream-timeout`` with ``timeout=True``, as in the simulator.
* **barge-in** — with ``load.barge_in_share`` a turn is interrupted
  ``load.barge_in_after_s`` after its first playable chunk (or when it would
  have had one): ``CancelTask`` is sent, the turn ends ``cancelled``.
* **injected copies** (``[load]``) — ``resend`` (byte-identical,
  ``resend_delay_s`` after the attempt ended), ``concurrent`` (byte-identical, at the same time) and
  ``continuation-dup`` (a second continuation of the INPUT_REQUIRED task, new
  requestGuid: docs/decisions.md D2's atomic claim).  Copies are read to their end in
  their own greenlet and recorded with ``injected`` set; they never change the
  turn's outcome.

Every attempt, received event, turn and call is written to the :class:`Ledger`
(see docs/ledger.md); time to first chunk and turn completion are also
Locust stats rows (``TTFC`` and ``TURN``).
"""

from __future__ import annotations

import itertools
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import gevent
import gevent.event
import numpy as np

from rtalab.loadtests.live.config import LiveOptions
from rtalab.loadtests.live.playback import Playback
from rtalab.loadtests.live.wire import (
    TIMING_COLUMNS,
    Event,
    Ids,
    event_keys,
    scan_event,
    streaming_request,
)
from rtalab.sim.model.rand import sampler
from rtalab.sim.policy import RetryBudget, RetryPolicy, make_budget
from rtalab.sim.policy.codes import ErrorCode
from rtalab.sim.policy.config import TimeoutConfig
from rtalab.sim.policy.turn import (
    AWAIT_CALLER,
    END,
    WAIT,
    Action,
    CallMachine,
    TurnMachine,
    TurnRules,
)
from rtalab.sim.scenario import Scenario
from rtalab.sim.vocab import AttemptOutcome as A
from rtalab.sim.vocab import CallEndReason, Decision, EndReason, Phase, Told, TurnOutcome

UPSTREAM_TIMEOUT = ErrorCode.UPSTREAM_TIMEOUT.value
# Ledger rows hold plain scalars only: an Enum member is an object the cyclic collector tracks,
# and so is every dict that holds one, while a dict of str, int, float, bool and None is not
# tracked at all.  So the cells the vocabulary names are written as their values (plain str;
# equal to the members, the same in JSON): held rows then cost the collector nothing.
_PLAIN: dict[object, str] = {m: m.value for e in (A, Decision, EndReason, Phase, Told, TurnOutcome)
                          for m in e}
_PHASES = (Phase.INITIAL.value, Phase.CONTINUATION.value)  # by TurnMachine.phase (0, 1)
_O_CANCELLED, _O_FAILED, _O_RESPONSE_LOST, _O_TIMEOUT, _O_TOTAL_TIMEOUT, _O_UNFINISHED = (
    A.CANCELLED.value, A.FAILED.value, A.RESPONSE_LOST.value, A.TIMEOUT.value,
    A.TOTAL_TIMEOUT.value, A.UNFINISHED.value)
# what the caller was told, by turn outcome
_TOLD = {TurnOutcome.COMPLETED: Told.SUCCESS.value, TurnOutcome.FAILED: Told.FAILURE.value}
_TOLD_NONE = Told.NONE.value
_END_STATES = {"TASK_STATE_COMPLETED": A.COMPLETED.value,
               "TASK_STATE_INPUT_REQUIRED": A.INPUT_REQUIRED.value,
               "TASK_STATE_CANCELED": _O_CANCELLED}  # any other end state: failed
_TIMEOUTS = (_O_TIMEOUT, _O_TOTAL_TIMEOUT, _O_RESPONSE_LOST)
NAN = float("nan")
TEXT = "what is my balance"
UNIFORM_BLOCK = 64  # share draws per numpy call (Call._uniform)
# the Reasoner's per-turn timings (docs/load.md): empty until a stream-end event carries them
_TIMING_NAMES = tuple(column for _, column in TIMING_COLUMNS)
_NO_TIMING: dict[str, None] = dict.fromkeys(_TIMING_NAMES)


COPY_FIRST_WAIT_S = 5.0  # the longest an original waits for its copy to be sent first

class StreamBroken(Exception):
    """The connection or stream of a request failed before its end state."""


class _Expired(BaseException):
    """A Live-layer timer fired (internal; a BaseException so that no transport's error
    handling mistakes it for a broken stream)."""


class _Deadline:
    """The Live-layer timer of one greenlet's attempts: throws :class:`_Expired` into the
    greenlet that armed it once ``time.time()`` reaches ``at``.  Armed per attempt
    (:meth:`arm`), stopped when the attempt ends (:meth:`close`), kept for the next: the
    loop timer of the attempts' first duration (the same every attempt: the scenario's
    timeouts) is made once and re-armed (libev's ``again`` on a timer whose repeat is that
    duration), no timer object per attempt.  Moving ``at`` later only records it (the timer
    re-arms itself for the rest when it fires); moving it earlier re-arms now, or raises at
    once if it has passed; the rest runs on a one-shot timer of its own."""

    __slots__ = ("_first", "_first_s", "_glet", "_loop", "_timer", "at")

    def __init__(self) -> None:
        self.at = math.inf
        self._glet: Any = None
        self._loop = gevent.get_hub().loop
        self._timer: Any = None  # the armed timer
        self._first: Any = None  # the timer of the first duration, kept between attempts
        self._first_s = NAN

    def arm(self, at: float, seconds: float) -> _Deadline:
        """Time an attempt of the current greenlet: fire at ``at``, ``seconds`` from now."""
        self.close()
        self.at = at
        self._glet = gevent.getcurrent()
        seconds = max(0.001, seconds)
        timer = self._first
        if seconds != self._first_s:  # another first duration (or none yet): its own timer
            if timer is not None:
                timer.close()
            timer = self._first = self._loop.timer(seconds, seconds)
            self._first_s = seconds
        timer.again(self._fire, update=True)  # starts it ``seconds`` (its repeat) from now
        self._timer = timer
        return self

    def _arm(self, seconds: float) -> None:
        self._timer = self._loop.timer(seconds)
        self._timer.start(self._fire, update=True)

    def _fire(self) -> None:
        self.close()
        remaining = self.at - time.time()
        if remaining > 0:  # the deadline moved later since the timer was armed
            self._arm(remaining)
        else:
            self._glet.throw(_Expired)

    def move(self, at: float) -> None:
        """The attempt's deadline is now ``at``."""
        earlier = at < self.at
        self.at = at
        if earlier:
            self.close()
            remaining = at - time.time()
            if remaining <= 0:
                raise _Expired
            self._arm(remaining)

    def close(self) -> None:
        """Stop the timer (idempotent); the first duration's timer is kept for the next
        attempt."""
        timer = self._timer
        if timer is not None:
            self._timer = None
            if timer is self._first:
                timer.stop()
            else:
                timer.close()

    def release(self) -> None:
        """Stop and free every timer (the call ended)."""
        self.close()
        if self._first is not None:
            self._first.close()
            self._first = None
            self._first_s = NAN


class Exchange(Protocol):
    """One request in flight on a binding."""

    http_status: int | None
    worker: str | None
    echo: bool

    def next_frame(self) -> dict[str, Any] | None: ...
    def close(self, failure: str | None = None) -> None: ...


class Channel(Protocol):
    """A call's binding (HTTP/SSE or WebSocket)."""

    binding: str

    def open(self, negotiation_s: float) -> bool | None: ...
    def send(self, rpc_id: str, body: bytes, active: bool) -> Exchange: ...
    def cancel(self, rpc_id: str, task_id: str, active: bool) -> str | None: ...
    def close(self) -> None: ...


class Sink(Protocol):
    """Where rows go (:class:`rtalab.loadtests.live.ledger.Ledger`)."""

    def attempt(self, row: dict[str, Any]) -> None: ...
    def events(self, rows: list[dict[str, Any]]) -> None: ...
    def turn(self, row: dict[str, Any]) -> None: ...
    def call(self, row: dict[str, Any]) -> None: ...


class UnsafeTestRetryPolicy(RetryPolicy):
    """TEST ONLY (negative control): a RetryPolicy that also retries the given non-retryable
    codes with the default attempt limit, violating errors.md §2-3 on purpose."""

    def __init__(self, cfg: Any, budget: RetryBudget | None, codes: tuple[str, ...]) -> None:
        super().__init__(cfg, budget)
        for c in codes:
            self._limits[c] = cfg.retry.max_attempts


class Instance:
    """One Live-layer instance (a Locust process): its retry policy and budget."""

    def __init__(self, index: int, scenario: Scenario, opts: LiveOptions, t0: float) -> None:
        self.index = index
        budget = make_budget(scenario.live.budget)
        self.budget: RetryBudget | None = budget if budget.parts else None
        if opts.unsafe_test_retry_codes:
            self.policy: RetryPolicy = UnsafeTestRetryPolicy(scenario.live, self.budget,
                                                             opts.unsafe_test_retry_codes)
        else:
            self.policy = RetryPolicy(scenario.live, self.budget)
        self.t0 = t0

    def now(self) -> float:
        """Seconds since the run started (the budget's clock)."""
        return time.time() - self.t0


_BASE = uuid.uuid4().hex[:12]  # unique per process; ids are this plus a counter (cheap)
_COUNTER = itertools.count()


def _id(prefix: str) -> str:
    """A fresh identifier, unique across processes and runs."""
    return f"{prefix}-{_BASE}{next(_COUNTER):x}"


class _Turn(TurnMachine):
    """One turn: the sans-IO :class:`rtalab.sim.policy.turn.TurnMachine` (ids, policy, endings) plus
    what the wire needs.  Its clock is ``time.time()``; the rules' ``t0`` gives the budget the
    run's clock."""

    __slots__ = ("barge_in_s", "force_error", "index", "input_required", "interaction_id",
                 "last_row", "next_seq", "sends", "side_sent")

    def __init__(self, rules: TurnRules, index: int, interaction_id: str, turn_id: str,
                 side_effect: bool, handoff: bool, start_s: float,
                 force_error: str | None) -> None:
        super().__init__(rules, start_s, side_effect, handoff, turn_id)
        self.index = index
        self.interaction_id = interaction_id
        self.force_error = force_error
        self.barge_in_s: float | None = None
        self.next_seq: float | None = None  # where the task's sequenceIds go on (continuation)
        self.side_sent = False  # a request of this turn was sent with sideEffect: true
        self.input_required = False  # the server answered the first phase INPUT_REQUIRED
        self.sends: dict[str, int] = {}  # requestGuid -> times sent
        self.last_row: dict[str, Any] | None = None  # the attempt row of the latest attempt


@dataclass(slots=True)
class _Result:
    outcome: str
    end_s: float
    state: str | None = None
    code: str | None = None
    retry_after_ms: float | None = None
    first_chunk_s: float = NAN
    timeout: bool = False


class _Read:
    """One exchange's reading (shared by :meth:`Call._exchange` and the steps it calls): its
    deadlines, reorder buffer and event rows, and how its stream ended."""

    __slots__ = ("barge_at", "end_ev", "ev_rows", "failure", "got_output", "hard_deadline",
                 "outcome", "pb", "resp_deadline", "seq_rows", "timer_s", "total_deadline")

    def __init__(self, send_s: float, to: TimeoutConfig, hard_timeout_s: float,
                 pb: Playback) -> None:
        resp_s = to.turn_response_s if to.turn_response_s > 0 else math.inf
        total_s = to.turn_total_s if to.turn_total_s > 0 else math.inf
        self.resp_deadline = send_s + resp_s
        self.total_deadline = send_s + total_s
        self.hard_deadline = send_s + hard_timeout_s
        self.timer_s = min(resp_s, total_s, hard_timeout_s)  # from the send to the first deadline
        self.pb = pb
        self.ev_rows: list[dict[str, Any]] = []
        self.seq_rows: list[dict[str, Any]] = []  # sequenced events, in arrival order
        self.got_output = False  # a directive, chunk or end state came (errors.md §5)
        self.barge_at = math.inf  # when the caller barges in (main attempt, once it played)
        self.end_ev: Event | None = None  # the event that ended the stream
        self.outcome: str = _O_RESPONSE_LOST  # unless an end state or a timer says otherwise
        self.failure: str | None = None  # why the request failed (its Locust stats row)


class Call:
    """One call (a Live session), played from arrival to its end by :meth:`run`."""

    def __init__(self, call_id: str, scenario: Scenario, instance: Instance, channel: Channel,
                 sink: Sink, opts: LiveOptions, rng: np.random.Generator, process: str,
                 run_id: str, stats: Callable[[str, str, float, bool], None] | None = None,
                 spawn: Callable[..., gevent.Greenlet[..., Any]] = gevent.spawn) -> None:
        self.call_id = call_id
        self.sc = scenario
        self.inst = instance
        self.ch = channel
        self.sink = sink
        self.opts = opts
        self.rng = rng
        self.process = process
        self.run_id = run_id
        self.stats = stats or (lambda kind, name, ms, ok: None)
        self.spawn = spawn
        wl, live = scenario.workload, scenario.live
        self.progress = CallMachine(max(1, math.ceil(sampler(wl.turns_per_call, rng)())),
                                    live.escalation)
        self.turns_planned = self.progress.turns_planned
        self.think = sampler(wl.think_time_s, rng)
        self.caller_response = sampler(wl.caller_response_time_s, rng)
        self.barge_after = sampler(scenario.load.barge_in_after_s, rng)
        self.resend_delay = sampler(scenario.load.resend_delay_s, rng)
        self.context_id: str | None = _id("ctx") if live.client_context_id else None
        self.contexts_seen: set[str] = set()
        self.rules = TurnRules(live, instance.policy, instance.budget, rng, self._new_guid,
                               self._new_turn_id, instance.t0, opts.unsafe_test_retry_codes)
        self.active = True
        self.degraded = False
        self.negotiated = False
        self.copies: list[gevent.Greenlet[..., Any]] = []
        self._uniforms: list[float] = []  # share draws of ``rng``, a block at a time
        self._open_attempt: dict[str, Any] | None = None
        self._turn: _Turn | None = None
        self._deadline: _Deadline | None = None  # the timer of the main attempts, made once
        self.turn_ids_minted = 0
        self.per_call_turn_ids = scenario.load.turn_ids == "per_call"
        # what every turn and attempt reads of the options, read once (two are properties)
        self._force_codes = opts.force_error_codes
        self._reorder, self._hold_s, self._hard_s = opts.reorder, opts.hold_s, opts.hard_timeout_s
        self._keys = event_keys(opts.ext_uri)
        self.arrival_s = time.time()
        self._templates()

    @staticmethod
    def _new_guid() -> str:
        return f"g-{_BASE}{next(_COUNTER):x}"  # _id("g"), without its call (one per attempt)

    def _new_turn_id(self) -> str:
        """A new turnId: globally unique, or ``t-1``, ``t-2``, ... per call (``load.turn_ids``)."""
        self.turn_ids_minted += 1
        if self.per_call_turn_ids:
            return f"t-{self.turn_ids_minted}"
        return f"turn-{_BASE}{next(_COUNTER):x}"  # _id("turn"), without its call

    def _uniform(self) -> float:
        """One U[0, 1) draw of the call's ``rng`` for a share decision (side effect, handoff,
        barge-in, injected copies).  Drawn ``UNIFORM_BLOCK`` at a time: one numpy call (and one
        of its locks, a Python-level gevent lock under Locust) per block instead of per turn.
        Same distribution, other values than per-turn draws.  Policy, budget and samplers
        draw from ``rng`` directly."""
        u = self._uniforms
        if not u:
            u = self._uniforms = self.rng.random(UNIFORM_BLOCK).tolist()
        return u.pop()

    # ------------------------------------------------------------------ call and turns

    def run(self) -> None:
        """Play the whole call; a kill (end of run) records what was open as ``unfinished``."""
        end_reason = CallEndReason.END_OF_RUN
        try:
            self._negotiate()
            while True:
                _, end = self.progress.turn_ended(self._play_turn())
                if end is not None:
                    end_reason = end
                    break
                think = self.think()
                if think > 0:  # no think time: go on without a trip through the hub
                    gevent.sleep(think)
        except gevent.GreenletExit:
            self._flush_unfinished()
            end_reason = CallEndReason.END_OF_RUN
            raise
        finally:
            gevent.joinall(self.copies, timeout=self.opts.hard_timeout_s)
            if self._deadline is not None:
                self._deadline.release()
            self.ch.close()
            self.sink.call({
                "run_id": self.run_id, "process": self.process, "binding": self.ch.binding,
                "call_id": self.call_id, "live_instance": self.inst.index,
                "arrival_s": self.arrival_s,
                "end_s": time.time() if end_reason != CallEndReason.END_OF_RUN else None,
                "turns_planned": self.turns_planned,
                "turns_started": self.progress.turns_started,
                "end_reason": end_reason, "degraded": self.degraded,
                "context_ids": sorted(self.contexts_seen)})

    def _negotiate(self) -> None:
        """Extension negotiation: the WebSocket upgrade's echo (SSE: first request's echo)."""
        limit = self.sc.live.timeouts.negotiation_s
        try:
            ok = self.ch.open(limit)
        except StreamBroken:
            ok = None  # the first request will reconnect and tell
        if ok is not None:
            self.negotiated = True
        if ok is False:
            self._degrade()

    def _degrade(self) -> None:
        self.active = False
        self.degraded = True

    def _play_turn(self) -> TurnOutcome:
        wl = self.sc.workload
        i = self.progress.turns_started
        self.progress.turns_started += 1
        codes = self._force_codes
        u_side, u_handoff = self._uniform(), self._uniform()
        t = _Turn(self.rules, i, f"{self.call_id}.{i}", self._new_turn_id(),
                  u_side < wl.side_effect_share, u_handoff < wl.handoff_share, time.time(),
                  codes[i % len(codes)] if codes else None)
        barge_share = self.sc.load.barge_in_share
        if barge_share > 0 and self._uniform() < barge_share:
            t.barge_in_s = self.barge_after()
        self._turn = t
        action, end_s, first_chunk_s = self._run_phase(t, t.send(t.start_s))
        # a continuation may be asked for input again (any task may go INPUT_REQUIRED, A2A
        # §7.1): the caller is prompted each time, as in the simulator's event loop
        while action == AWAIT_CALLER:
            t.input_required = True
            gone = t.caller_wait(self.caller_response(), self.sc.live.timeouts.handoff_s)
            gevent.sleep(t.handoff_wait_s)
            if gone:
                end_s = time.time()
                action = t.caller_gone(end_s)
            else:
                action, end_s, first_chunk_s = self._run_phase(t, t.caller_answered(time.time()))
        t.first_chunk_s = first_chunk_s
        self._end_turn(t, end_s)
        return t.outcome  # type: ignore[return-value]  # _end_turn set the outcome

    def _end_turn(self, t: _Turn, end_s: float) -> None:
        timings = t.timings(end_s)
        ttfc = timings[0]
        if not math.isnan(ttfc):
            self.stats("TTFC", self.ch.binding, ttfc * 1000.0, True)
        self.stats("TURN", self.ch.binding, (end_s - t.start_s) * 1000.0,
                   t.outcome == TurnOutcome.COMPLETED)
        self._write_turn(t, end_s, timings)

    def _write_turn(self, t: _Turn, end_s: float | None,
                    timings: tuple[float, float] | None = None) -> None:
        """The turn's ledger row, once: ended at ``end_s``, or unfinished (None); ``timings``:
        ``t.timings(end_s)`` if the caller has it already."""
        ttfc, completion = timings or t.timings(NAN if end_s is None else end_s)
        row = self._turn_base.copy()
        row["turn_index"] = t.index
        row["interaction_id"] = t.interaction_id
        row["turn_id"] = t.turn_id
        row["side_effect"] = t.side_sent
        row["side_effect_planned"] = t.side_effect
        row["handoff"] = t.handoff
        row["input_required"] = t.input_required
        row["start_s"] = t.start_s
        row["end_s"] = end_s
        row["outcome"] = _PLAIN.get(t.outcome, t.outcome)
        row["end_reason"] = _PLAIN.get(t.reason, t.reason)
        row["error_code"] = t.code
        row["attempts"] = t.attempts
        row["retries"] = t.attempts - t.first_sends
        row["ttfc_s"] = None if math.isnan(ttfc) else ttfc
        row["completion_s"] = None if math.isnan(completion) else completion
        row["handoff_wait_s"] = t.handoff_wait_s
        row["told_caller"] = _TOLD.get(t.outcome, _TOLD_NONE)  # type: ignore[arg-type]  # None (no outcome yet) is no key: Told.NONE
        row["forced_error"] = t.force_error
        last = t.last_row
        if end_s is not None and last is not None:  # the timings of the attempt that ended it
            for column in _TIMING_NAMES:
                row[column] = last.get(column)
        self.sink.turn(row)
        self._turn = None

    def _templates(self) -> None:
        """The call's row templates: every column of an attempts row and a turns row
        (docs/ledger.md), in their order, with the cells that are the same on every row of
        the call; a row is a copy with its own cells set (one dict copy: cheaper than
        building all of its entries per row)."""
        call = {"run_id": self.run_id, "process": self.process, "binding": self.ch.binding,
                "call_id": self.call_id}
        self._attempt_base: dict[str, Any] = {
            **call, "turn_index": None, "interaction_id": None, "turn_id": None,
            "task_id": None, "phase": None, "attempt": None, "request_guid": None,
            "context_id": None, "context_id_learned": None, "task_id_answered": None,
            "injected": "", "side_effect": False, "handoff": False,
            "live_instance": self.inst.index, "delay_before_s": 0.0, "send_s": None,
            "first_response_s": None, "first_chunk_s": None, "end_s": None,
            "outcome": _O_UNFINISHED, "state": None, "error_code": None, "retry_after_ms": None,
            "decision": None, "echo": False, "events": 0, "events_without_seq": 0,
            "order_violations": 0, "http_status": None, "server_worker": None,
            "active": True, "forced_error": None, "side_effect_reported": None, **_NO_TIMING}
        self._turn_base: dict[str, Any] = {
            **call, "turn_index": None, "interaction_id": None, "turn_id": None,
            "live_instance": self.inst.index, "side_effect": False,
            "side_effect_planned": False, "handoff": False, "input_required": False,
            "start_s": None, "end_s": None, "outcome": None, "end_reason": None,
            "error_code": None, "attempts": 0, "retries": 0, "ttfc_s": None,
            "completion_s": None, "handoff_wait_s": 0.0, "told_caller": None,
            "forced_error": None, **_NO_TIMING}

    def _flush_unfinished(self) -> None:
        """Record the attempt and turn still open when the run was stopped."""
        row = self._open_attempt
        if row is not None:
            row["outcome"] = _O_UNFINISHED
            self.sink.attempt(row)
            self._open_attempt = None
        t = self._turn
        if t is not None:
            t.stop(time.time())  # a retry waiting in its backoff is dropped
            self._write_turn(t, None)

    # ------------------------------------------------------------------ one phase

    def _run_phase(self, t: _Turn, action: Action) -> tuple[Action, float, float]:
        """Attempts of one phase, from the machine's answer to its first send, until the
        phase ends: (END or AWAIT_CALLER, end_s, first playable chunk)."""
        while action != END:
            res = self._attempt(t, t.delay_s)
            action = t.attempt_ended(res.end_s, res.outcome, res.code, res.retry_after_ms)
            if t.decision is not None:  # a failed attempt: its row waits for the decision
                self._last_row["decision"] = _PLAIN.get(t.decision, t.decision)
                self._commit_attempt()
            if t.cancel and t.task_id:  # cancel_on_timeout: CancelTask for the abandoned attempt
                self.ch.cancel(_id("r"), t.task_id, self.active)  # type: ignore[arg-type]  # a str on the wire (TurnRules: Hashable)
            if action == AWAIT_CALLER:
                return action, res.end_s, NAN
            if action != WAIT:
                return action, res.end_s, res.first_chunk_s if t.decision is None else NAN
            if t.delay_s > 0:
                try:
                    gevent.sleep(t.delay_s)
                except BaseException:  # the user is stopped in the backoff: retry dropped
                    t.stop(time.time())
                    raise
            action = t.retry_due(time.time())
        return action, time.time(), NAN

    # ------------------------------------------------------------------ one attempt

    def _attempt(self, t: _Turn, delay_before: float) -> _Result:
        """Send one request of turn ``t``, read it to its end (or a timer), record it."""
        ids = Ids(_id("m"), t.guid, t.turn_id, t.interaction_id, self.context_id,  # type: ignore[arg-type]  # strs on the wire (TurnRules: Hashable)
                  t.task_id)  # type: ignore[arg-type]  # a str on the wire (TurnRules: Hashable)
        extra = {"test.forceError": t.force_error} if t.force_error else None
        side = t.side_effect and not t.wants_input
        t.side_sent = t.side_sent or side
        rpc_id = _id("r")
        body = streaming_request(rpc_id, ids, self.opts.ext_uri, self.active, text=TEXT,
                                 side_effect=side, handoff=t.wants_input, extra_meta=extra)
        row = self._attempt_row(t, ids, "", side, delay_before)
        self._open_attempt = row
        load = self.sc.load
        if load.concurrent_duplicate_share > 0 and self._uniform() < (
                load.concurrent_duplicate_share):
            # the copy first, for a share of them: the server then sees the duplicate before
            # its original (as on any real network), the original joins or replays it
            first = self._uniform() < load.concurrent_first_share
            sent = gevent.event.Event() if first else None
            self._spawn_copy(t, ids, body, "concurrent", side, sent=sent)
            if sent is not None:
                sent.wait(timeout=COPY_FIRST_WAIT_S)
        if t.phase and ids.task_id and load.continuation_duplicate_share > 0 and (
                self._uniform() < load.continuation_duplicate_share):
            dup_ids = Ids(_id("m"), _id("g"), ids.turn_id, ids.interaction_id, ids.context_id,
                          ids.task_id)
            dup_rpc = _id("r")
            dup_body = streaming_request(dup_rpc, dup_ids, self.opts.ext_uri, self.active,
                                         text=TEXT, side_effect=side, handoff=False,
                                         extra_meta=extra)
            self._spawn_copy(t, dup_ids, dup_body, "continuation-dup", side, dup_rpc)
        res = self._exchange(t, ids, rpc_id, body, row, main=True)
        self._last_row = t.last_row = row
        # no decision to wait for: _commit_attempt, inline (most attempts)
        if res.outcome not in _TIMEOUTS and res.outcome != _O_FAILED and (
                self._open_attempt is not None):
            self.sink.attempt(self._open_attempt)
            self._open_attempt = None
        if load.resend_share > 0 and self._uniform() < load.resend_share:
            self._spawn_copy(t, ids, body, "resend", side)
        return res

    def _commit_attempt(self) -> None:
        row = self._open_attempt
        if row is not None:
            self.sink.attempt(row)
            self._open_attempt = None

    def _attempt_row(self, t: _Turn, ids: Ids, injected: str, side: bool,
                     delay_before: float) -> dict[str, Any]:
        """A new attempts row: the call's template (:meth:`_templates`) with this attempt's
        own cells."""
        row = self._attempt_base.copy()
        row["turn_index"] = t.index
        row["interaction_id"] = t.interaction_id
        row["turn_id"] = ids.turn_id
        row["task_id"] = ids.task_id
        row["phase"] = _PHASES[t.phase]
        row["attempt"] = t.phase_attempts
        row["request_guid"] = ids.request_guid
        row["context_id"] = ids.context_id
        row["injected"] = injected
        row["side_effect"] = side
        row["handoff"] = t.handoff
        row["delay_before_s"] = delay_before
        row["send_s"] = time.time()
        row["active"] = self.active
        row["forced_error"] = t.force_error
        return row

    def _spawn_copy(self, t: _Turn, ids: Ids, body: bytes, injected: str, side: bool,
                    rpc_id: str | None = None, sent: gevent.event.Event | None = None) -> None:
        """Send a copy of ``body`` in its own greenlet (``sent`` is set once it was sent)."""
        row = self._attempt_row(t, ids, injected, side, 0.0)
        if rpc_id is None:  # byte-identical body; a fresh JSON-RPC id on a shared socket
            rpc_id = _id("r")
            body = body.replace(body[body.index(b'"id":"') + 6:body.index(b'","method"')],
                                rpc_id.encode(), 1)

        delay = self.resend_delay() if injected == "resend" else 0.0

        def run_copy() -> None:
            try:
                if delay > 0:
                    gevent.sleep(delay)
                self._exchange(t, ids, rpc_id, body, row, main=False, sent=sent)
            except gevent.GreenletExit:
                row["outcome"] = _O_UNFINISHED
            finally:
                if sent is not None:
                    sent.set()  # never keep the original waiting for a copy that failed
            self.sink.attempt(row)

        self.copies.append(self.spawn(run_copy))

    def _exchange(self, t: _Turn, ids: Ids, rpc_id: str, body: bytes, row: dict[str, Any],
                  main: bool, sent: gevent.event.Event | None = None) -> _Result:
        """Send ``body`` and read its stream into ``row`` and the events ledger."""
        send_s = row["send_s"] = time.time()
        st = _Read(send_s, self.sc.live.timeouts, self._hard_s,
                   Playback(self._reorder, self._hold_s, t.next_seq if t.phase else None))
        guid = ids.request_guid
        copy_no = t.sends.get(guid, 0)
        t.sends[guid] = copy_no + 1
        ex: Exchange | None = None
        deadline: _Deadline | None = None
        try:
            try:
                if main:  # the call's greenlet: its one timer, re-armed
                    deadline = self._deadline
                    if deadline is None:
                        deadline = self._deadline = _Deadline()
                else:  # a copy, in a greenlet of its own
                    deadline = _Deadline()
                deadline.arm(min(st.resp_deadline, st.total_deadline, st.hard_deadline),
                             st.timer_s)
                ex = self.ch.send(rpc_id, body, self.active)
                self._answered(ex, row, main, sent)
                self._read(t, ex, deadline, st, row, f"{guid}#{copy_no}", main)
            except _Expired:
                self._expired(t, st, row)
            except StreamBroken as e:
                st.outcome, st.failure = _O_RESPONSE_LOST, str(e)
        finally:
            if deadline is not None:
                if main:
                    deadline.close()  # kept for the call's next attempt
                else:
                    deadline.release()
            if ex is not None:
                ex.close(st.failure)
        return self._settle(t, st, row, main)

    def _answered(self, ex: Exchange, row: dict[str, Any], main: bool,
                  sent: gevent.event.Event | None) -> None:
        """The request is out and answered (SSE: its answer has started): what the answer's
        start tells (status, worker, the extension's echo: the negotiation)."""
        if sent is not None:
            sent.set()
        row["http_status"], row["server_worker"] = ex.http_status, ex.worker
        row["echo"] = ex.echo
        if main and self.active and not self.negotiated and ex.http_status == 200:
            self.negotiated = True  # the first real answer settles the negotiation
            if not ex.echo:
                self._degrade()  # no A2A-Extensions echo: core A2A from now on

    def _read(self, t: _Turn, ex: Exchange, deadline: _Deadline, st: _Read, row: dict[str, Any],
              key: str, main: bool) -> None:
        """Read ``ex``'s events up to its end state, or until the stream ends (raises what the
        stream and the timer raise): an events row each, played in ``sequenceId`` order, the
        first response, the contextId and taskId they carry, the barge-in moment.  The hot
        loop: locals only, written to ``st`` and ``row`` once, when reading stops."""
        pb, ev_rows, seq_rows = st.pb, st.ev_rows, st.seq_rows
        resp_deadline, total_deadline, hard_deadline = (st.resp_deadline, st.total_deadline,
                                                        st.hard_deadline)
        armed = limit = deadline.at
        got_output = False
        barge_at = inf = math.inf
        n_without_seq = 0
        ext_uri, call_id, guid = self.opts.ext_uri, self.call_id, row["request_guid"]
        learn_task = main and t.task_id is None
        watch_barge = main and t.barge_in_s is not None
        last_ctx: str | None = None  # the contextId already taken into account
        answered_task: str | None = None  # the first taskId this send's events carried
        keys = self._keys
        _time, _scan, _isnan, push_next, next_frame = (time.time, scan_event, math.isnan,
                                                       pb.push_next, ex.next_frame)
        try:
            while True:
                if limit != armed:  # the attempt's deadline moved
                    deadline.move(limit)
                    armed = limit
                frame = next_frame()
                now = _time()
                if frame is None:
                    st.failure = "stream ended without an end state"
                    return
                kind, state, seq, task_id, ctx, is_output, end_ev = _scan(frame, keys, ext_uri)
                if ctx and ctx != last_ctx:
                    last_ctx = ctx
                    if row["context_id_learned"] is None:
                        row["context_id_learned"] = ctx
                    self.contexts_seen.add(ctx)
                    if main and self.context_id is None:
                        self.context_id = ctx
                if answered_task is None and task_id:  # the first event with a taskId
                    answered_task = row["task_id_answered"] = task_id
                    if learn_task:  # the Task event, or any later one
                        t.task_id = row["task_id_learned"] = task_id
                        learn_task = False
                if not got_output and is_output:
                    got_output = True
                    row["first_response_s"] = now
                    limit = min(total_deadline, hard_deadline, barge_at)
                evrow = {"request_guid": guid, "attempt_key": key, "call_id": call_id,
                         "recv_s": now, "kind": kind, "state": state,
                         "sequence_id": seq, "played_index": None}
                ev_rows.append(evrow)
                if seq is None:
                    if kind != "task" and kind != "error":
                        n_without_seq += 1
                    if kind == "artifact" and _isnan(pb.first_chunk_s):
                        pb.first_chunk_s = now
                else:
                    seq_rows.append(evrow)
                    idx = push_next(seq, kind == "artifact", now)  # in order: played now
                    if idx is not None:
                        evrow["played_index"] = idx
                    else:
                        for n, idx in pb.push(seq, kind == "artifact", now):
                            seq_rows[n]["played_index"] = idx
                if watch_barge and barge_at == inf and not _isnan(pb.first_chunk_s):
                    barge_at = pb.first_chunk_s + cast("float", t.barge_in_s)  # watch_barge
                    limit = min(total_deadline, hard_deadline, barge_at,
                                inf if got_output else resp_deadline)
                if end_ev is not None:  # the event that ends the stream (_settle reads it)
                    st.end_ev = end_ev
                    return
        finally:
            row["events"] += len(ev_rows)
            row["events_without_seq"] += n_without_seq
            st.got_output, st.barge_at = got_output, barge_at

    def _expired(self, t: _Turn, st: _Read, row: dict[str, Any]) -> None:
        """The attempt's timer fired: barge-in (CancelTask), or which timeout it was."""
        now = time.time()
        if st.barge_at <= now:
            st.outcome = _O_CANCELLED
            if t.task_id:  # the answer says whether the side effect ran
                row["side_effect_reported"] = self.ch.cancel(_id("r"), t.task_id,  # type: ignore[arg-type]  # a str on the wire (TurnRules: Hashable)
                                                             self.active)
        elif not st.got_output and st.resp_deadline <= now:
            st.outcome, st.failure = _O_TIMEOUT, "turn-response timeout"
        elif st.total_deadline <= now:
            st.outcome, st.failure = _O_TOTAL_TIMEOUT, "turn total timeout"
        else:
            st.outcome, st.failure = _O_TIMEOUT, "hard timeout"

    def _settle(self, t: _Turn, st: _Read, row: dict[str, Any], main: bool) -> _Result:
        """The attempt once its stream stopped: what the reorder buffer still held played,
        the continuation's first sequenceId, the row's end cells, the events rows written."""
        pb = st.pb
        end_s = time.time()
        seq_rows = st.seq_rows
        for n, idx in pb.finish(end_s):
            seq_rows[n]["played_index"] = idx
        if main and not t.phase and math.isfinite(pb.last_played):
            t.next_seq = pb.last_played + 1
        res = _Result(st.outcome, end_s, first_chunk_s=pb.first_chunk_s,
                      timeout=st.outcome in _TIMEOUTS)
        end_ev = st.end_ev
        if end_ev is not None:
            if end_ev.timing:
                row.update(end_ev.timing)
            res.state = end_ev.state
            st_ = end_ev.state
            row["side_effect_reported"] = end_ev.side_effect
            res.outcome = _END_STATES.get(st_, _O_FAILED)  # type: ignore[arg-type]  # a missing state maps to FAILED
            if res.outcome == _O_FAILED:
                res.code = end_ev.error_code or "internal"
                res.retry_after_ms = end_ev.retry_after_ms
            res.timeout = False
        if res.timeout:
            res.code = UPSTREAM_TIMEOUT
        row["end_s"], row["outcome"], row["state"] = end_s, res.outcome, res.state
        row["error_code"] = res.code if res.outcome == _O_FAILED or res.timeout else None
        row["retry_after_ms"] = res.retry_after_ms
        row["first_chunk_s"] = None if math.isnan(pb.first_chunk_s) else pb.first_chunk_s
        row["order_violations"] = pb.order_violations
        self.sink.events(st.ev_rows)
        return res
