"""The domain vocabulary, once: every outcome, ending, reason, decision, binding and run state.

Each is an :class:`enum.StrEnum`, so a member *is* its plain string: it compares equal to
it, hashes like it and is written to records, ledgers and JSON as it (records stay
bit-identical to the bare strings they replace).  The record categories of
:mod:`rtalab.sim.shared.schema` are tuples of these values in their fixed on-disk order.

``tests/test_vocabulary.py`` fails on a bare outcome string literal outside this module.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class AttemptOutcome(StrEnum):
    """How one attempt (one request message) ended."""

    COMPLETED = "completed"
    INPUT_REQUIRED = "input-required"
    FAILED = "failed"  # a FAILED state with its error code
    TIMEOUT = "timeout"  # turn-response timeout (or the Live users' hard timeout)
    TOTAL_TIMEOUT = "total-timeout"
    RESPONSE_LOST = "response-lost"  # broken stream / no terminal state seen
    UNFINISHED = "unfinished"  # still open when the run ended
    CANCELLED = "cancelled"  # barge-in: CancelTask sent


class TurnOutcome(StrEnum):
    """How one logical turn (one interactionId) ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"  # the caller did not answer a handoff in time
    UNFINISHED = "unfinished"
    CANCELLED = "cancelled"  # barge-in


class Decision(StrEnum):
    """The retry decision about a failed attempt (:meth:`rtalab.sim.policy.RetryPolicy.decide`)."""

    RETRY = "retry"
    NOT_RETRYABLE = "not-retryable"
    ATTEMPTS_EXHAUSTED = "attempts-exhausted"
    DEADLINE = "deadline"
    BUDGET = "budget"


class EndReason(StrEnum):
    """Why a turn ended: a refusing decision, or one of the other endings."""

    COMPLETED = "completed"
    NOT_RETRYABLE = "not-retryable"
    ATTEMPTS_EXHAUSTED = "attempts-exhausted"
    DEADLINE = "deadline"
    BUDGET = "budget"
    HANDOFF_TIMEOUT = "handoff-timeout"
    END_OF_RUN = "end-of-run"
    BARGE_IN = "barge-in"


class CallEndReason(StrEnum):
    """Why a call (a Live session) ended."""

    ALL_TURNS_DONE = "all-turns-done"
    ESCALATED = "escalated"
    END_OF_RUN = "end-of-run"


class Ending(StrEnum):
    """Every way an attempt can end, as far as a retry budget is concerned."""

    SUCCESS = "success"  # COMPLETED or INPUT_REQUIRED
    NOT_RETRYABLE = "not-retryable"  # a non-retryable code: the request was bad
    FAILURE = "failure"  # a retryable code
    OVERLOADED = "overloaded"  # rate-limited: the server shed the request
    TIMEOUT = "timeout"  # turn-response or total timeout
    LOST = "lost"  # the response was lost (stream ended without a terminal state)
    CANCELLED = "cancelled"  # the caller cancelled it (barge-in, CancelTask): no outcome
    DROPPED = "dropped"  # a granted retry dropped during its backoff, never sent


class Told(StrEnum):
    """What the caller was told at the end of a turn (the Live users' turn ledger)."""

    SUCCESS = "success"
    FAILURE = "failure"
    NONE = "none"


class Phase(StrEnum):
    """The phase of a turn an attempt belongs to."""

    INITIAL = "initial"
    CONTINUATION = "continuation"


class BindingName(StrEnum):
    """The wire bindings of the Live users (:mod:`rtalab.loadtests.live.bindings`)."""

    SSE = "sse"
    REST = "rest"
    GRPC = "grpc"
    WS = "ws"


class RunState(StrEnum):
    """The state of a run folder (``meta.json``'s ``status``)."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


#: attempt outcomes that are a failed attempt (the policy decides about a retry)
FAILED_OUTCOMES: Final = frozenset((AttemptOutcome.FAILED, AttemptOutcome.TIMEOUT,
                                    AttemptOutcome.TOTAL_TIMEOUT, AttemptOutcome.RESPONSE_LOST))
#: attempt outcomes the Live layer cannot tell from a timeout (decided as upstream-timeout)
TIMEOUT_OUTCOMES: Final = frozenset((AttemptOutcome.TIMEOUT, AttemptOutcome.TOTAL_TIMEOUT,
                                     AttemptOutcome.RESPONSE_LOST))


def values(enum: type[StrEnum]) -> tuple[str, ...]:
    """The plain string values of ``enum``, in definition order (a record's categories)."""
    return tuple(m.value for m in enum)
