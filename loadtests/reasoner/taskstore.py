"""An in-memory A2A task store with an LRU bound and an idle TTL.

``InMemoryTaskStore`` keeps every task forever; on a long load run that is a
leak.  This subclass records each save in an LRU index and evicts the least
recently written tasks beyond ``max_tasks`` or idle for longer than ``ttl_s``.
Running tasks are written on every event, so only finished or parked
(INPUT_REQUIRED) tasks age out; ``ttl_s`` must exceed the handoff timeout.
Tasks stay scoped by owner (the authenticated principal), as in the SDK.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import Task


class BoundedTaskStore(InMemoryTaskStore):
    """InMemoryTaskStore that forgets old tasks (by last write)."""

    def __init__(self, max_tasks: int = 50_000, ttl_s: float = 900.0):
        super().__init__()
        self.max_tasks = max_tasks
        self.ttl_s = ttl_s
        self._written: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.evicted = 0

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save, then evict what exceeds the bounds."""
        await super().save(task, context)
        key = (self._impl.owner_resolver(context), task.id)
        now = time.monotonic()
        self._written[key] = now
        self._written.move_to_end(key)
        self._evict(now)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete and forget the index entry."""
        await super().delete(task_id, context)
        self._written.pop((self._impl.owner_resolver(context), task_id), None)

    def _evict(self, now: float) -> None:
        """Drop least recently written tasks beyond ``max_tasks`` or older than ``ttl_s``."""
        impl = self._impl
        while self._written:
            (owner, task_id), at = next(iter(self._written.items()))
            if len(self._written) <= self.max_tasks and now - at <= self.ttl_s:
                return
            self._written.popitem(last=False)
            with impl.lock:
                owner_tasks = impl.tasks.get(owner)
                if owner_tasks is not None:
                    owner_tasks.pop(task_id, None)
                    if not owner_tasks:
                        del impl.tasks[owner]
            self.evicted += 1

    def __len__(self) -> int:
        """Number of tasks held."""
        return len(self._written)
