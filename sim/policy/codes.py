"""The stable error codes of errors.md §2 and their retryability, as data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorCode(StrEnum):
    """Machine-stable error codes carried in ``rta/errorCode`` of a FAILED status."""

    SCHEMA_VALIDATION = "schema-validation"
    UNSUPPORTED_DIRECTIVE = "unsupported-directive"
    EXTENSION_INACTIVE = "extension-inactive"
    AUTH = "auth"
    RATE_LIMITED = "rate-limited"
    UPSTREAM_TIMEOUT = "upstream-timeout"
    SESSION_NOT_FOUND = "session-not-found"
    INTERNAL = "internal"


class Retryability(StrEnum):
    NO = "no"
    YES = "yes"
    AFTER_BACKOFF = "after-backoff"  # rate-limited: honour retryAfterMs
    LIMITED = "limited"  # internal: retryable, fewer attempts


@dataclass(frozen=True)
class CodeInfo:
    code: ErrorCode
    meaning: str
    retryability: Retryability
    typical_cause: str
    live_action: str

    @property
    def retryable(self) -> bool:
        return self.retryability is not Retryability.NO


CODES: dict[ErrorCode, CodeInfo] = {
    c.code: c
    for c in (
        CodeInfo(ErrorCode.SCHEMA_VALIDATION,
                 "A directive, metadata field, or DataPart failed schema/field validation",
                 Retryability.NO,
                 "Malformed fields, invalid directive type, missing handoff fields",
                 "fix the request or fail the turn"),
        CodeInfo(ErrorCode.UNSUPPORTED_DIRECTIVE,
                 "Reasoner would need a directive type outside the negotiated effective set",
                 Retryability.NO, "Directive type not in Agent Card ∩ clientCapabilities",
                 "renegotiate capabilities or fail the turn"),
        CodeInfo(ErrorCode.EXTENSION_INACTIVE,
                 "Profile data received or required but the extension was not echoed as active",
                 Retryability.NO, "rta/* metadata without a successful A2A-Extensions negotiation",
                 "renegotiate, else degrade to core A2A"),
        CodeInfo(ErrorCode.AUTH, "Authentication or authorization failure", Retryability.NO,
                 "Invalid/expired credentials; unauthorized handoff/transfer action",
                 "reauthenticate or fail the turn"),
        CodeInfo(ErrorCode.RATE_LIMITED, "Sender exceeded a rate or size bound",
                 Retryability.AFTER_BACKOFF, "Message-rate or size-bound violation",
                 "back off (at least retryAfterMs) and retry"),
        CodeInfo(ErrorCode.UPSTREAM_TIMEOUT,
                 "A dependency (tool, workflow, model call) did not respond in time",
                 Retryability.YES, "Reasoner-internal timeout waiting on a tool/workflow",
                 "backoff, bounded attempts"),
        CodeInfo(ErrorCode.SESSION_NOT_FOUND, "Referenced contextId/taskId is unknown or expired",
                 Retryability.NO, "Stale identifiers after session teardown or expiry",
                 "fail the turn / start a new session"),
        CodeInfo(ErrorCode.INTERNAL, "Unclassified server-side failure", Retryability.LIMITED,
                 "Unhandled exception, dependency outage", "backoff, fewer attempts"),
    )
}

ALL_CODES: tuple[str, ...] = tuple(c.value for c in ErrorCode)
RETRYABLE_CODES: frozenset[str] = frozenset(c.value for c, i in CODES.items() if i.retryable)


def is_retryable(code: str) -> bool:
    """True if errors.md §2 allows a retry of ``code`` (unknown codes are not retryable)."""
    return code in RETRYABLE_CODES
