"""Replay semantics of errors.md §4 on top of a :class:`DedupStore`.

Modes (``[reasoner].dedup``, overridable with ``--dedup-mode``):

- ``request-guid`` (default): key ``g:<requestGuid>`` (a message naming a taskId:
  ``g:<taskId>:<requestGuid>``, so a continuation's key never matches another task's
  outcome).  Every outcome, failures included, is stored and replayed to a repeat of
  the same requestGuid.
- ``turn``: key ``t:<turnId>`` (an INPUT_REQUIRED continuation, or a message
  without turnId, falls back to ``g:<requestGuid>``).  A repeat of the turn is
  replayed; after a *retryable* failure the turn key is released so the retry
  runs again, while its side effect is guarded by ``s:<turnId>`` and never runs
  twice for one logical turn.
- ``none``: no dedup at all (negative control).

Continuations (every mode, ``none`` included: this is not a dedup key but the
task's claim; errors.md §4 and docs/decisions.md D2).  The first message continuing an
INPUT_REQUIRED task claims ``k:<taskId>:<pause>`` (``<pause>`` = the task's next
sequenceId, so each pause of one task is claimed once) in the shared store,
atomically for all workers; any other continuation of that pause, while the
claim is in flight or after it finished, is a retry of the continuation: it
waits for and gets the claimed continuation's outcome, never a second execution.

Fingerprints.  Every claim of a request presents
:func:`request_fingerprint` (method, taskId, parts, the ``sideEffect`` and
``handoff`` metadata; the contextId is the scope), stored with the entry.  A live
entry claimed with another fingerprint is a *conflict* (:func:`rtalab.sim.shared.dedup_rule.judge`):
the key was reused for a different request, which gets ``schema-validation`` and
runs nothing (errors.md §2-3: the request is invalid and MUST NOT be retried
unmodified).

Scopes are ``<principal>\\x1f<contextId>``: replay detection never crosses a
context, nor a tenant.  A first message without contextId is scoped to the
principal's empty context, so a duplicated first message replays rather than
opening a second session.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from a2a.types import Message

from rtalab.loadtests.dedup.base import DedupStore, StoreUnavailable, is_lost_outcome
from rtalab.loadtests.reasoner.owners import new_owner, owner_gone
from rtalab.sim.shared.dedup_rule import (
    PROGRESS_DONE,
    PROGRESS_NOT_RUN,
    PROGRESS_STARTED,
    PROGRESS_UNANSWERED,
)

Mode = Literal["request-guid", "turn", "none"]
MODES: tuple[str, ...] = ("request-guid", "turn", "none")
OUTCOME_VERSION = 2  # {"v", "state", "errorCode", "events": [base64 StreamResponse, ...]}
LIVENESS_CHECK_S = 1.0  # a waiting duplicate re-checks the in-flight owner this often


def scope_of(principal: str, context_id: str) -> str:
    """The dedup scope of one principal's context."""
    return f"{principal}\x1f{context_id}"


def request_fingerprint(method: str, msg: Message, side_effect: bool | None,
                        handoff: bool) -> str:
    """The meaning of a request, stored with its dedup entry: the method, the taskId, every
    part (deterministic protobuf bytes, length-prefixed) and the profile's side-effect
    metadata (``sideEffect``: absent, true or false; ``handoff``).  Not the messageId, the
    requestGuid / turnId (they are the keys) nor the contextId (the scope; a first message
    without one matches its minted context, docs/decisions.md D1)."""
    h = hashlib.sha256()
    for field_ in (method, msg.task_id, repr(side_effect), repr(handoff)):
        data = field_.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big") + data)
    for part in msg.parts:
        data = part.SerializeToString(deterministic=True)
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:32]


def continuation_key(task_id: str, pause: int) -> str:
    """The store key claimed by the first continuation of pause ``pause`` of a task."""
    return f"k:{task_id}:{pause}"


@dataclass
class Ticket:
    """Ownership of one dedup key: exactly one of ``complete`` / ``release`` must follow."""

    store: DedupStore
    scope: str
    key: str
    owner: str
    turn_key: bool  # key is a turnId (released after retryable failures)
    handed_over: bool = False  # someone took responsibility for settling it
    fingerprint: str = ""  # of the request holding it

    async def complete(self, outcome: dict[str, Any], retryable_failure: bool) -> None:
        """Store the outcome (turn keys: release instead after a retryable failure).  If the
        store is unavailable the write is retried in the background (the store's ``defer``)
        and :class:`StoreUnavailable` propagates."""
        if self.turn_key and retryable_failure:
            await self._write("abandon")
        else:
            await self._write("complete", outcome)

    async def release(self) -> None:
        """Forget the claim: nothing was executed (refused before any work)."""
        await self._write("abandon")

    async def _write(self, op: str, outcome: dict[str, Any] | None = None) -> None:
        """``complete`` or ``abandon`` (owner-checked), deferred when the store fails."""
        try:
            if op == "complete":
                assert outcome is not None
                await self.store.complete(self.scope, self.key, outcome, time.time(),
                                          owner=self.owner)
            else:
                await self.store.abandon(self.scope, self.key, owner=self.owner)
        except StoreUnavailable:
            later = getattr(self.store, "defer_write", None)
            if later is not None:
                later(op, self.scope, self.key, self.owner, outcome, self.fingerprint)
            raise

    async def progress(self, value: str) -> bool:
        """Record how far the turn got (its side effect: :data:`PROGRESS_VALUES`); False if
        this ticket no longer holds the key in flight (lease over, store lost its data)."""
        return await self.store.progress(self.scope, self.key, self.owner, value)


# The side-effect progress recorded with a turn's claims, durably, before and after the tool
# call (a crash leaves the last one in the lost outcome: rtalab.loadtests.reasoner.handler answers
# it).
SIDE_EFFECT_STARTED, SIDE_EFFECT_DONE = PROGRESS_STARTED, PROGRESS_DONE
SIDE_EFFECT_UNANSWERED, SIDE_EFFECT_NOT_RUN = PROGRESS_UNANSWERED, PROGRESS_NOT_RUN
PROGRESS_VALUES = (SIDE_EFFECT_STARTED, SIDE_EFFECT_DONE, SIDE_EFFECT_UNANSWERED,
                   SIDE_EFFECT_NOT_RUN)
PROGRESS_OF_RESULT = {"ok": SIDE_EFFECT_DONE, "timeout": SIDE_EFFECT_UNANSWERED,
                      "error": SIDE_EFFECT_NOT_RUN}  # tool result -> progress record


@dataclass
class Replay:
    """A previously produced outcome to send again (``outcome`` None: it never arrived)."""

    kind: Literal["replay", "join", "lost", "timeout", "conflict"]
    outcome: dict[str, Any] | None = field(default=None)


class Idempotency:
    """Chooses the dedup key of a request and claims it (waiting for in-flight owners)."""

    def __init__(self, store: DedupStore | None, mode: str, wait_s: float = 30.0):
        if mode not in MODES:
            raise ValueError(f"dedup mode must be one of {MODES}, got {mode!r}")
        self.store = store
        self.mode = mode
        self.wait_s = wait_s

    def key_for(self, turn_id: str | None, request_guid: str | None,
                task_id: str = "") -> tuple[str, bool] | None:
        """``(key, is_turn_key)`` for a request (``task_id``: the task it names), or None when
        it is not deduplicated."""
        if self.store is None or self.mode == "none":
            return None
        if self.mode == "turn" and turn_id and not task_id:
            return f"t:{turn_id}", True
        if request_guid:
            return (f"g:{task_id}:{request_guid}" if task_id else f"g:{request_guid}"), False
        return None

    async def claim_continuation(self, scope: str, task_id: str, pause: int) -> Ticket | Replay:
        """The continuation claim of one pause of a task (every dedup mode; see the module
        docstring): a Ticket for the first continuation, a Replay for any other.  No
        fingerprint: errors.md §4 makes every message naming the task a retry of its turn,
        whatever it holds (as for a running task)."""
        return await self.enter(scope, continuation_key(task_id, pause), False)

    async def enter(self, scope: str, key: str, turn_key: bool,
                    fingerprint: str = "") -> Ticket | Replay:
        """Claim ``key``: a Ticket to execute, or a Replay of the stored / joined outcome (or
        of a conflict: the key is live for a request with another ``fingerprint``)."""
        if self.store is None:
            raise RuntimeError("no dedup store to claim in")
        owner = new_owner()
        deadline = time.monotonic() + self.wait_s
        dead: str | None = None
        while True:
            claim = await self.store.claim(scope, key, owner, time.time(), dead_owner=dead,
                                           fingerprint=fingerprint)
            if claim.state == "new":
                return Ticket(self.store, scope, key, owner, turn_key, fingerprint=fingerprint)
            if claim.state == "conflict":
                return Replay("conflict")
            if claim.state == "done":
                return Replay("lost" if claim.lost else "replay", claim.outcome)
            if claim.owner and claim.owner != dead and owner_gone(claim.owner):
                dead = claim.owner  # its process is gone: resolve the claim now, not at lease end
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Replay("timeout")
            # Wake at least every LIVENESS_CHECK_S to notice an owner that died meanwhile.
            outcome = await self.store.wait(scope, key, min(remaining, LIVENESS_CHECK_S))
            if outcome is not None:
                return Replay("lost" if is_lost_outcome(outcome) else "join", outcome)
            # abandoned, or a liveness check is due: claim again (the loop ends at the deadline)

    async def guard_side_effect(self, scope: str, turn_id: str | None) -> SideEffectGuard:
        """Mode ``turn``: run the side effect only if this logical turn has not run it yet."""
        if self.store is None or self.mode != "turn" or not turn_id:
            return SideEffectGuard(run=True)
        owner = new_owner()
        key = f"s:{turn_id}"
        claim = await self.store.claim(scope, key, owner, time.time())
        if claim.state != "new":
            return SideEffectGuard(run=False)
        return SideEffectGuard(run=True, ticket=Ticket(self.store, scope, key, owner, False))


@dataclass
class SideEffectGuard:
    """Whether to run a side effect, and the claim to settle afterwards."""

    run: bool
    ticket: Ticket | None = None

    async def settle(self, maybe_executed: bool) -> None:
        """Record the side effect as done, or release the claim if it surely did not run."""
        if self.ticket is None:
            return
        if maybe_executed:
            await self.ticket.complete({"sideEffect": True}, retryable_failure=False)
        else:
            await self.ticket.release()
