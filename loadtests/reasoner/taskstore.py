"""An in-memory A2A task store with per-principal fair bounds and an idle TTL.

``InMemoryTaskStore`` keeps every task forever; on a long load run that is a
leak.  This subclass indexes each save by owner (the authenticated principal,
as in the SDK) and forgets tasks three ways:

- **executed tasks** (``save``): at most ``max_tasks`` per worker in all.  When
  the bound is exceeded the least recently written task *of the principal
  holding the most tasks* is dropped, so one tenant's flood only ever evicts its
  own tasks while it holds more than any other tenant: another principal's
  parked (INPUT_REQUIRED) task survives it;
- **rejections** (``save_rejection``: the FAILED task of a request refused
  before execution, kept only so that ``GetTask`` on its id answers): at most
  ``max_rejections`` per principal, in their own LRU, never counted against
  (nor evicting) executed tasks;
- **idle tasks**: anything not written for ``ttl_s``.

Running tasks are written on every event, so only finished or parked tasks age
out; ``ttl_s`` must exceed the handoff timeout.

Memory.  A retained turn task (the user message, a progress directive, 3
spoken chunks, COMPLETED) holds about :data:`TASK_BYTES` (~3 KiB) of process
memory, mostly protobuf (measured in-process over 10,000 tasks by
``tests/serve/test_hardening.py::test_task_memory_per_task``); a served turn
with a new context costs ~6 KiB of worker RSS in all (measured on a worker
over 4,000 turns: the task plus that context's session binding and rate-limit
bucket, which have their own LRU bounds).  The default bound of
:data:`DEFAULT_MAX_TASKS` executed tasks keeps the task store at ~30 MiB per
worker (the old default, 50,000 tasks, was ~150 MiB of tasks and ~300 MiB of
RSS), plus ``max_rejections`` rejections per principal (~2 MiB each).
"""

from __future__ import annotations

import time
from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import Task

DEFAULT_MAX_TASKS = 10_000
DEFAULT_MAX_REJECTIONS = 1_000
TASK_BYTES = 3 * 1024  # process memory per retained turn task (measured; see the docstring)

_Index = dict[str, "OrderedDict[str, float]"]  # owner -> taskId -> last write (monotonic)


class BoundedTaskStore(InMemoryTaskStore):
    """InMemoryTaskStore with fair per-principal eviction (see the module docstring)."""

    def __init__(self, max_tasks: int = DEFAULT_MAX_TASKS, ttl_s: float = 900.0,
                 max_rejections: int = DEFAULT_MAX_REJECTIONS):
        super().__init__()
        self.max_tasks = max_tasks
        self.max_rejections = max_rejections
        self.ttl_s = ttl_s
        self._tasks: _Index = {}
        self._rejections: _Index = {}
        self._count = 0  # executed tasks held, all owners
        self.evicted = 0

    def _owner(self, context: ServerCallContext) -> str:
        """The owner key the SDK stores ``context``'s tasks under."""
        return str(self._impl.owner_resolver(context))

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save an executed task's state, then evict what exceeds the bounds."""
        await super().save(task, context)
        owner = self._owner(context)
        rejected = self._rejections.get(owner)
        if rejected is not None and task.id in rejected:  # (a rejection's id reused: move it)
            self._forget(self._rejections, owner, task.id)
        now = time.monotonic()
        if self._touch(self._tasks, owner, task.id, now):
            self._count += 1
        self._evict(now)

    async def save_rejection(self, task: Task, context: ServerCallContext) -> None:
        """Save the FAILED task of a refused request, in the principal's own small LRU."""
        await super().save(task, context)
        owner = self._owner(context)
        now = time.monotonic()
        self._touch(self._rejections, owner, task.id, now)
        ring = self._rejections[owner]
        while len(ring) > self.max_rejections:
            self._drop(self._rejections, owner, next(iter(ring)))
        self._evict(now)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete and forget the index entry."""
        await super().delete(task_id, context)
        owner = self._owner(context)
        if self._forget(self._tasks, owner, task_id):
            self._count -= 1
        self._forget(self._rejections, owner, task_id)

    @staticmethod
    def _touch(index: _Index, owner: str, task_id: str, now: float) -> bool:
        """Record a write; True if the task is new to ``index``."""
        tasks = index.setdefault(owner, OrderedDict())
        new = task_id not in tasks
        tasks[task_id] = now
        tasks.move_to_end(task_id)
        return new

    @staticmethod
    def _forget(index: _Index, owner: str, task_id: str) -> bool:
        """Remove a task from ``index`` only; True if it was there."""
        tasks = index.get(owner)
        if tasks is None or tasks.pop(task_id, None) is None:
            return False
        if not tasks:
            del index[owner]
        return True

    def _drop(self, index: _Index, owner: str, task_id: str) -> None:
        """Forget a task in ``index`` and in the SDK's dict."""
        if self._forget(index, owner, task_id) and index is self._tasks:
            self._count -= 1
        impl = self._impl
        with impl.lock:
            owner_tasks = impl.tasks.get(owner)
            if owner_tasks is not None:
                owner_tasks.pop(task_id, None)
                if not owner_tasks:
                    del impl.tasks[owner]
        self.evicted += 1

    def _evict(self, now: float) -> None:
        """Idle tasks of every owner, then executed tasks beyond ``max_tasks`` (fairly)."""
        for index in (self._tasks, self._rejections):
            for owner in list(index):
                tasks = index[owner]
                while tasks:
                    task_id, at = next(iter(tasks.items()))
                    if now - at <= self.ttl_s:
                        break
                    self._drop(index, owner, task_id)
                    if owner not in index:
                        break
        while self._count > self.max_tasks:
            owner = max(self._tasks, key=lambda o: len(self._tasks[o]))
            self._drop(self._tasks, owner, next(iter(self._tasks[owner])))

    def held(self, owner: str | None = None) -> tuple[int, int]:
        """(executed tasks, rejections) held, for one owner or all."""
        if owner is not None:
            return (len(self._tasks.get(owner, ())), len(self._rejections.get(owner, ())))
        return self._count, sum(len(r) for r in self._rejections.values())

    def __len__(self) -> int:
        """Number of tasks held (executed and rejections)."""
        return sum(self.held())
