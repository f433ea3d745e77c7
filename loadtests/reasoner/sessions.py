"""Binding of each ``contextId`` to the principal that opened it (tenant isolation).

A context is bound on its first turn.  The binding is cached per process (LRU,
idle TTL) and, when the dedup store is shared between workers, also recorded in
the store under the namespace :data:`BIND_SCOPE` so every worker agrees; there it
lives for the store's window after the first turn.  Another principal using a
bound context gets ``session-not-found``.  Data never leaks either way: tasks
are stored per principal and dedup scopes include the principal.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import OrderedDict

from loadtests.dedup.base import DedupStore, is_lost_outcome

BIND_SCOPE = "\x1fbind"
log = logging.getLogger("rtalab.reasoner")


class SessionRegistry:
    """contextId -> principal, local cache in front of an optional shared store."""

    def __init__(self, store: DedupStore | None, ttl_s: float = 3600.0,
                 max_entries: int = 200_000, wait_s: float = 5.0):
        self.store = store if store is not None and store.shared else None
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.wait_s = wait_s
        self._local: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def _remember(self, context_id: str, principal: str, now: float) -> None:
        """Cache a binding, dropping expired and least recently used entries."""
        self._local[context_id] = (principal, now)
        self._local.move_to_end(context_id)
        while self._local:
            first = next(iter(self._local.values()))
            if len(self._local) <= self.max_entries and now - first[1] <= self.ttl_s:
                break
            self._local.popitem(last=False)

    async def admit(self, principal: str, context_id: str) -> bool:
        """Bind ``context_id`` to ``principal`` if new; True iff it belongs to ``principal``."""
        now = time.monotonic()
        hit = self._local.get(context_id)
        if hit is not None and now - hit[1] <= self.ttl_s:
            if hit[0] != principal:
                return False
            self._remember(context_id, principal, now)
            return True
        owner = principal if self.store is None else await self._shared_owner(principal, context_id)
        if owner is None:
            return False
        self._remember(context_id, owner, now)
        return owner == principal

    async def _shared_owner(self, principal: str, context_id: str) -> str | None:
        """The principal recorded in the shared store (recording ``principal`` if none)."""
        assert self.store is not None
        me = f"{os.getpid()}:{uuid.uuid4().hex[:12]}"
        for _ in range(3):
            claim = await self.store.claim(BIND_SCOPE, context_id, me, time.time())
            if claim.state == "new":
                await self.store.complete(BIND_SCOPE, context_id, {"principal": principal},
                                          time.time(), owner=me)
                return principal
            outcome = claim.outcome
            if claim.state == "in_flight":
                outcome = await self.store.wait(BIND_SCOPE, context_id, self.wait_s)
                if outcome is None:
                    continue
            if outcome is None or is_lost_outcome(outcome) or "principal" not in outcome:
                log.warning("session binding unreadable ctx=%s; refusing", context_id)
                return None
            return str(outcome["principal"])
        return None
