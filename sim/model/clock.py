"""How the model schedules and runs: ``call_later``/``call_at`` run a callback at a future
simulated time (``scheduler(env)`` is ``call_later`` bound to one environment, and
``pusher(env)`` the unchecked, frame-free form of the per-turn sites), :class:`Deadlines`
keeps fixed-length timers with one pending entry, ``sim_time`` is the current simulated
time and :func:`run` advances the simulation.  The ONE module that touches SimPy's
private attributes (``Environment._now``, ``_queue``, ``_eid``; pinned by
``tests/test_model_components.py::test_private_simpy_access_is_confined_to_clock``).

The model is callback-driven on SimPy's event queue and clock: it starts no SimPy
process.  A scheduled callback is one queue entry ``(time, NORMAL, id, callback, value)``
— no event object — ordered exactly as a SimPy ``Timeout(env, delay, value)`` with one
callback would be (same time, priority and id sequence), and :func:`run` calls
``callback(value)`` when it is popped.  A SimPy ``Timeout`` with one callback costs
~0.75 µs from creation to firing and the model schedules ~5 per turn; the entry costs
~0.35 µs.  SimPy's own events and processes in the same environment still work: :func:`run`
hands each to ``Environment.step``.  An environment holding model entries must be
advanced with :func:`run` (``Environment.run``/``step`` cannot unpack them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from heapq import heappop, heappush
from operator import attrgetter
from typing import Any, cast

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT

_NORMAL = int(NORMAL)
_URGENT = int(URGENT)
#: the priority of a model entry (SimPy's NORMAL), for :func:`pusher`'s entries
ENTRY_PRIORITY = _NORMAL


#: ``sim_time(env)`` -> the current simulated time (``env.now`` without the property's cost)
sim_time: Callable[[simpy.Environment], float] = attrgetter("_now")

#: a queue entry: SimPy types its queue as ``(time, priority, id, event)``; the model's
#: entries are ``(time, priority, id, callback, value)`` and the stop mark ``(time, URGENT, id)``
_Entry = tuple[Any, ...]


def _queue(env: simpy.Environment) -> list[_Entry]:
    return cast("list[_Entry]", env._queue)


def call_later(env: simpy.Environment, delay: float, callback: Callable[[Any], None],
               value: Any = None) -> None:
    """Run ``callback(value)`` after ``delay`` simulated seconds."""
    if delay < 0.0:
        raise ValueError(f"negative delay {delay!r}")
    call_at(env, env._now + delay, callback, value)


def scheduler(env: simpy.Environment) -> Callable[..., None]:
    """``later(delay, callback, value=None)``: :func:`call_later` bound to ``env`` (the queue,
    the id counter and the push held in closure cells: the hot path's form)."""
    queue, eid, push = _queue(env), env._eid.__next__, heappush

    def later(delay: float, callback: Callable[[Any], None], value: Any = None) -> None:
        if delay < 0.0:
            raise ValueError(f"negative delay {delay!r}")
        push(queue, (env._now + delay, _NORMAL, eid(), callback, value))

    return later


def pusher(env: simpy.Environment) -> tuple[Callable[[_Entry], None], Callable[[], int]]:
    """``(push, next_id)`` bound to ``env``: ``push((when, ENTRY_PRIORITY, next_id(), callback,
    value))`` schedules as :func:`call_at` does, without its check or a Python call frame (a
    C-level ``heappush`` partial: the per-turn sites' form, ~4 entries a turn).  The caller
    guarantees ``when >= now``; ``when`` must be computed as ``now + delay`` wherever the
    other forms add a delay to the clock, so the times stay bit-identical."""
    return partial(heappush, _queue(env)), env._eid.__next__


def call_at(env: simpy.Environment, when: float, callback: Callable[[Any], None],
            value: Any = None) -> None:
    """Run ``callback(value)`` at the simulated time ``when`` (not before now)."""
    if when < env._now:
        raise ValueError(f"time {when!r} is in the past (now {env._now!r})")
    # no cast() here: a call per scheduled event on the model's hottest path
    heappush(env._queue, (when, _NORMAL, next(env._eid), callback, value))  # type: ignore[misc]  # SimPy types its queue entries as (time, priority, id, event); the model's carry a callback and value


def run(env: simpy.Environment, until: float | None = None) -> None:
    """Advance ``env`` as ``env.run(until)`` does for a number: process every entry before
    ``until`` (and those at ``until`` scheduled URGENT before this call), then stop with
    ``env.now == until``; with ``until=None``, until nothing is scheduled.

    Model entries are dispatched as ``callback(value)``; a SimPy event goes back on top of
    the queue (it was the smallest entry, and ids are unique) and ``Environment.step``
    processes it, so SimPy's own semantics apply (a failed undefused event raises)."""
    queue = _queue(env)
    if until is not None:
        at = float(until)
        if at <= env._now:
            raise ValueError(f"until ({at}) must be greater than the current simulation time")
        # the stop mark: where Environment.run(until=at) puts its URGENT until-event
        heappush(queue, (at, _URGENT, next(env._eid)))
    pop = heappop
    try:
        while queue:
            entry = pop(queue)
            try:
                env._now, _, _, callback, value = entry  # a model entry (the common case)
            except ValueError:
                if len(entry) == 4:  # a SimPy event: back on top, for SimPy's own step
                    heappush(queue, entry)
                    env.step()
                    continue
                env._now = entry[0]
                return  # the stop mark
            callback(value)
    except StopSimulation:  # a SimPy callback ended the run (env.exit-style)
        return


class Deadlines:
    """Timers armed in order of their deadlines, at most ONE queue entry pending for all of them.

    The model's fixed-length timers (every attempt's turn-response timer runs
    ``turn_response_s`` after its send) are armed in non-decreasing order of their
    deadlines, so they form a FIFO: only the head needs an entry.  At the head's
    deadline every due entry is handed to ``callback(value)`` (in arming order), then
    entries no longer ``alive(value)`` (an attempt that ended meanwhile) are dropped
    from the head without an event, and one entry is scheduled for the next live head.
    Most attempts end before their timer, so most timers never cost an event (on
    ``baseline``, ~1 wake-up per 8 timers).  The deadline each entry
    fires at is exactly the one it was armed with, as with :func:`call_later`; an entry
    armed with an earlier deadline than the last one armed falls back to its own entry.
    """

    __slots__ = ("_alive", "_armed", "_callback", "_env", "_last", "_next_id", "_push", "_q",
                 "_wake_cb")

    def __init__(self, env: simpy.Environment, callback: Callable[[Any], None],
                 alive: Callable[[Any], bool]) -> None:
        self._env = env
        self._callback = callback
        self._alive = alive
        self._q: deque[tuple[float, Any]] = deque()
        self._armed = False
        self._last = -float("inf")
        self._wake_cb = self._wake
        self._push, self._next_id = pusher(env)  # the wake-ups: call_at without its call

    def __len__(self) -> int:
        return len(self._q)

    def add(self, when: float, value: Any) -> None:
        """Call ``callback(value)`` at ``when``; if ``value`` is no longer alive by then its
        call may be skipped (the callback must treat a dead value as a no-op anyway)."""
        env = self._env
        if when < env._now:
            raise ValueError(f"time {when!r} is in the past (now {env._now!r})")
        if when < self._last:  # out of order: its own entry
            call_at(env, when, self._callback, value)
            return
        self._last = when
        self._q.append((when, value))
        if not self._armed:
            self._armed = True
            self._push((when, _NORMAL, self._next_id(), self._wake_cb, None))  # when >= now: above

    def _wake(self, _: Any = None) -> None:
        env = self._env
        q, callback, alive = self._q, self._callback, self._alive
        now = env._now
        while q and q[0][0] <= now:
            callback(q.popleft()[1])
        while q and not alive(q[0][1]):
            q.popleft()
        if q:  # the head is not due yet (the due ones were handed over above)
            self._push((q[0][0], _NORMAL, self._next_id(), self._wake_cb, None))
        else:
            self._armed = False
            self._last = -float("inf")
