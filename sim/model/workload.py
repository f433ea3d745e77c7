"""Call arrivals: a Poisson process, or piecewise-constant rates (Poisson within each phase).

The next arrival is found by inverting the integrated rate: draw E ~ Exp(1)
and walk the phases until the rate integral reaches E, so a rate change at a
phase boundary takes effect exactly there (no thinning, one draw per call).
Arrivals stop at ``run.duration_s`` or after ``workload.max_calls`` calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy

from rtalab.sim.dist import Exp
from rtalab.sim.model.clock import scheduler, sim_time
from rtalab.sim.model.rand import Streams
from rtalab.sim.scenario import WorkloadConfig

INF = float("inf")


class Arrivals:
    """Calls ``on_call(call_id)`` at each arrival time."""

    def __init__(self, env: simpy.Environment, cfg: WorkloadConfig, duration_s: float,
                 streams: Streams, on_call: Callable[[int], None]) -> None:
        self.env = env
        self.on_call = on_call
        self.duration_s = duration_s
        self.max_calls = cfg.max_calls
        if cfg.arrival == "poisson":
            self.phases: tuple[tuple[float, float], ...] = ((0.0, cfg.calls_per_s),)
        else:
            self.phases = tuple((p.start_s, p.calls_per_s) for p in cfg.schedule)
        self.exp1 = streams.sampler("arrivals", Exp(1.0))
        self.count = 0
        self._cb = self._on_arrival
        self._later = scheduler(env)  # call_later bound to env: one call frame per arrival

    def next_time(self, t: float) -> float:
        """The arrival after time ``t`` (``inf`` if none); consumes one Exp(1) draw."""
        e = self.exp1()
        phases = self.phases
        n = len(phases)
        i = 0
        while i + 1 < n and phases[i + 1][0] <= t:
            i += 1
        if t < phases[0][0]:  # before the first phase: no arrivals
            t, i = phases[0][0], 0
        while True:
            rate = phases[i][1]
            end = phases[i + 1][0] if i + 1 < n else INF
            if rate > 0.0:
                dt = e / rate
                if t + dt < end:
                    return t + dt
                e -= (end - t) * rate
            if end == INF:
                return INF
            t, i = end, i + 1

    def start(self) -> None:
        """Schedule the first arrival."""
        self._schedule(0.0)

    def _schedule(self, now: float) -> None:
        if self.max_calls and self.count >= self.max_calls:
            return
        t = self.next_time(now)
        if t < self.duration_s:
            self._later(t - now, self._cb)

    def _on_arrival(self, _: Any = None) -> None:
        call_id = self.count
        self.count += 1
        self.on_call(call_id)
        self._schedule(sim_time(self.env))
