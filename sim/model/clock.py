"""How the model schedules: ``call_later``/``call_at`` run a callback at a future
simulated time (``scheduler(env)`` is ``call_later`` bound to one environment, the hot
path's form), :class:`Deadlines` keeps fixed-length timers with one pending event, and
``sim_time`` is the current simulated time.  The ONE module that touches SimPy's private
attributes (``Environment._now``, ``_queue``, ``_eid``; pinned by
``tests/test_model_components.py::test_private_simpy_access_is_confined_to_clock``).

A SimPy ``Timeout`` with one callback costs ~0.75 µs from creation to firing; the
model schedules ~5 events per turn.  :class:`Call` is the minimum
``Environment.step`` needs from an event (``callbacks``, ``_ok``, ``_value``),
pushed straight onto the event queue with NORMAL priority — the same order
and semantics as ``Timeout(env, delay, value).callbacks.append(callback)``,
for ~0.55 µs.  Model code never yields these from a process.  A callback receives the
event and reads the scheduled value as ``ev.value`` (a :class:`Deadlines` callback gets
the value itself).
"""

from __future__ import annotations

from collections import deque
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

    __slots__ = ("callbacks", "value")
    _ok = True  # never failed: a class attribute, one store less per event

    def __init__(self, value: Any, callback: Callable[[Any], None]) -> None:
        self.value = value
        # SimPy iterates it once and sets it to None: a 1-tuple is cheaper than a list
        self.callbacks: tuple[Callable[[Any], None], ...] | None = (callback,)


def call_later(env: simpy.Environment, delay: float, callback: Callable[[Any], None],
               value: Any = None) -> None:
    """Run ``callback(event)`` after ``delay`` simulated seconds; ``event.value`` is ``value``."""
    if delay < 0.0:
        raise ValueError(f"negative delay {delay!r}")
    call_at(env, env._now + delay, callback, value)


def scheduler(env: simpy.Environment) -> Callable[..., None]:
    """``later(delay, callback, value=None)``: :func:`call_later` bound to ``env`` (the queue,
    the id counter and the push held in closure cells: the hot path's form)."""
    queue, eid, push = env._queue, env._eid, heappush

    def later(delay: float, callback: Callable[[Any], None], value: Any = None) -> None:
        if delay < 0.0:
            raise ValueError(f"negative delay {delay!r}")
        push(queue, (env._now + delay, _NORMAL, next(eid), Call(value, callback)))

    return later


def call_at(env: simpy.Environment, when: float, callback: Callable[[Any], None],
            value: Any = None) -> None:
    """Run ``callback(event)`` at the simulated time ``when`` (not before now)."""
    if when < env._now:
        raise ValueError(f"time {when!r} is in the past (now {env._now!r})")
    heappush(env._queue, (when, _NORMAL, next(env._eid), Call(value, callback)))


class Deadlines:
    """Timers armed in order of their deadlines, at most ONE SimPy event pending for all of them.

    The model's fixed-length timers (every attempt's turn-response timer runs
    ``turn_response_s`` after its send) are armed in non-decreasing order of their
    deadlines, so they form a FIFO: only the head needs an event.  At the head's
    deadline every due entry is handed to ``callback(value)`` (in arming order), then
    entries no longer ``alive(value)`` (an attempt that ended meanwhile) are dropped
    from the head without an event, and one event is scheduled for the next live head.
    Most attempts end before their timer, so most timers never cost an event (on
    ``baseline``, ~1 wake-up per 8 timers).  The deadline each entry
    fires at is exactly the one it was armed with, as with :func:`call_later`; an entry
    armed with an earlier deadline than the last one armed falls back to its own event.
    """

    __slots__ = ("_alive", "_armed", "_callback", "_env", "_last", "_q", "_wake_cb")

    def __init__(self, env: simpy.Environment, callback: Callable[[Any], None],
                 alive: Callable[[Any], bool]) -> None:
        self._env = env
        self._callback = callback
        self._alive = alive
        self._q: deque[tuple[float, Any]] = deque()
        self._armed = False
        self._last = -float("inf")
        self._wake_cb = self._wake

    def __len__(self) -> int:
        return len(self._q)

    def add(self, when: float, value: Any) -> None:
        """Call ``callback(value)`` at ``when``; if ``value`` is no longer alive by then its
        call may be skipped (the callback must treat a dead value as a no-op anyway)."""
        env = self._env
        if when < env._now:
            raise ValueError(f"time {when!r} is in the past (now {env._now!r})")
        if when < self._last:  # out of order: its own event
            call_at(env, when, self._fire_one, value)
            return
        self._last = when
        self._q.append((when, value))
        if not self._armed:
            self._armed = True
            call_at(env, when, self._wake_cb)

    def _fire_one(self, ev: Any) -> None:
        self._callback(ev.value)

    def _wake(self, ev: Any) -> None:
        env = self._env
        q, callback, alive = self._q, self._callback, self._alive
        now = env._now
        while q and q[0][0] <= now:
            callback(q.popleft()[1])
        while q and not alive(q[0][1]):
            q.popleft()
        if q:
            call_at(env, q[0][0], self._wake_cb)
        else:
            self._armed = False
            self._last = -float("inf")
