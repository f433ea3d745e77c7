"""Retry budgets: shared, stateful limits on how much a Live-layer instance retries.

Eight mechanisms, each usable alone or combined (a retry needs all enabled ones
to agree); docs/budgets.md maps each to its published source:

* :class:`TokenBucket` — gRPC retry throttling (gRFC A6): tokens start at
  ``max_tokens``, -1 per failure, +``token_ratio`` per success (capped at
  ``max_tokens``, floored at 0); retries only while ``tokens > max_tokens / 2``.
  Kept in integer milli-tokens like gRPC, so counts are exact.
* :class:`FinagleBudget` — Finagle ``RetryBudget``: every first send deposits,
  every retry withdraws, deposits and withdrawals expire after ``ttl_s``; a
  retry is allowed while the balance covers it.  Over any ``ttl_s`` window this
  allows about ``min_retries_per_s * ttl_s + percent_can_retry * requests``
  retries.
* :class:`AdaptiveThrottle` — Google SRE client-side throttling:
  ``P(reject) = max(0, (requests - k * accepts) / (requests + 1))`` over the
  last ``window_s``; applied to retries, and to first sends if
  ``apply_to_first``.  A locally rejected request counts as a request (SRE).
* :class:`CircuitBreaker` — closed → open after ``failure_threshold``
  consecutive failures; open rejects everything (first sends too) for
  ``open_s``; then half-open lets ``half_open_probes`` trial requests through;
  a success closes it, a failure re-opens it.
* :class:`AwsRetryQuota` — AWS SDK standard retry mode: a quota of
  ``initial_tokens`` (also the cap); a retry takes ``retry_cost``
  (``timeout_retry_cost`` after a timeout) if that much is left; a success
  without retry returns ``no_retry_increment``, a successful retry its cost; a
  non-retryable error returns nothing.
* :class:`EnvoyRetryBudget` — Envoy ``retry_budget``: active retries <
  ``max(min_retry_concurrency, floor(budget_percent / 100 * active requests))``;
  a retry is active from its grant until its attempt ends (concurrency, not rates).
* :class:`CallBucket` — Brooker's retry token bucket: ``+fill_per_call`` per
  call started (capped, starts full); a retry needs more than ``retry_cost``
  tokens and takes them.  Outcomes do not refill it.
* :class:`RetryBreaker` — Brooker's retry-only breaker: refuses retries while
  failures / calls started over ``window_s`` > ``max_failure_ratio``; never
  refuses a first send.

Time comes only from the ``now_s`` arguments (simulated or wall clock, must not
go backwards); randomness only from the ``rng`` arguments.  Windows are kept in
at most ``ceil(window / slice)`` fixed slices of ``min(1 s, window / 10)``
each, so memory is bounded and an event expires between ``window - slice`` and
``window`` after it happened.

How the caller drives a budget (one per Live-layer instance) — the simulator's Live
layer and the Locust user both report every attempt's end through ONE call,
:meth:`RetryBudget.end_attempt` with an :class:`Ending` (:func:`ending_of` maps an
attempt outcome of ``sim/shared/schema.py`` to it), which calls the hooks below in order:

1. before a first send: ``allow_first(now, rng)`` (False ⇒ fail the turn locally);
2. for each attempt actually sent: ``on_attempt(now, is_retry)`` — a first send
   (``is_retry=False``) is a *call started* for the per-call budgets;
3. when the caller stops waiting for an attempt (answer, error, timeout, lost
   response): ``on_attempt_end(now, is_retry)``, before deciding about a retry;
   a granted retry dropped without being sent: ``on_attempt_end(now, True,
   sent=False)``;
4. for each attempt's outcome: ``on_success(now, retried, after_timeout)`` when
   the server answered (COMPLETED or INPUT_REQUIRED; ``retried``: the attempt
   was a retry, ``after_timeout``: granted with ``allow_retry(timeout=True)``);
   ``on_not_retryable(now)`` for a non-retryable code (the server is fine, the
   request was bad: a success for every budget except the AWS quota, which
   returns nothing for an error answer); ``on_failure(now)`` for a retryable
   code, a turn-response timeout or a lost response;
5. before a retry: ``allow_retry(now, rng, timeout)`` — usually via
   :meth:`rtalab.sim.policy.decide.RetryPolicy.decide`; ``timeout``: the failed attempt
   timed out.  A granted retry is charged at once (Finagle withdrawal, breaker
   probe, AWS tokens, Envoy active retry), not at ``on_attempt``.

The keyword arguments default so that a caller written for the first four
budgets (``allow_retry(now, rng)``, ``on_success(now)``) still works.

Every way an attempt ends is one :class:`Ending`: ``success`` (COMPLETED /
INPUT_REQUIRED), ``not-retryable``, ``failure`` (a retryable code), ``overloaded``
(``rate-limited``: the server shed it), ``timeout``, ``lost`` (the response was lost),
``cancelled`` (the caller cancelled it: barge-in, CancelTask) and ``dropped`` (a granted
retry dropped during its backoff, never sent).  The last two are no outcome: they go to
``on_abandoned``, which hands back what the attempt held (a breaker's half-open probe,
Envoy's active retry) and charges nothing.

``allow_*`` is two-phase inside (``_permit_*`` checks, ``_take_*`` commits), so
a combination charges nothing when one member vetoes.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from rtalab.sim.policy.config import (
    AdaptiveThrottleConfig,
    AwsRetryQuotaConfig,
    BudgetConfig,
    CallBucketConfig,
    CircuitBreakerConfig,
    EnvoyRetryBudgetConfig,
    FinagleBudgetConfig,
    RetryBreakerConfig,
    TokenBucketConfig,
)
from rtalab.sim.vocab import AttemptOutcome, Ending

#: endings that are a failed attempt (``on_failure``)
FAILED_ENDINGS = frozenset((Ending.FAILURE, Ending.OVERLOADED, Ending.TIMEOUT, Ending.LOST))
_OUTCOME_ENDINGS: dict[str, Ending] = {AttemptOutcome.COMPLETED: Ending.SUCCESS,
                                       AttemptOutcome.INPUT_REQUIRED: Ending.SUCCESS,
                                       AttemptOutcome.TIMEOUT: Ending.TIMEOUT,
                                       AttemptOutcome.TOTAL_TIMEOUT: Ending.TIMEOUT,
                                       AttemptOutcome.RESPONSE_LOST: Ending.LOST,
                                       AttemptOutcome.CANCELLED: Ending.CANCELLED}
_OVERLOAD_CODE = "rate-limited"


def ending_of(outcome: str, code: str | None = None, retryable: bool = False) -> Ending:
    """The :class:`Ending` of an attempt with ``outcome``
    (``rtalab.sim.shared.schema.ATTEMPT_OUTCOMES``); for ``failed``, ``code`` and whether the caller
    treats it as ``retryable`` decide."""
    e = _OUTCOME_ENDINGS.get(outcome)
    if e is not None:
        return e
    if outcome != AttemptOutcome.FAILED:
        raise ValueError(f"attempt outcome {outcome!r} has no budget ending")
    if code == _OVERLOAD_CODE:
        return Ending.OVERLOADED
    return Ending.FAILURE if retryable else Ending.NOT_RETRYABLE


class _Window:
    """Two integer counters summed over a sliding time window of fixed slices."""

    __slots__ = ("_last", "_n", "_slice_s", "_slices", "a", "b")

    def __init__(self, window_s: float, slices: int | None = None) -> None:
        """``slices``: exactly that many (Finagle: 10); default ``min(1 s, window / 10)`` each."""
        if slices is not None:
            self._n = slices
        else:
            target = min(1.0, window_s / 10.0)
            self._n = max(1, math.ceil(window_s / target - 1e-9))
        self._slice_s = window_s / self._n
        self._slices: deque[list[int]] = deque()  # [slice index, a, b], oldest first
        self._last = 0
        self.a = 0
        self.b = 0

    def advance(self, now_s: float) -> int:
        """Drop slices that left the window at ``now_s``; return the current slice index."""
        idx = int(now_s / self._slice_s)
        if idx < self._last:
            idx = self._last  # clock went backwards: stay in the latest slice
        self._last = idx
        slices = self._slices
        horizon = idx - self._n
        while slices and slices[0][0] <= horizon:
            _, a, b = slices.popleft()
            self.a -= a
            self.b -= b
        return idx

    def add(self, now_s: float, a: int, b: int) -> None:
        """Add ``a`` and ``b`` to the counters at ``now_s``."""
        idx = self.advance(now_s)
        slices = self._slices
        if slices and slices[-1][0] == idx:
            s = slices[-1]
            s[1] += a
            s[2] += b
        else:
            slices.append([idx, a, b])
        self.a += a
        self.b += b

    def __len__(self) -> int:
        return len(self._slices)


class _Total:
    """Two integer counters since the start (a :class:`_Window` that never forgets)."""

    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a = 0
        self.b = 0

    def advance(self, now_s: float) -> int:
        """Nothing expires."""
        return 0

    def add(self, now_s: float, a: int, b: int) -> None:
        """Add ``a`` and ``b`` to the counters."""
        self.a += a
        self.b += b

    def __len__(self) -> int:
        return 1


class RetryBudget:
    """Base class and the null budget: allows everything, keeps no state."""

    name: str = "none"

    def allow_first(self, now_s: float, rng: np.random.Generator) -> bool:
        """May a first send go out now? (charges it if so)"""
        if self._permit_first(now_s, rng):
            self._take_first(now_s)
            return True
        return False

    def allow_retry(self, now_s: float, rng: np.random.Generator, timeout: bool = False) -> bool:
        """May a retry be scheduled now? (charges it if so; ``timeout``: the failed attempt
        timed out or its response was lost)"""
        if self._permit_retry(now_s, rng, timeout):
            self._take_retry(now_s, timeout)
            return True
        return False

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """An attempt (first send = a call started, or retry) was actually sent."""

    def on_attempt_end(self, now_s: float, is_retry: bool, sent: bool = True) -> None:
        """The caller stopped waiting for an attempt (``sent=False``: a granted retry that
        was dropped before it was sent)."""

    def end_attempt(self, now_s: float, ending: Ending, is_retry: bool = False,
                    after_timeout: bool = False) -> None:
        """THE call path for every attempt's end (see the module docstring): the attempt
        ended (``on_attempt_end``), then its outcome (``on_success`` / ``on_not_retryable`` /
        ``on_failure``) or, for ``cancelled`` / ``dropped``, ``on_abandoned``."""
        sent = ending is not Ending.DROPPED
        self.on_attempt_end(now_s, is_retry, sent)
        if ending is Ending.SUCCESS:
            self.on_success(now_s, is_retry, after_timeout)
        elif ending is Ending.NOT_RETRYABLE:
            self.on_not_retryable(now_s)
        elif ending in FAILED_ENDINGS:
            self.on_failure(now_s, ending)
        else:
            self.on_abandoned(now_s, is_retry, sent)

    def on_success(self, now_s: float, retried: bool = False, after_timeout: bool = False) -> None:
        """An attempt was answered (COMPLETED / INPUT_REQUIRED); ``retried``: it was a retry,
        ``after_timeout``: one granted by ``allow_retry(timeout=True)``."""

    def on_not_retryable(self, now_s: float) -> None:
        """An attempt was answered with a non-retryable code: a success unless overridden."""
        self.on_success(now_s)

    def on_failure(self, now_s: float, ending: Ending = Ending.FAILURE) -> None:
        """An attempt failed with a retryable code, timed out or lost its response."""

    def on_abandoned(self, now_s: float, is_retry: bool, sent: bool) -> None:
        """An attempt ended with no outcome: cancelled by the caller (``sent``) or a granted
        retry dropped unsent.  Hands back what it held; nothing else by default."""

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """Small flat dict for records / time series (advanced to ``now_s`` if given)."""
        return {}

    # hooks for subclasses: check without side effects, then commit
    def _permit_first(self, now_s: float, rng: np.random.Generator) -> bool:
        return True

    def _take_first(self, now_s: float) -> None:
        pass

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return True

    def _take_retry(self, now_s: float, timeout: bool) -> None:
        pass


class TokenBucket(RetryBudget):
    """gRPC retry throttling: retries only while tokens > max_tokens / 2."""

    name = "token_bucket"
    MILLI = 1000

    def __init__(self, cfg: TokenBucketConfig) -> None:
        self._max = round(cfg.max_tokens * self.MILLI)
        self._ratio = max(1, round(cfg.token_ratio * self.MILLI))
        self._milli = self._max

    @property
    def tokens(self) -> float:
        """Current token count."""
        return self._milli / self.MILLI

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return 2 * self._milli > self._max

    def on_success(self, now_s: float, retried: bool = False, after_timeout: bool = False) -> None:
        """+token_ratio, capped at max_tokens."""
        m = self._milli + self._ratio
        self._milli = m if m < self._max else self._max

    def on_not_retryable(self, now_s: float) -> None:
        """gRFC A6: a non-retryable status changes nothing."""

    def on_failure(self, now_s: float, ending: Ending = Ending.FAILURE) -> None:
        """-1 token, floored at 0."""
        m = self._milli - self.MILLI
        self._milli = m if m > 0 else 0

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """``{"tokens": float}``."""
        return {"tokens": self.tokens}


class FinagleBudget(RetryBudget):
    """Finagle RetryBudget: ttl-expiring deposits per first send, withdrawals per retry.

    As in Finagle, deposits and withdrawals expire independently, so the
    balance can dip below zero for up to ``ttl_s`` after a burst of retries;
    no retry is granted until it is back above one withdrawal.
    """

    name = "finagle"
    SCALE = 1000
    SLICES = 10

    def __init__(self, cfg: FinagleBudgetConfig) -> None:
        pct = cfg.percent_can_retry
        # Finagle's integer arithmetic: a request deposits SCALE, a retry costs SCALE / percent
        # truncated (``.toInt``); percent = 0 (or so small it truncates away) means the
        # reserve alone, 1 per retry.  Its leaky bucket keeps 10 slices over the ttl.
        if pct > 0.0 and self.SCALE / pct < 2**53:
            self._deposit, self._withdraw = self.SCALE, max(1, int(self.SCALE / pct))
        else:
            self._deposit, self._withdraw = 0, 1
        self._reserve = cfg.min_retries_per_s * cfg.ttl_s * self._withdraw
        self._win = _Window(cfg.ttl_s, slices=self.SLICES)

    def balance(self, now_s: float) -> float:
        """Balance at ``now_s`` in units of retries."""
        self._win.advance(now_s)
        return (self._reserve + self._win.a) / self._withdraw

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        self._win.advance(now_s)
        return self._reserve + self._win.a >= self._withdraw

    def _take_retry(self, now_s: float, timeout: bool) -> None:
        self._win.add(now_s, -self._withdraw, 0)

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """A first send deposits; a retry was already charged by allow_retry."""
        if not is_retry and self._deposit:
            self._win.add(now_s, self._deposit, 0)

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """``{"finagle_retries_left": int}``."""
        if now_s is not None:
            self._win.advance(now_s)
        return {"finagle_retries_left": int((self._reserve + self._win.a) // self._withdraw)}


class AdaptiveThrottle(RetryBudget):
    """SRE client-side throttling: reject with P = max(0, (requests - k·accepts)/(requests + 1))."""

    name = "adaptive"

    def __init__(self, cfg: AdaptiveThrottleConfig) -> None:
        self.k = cfg.k
        self.book = cfg.variant == "sre_book"
        self.apply_to_first = cfg.apply_to_first or self.book
        self._win = _Window(cfg.window_s)

    @property
    def requests(self) -> int:
        """Requests in the window as of the last call."""
        return self._win.a

    @property
    def accepts(self) -> int:
        """Accepts in the window as of the last call."""
        return self._win.b

    def reject_probability(self, now_s: float) -> float:
        """P(reject) at ``now_s``."""
        self._win.advance(now_s)
        r = self._win.a
        p = (r - self.k * self._win.b) / (r + 1)
        return p if p > 0.0 else 0.0

    def _permit(self, now_s: float, rng: np.random.Generator) -> bool:
        p = self.reject_probability(now_s)
        if p > 0.0 and rng.random() < p:
            self._win.add(now_s, 1, 0)  # a locally rejected request still counts as a request
            return False
        return True

    def _permit_first(self, now_s: float, rng: np.random.Generator) -> bool:
        return self._permit(now_s, rng) if self.apply_to_first else True

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return self._permit(now_s, rng)

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """Every attempt sent is a request."""
        self._win.add(now_s, 1, 0)

    def on_success(self, now_s: float, retried: bool = False, after_timeout: bool = False) -> None:
        """The server accepted the request."""
        self._win.add(now_s, 0, 1)

    def on_failure(self, now_s: float, ending: Ending = Ending.FAILURE) -> None:
        """Not accepted — except, in the book's variant, an error answer that was not an
        overload rejection (the backend accepted and answered it)."""
        if self.book and ending is Ending.FAILURE:
            self._win.add(now_s, 0, 1)

    def on_abandoned(self, now_s: float, is_retry: bool, sent: bool) -> None:
        """A request the caller cancelled was not rejected: an accept (a dropped retry was
        never a request)."""
        if sent:
            self._win.add(now_s, 0, 1)

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """Requests, accepts and the current rejection probability."""
        if now_s is not None:
            self._win.advance(now_s)
        r, a = self._win.a, self._win.b
        return {"adaptive_requests": r, "adaptive_accepts": a,
                "adaptive_p_reject": max(0.0, (r - self.k * a) / (r + 1))}


class CircuitBreaker(RetryBudget):
    """Consecutive-failure circuit breaker: closed → open → half-open → closed | open."""

    name = "circuit_breaker"
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"

    def __init__(self, cfg: CircuitBreakerConfig) -> None:
        self.failure_threshold = cfg.failure_threshold
        self.open_s = cfg.open_s
        self.half_open_probes = cfg.half_open_probes
        self.status = self.CLOSED
        self.failures = 0  # consecutive failures while closed
        self.opens = 0  # how many times it has opened
        self.opened_at_s = -math.inf
        self._probes_left = 0
        self.probes_in_flight = 0  # granted while half-open, no outcome yet

    def _open(self, now_s: float) -> None:
        self.status = self.OPEN
        self.opened_at_s = now_s
        self.opens += 1
        self.failures = 0
        self.probes_in_flight = 0

    def _refresh(self, now_s: float) -> None:
        if self.status == self.OPEN and now_s >= self.opened_at_s + self.open_s:
            self.status = self.HALF_OPEN
            self._probes_left = self.half_open_probes
            self.probes_in_flight = 0

    def _permit(self, now_s: float, rng: np.random.Generator, timeout: bool = False) -> bool:
        self._refresh(now_s)
        if self.status == self.CLOSED:
            return True
        return self.status == self.HALF_OPEN and self._probes_left > 0

    def _take(self, now_s: float, timeout: bool = False) -> None:
        if self.status == self.HALF_OPEN:
            self._probes_left -= 1
            self.probes_in_flight += 1

    _permit_first = _permit_retry = _permit
    _take_first = _take_retry = _take

    def on_success(self, now_s: float, retried: bool = False, after_timeout: bool = False) -> None:
        """Closed: reset the failure run.  Half-open: close.  Open: ignored (a late reply)."""
        if self.status == self.CLOSED:
            self.failures = 0
        elif self.status == self.HALF_OPEN:
            self.status = self.CLOSED
            self.failures = 0
            self.probes_in_flight = 0

    def on_abandoned(self, now_s: float, is_retry: bool, sent: bool) -> None:
        """Half-open: a probe cancelled or dropped brings no outcome, so its slot goes back
        (else the breaker would wait for it for ever).  Closed / open: nothing."""
        self._refresh(now_s)
        if self.status == self.HALF_OPEN and self.probes_in_flight > 0:
            self.probes_in_flight -= 1
            self._probes_left += 1

    def on_failure(self, now_s: float, ending: Ending = Ending.FAILURE) -> None:
        """Closed: count, open at the threshold.  Half-open: re-open.  Open: ignored."""
        if self.status == self.CLOSED:
            self.failures += 1
            if self.failures >= self.failure_threshold:
                self._open(now_s)
        elif self.status == self.HALF_OPEN:
            self._open(now_s)

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """Breaker status, current failure run and number of openings."""
        if now_s is not None:
            self._refresh(now_s)
        return {"breaker": self.status, "breaker_failures": self.failures,
                "breaker_opens": self.opens, "breaker_probes_in_flight": self.probes_in_flight}


class AwsRetryQuota(RetryBudget):
    """AWS SDK standard retry mode's retry quota (botocore ``RetryQuotaChecker``)."""

    name = "aws_quota"

    def __init__(self, cfg: AwsRetryQuotaConfig) -> None:
        self.max_tokens = cfg.initial_tokens
        self.tokens = cfg.initial_tokens
        self.retry_cost = cfg.retry_cost
        self.timeout_retry_cost = cfg.timeout_retry_cost
        self.no_retry_increment = cfg.no_retry_increment

    def cost(self, timeout: bool) -> int:
        """Tokens a retry takes: ``timeout_retry_cost`` after a timeout, else ``retry_cost``."""
        return self.timeout_retry_cost if timeout else self.retry_cost

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return self.cost(timeout) <= self.tokens

    def _take_retry(self, now_s: float, timeout: bool) -> None:
        self.tokens -= self.cost(timeout)

    def on_success(self, now_s: float, retried: bool = False, after_timeout: bool = False) -> None:
        """A successful retry returns its cost, a success without retry ``no_retry_increment``;
        never above the initial quota."""
        amount = self.cost(after_timeout) if retried else self.no_retry_increment
        self.tokens = min(self.max_tokens, self.tokens + amount)

    def on_not_retryable(self, now_s: float) -> None:
        """An error answer returns nothing (only a 2xx answer releases quota)."""

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """``{"aws_tokens": int}``."""
        return {"aws_tokens": self.tokens}


class EnvoyRetryBudget(RetryBudget):
    """Envoy ``retry_budget``: a limit on concurrent retries relative to active requests."""

    name = "envoy"

    def __init__(self, cfg: EnvoyRetryBudgetConfig) -> None:
        self.budget_percent = cfg.budget_percent
        self.min_retry_concurrency = cfg.min_retry_concurrency
        self.active_requests = 0  # attempts sent and not ended
        self.active_retries = 0  # retries granted and not ended (backoff included)

    def max_retries(self) -> int:
        """The active-retry limit now (Envoy truncates the percentage to an integer)."""
        pct = int(self.budget_percent / 100.0 * self.active_requests)
        return pct if pct > self.min_retry_concurrency else self.min_retry_concurrency

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return self.active_retries < self.max_retries()

    def _take_retry(self, now_s: float, timeout: bool) -> None:
        self.active_retries += 1

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """One more active request."""
        self.active_requests += 1

    def on_attempt_end(self, now_s: float, is_retry: bool, sent: bool = True) -> None:
        """One request fewer (if it was sent); a retry's grant is released."""
        if sent and self.active_requests > 0:
            self.active_requests -= 1
        if is_retry and self.active_retries > 0:
            self.active_retries -= 1

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """Active requests and active retries."""
        return {"envoy_active_requests": self.active_requests,
                "envoy_active_retries": self.active_retries}


class CallBucket(RetryBudget):
    """Brooker's retry token bucket: filled per call started, charged per retry only.

    Kept in integer milli-tokens, so counts are exact.
    """

    name = "call_bucket"
    MILLI = 1000

    def __init__(self, cfg: CallBucketConfig) -> None:
        self._max = round(cfg.max_tokens * self.MILLI)
        self._fill = round(cfg.fill_per_call * self.MILLI)
        self._cost = round(cfg.retry_cost * self.MILLI)
        self._milli = self._max

    @property
    def tokens(self) -> float:
        """Current token count."""
        return self._milli / self.MILLI

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """A first send is a call started: +fill_per_call, capped at max_tokens."""
        if not is_retry:
            m = self._milli + self._fill
            self._milli = m if m < self._max else self._max

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return self._milli > self._cost  # strictly more than one retry's worth

    def _take_retry(self, now_s: float, timeout: bool) -> None:
        self._milli -= self._cost

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """``{"call_bucket_tokens": float}``."""
        return {"call_bucket_tokens": self.tokens}


class RetryBreaker(RetryBudget):
    """Brooker's retry-only breaker: no retries while failures / calls started > the ratio."""

    name = "retry_breaker"

    def __init__(self, cfg: RetryBreakerConfig) -> None:
        self.max_failure_ratio = cfg.max_failure_ratio
        # a = calls started, b = failures
        self._win: _Window | _Total = _Window(cfg.window_s) if cfg.window_s > 0 else _Total()

    def tripped(self, now_s: float) -> bool:
        """True while failures / calls in the window exceed ``max_failure_ratio``."""
        self._win.advance(now_s)
        return self._over()

    def _over(self) -> bool:
        calls, failures = self._win.a, self._win.b
        if calls == 0:
            return failures > 0
        return failures / calls > self.max_failure_ratio

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        return not self.tripped(now_s)

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """A first send is a call started."""
        if not is_retry:
            self._win.add(now_s, 1, 0)

    def on_failure(self, now_s: float, ending: Ending = Ending.FAILURE) -> None:
        """Every failed attempt counts (first sends and retries alike)."""
        self._win.add(now_s, 0, 1)

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """Calls and failures in the window, and whether retries are refused."""
        if now_s is not None:
            self._win.advance(now_s)
        return {"retry_breaker_calls": self._win.a, "retry_breaker_failures": self._win.b,
                "retry_breaker_tripped": self._over()}


class CompositeBudget(RetryBudget):
    """All members must allow; nothing is charged when one vetoes.  Empty ⇒ always allows."""

    name = "composite"

    def __init__(self, parts: tuple[RetryBudget, ...] | list[RetryBudget] = ()) -> None:
        self.parts: tuple[RetryBudget, ...] = tuple(parts)
        self.vetoes: dict[str, int] = {p.name: 0 for p in self.parts}
        self.vetoed_by = ""  # member that vetoed the last refused request

    def _permit_first(self, now_s: float, rng: np.random.Generator) -> bool:
        for p in self.parts:
            if not p._permit_first(now_s, rng):
                self.vetoes[p.name] += 1
                self.vetoed_by = p.name
                return False
        return True

    def _take_first(self, now_s: float) -> None:
        for p in self.parts:
            p._take_first(now_s)

    def _permit_retry(self, now_s: float, rng: np.random.Generator, timeout: bool) -> bool:
        for p in self.parts:
            if not p._permit_retry(now_s, rng, timeout):
                self.vetoes[p.name] += 1
                self.vetoed_by = p.name
                return False
        return True

    def _take_retry(self, now_s: float, timeout: bool) -> None:
        for p in self.parts:
            p._take_retry(now_s, timeout)

    def on_attempt(self, now_s: float, is_retry: bool) -> None:
        """Forward to every member."""
        for p in self.parts:
            p.on_attempt(now_s, is_retry)

    def on_attempt_end(self, now_s: float, is_retry: bool, sent: bool = True) -> None:
        """Forward to every member."""
        for p in self.parts:
            p.on_attempt_end(now_s, is_retry, sent)

    def on_success(self, now_s: float, retried: bool = False, after_timeout: bool = False) -> None:
        """Forward to every member."""
        for p in self.parts:
            p.on_success(now_s, retried, after_timeout)

    def on_not_retryable(self, now_s: float) -> None:
        """Forward to every member."""
        for p in self.parts:
            p.on_not_retryable(now_s)

    def on_failure(self, now_s: float, ending: Ending = Ending.FAILURE) -> None:
        """Forward to every member."""
        for p in self.parts:
            p.on_failure(now_s, ending)

    def on_abandoned(self, now_s: float, is_retry: bool, sent: bool) -> None:
        """Forward to every member."""
        for p in self.parts:
            p.on_abandoned(now_s, is_retry, sent)

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """Members' states merged, plus ``vetoes_<member>`` counts."""
        out: dict[str, Any] = {}
        for p in self.parts:
            out.update(p.state(now_s))
            out[f"vetoes_{p.name}"] = self.vetoes[p.name]
        return out


#: the budgets in the order a composite checks them, each configured by ``BudgetConfig.<name>``;
#: the adaptive throttle last: it draws from the rng only if the others allow
CHECK_ORDER: tuple[type[RetryBudget], ...] = (
    CircuitBreaker, RetryBreaker, TokenBucket, CallBucket, AwsRetryQuota, EnvoyRetryBudget,
    FinagleBudget, AdaptiveThrottle)


def make_budget(cfg: BudgetConfig) -> CompositeBudget:
    """The composite of the enabled budgets, checked in :data:`CHECK_ORDER`: circuit breaker,
    retry breaker, token bucket, call bucket, AWS quota, Envoy, Finagle, adaptive."""
    parts: list[RetryBudget] = []
    for kind in CHECK_ORDER:
        part_cfg = getattr(cfg, kind.name)
        if part_cfg.enabled:
            parts.append(kind(part_cfg))  # type: ignore[call-arg]  # each kind takes its config
    return CompositeBudget(parts)
