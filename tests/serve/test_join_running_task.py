"""Joining a running task forwards each sequenceId once (rtalab.loadtests.reasoner.handler).

The SDK taps a running task's event queue before it reads the snapshot, so an event
produced in between reaches the joiner twice; seen once in CI as a duplicated
sequenceId in ``test_hardening.py::test_concurrent_continuations_execute_once[ws]``.
This drives the filter with exactly that interleaving, deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from rtalab.loadtests.reasoner.handler import once_per_sequence
from rtalab.loadtests.reasoner.wire import EventFactory, Keys


async def _events(items: list[Any]) -> AsyncIterator[Any]:
    for ev in items:
        yield ev


def _seq(ev: Any, key: str) -> float | None:
    if not hasattr(ev, "metadata"):
        return None
    v = ev.metadata.fields.get(key)
    return v.number_value if v is not None else None


def _forwarded(items: list[Any], key: str) -> list[Any]:
    async def collect() -> list[Any]:
        return [ev async for ev in once_per_sequence(_events(items), key)]

    return asyncio.run(collect())


def test_an_event_in_both_snapshot_tap_and_queue_is_forwarded_once() -> None:
    keys = Keys()
    key = keys("sequenceId")
    f = EventFactory(keys, "task-1", "ctx-1", active=True)
    progress = f.directive("progress", 2)  # TASK_STATE_WORKING
    c0, c1 = f.chunk(0, 2, "a"), f.chunk(1, 2, "b")
    done = f.completed()
    snapshot = f.submitted()  # the Task snapshot carries no sequenceId
    # the race: chunk 0 was produced after the tap and before the snapshot was read
    stream = [snapshot, progress, c0, c0, c1, done]
    out = _forwarded(stream, key)
    seqs = [_seq(ev, key) for ev in out]
    assert seqs == [None, 0.0, 1.0, 2.0, 3.0]  # 1.0 once
    assert out[-1] is done


def test_events_without_sequence_ids_always_pass() -> None:
    keys = Keys()
    f = EventFactory(keys, "task-2", "ctx-2", active=False)  # core A2A: no sequenceIds
    w1, w2, done = f.working(), f.working(), f.completed()
    assert _forwarded([w1, w2, done], keys("sequenceId")) == [w1, w2, done]
