"""The dedup (idempotency) store interface shared by every backend.

A store records, per ``(context_id, key)``, whether a request is new, being
executed, or finished with a stored outcome.  ``key`` is the dedup key chosen by
the dedup mode: the ``rta/requestGuid`` (mode ``request-guid``) or the
``rta/turnId`` (mode ``turn``).  Replay detection never crosses ``context_id``.

Protocol of use by the Reasoner, for one incoming request:

1. ``claim = await store.claim(ctx, key, owner, now_s)``
   - ``claim.state == "new"``: this caller owns execution; it runs the turn,
     then calls ``complete(ctx, key, outcome)`` (or ``abandon`` if it crashed
     before any side effect and the entry should be retried from scratch).
   - ``"in_flight"``: another caller (possibly another worker process) owns it;
     ``await store.wait(ctx, key, timeout_s)`` returns the outcome when it is
     stored (or ``None`` on timeout), and the caller replays it.
   - ``"done"``: ``claim.outcome`` is the stored outcome; replay it, never re-execute.
2. Entries are kept at least while in flight and ``window_s`` after completion;
   ``purge(now_s)`` removes older finished entries (backends may also expire lazily).

Outcomes are JSON-serialisable dicts (the terminal state, artifacts' text and
metadata, error code) so any worker can replay what another produced.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

ClaimState = Literal["new", "in_flight", "done"]


@dataclass(frozen=True)
class Claim:
    state: ClaimState
    outcome: dict[str, Any] | None = None


@dataclass
class StoreStats:
    entries: int = 0
    in_flight: int = 0
    hits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class DedupStore(ABC):
    """Async idempotency store; one instance per Reasoner worker process."""

    name: str = "abstract"
    durable: bool = False  # survives a SIGKILL of the process
    shared: bool = False  # visible to other worker processes

    def __init__(self, window_s: float = 300.0):
        self.window_s = window_s

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections, create schema (called in the app lifespan)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    @abstractmethod
    async def claim(self, context_id: str, key: str, owner: str, now_s: float) -> Claim:
        """Atomically register ``key`` as in flight for ``owner`` unless already known."""

    @abstractmethod
    async def complete(self, context_id: str, key: str, outcome: dict[str, Any],
                       now_s: float) -> None:
        """Store the terminal outcome of an owned entry and wake its waiters."""

    @abstractmethod
    async def abandon(self, context_id: str, key: str) -> None:
        """Forget an owned in-flight entry that did no side effect (next claim is ``new``)."""

    @abstractmethod
    async def wait(self, context_id: str, key: str, timeout_s: float) -> dict[str, Any] | None:
        """Wait for the outcome of an in-flight entry; ``None`` after ``timeout_s``."""

    @abstractmethod
    async def purge(self, now_s: float) -> int:
        """Drop finished entries older than ``window_s``; return how many were dropped."""

    @abstractmethod
    async def stats(self) -> StoreStats:
        """Entry counts for /metrics and checkers."""
