"""Binding of each ``contextId`` to the principal that opened it (tenant isolation).

A context is bound on its first turn.  The binding is cached per process (LRU,
idle TTL) and, when the dedup store is shared between workers, also recorded in
the store with :meth:`DedupStore.bind` (one atomic insert-if-absent that returns
the bound principal: one write transaction per new context, none for a context
this worker already knows) so every worker agrees; there it lives for the
store's window after the first turn.  Another principal using a bound context
gets ``session-not-found``.  Data never leaks either way: tasks are stored per
principal and dedup scopes include the principal.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from rtalab.loadtests.dedup.base import DedupStore


class SessionRegistry:
    """contextId -> principal, local cache in front of an optional shared store."""

    def __init__(self, store: DedupStore | None, ttl_s: float = 3600.0,
                 max_entries: int = 200_000):
        self.store = store if store is not None and store.shared else None
        self.ttl_s = ttl_s
        self.max_entries = max_entries
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
        owner = principal if self.store is None else await self.store.bind(
            context_id, principal, time.time())
        self._remember(context_id, owner, now)
        return owner == principal
