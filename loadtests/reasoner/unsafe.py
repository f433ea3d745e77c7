"""TEST ONLY: planted bugs for the release gate's negative controls (``--unsafe-bug BUG``).

Each switch plants exactly one class of bug that Reasoners written elsewhere
commonly have, so that ``rtalab load run release_gate`` can be shown to catch
it (tests/load/test_release_gate.py).  None is reachable by accident: the only
way in is ``rtalab serve reasoner --unsafe-bug BUG`` (or ``rtalab load run
--unsafe-bug BUG``, which passes it on), flags listed as TEST ONLY; the server
prints a banner on stderr and logs it in every worker, ``/healthz`` and the
agent card's log line name it, and a load run records it in ``meta.json``.

=====================  ================================================  ========================
bug                    what the Reasoner does wrong                      rule that must fail
=====================  ================================================  ========================
``late-claim``         claims a request's dedup key only when its        ``duplicated``
                       outcome is stored: a duplicate that arrives while
                       the original runs executes again
``turn-key``           dedups by ``turnId`` alone, across contexts and   ``cross-session-answer``
                       principals: turn ``t-1`` of a second call replays (and ``lost`` when a
                       the first call's answer and never runs            side-effect turn is
                                                                         told COMPLETED)
``turn-key-rewrite``   as ``turn-key``, and rewrites the contextId of     ``foreign-task-answer``
                       what it replays to the caller's (the foreign      (``cross-session-answer``
                       answer hides in the caller's own session)         passes: nothing to see)
``volatile``           keeps dedup entries in process memory only: a     ``duplicated``
                       resend after a restart executes again
``continuation-twice`` executes every continuation of an INPUT_REQUIRED  ``continuation-answered-
                       task (no atomic claim of the pause)               twice``
``refuse-auth``        refuses every bearer token (401)                  the auth / availability
                                                                         rule
``no-input-required``  never pauses a handoff turn: answers COMPLETED    none: a warning, and the
                                                                         class "not exercised"
``<b>-skips-dedup``    skips the dedup store for requests that came in   ``duplicated`` (on binding
(``sse``, ``rest``,    on binding ``<b>`` only (every other binding is   ``<b>`` only) and
``ws``, ``grpc``)      correct): a resend on it executes again           ``transport-equivalence``
=====================  ================================================  ========================

The hooks are thin: :func:`idempotency_class`, :func:`store_url`,
:func:`tokens`, :func:`pauses`, :func:`start_recorded`, :func:`replayed` and
:func:`dedup_skipped` are called once each from ``runtime.py``, ``app.py``, ``executor.py``
and ``handler.py`` (the handler reads the last one's set from the runtime); everything else
lives here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from rtalab.loadtests.reasoner.owners import new_owner

SKIPS_DEDUP = "-skips-dedup"  # <binding>-skips-dedup: one binding without dedup
UNSAFE_BUGS = ("late-claim", "turn-key", "turn-key-rewrite", "volatile", "continuation-twice",
               "refuse-auth", "no-input-required",
               *(f"{b}{SKIPS_DEDUP}" for b in ("sse", "rest", "ws", "grpc")))
RACE_WINDOW_S = 0.2  # continuation-twice: time between reading the task and marking it
GLOBAL_SCOPE = "\x1fany-principal\x1fany-context"  # turn-key: one scope for everyone
log = logging.getLogger("rtalab.reasoner")


def banner(bugs: Iterable[str]) -> str:
    """The warning printed and logged by a Reasoner with planted bugs."""
    return (f"UNSAFE TEST BUILD: planted bug(s) {', '.join(bugs)} (--unsafe-bug): this "
            "Reasoner is broken on purpose; never serve real traffic with it")


def check(bugs: Iterable[str]) -> tuple[str, ...]:
    """The bugs, validated (ValueError names an unknown one)."""
    out = tuple(bugs)
    for b in out:
        if b not in UNSAFE_BUGS:
            raise ValueError(f"unknown --unsafe-bug {b!r} (one of {', '.join(UNSAFE_BUGS)})")
    return out


def store_url(url: str, bugs: Iterable[str]) -> str:
    """``volatile``: the dedup store lives in process memory (gone after a restart)."""
    return "memory" if "volatile" in bugs else url


def tokens(configured: Mapping[str, str], bugs: Iterable[str]) -> Mapping[str, str]:
    """``refuse-auth``: only a token nobody has is accepted (every caller gets 401)."""
    if "refuse-auth" in bugs:
        return {uuid.uuid4().hex: "nobody"}
    return configured


def pauses(bugs: Iterable[str]) -> bool:
    """False with ``no-input-required``: handoff turns are answered COMPLETED."""
    return "no-input-required" not in bugs


def replayed(events: list[Any], context_id: str, bugs: Iterable[str]) -> list[Any]:
    """``turn-key-rewrite``: the replayed events moved into the caller's context."""
    if "turn-key-rewrite" not in bugs:
        return events
    ctx = context_id or uuid.uuid4().hex
    for ev in events:
        ev.context_id = ctx
        status = getattr(ev, "status", None)
        if status is not None and status.HasField("message"):
            status.message.context_id = ctx
        for m in getattr(ev, "history", ()):
            m.context_id = ctx
    return events


def start_recorded(recorded: bool, tickets: Iterable[Any], bugs: Iterable[str]) -> bool:
    """Whether the side effect's start counts as recorded.  ``continuation-twice``: a
    continuation running on an unclaimed pause starts whatever its claims say (a server
    without the pause's atomic claim has nothing to refuse it with); the second
    continuation's own request claim may already be settled by the first one's answer on
    the task's shared stream, which the correct server's fail-closed start would turn into
    "not run" -- hiding the bug this plant exists to show."""
    if recorded or "continuation-twice" not in bugs:
        return recorded
    return any(getattr(t, "unclaimed", False) for t in tickets)
def dedup_skipped(bugs: Iterable[str]) -> frozenset[str]:
    """``<binding>-skips-dedup``: the bindings whose requests bypass the dedup store."""
    return frozenset(b[:-len(SKIPS_DEDUP)] for b in bugs if b.endswith(SKIPS_DEDUP))


def idempotency_class(bugs: Iterable[str]) -> type[Any]:
    """The Idempotency class with the planted dedup bugs (the correct one without)."""
    # lazy: +66 ms (a2a, starlette, google) off importing unsafe
    from rtalab.loadtests.reasoner.idempotency import Idempotency, Replay, Ticket

    bugs = tuple(bugs)
    if not {"late-claim", "turn-key", "turn-key-rewrite", "continuation-twice"} & set(bugs):
        return Idempotency
    turn_key = bool({"turn-key", "turn-key-rewrite"} & set(bugs))

    class Unclaimed(Ticket):
        """Runs beside the owner of the key; stores nothing, releases nothing."""

        unclaimed = True  # read by start_recorded

        async def complete(self, outcome: dict[str, Any], retryable_failure: bool) -> None:
            return None

        async def release(self) -> None:
            return None

        async def progress(self, value: str) -> bool:
            return True

    class UnsafeIdempotency(Idempotency):
        """Idempotency with the planted bugs of ``bugs``."""

        def key_for(self, turn_id: str | None, request_guid: str | None,
                    task_id: str = "") -> tuple[str, bool] | None:
            if turn_key and self.store is not None and turn_id and not task_id:
                return f"t:{turn_id}", True
            return super().key_for(turn_id, request_guid, task_id)

        async def enter(self, scope: str, key: str, turn_key: bool,
                        fingerprint: str = "") -> Ticket | Replay:
            if turn_key and key.startswith("t:"):
                scope = GLOBAL_SCOPE  # and no request fingerprint: the turnId alone decides
                fingerprint = ""
            if "continuation-twice" in bugs and key.startswith("k:"):
                # check-then-act: the task was read INPUT_REQUIRED before this; a slow step
                # before it is marked WORKING lets a second continuation read the same
                await asyncio.sleep(RACE_WINDOW_S)
                return Unclaimed(self.store, scope, key, new_owner(), False)  # type: ignore[arg-type]  # the unsafe bug runs with a dedup store
            if "late-claim" in bugs and not key.startswith("k:"):
                assert self.store is not None
                owner = new_owner()
                claim = await self.store.claim(scope, key, owner, time.time(),
                                               fingerprint=fingerprint)
                if claim.state == "new":
                    return Ticket(self.store, scope, key, owner, turn_key,
                                  fingerprint=fingerprint)
                if claim.state == "conflict":
                    return Replay("conflict")
                if claim.state == "done":
                    return Replay("lost" if claim.lost else "replay", claim.outcome)
                return Unclaimed(self.store, scope, key, owner, turn_key)  # runs it again
            return await super().enter(scope, key, turn_key, fingerprint)

    return UnsafeIdempotency
