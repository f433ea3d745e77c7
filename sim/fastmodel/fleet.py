"""A fleet's mean field: N Reasoner replicas behind a balancer, too many to simulate.

Each replica has ``c`` workers (rate ``μ = 1 / service_s``, the fast model's
:class:`~sim.fastmodel.params.FastParams`) and room for ``queue_limit`` waiting requests.  In
the mean-field limit (N → ∞, Vvedenskaya–Dobrushin–Karpelevich, Mitzenmacher's supermarket
model) the fleet is described by ``s_k``, the share of replicas holding at least ``k``
requests, and a request sent to the shortest of ``d`` replicas sampled at random (with
replacement) joins one holding ``k`` with probability ``s_k^d - s_{k+1}^d``.  The fixed point of

    ds_k/dt = λ (s_{k-1}^d - s_k^d) - μ min(k, c) (s_k - s_{k+1}),   s_0 = 1,

with ``λ`` the request rate *per replica*, gives the queue-length law a request sees.  The
balancer policies map to it as follows (each a place where the simulator can differ):

- ``random`` and ``sticky`` (by contextId: a Poisson split of the calls): ``d = 1``, the
  replicas are independent M/M/c/K queues (Erlang C per replica when the queue is unbounded)
  — exact for Poisson arrivals and exponential service, whatever N;
- ``power_of_two``: ``d = 2`` (the simulator samples two *distinct* replicas: at small N it
  balances a little better than the mean field);
- ``least_outstanding``: join-the-shortest-queue, taken as ``d = N`` (N samples with
  replacement: at N = 2 this is JSQ(2) with replacement, weaker than true JSQ);
- ``round_robin``: each replica sees every N-th request (Erlang-N gaps, squared coefficient
  of variation 1/N): M/M/c per replica with the waits scaled by ``(1/N + 1) / 2``
  (Allen–Cunneen).

A request's wait, given ``k >= c`` ahead of it in FIFO order, is Erlang(k - c + 1, cμ); its
completion adds the execution (the scenario's service distribution, sampled with a fixed
seed), the network latencies, the first chunk and the chunk cadence.

Retries (the retry policy): a request times out when its wait exceeds the turn-response
timeout (:func:`sim.fastmodel.fluid.p_timeout`'s rule, under the queue law above); with
``known_task = "execute"`` each of the up to ``attempts`` retries is new work beside the
abandoned one (which still runs unless ``cancel_on_timeout``), with ``"retry"`` it joins the
abandoned execution.  The offered request rate and the timeout probability are solved together
(a damped fixed-point iteration from the healthy side: the healthy branch; the metastable
branch is :func:`sim.fastmodel.fluid.fixed_points`'s job).  A turn completes unless all its
attempts time out or it is refused by a full queue.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import gammaincc

from sim.fastmodel.params import FastParams, from_scenario
from sim.scenario import Scenario

POLICIES = ("random", "round_robin", "least_outstanding", "power_of_two", "sticky")
SAMPLES = 100_000  # Monte-Carlo draws of a completion time (fixed seed)
TAIL = 1e-13  # queue levels are kept until the share of random routing falls below this
METRICS = ("goodput_turns_per_s", "success_rate", "worker_utilisation", "queue.p_wait",
           "queue.mean_wait_s", "completion_s.p50", "completion_s.p99", "p_timeout",
           "load_amplification")


class FleetModelError(ValueError):
    """Inputs the fleet model cannot take (one line, for the CLI)."""


def choices(policy: str, replicas: int) -> int:
    """The ``d`` of the supermarket model for ``policy`` (see the module docstring)."""
    if policy not in POLICIES:
        raise FleetModelError(f"unknown balancer {policy!r}: one of {', '.join(POLICIES)}")
    return {"power_of_two": min(2, replicas), "least_outstanding": replicas}.get(policy, 1)


def _levels(lam: float, c: int, mu: float, cap: int) -> int:
    """Queue levels kept: all of them with a bounded queue, else to the random-routing tail."""
    rho = lam / (c * mu)
    if rho >= 1.0:
        return cap
    extra = math.ceil(math.log(TAIL) / math.log(max(rho, 1e-9))) if rho > 0 else 1
    return int(min(cap, c + max(extra, 1) + 1))


def occupancy(lam: float, c: int, mu: float, d: int, cap: int) -> np.ndarray:
    """``s_k`` (k = 0..K), the share of replicas with at least ``k`` requests, at the
    mean-field fixed point for per-replica request rate ``lam``, ``c`` workers of rate ``mu``,
    JSQ(``d``) and at most ``cap`` requests per replica (in service plus waiting)."""
    K = _levels(lam, c, mu, cap)
    k = np.arange(K + 1)
    rate = mu * np.minimum(k, c).astype(float)
    # d = 1: the M/M/c/K birth-death chain, in closed form (log space)
    logp = np.concatenate([[0.0], np.cumsum(np.log(lam) - np.log(rate[1:]))])
    p = np.exp(logp - logp.max())
    p /= p.sum()
    s = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    s[0] = 1.0
    if d == 1:
        return s[:-1]

    def f(_t: float, x: np.ndarray) -> np.ndarray:
        full = np.concatenate([[1.0], np.clip(x, 0.0, 1.0), [0.0]])
        up = lam * (full[:-2] ** d - full[1:-1] ** d)
        down = rate[1:] * (full[1:-1] - full[2:])
        return up - down

    x0 = s[1:-1]
    horizon = 200.0 / mu
    for _ in range(8):  # until the fixed point is reached
        sol = solve_ivp(f, (0.0, horizon), x0, method="LSODA", rtol=1e-9, atol=1e-13,
                        lband=1, uband=1)
        x0 = np.clip(sol.y[:, -1], 0.0, 1.0)
        if np.abs(f(0.0, x0)).max() < 1e-10 * max(lam, 1.0):
            break
    return np.concatenate([[1.0], x0])


def join_law(s: np.ndarray, d: int) -> np.ndarray:
    """P(an arriving request finds ``k`` requests), k = 0..K (the last: refused if full)."""
    sd = np.minimum.accumulate(np.concatenate([s, [0.0]])) ** d
    return np.maximum(sd[:-1] - sd[1:], 0.0)


@dataclass(frozen=True)
class FleetPoint:
    """The mean field of one fleet: replicas, policy and what it predicts."""

    replicas: int
    policy: str
    offered_turns_per_s: float
    goodput_turns_per_s: float
    success_rate: float
    worker_utilisation: float
    p_wait: float
    mean_wait_s: float
    completion_p50_s: float
    completion_p99_s: float
    p_timeout: float
    load_amplification: float  # requests executed per turn offered
    refused_share: float

    def metric(self, name: str) -> float:
        """A value by its ``summary.json`` name (:data:`METRICS`)."""
        table = {"goodput_turns_per_s": self.goodput_turns_per_s,
                 "success_rate": self.success_rate,
                 "worker_utilisation": self.worker_utilisation, "queue.p_wait": self.p_wait,
                 "queue.mean_wait_s": self.mean_wait_s,
                 "completion_s.p50": self.completion_p50_s,
                 "completion_s.p99": self.completion_p99_s, "p_timeout": self.p_timeout,
                 "load_amplification": self.load_amplification}
        if name not in table:
            raise FleetModelError(f"the fleet model has no metric {name!r}: one of "
                                  f"{', '.join(METRICS)}")
        return table[name]

    def row(self) -> dict[str, float | int | str]:
        return asdict(self)


class FleetModel:
    """The mean field of a scenario's Reasoner replicated behind a balancer."""

    def __init__(self, scenario: Scenario, params: FastParams | None = None) -> None:
        self.scenario = scenario
        self.p = params or from_scenario(scenario)
        r, net = scenario.reasoner, scenario.network
        self.workers = int(self.p.phases[0].workers)
        if self.workers < 1:
            raise FleetModelError("the fleet model needs reasoner.workers >= 1")
        self.mu = 1.0 / self.p.service_s
        self.cap = self.workers + int(self.p.queue_limit)
        self.turns_per_call = float(scenario.workload.turns_per_call.mean)
        self.other_s = (net.uplink.latency_s.mean + net.downlink.latency_s.mean
                        + r.first_chunk_s.mean + (r.chunks - 1) * r.chunk_interval_s)
        self.service = self._service_draws(scenario)

    @staticmethod
    def _service_draws(s: Scenario) -> np.ndarray:
        """Execution times (reasoning, the side-effect share's tool call, base), fixed seed."""
        r, w = s.reasoner, s.workload
        rng = np.random.default_rng(20261202)
        reason = np.array([r.reasoning_time_s.sample(rng) for _ in range(SAMPLES)])
        tool = np.array([r.tool_latency_s.sample(rng) for _ in range(SAMPLES)])
        if r.upstream_timeout_s > 0:
            tool = np.minimum(tool, r.upstream_timeout_s)
        se = rng.random(SAMPLES) < w.side_effect_share
        return reason + np.where(se, tool, 0.0) + r.load_latency_base_s

    def turns_per_s(self, calls_per_s: float) -> float:
        """Turns offered per second at a call rate (the scenario's mean turns per call)."""
        return calls_per_s * self.turns_per_call

    def _queue_law(self, lam: float, policy: str, n: int) -> tuple[np.ndarray, float]:
        d = choices(policy, n)
        s = occupancy(lam, self.workers, self.mu, d, self.cap)
        return join_law(s, d), (0.5 * (1.0 / n + 1.0) if policy == "round_robin" else 1.0)

    def _p_timeout(self, law: np.ndarray, scale: float) -> float:
        T = self.p.timeout_s
        if T <= 0:
            return 0.0
        k = np.arange(len(law))
        ahead = k - self.workers + 1
        waiting = ahead > 0
        pt = np.zeros(len(law))
        pt[waiting] = gammaincc(ahead[waiting], self.workers * self.mu * T / scale)
        served = law[: self.cap] if len(law) > self.cap else law
        return float((pt[: len(served)] * served).sum() / max(served.sum(), 1e-300))

    def point(self, calls_per_s: float, replicas: int, policy: str) -> FleetPoint:
        """The fleet's mean field at ``calls_per_s`` (fleet-wide) over ``replicas``."""
        if replicas < 1:
            raise FleetModelError(f"replicas must be >= 1, got {replicas}")
        choices(policy, replicas)
        turns = self.turns_per_s(calls_per_s)
        lam_turn = turns / replicas
        K = self.p.attempts
        retry_new = self.p.retry_is_work or self.p.cancel_on_timeout
        pto, lam = 0.0, lam_turn
        for _ in range(200):  # damped fixed point: requests offered <-> timeouts
            law, scale = self._queue_law(lam, policy, replicas)
            new_pto = self._p_timeout(law, scale)
            refused = float(law[self.cap]) if len(law) > self.cap else 0.0
            attempts = sum(new_pto ** j for j in range(K)) if retry_new else 1.0
            new_lam = lam_turn * attempts
            # keep the load below saturation: past it the healthy branch does not exist
            new_lam = min(new_lam, 0.999 * self.workers * self.mu) if self.p.queue_limit >= \
                10**6 else new_lam
            if abs(new_lam - lam) <= 1e-9 * lam_turn and abs(new_pto - pto) < 1e-12:
                break
            lam, pto = 0.5 * (lam + new_lam), new_pto
        law, scale = self._queue_law(lam, policy, replicas)
        pto = self._p_timeout(law, scale)
        refused = float(law[self.cap]) if len(law) > self.cap else 0.0
        success = (1.0 - refused) * (1.0 - pto ** K)
        exec_rate = lam * (1.0 - refused)
        util = min(exec_rate / (self.workers * self.mu), 1.0)
        k = np.arange(len(law))
        ahead = np.maximum(k - self.workers + 1, 0)
        served = law.copy()
        if len(served) > self.cap:
            served[self.cap] = 0.0
        served /= served.sum()
        p_wait = float(served[ahead > 0].sum())
        mean_wait = float((served * ahead).sum() * scale / (self.workers * self.mu))
        p50, p99 = self._completion(served, scale)
        return FleetPoint(replicas, policy, turns, turns * success, success, util, p_wait,
                          mean_wait, p50, p99, pto, lam * replicas / turns if turns else 1.0,
                          refused)

    def _completion(self, served: np.ndarray, scale: float) -> tuple[float, float]:
        """p50 and p99 of wait + execution + the fixed latencies (fixed-seed Monte Carlo)."""
        rng = np.random.default_rng(7)
        k = rng.choice(len(served), size=SAMPLES, p=served)
        ahead = np.maximum(k - self.workers + 1, 0)
        wait = np.zeros(SAMPLES)
        q = ahead > 0
        wait[q] = rng.gamma(ahead[q], scale / (self.workers * self.mu))
        t = wait + self.service + self.other_s
        p50, p99 = np.percentile(t, [50, 99])
        return float(p50), float(p99)


def holds(point: FleetPoint, slos: list[tuple[str, str, float]]) -> bool:
    """Every ``(metric, op, target)`` holds at the point (the mean field has no CI)."""
    ops = {"<=": float.__le__, "<": float.__lt__, ">=": float.__ge__, ">": float.__gt__}
    return all(ops[op](float(point.metric(m)), float(t)) for m, op, t in slos)


def fleet_size(model: FleetModel, calls_per_s: float, policy: str,
               slos: list[tuple[str, str, float]], max_replicas: int = 10**7
               ) -> tuple[int | None, FleetPoint | None]:
    """The fewest replicas meeting every SLO at ``calls_per_s`` (None if even
    ``max_replicas`` do not), by doubling then bisection (more replicas never hurt in the
    mean field)."""
    cache: dict[int, FleetPoint] = {}

    def ok(n: int) -> bool:
        if n not in cache:
            cache[n] = model.point(calls_per_s, n, policy)
        return holds(cache[n], slos)

    lo = max(1, math.floor(model.turns_per_s(calls_per_s) / (model.workers * model.mu)))
    if ok(lo):
        return lo, cache[lo]
    hi = lo
    while not ok(hi):
        if hi >= max_replicas:
            return None, None
        lo, hi = hi, min(hi * 2, max_replicas)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, cache[hi]

