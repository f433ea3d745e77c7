"""The fast model's inputs: a scenario reduced to rates, capacities and delays.

:class:`FastParams` is plain data (a frozen dataclass) so that a caller can also build or
scale it by hand — e.g. a mean-field model of N replicas divides the arrival rate by N
(:meth:`FastParams.scaled`).  :func:`from_scenario` reads a :class:`rtalab.sim.scenario.Scenario`:

- arrivals: calls at ``workload.rate_at(t)`` until ``max_calls`` have arrived; each call plays
  ``turns_per_call`` turns (mean, so a call ends after a turn with probability 1/mean) with
  ``think_time_s`` (mean) between them;
- service: ``reasoning_time_s`` + ``side_effect_share`` × ``tool_latency_s`` (capped at
  ``upstream_timeout_s``) + ``load_latency_base_s`` + ``load_latency_k_s`` × requests in the
  Reasoner; ``workers`` servers, lowered by ``capacity_drops``; ``queue_limit`` waiting;
- the turn-response timeout (``live.timeouts.turn_response_s``; without a progress directive
  the first chunk must come, so the mean service time counts against it);
- attempts (``max_attempts_by_code['upstream-timeout']``, the code of a timeout) and the mean
  backoff before each retry (``Backoff.mean_s``; a Monte-Carlo mean where it has none);
- ``reasoner.known_task``: ``execute`` — a retry is new work beside the abandoned one;
  ``retry`` — it joins the abandoned execution (no new work);
- ``live.cancel_on_timeout``: an abandoned request leaves the queue when its caller gives up;
- network outages (``uplink``/``both``: requests never arrive; ``downlink``: they run, the
  answers are lost);
- the Finagle budget as a cap on the retry rate (``min_retries_per_s`` +
  ``percent_can_retry`` × first attempts per second).

What it cannot express is listed in :attr:`FastParams.unexpressed` (the other budgets and the
breakers keep per-client state the mean field averages away; handoffs, barge-in, network
loss and duplication, the per-context rate limit, injected errors, ``turn_total_s``,
``deadline_s``, ``lifo``, the queue deadline).  The model still runs then; the map reports
that its guidance for such a strategy is only approximate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from rtalab.sim.policy.backoff import make_backoff
from rtalab.sim.scenario import Scenario

_TIMEOUT_CODE = "upstream-timeout"


@dataclass(frozen=True)
class Phase:
    """Constant inputs from ``start_s`` on: call arrival rate, workers, outage flags."""

    start_s: float
    calls_per_s: float
    workers: int
    uplink_down: bool = False  # requests are dropped (outage "uplink" or "both")
    downlink_down: bool = False  # answers are dropped (outage "downlink" or "both")


@dataclass(frozen=True)
class FastParams:
    """A scenario as the fast model sees it (see the module docstring); times in seconds."""

    phases: tuple[Phase, ...]  # piecewise-constant inputs, increasing start_s, first at 0
    service_s: float  # mean service time at no load (reasoning + tool share + base)
    load_k_s: float  # extra service time per request in the Reasoner
    queue_limit: int  # waiting requests beyond which one is refused
    timeout_s: float  # effective turn-response timeout (0: none)
    attempts: int  # attempts per turn after timeouts, first included
    backoff_s: tuple[float, ...]  # mean delay before retry n (index n-1), len attempts-1
    retry_after_s: float  # floor of the delay after a refusal (queue full), when honoured
    think_s: float  # mean think time between turns
    turns_per_call: float  # mean turns per call (>= 1)
    max_calls: int = 0  # 0: no limit
    retry_is_work: bool = True  # known_task = "execute": a retry runs beside the first
    cancel_on_timeout: bool = False
    retry_cap_per_s: float = math.inf  # Finagle: min_retries_per_s (+ share below)
    retry_share: float = math.inf  # Finagle: percent_can_retry (a share) of first attempts
    duration_s: float = 300.0  # arrivals stop here
    unexpressed: tuple[str, ...] = field(default=())

    def phase_at(self, t_s: float) -> Phase:
        """The phase in force at ``t_s``."""
        cur = self.phases[0]
        for p in self.phases:
            if p.start_s <= t_s:
                cur = p
        return cur

    def breakpoints(self) -> list[float]:
        """Phase starts (where the inputs jump), in order."""
        return [p.start_s for p in self.phases]

    def scaled(self, load: float = 1.0, workers: float = 1.0) -> FastParams:
        """Arrival rates × ``load`` (and ``max_calls``), workers × ``workers`` (rounded)."""
        phases = tuple(replace(p, calls_per_s=p.calls_per_s * load,
                               workers=max(0, round(p.workers * workers))) for p in self.phases)
        return replace(self, phases=phases, max_calls=round(self.max_calls * load))


def _mean_backoff(scenario: Scenario, retries: int) -> tuple[float, ...]:
    b = make_backoff(scenario.live.backoff)
    out, prev, rng = [], 0.0, np.random.default_rng(0)
    for n in range(1, retries + 1):
        m = b.mean_s(n)
        if m is None:  # history-dependent (decorrelated): a fixed-seed Monte-Carlo mean
            draws = [b.delay_s(n, prev, rng) for _ in range(2000)]
            m = float(np.mean(draws))
            prev = m
        out.append(float(m))
    return tuple(out)


def _unexpressed(s: Scenario) -> tuple[str, ...]:
    live, r, w, net = s.live, s.reasoner, s.workload, s.network
    out = [f"live.budget.{name}" for name in ("token_bucket", "adaptive", "circuit_breaker",
                                              "aws_quota", "envoy", "call_bucket",
                                              "retry_breaker")
           if getattr(live.budget, name).enabled]
    checks = {
        "workload.handoff_share": w.handoff_share > 0,
        "workload.barge_in_share": w.barge_in_share > 0,
        "reasoner.errors": bool(r.errors),
        "reasoner.context_rate_per_s": r.context_rate_per_s > 0,
        "reasoner.queue_timeout_s": r.queue_timeout_s > 0,
        "reasoner.queue_discipline": r.queue_discipline != "fifo",
        "live.retry.deadline_s": live.retry.deadline_s > 0,
        "network.outages kind (reset, reasoner-down, loss: taken as blackhole)": any(
            o.kind != "blackhole" for o in net.outages),
        "network loss/duplication": any(getattr(link, k) > 0 for link in
                                        (net.uplink, net.downlink)
                                        for k in ("loss", "duplication", "reorder")),
    }
    return tuple(out + [k for k, v in checks.items() if v])


def from_scenario(s: Scenario) -> FastParams:
    """The fast model's view of ``s`` (see the module docstring)."""
    r, live, w = s.reasoner, s.live, s.workload
    tool = r.tool_latency_s.mean
    if r.upstream_timeout_s > 0:
        tool = min(tool, r.upstream_timeout_s)
    service = r.reasoning_time_s.mean + w.side_effect_share * tool + r.load_latency_base_s
    limits = {_TIMEOUT_CODE: live.retry.max_attempts, **dict(live.retry.max_attempts_by_code)}
    attempts = limits.get(_TIMEOUT_CODE, live.retry.max_attempts) \
        if live.retry.retry_on_timeout else 1
    timeout = live.timeouts.turn_response_s
    if timeout > 0 and not r.progress_directive:
        timeout = max(timeout - service - r.first_chunk_s.mean, 1e-3)
    # breakpoints of every input
    starts = {0.0, s.run.duration_s}
    starts |= {p.start_s for p in w.schedule} if w.arrival == "schedule" else set()
    for d in r.capacity_drops:
        starts |= {d.start_s, d.start_s + d.duration_s}
    for o in s.network.outages:
        starts |= {o.start_s, o.start_s + o.duration_s}
    phases = []
    for t in sorted(starts):
        workers = r.workers
        for d in r.capacity_drops:
            if d.start_s <= t < d.start_s + d.duration_s:
                workers = min(workers, d.workers)
        up = any(o.start_s <= t < o.start_s + o.duration_s and o.direction in ("uplink", "both")
                 for o in s.network.outages)
        down = any(o.start_s <= t < o.start_s + o.duration_s
                   and o.direction in ("downlink", "both") for o in s.network.outages)
        rate = w.rate_at(t) if t < s.run.duration_s else 0.0
        phases.append(Phase(t, rate, workers, up, down))
    fin = live.budget.finagle
    return FastParams(
        phases=tuple(phases), service_s=service, load_k_s=r.load_latency_k_s,
        queue_limit=r.queue_limit, timeout_s=timeout, attempts=max(1, attempts),
        backoff_s=_mean_backoff(s, max(0, attempts - 1)),
        retry_after_s=r.retry_after_ms / 1000.0 if live.retry.honour_retry_after else 0.0,
        think_s=w.think_time_s.mean, turns_per_call=max(1.0, math.ceil(w.turns_per_call.mean)),
        max_calls=w.max_calls, retry_is_work=r.known_task == "execute",
        cancel_on_timeout=live.cancel_on_timeout,
        retry_cap_per_s=fin.min_retries_per_s if fin.enabled else math.inf,
        retry_share=fin.percent_can_retry if fin.enabled else math.inf,
        duration_s=s.run.duration_s, unexpressed=_unexpressed(s))


def replica_params(s: Scenario) -> FastParams:
    """The fast model's view of one replica of ``s``'s fleet (``from_scenario(s)`` itself for
    one pool, so a one-pool scenario's numbers do not change).

    The fluid model and the CTMC see one pool; a fleet of ``N`` replicas is mapped to one:

    - ``random``, ``round_robin``, ``sticky`` and ``power_of_two`` (N >= 3): one replica fed
      ``1/N`` of the calls (:meth:`FastParams.scaled`), its own ``[reasoner]`` workers, queue
      and capacity drops (a drop hits every replica).  For random routing this is the Poisson
      split: exact for the first attempts, and for retries in the mean (each is re-routed at
      random, so every replica gets ``1/N`` of them: the fluid is symmetric); the CTMC's
      hitting times are then those of *one* replica (the fleet's replicas are coupled only
      through re-routed retries, which the mean field averages);
    - ``least_outstanding`` (and ``power_of_two`` at N = 2, the same rule): one pooled queue
      of ``N`` × the workers and ``N`` × the queue room (join-the-shortest-queue is close to a
      central queue; :mod:`rtalab.sim.fastmodel.fleet`);
    - ``state = "per-replica"`` with a balancer other than ``sticky`` and ``known_task =
      "retry"``: a retry that lands on another replica than its abandoned execution does not
      find it and runs as new work — ``(N - 1)/N`` of the retries under random routing; taken
      as every retry (``retry_is_work``), listed in ``unexpressed``;
    - ``[[fleet.failures]]`` are not expressed (listed in ``unexpressed``).
    """
    p = from_scenario(s)
    f = s.fleet
    if not f.is_fleet:
        return p
    n = f.replicas
    extra: list[str] = []
    if f.balancer == "least_outstanding" or (f.balancer == "power_of_two" and n == 2):
        p = replace(p.scaled(workers=n), queue_limit=p.queue_limit * n)
    else:
        p = p.scaled(load=1.0 / n)
    if f.state == "per-replica" and f.balancer != "sticky" and n > 1 and not p.retry_is_work:
        p = replace(p, retry_is_work=True)
        extra.append("fleet.state = per-replica: a retry on another replica is new work "
                     f"({n - 1}/{n} of them; taken as all)")
    if f.failures:
        extra.append("fleet.failures")
    return replace(p, unexpressed=p.unexpressed + tuple(extra))

