"""Every budget stays correct under every way an attempt can end (issue 16, point 4).

A model-based property test plays a caller — many turns at once, attempts in
flight, granted retries waiting out their backoff — and drives random sequences
of endings (success, not retryable, retryable failure, overload, timeout, lost
response, cancelled by barge-in/CancelTask, a granted retry dropped during its
backoff) through ``RetryBudget.end_attempt``, the one call path the simulator
and the Locust user share.  Invariants checked after every step and at
quiescence (every attempt ended, every pending retry sent or dropped):

* in-flight counters (Envoy's active requests / retries, the breaker's probes)
  never go negative and return to zero at quiescence;
* the breaker is never half-open with no probe left and none in flight (it
  would refuse every request for ever), and a quiescent breaker lets a request
  through once ``open_s`` has passed;
* tokens stay within their bounds (gRPC, AWS, Brooker's bucket, SRE's counts).

Then the same with the simulator: a barge-in must not leave a breaker waiting
for a probe's outcome, nor Envoy holding a retry dropped in its backoff.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rtalab.sim.policy import Ending, ending_of, make_budget
from rtalab.sim.policy.budget import FAILED_ENDINGS, CircuitBreaker, EnvoyRetryBudget, RetryBudget
from rtalab.sim.policy.config import BudgetConfig
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import Scenario

BUDGETS = ("token_bucket", "finagle", "adaptive", "circuit_breaker", "aws_quota", "envoy",
           "call_bucket", "retry_breaker")
OPEN_S = 0.5


def _config(names: tuple[str, ...], book: bool = False) -> BudgetConfig:
    sections: dict[str, Any] = {}
    for n in names:
        d: dict[str, Any] = {"enabled": True}
        if n == "circuit_breaker":
            d.update(failure_threshold=2, open_s=OPEN_S, half_open_probes=1)
        if n == "adaptive" and book:
            d["variant"] = "sre_book"
        if n == "aws_quota":
            d.update(initial_tokens=30)
        sections[n] = d
    return Scenario().with_overrides(
        {f"live.budget.{k}": v for k, v in sections.items()}).live.budget


def _check(b: RetryBudget, now: float) -> None:
    """Invariants that hold after every step."""
    for p in b.parts:  # type: ignore[attr-defined]
        if isinstance(p, EnvoyRetryBudget):
            assert p.active_requests >= 0 and p.active_retries >= 0
        elif isinstance(p, CircuitBreaker):
            p._refresh(now)
            assert 0 <= p.probes_in_flight <= p.half_open_probes
            if p.status == p.HALF_OPEN:
                assert p._probes_left + p.probes_in_flight == p.half_open_probes, \
                    "half-open: every probe slot is free or held by a probe in flight"
        st_ = p.state(now)
        if "tokens" in st_:
            assert 0.0 <= st_["tokens"] <= 10.0
        if "aws_tokens" in st_:
            assert 0 <= st_["aws_tokens"] <= 30
        if "call_bucket_tokens" in st_:
            assert 0.0 <= st_["call_bucket_tokens"] <= 5.0
        if "adaptive_requests" in st_:
            assert st_["adaptive_requests"] >= 0 and st_["adaptive_accepts"] >= 0
            assert 0.0 <= st_["adaptive_p_reject"] < 1.0


ENDINGS = [e for e in Ending if e is not Ending.DROPPED]


class _Caller(RuleBasedStateMachine):
    """A Live layer as a state machine: turns start, attempts end in any way, granted retries
    are sent or dropped in their backoff, time passes.  ``NAMES``: the budgets enabled."""

    NAMES: tuple[str, ...] = ()
    BOOK = False

    def __init__(self) -> None:
        super().__init__()
        self.b = make_budget(_config(self.NAMES, self.BOOK))
        self.rng = np.random.default_rng(0)
        self.now = 0.0
        self.flying: list[tuple[bool, bool]] = []  # attempts in flight: (is_retry, after_timeout)
        self.pending: list[bool] = []  # granted retries in their backoff: after_timeout

    @rule(dt=st.sampled_from((0.01, 0.3, 1.0, 2.5)))
    def tick(self, dt: float) -> None:
        self.now += dt

    @rule()
    def start(self) -> None:
        if self.b.allow_first(self.now, self.rng):
            self.b.on_attempt(self.now, False)
            self.flying.append((False, False))

    @precondition(lambda self: self.flying)
    @rule(idx=st.integers(0, 50), ending=st.sampled_from(ENDINGS))
    def end(self, idx: int, ending: Ending) -> None:
        is_retry, after_to = self.flying.pop(idx % len(self.flying))
        self.b.end_attempt(self.now, ending, is_retry, after_to)
        if ending in FAILED_ENDINGS:
            timeout = ending is Ending.TIMEOUT
            if self.b.allow_retry(self.now, self.rng, timeout):
                self.pending.append(timeout)

    @precondition(lambda self: self.pending)
    @rule(idx=st.integers(0, 50))
    def send(self, idx: int) -> None:
        after_to = self.pending.pop(idx % len(self.pending))
        self.b.on_attempt(self.now, True)
        self.flying.append((True, after_to))

    @precondition(lambda self: self.pending)
    @rule(idx=st.integers(0, 50))
    def drop(self, idx: int) -> None:
        after_to = self.pending.pop(idx % len(self.pending))
        self.b.end_attempt(self.now, Ending.DROPPED, True, after_to)

    @invariant()
    def bounded(self) -> None:
        _check(self.b, self.now)

    def teardown(self) -> None:
        """Quiescence: the caller barges in on everything still open."""
        b = self.b
        for is_retry, after_to in self.flying:
            b.end_attempt(self.now, Ending.CANCELLED, is_retry, after_to)
            _check(b, self.now)
        for after_to in self.pending:
            b.end_attempt(self.now, Ending.DROPPED, True, after_to)
            _check(b, self.now)
        for p in b.parts:
            if isinstance(p, EnvoyRetryBudget):
                assert (p.active_requests, p.active_retries) == (0, 0)
                assert p.allow_retry(self.now, np.random.default_rng(0))  # nothing leaked
            elif isinstance(p, CircuitBreaker):
                assert p.probes_in_flight == 0
                later = self.now + OPEN_S + 0.001
                assert p.allow_first(later, np.random.default_rng(0)), \
                    f"quiescent breaker still refuses after open_s: {p.state(later)}"


def _machine(names: tuple[str, ...], book: bool = False) -> type:
    cls = type(f"Caller_{'_'.join(names)}", (_Caller,), {"NAMES": names, "BOOK": book})
    return cls


CASES = [((n,), False) for n in BUDGETS] + [(("adaptive",), True), (BUDGETS, False)]


@pytest.mark.parametrize(("names", "book"), CASES,
                         ids=["+".join(n) + ("-book" if b else "") for n, b in CASES])
def test_budget_invariants_under_random_endings(names: tuple[str, ...], book: bool) -> None:
    run_state_machine_as_test(_machine(names, book),
                              settings=settings(max_examples=60, stateful_step_count=40,
                                                deadline=None))


def test_cancelled_half_open_probe_gives_its_slot_back() -> None:
    """The issue's first failure, step by step."""
    b = make_budget(_config(("circuit_breaker",)))
    rng = np.random.default_rng(0)
    for t in (0.0, 0.1):
        assert b.allow_first(t, rng)
        b.on_attempt(t, False)
        b.end_attempt(t, Ending.TIMEOUT)
    assert b.state(0.2)["breaker"] == "open"
    assert not b.allow_first(0.3, rng)
    assert b.allow_first(0.7, rng)  # half-open: the probe
    b.on_attempt(0.7, False)
    assert not b.allow_first(0.75, rng)  # one probe only
    b.end_attempt(0.8, Ending.CANCELLED)  # the caller barged in on the probe
    assert b.state(0.8)["breaker"] == "half-open"
    assert b.state(0.8)["breaker_probes_in_flight"] == 0
    assert b.allow_first(0.85, rng)  # a new probe may go
    b.on_attempt(0.85, False)
    b.end_attempt(0.9, Ending.SUCCESS)
    assert b.state(0.9)["breaker"] == "closed"


def test_dropped_probe_retry_gives_its_slot_back() -> None:
    b = make_budget(_config(("circuit_breaker",)))
    rng = np.random.default_rng(0)
    for t in (0.0, 0.1):
        b.allow_first(t, rng)
        b.on_attempt(t, False)
        b.end_attempt(t, Ending.FAILURE)
    assert b.allow_first(0.7, rng)
    b.on_attempt(0.7, False)
    b.end_attempt(0.75, Ending.CANCELLED)
    assert b.allow_retry(0.75, rng)  # a retry granted as the probe ...
    b.end_attempt(0.8, Ending.DROPPED, True)  # ... dropped in its backoff
    assert b.allow_first(0.85, rng)


def test_envoy_retry_dropped_in_backoff_is_released() -> None:
    b = make_budget(_config(("envoy",)))
    rng = np.random.default_rng(0)
    for i in range(3):  # min_retry_concurrency 3
        b.on_attempt(float(i), False)
        b.end_attempt(float(i), Ending.FAILURE)
        assert b.allow_retry(float(i), rng)
    assert not b.allow_retry(3.0, rng)
    for _ in range(3):
        b.end_attempt(4.0, Ending.DROPPED, True)
    assert b.state()["envoy_active_retries"] == 0
    assert b.allow_retry(5.0, rng)


@pytest.mark.parametrize(("outcome", "code", "retryable", "ending"), [
    ("completed", None, False, Ending.SUCCESS),
    ("input-required", None, False, Ending.SUCCESS),
    ("failed", "internal", True, Ending.FAILURE),
    ("failed", "auth", False, Ending.NOT_RETRYABLE),
    ("failed", "rate-limited", True, Ending.OVERLOADED),
    ("timeout", "upstream-timeout", True, Ending.TIMEOUT),
    ("total-timeout", "upstream-timeout", True, Ending.TIMEOUT),
    ("response-lost", "upstream-timeout", True, Ending.LOST),
    ("cancelled", None, False, Ending.CANCELLED),
])
def test_ending_of_every_attempt_outcome(outcome: str, code: str | None, retryable: bool,
                                         ending: Ending) -> None:
    assert ending_of(outcome, code, retryable) is ending


def test_ending_of_unfinished_is_refused() -> None:
    with pytest.raises(ValueError, match="unfinished"):
        ending_of("unfinished")


# ----------------------------------------------------------------------------- simulator


def _outage(barge: float, **budget: Any) -> Scenario:
    """A 30-s two-way outage at 20 s; the caller barges in on a share of turns."""
    ov: dict[str, Any] = {
        "workload.calls_per_s": 3.0,
        "workload.turns_per_call": 4,
        "workload.think_time_s": 0.5,
        "workload.handoff_share": 0.0,
        "workload.barge_in_share": barge,
        "workload.barge_in_after_s": {"dist": "exp", "mean": 0.8},
        "live.instances": 1,
        "live.escalation.end_session_after_failed_turns": 0,
        "live.timeouts.turn_response_s": 1.0,
        "live.backoff.base_s": 0.5,
        "reasoner.workers": 64,
        "reasoner.errors": {"internal": 0.1},
        "network.outages": [{"start_s": 20.0, "duration_s": 30.0, "direction": "both"}],
        "run.duration_s": 110.0,
        "run.warmup_s": 0.0,
        "run.drain_s": 10.0,
    }
    ov.update({f"live.budget.{k}": v for k, v in budget.items()})
    return Scenario().with_overrides(ov)


def test_breaker_recovers_after_an_outage_with_barge_in() -> None:
    """Before the fix a barge-in on the half-open probe left the breaker refusing every
    turn until the end of the run.  After the outage (50 s) plus a few open periods, turns
    fail on the budget no more than a few per cent, with or without barge-in."""
    cb = {"enabled": True, "failure_threshold": 5, "open_s": 2.0}
    for barge in (0.0, 0.6):
        out = run_once(_outage(barge, circuit_breaker=cb), 3)
        late = out.turns[out.turns["start_s"] >= 60.0]
        share = float((late["end_reason"] == "budget").mean())
        assert len(late) > 300
        assert share < 0.02, (barge, share)
        assert out.counters["budget.0.breaker"] == "closed"


def test_envoy_keeps_retrying_with_barge_in() -> None:
    """Before the fix every retry dropped in its backoff by a barge-in leaked: after ~50 s no
    retry was ever sent again.  Now the Envoy budget ends with nothing active and retries
    keep flowing after the outage."""
    env = {"enabled": True}
    out = run_once(_outage(0.6, envoy=env), 3)
    assert out.counters["budget.0.envoy_active_retries"] <= 3
    late = out.attempts[out.attempts["send_s"] >= 60.0]
    assert int((late["attempt"] > 1).sum()) > 0
    early = out.attempts[(out.attempts["send_s"] >= 20.0) & (out.attempts["send_s"] < 50.0)]
    assert int((early["attempt"] > 1).sum()) > 30
