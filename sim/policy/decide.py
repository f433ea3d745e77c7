"""The retry decision for one failed attempt, and the session-level escalation rule.

:meth:`RetryPolicy.decide` applies, in this order (the first that says no wins):

1. ``not-retryable`` — the code is not retryable per errors.md §2 (unknown codes
   included), or it is a turn-response timeout and ``retry_on_timeout`` is off;
2. ``attempts-exhausted`` — ``attempt >= max_attempts_for(code)``;
3. the delay: backoff for retry number ``attempt``; for ``rate-limited`` with a
   ``retry_after_ms`` hint and ``honour_retry_after``, at least that hint;
4. ``deadline`` — ``deadline_s > 0`` and ``elapsed_s + delay > deadline_s``;
5. ``budget`` — the retry budget refuses (checked last: a granted retry is charged).

Only a ``retry`` decision carries a delay; every refusal has ``delay_s == 0.0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from rtalab.sim.policy.backoff import Backoff, make_backoff
from rtalab.sim.policy.budget import RetryBudget
from rtalab.sim.policy.codes import ALL_CODES, ErrorCode, is_retryable
from rtalab.sim.policy.config import EscalationConfig, LivePolicyConfig
from rtalab.sim.vocab import Decision as Verdict
from rtalab.sim.vocab import Ending

Reason = Literal[Verdict.RETRY, Verdict.NOT_RETRYABLE, Verdict.ATTEMPTS_EXHAUSTED,
                 Verdict.DEADLINE, Verdict.BUDGET]
REASONS: Final[tuple[str, ...]] = tuple(Verdict)

_TIMEOUT_CODE: Final[str] = ErrorCode.UPSTREAM_TIMEOUT.value
_RATE_LIMITED: Final[str] = ErrorCode.RATE_LIMITED.value


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to retry a failed attempt, after how long, and why."""

    retry: bool
    delay_s: float
    reason: Verdict


NOT_RETRYABLE: Final = Decision(False, 0.0, Verdict.NOT_RETRYABLE)
ATTEMPTS_EXHAUSTED: Final = Decision(False, 0.0, Verdict.ATTEMPTS_EXHAUSTED)
DEADLINE: Final = Decision(False, 0.0, Verdict.DEADLINE)
BUDGET: Final = Decision(False, 0.0, Verdict.BUDGET)
#: endings the Live layer cannot tell from a timeout: decided as ``upstream-timeout``
_TIMEOUT_ENDINGS: Final = frozenset((Ending.TIMEOUT, Ending.LOST))


class RetryPolicy:
    """The Live layer's retry decision (stateless itself; the budget holds the shared state)."""

    def __init__(self, cfg: LivePolicyConfig, budget: RetryBudget | None = None) -> None:
        self.cfg = cfg
        self.backoff: Backoff = make_backoff(cfg.backoff)
        self.budget = budget
        r = cfg.retry
        # retryable codes only: a limit set for a non-retryable code is ignored (errors.md §3)
        self._limits: dict[str, int] = {
            c: r.max_attempts_by_code.get(c, r.max_attempts) for c in ALL_CODES if is_retryable(c)
        }
        self._retry_on_timeout = r.retry_on_timeout
        self._honour_retry_after = r.honour_retry_after
        self._deadline_s = r.deadline_s
        self._delay = self.backoff.delay_s

    def max_attempts_for(self, code: str, timeout: bool = False) -> int:
        """Attempts a turn failing with ``code`` gets, first send included (1 = never retried)."""
        if timeout:
            return self._limits[_TIMEOUT_CODE] if self._retry_on_timeout else 1
        return self._limits.get(code, 1)

    def decide(self, code: str, attempt: int, elapsed_s: float, now_s: float,
               rng: np.random.Generator, retry_after_ms: float | None = None,
               prev_delay_s: float = 0.0, ending: Ending = Ending.FAILURE) -> Decision:
        """Decide about attempt number ``attempt`` (1 = first send) that just failed with ``code``.

        ``elapsed_s`` is the time since the turn's first send; ``prev_delay_s``
        the delay before the failed attempt (decorrelated jitter uses it);
        ``ending`` is how the attempt ended (:class:`rtalab.sim.vocab.Ending`):
        ``TIMEOUT`` (a Live-side turn-response or total timeout) is decided as
        ``upstream-timeout`` whatever ``code`` says; ``LOST`` (a lost response) is decided
        like a timeout, but the budget is asked with ``timeout=False`` (botocore charges the
        timeout cost only for connect/read timeouts); any other ending decides by ``code``.
        """
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        timeout = ending in _TIMEOUT_ENDINGS
        if timeout:
            if not self._retry_on_timeout:
                return NOT_RETRYABLE
            code = _TIMEOUT_CODE
        limit = self._limits.get(code)
        if limit is None:
            return NOT_RETRYABLE
        if attempt >= limit:
            return ATTEMPTS_EXHAUSTED
        delay = self._delay(attempt, prev_delay_s, rng)
        if retry_after_ms is not None and code == _RATE_LIMITED and self._honour_retry_after:
            hint = retry_after_ms / 1000.0
            if hint > delay:
                delay = hint
        if self._deadline_s > 0.0 and elapsed_s + delay > self._deadline_s:
            return DEADLINE
        if self.budget is not None and not self.budget.allow_retry(now_s, rng,
                                                                   ending == Ending.TIMEOUT):
            return BUDGET
        return Decision(True, delay, Verdict.RETRY)


class Escalation:
    """Client-side escalation: end the session after N failed turns in a row (N = 0: never)."""

    def __init__(self, cfg: EscalationConfig) -> None:
        self.limit = cfg.end_session_after_failed_turns
        self.consecutive_failed = 0

    def record_turn(self, failed: bool) -> bool:
        """Record a finished turn; True means end the session now."""
        self.consecutive_failed = self.consecutive_failed + 1 if failed else 0
        return 0 < self.limit <= self.consecutive_failed

    def reset(self) -> None:
        """Start a new session."""
        self.consecutive_failed = 0
