"""``call_later``: run a callback at a future simulated time, the model's only way to schedule;
``sim_time``: the current simulated time.  The ONE module that touches SimPy's private
attributes (``Environment._now``, ``_queue``, ``_eid``; pinned by
``tests/test_model_components.py::test_private_simpy_access_is_confined_to_clock``).

A SimPy ``Timeout`` with one callback costs ~0.75 µs from creation to firing; the
model schedules ~5 of them per turn.  :class:`Call` is the minimum
``Environment.step`` needs from an event (``callbacks``, ``_ok``, ``_value``),
pushed straight onto the event queue with NORMAL priority — the same order
and semantics as ``Timeout(env, delay, value).callbacks.append(callback)``,
for ~0.55 µs.  Model code never yields these from a process.  A callback receives the event and
reads the scheduled value as ``ev.value``.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from operator import attrgetter
from typing import Any

import simpy
from simpy.events import NORMAL

_NORMAL = int(NORMAL)


#: ``sim_time(env)`` -> the current simulated time (``env.now`` without the property's cost)
sim_time: Callable[[simpy.Environment], float] = attrgetter("_now")


class Call:
    """A triggered, successful event carrying ``value`` with a single callback.

    SimPy's ``step`` reads ``callbacks`` and ``_ok`` (and ``_value`` only of a failed
    event, which a ``Call`` never is)."""

    __slots__ = ("_ok", "callbacks", "value")

    def __init__(self, value: Any, callback: Callable[[Any], None]) -> None:
        self._ok = True
        self.value = value
        self.callbacks: list[Callable[[Any], None]] | None = [callback]


def call_later(env: simpy.Environment, delay: float, callback: Callable[[Any], None],
               value: Any = None) -> None:
    """Run ``callback(event)`` after ``delay`` simulated seconds; ``event.value`` is ``value``."""
    if delay < 0.0:
        raise ValueError(f"negative delay {delay!r}")
    heappush(env._queue, (env._now + delay, _NORMAL, next(env._eid), Call(value, callback)))
