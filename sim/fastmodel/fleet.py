"""A fleet's mean field: N Reasoner replicas behind a balancer, too many to simulate.

Each replica has ``c`` workers (rate ``μ = 1 / service_s``, the fast model's
:class:`~rtalab.sim.fastmodel.params.FastParams`) and room for ``queue_limit`` waiting requests.  In
the mean-field limit (N → ∞, Vvedenskaya–Dobrushin–Karpelevich, Mitzenmacher's supermarket
model) the fleet is described by ``s_k``, the share of replicas holding at least ``k``
requests, and a request sent to the shortest of ``d`` replicas sampled at random (with
replacement) joins one holding ``k`` with probability ``s_k^d - s_{k+1}^d``.  The fixed point of

    ds_k/dt = λ (s_{k-1}^d - s_k^d) - μ min(k, c) (s_k - s_{k+1}),   s_0 = 1,

with ``λ`` the request rate *per replica*, gives the queue-length law a request sees.  The
balancer policies map to it as follows (each a place where the simulator can differ; the
errors at N = 2..4 are measured and asserted in tests/test_fleet_meanfield.py):

- ``random``: ``d = 1``, the replicas are independent M/M/c/K queues (Erlang C per replica
  when the queue is unbounded) — exact for Poisson arrivals and exponential service,
  whatever N;
- ``sticky`` (by contextId): a call's requests all go to one replica, so a replica is a
  finite-source queue — its ``K`` active calls each send one request at a time, a think
  time after the last (the machine-repairman chain; an arriving request sees it with
  ``K - 1`` sources).  ``K`` varies with the calls dealt to the replica: the simulator deals
  calls by ``call_id % N`` (a round robin of calls, smoother than a Poisson split), so
  ``Var K = z E[K]`` with Whitt's peakedness ``z = 1 + (1/N - 1) η`` of the call durations;
  ``sticky_hash=True`` takes ``z = 1`` (Poisson ``K``: hashing random contextIds, what a
  real balancer does).  Taken as independent Poisson arrivals instead (the random
  policy's law) the p50 comes out 4–8 % high at N = 3, 4;
- ``power_of_two``: ``d = 2`` for N >= 3 (the simulator samples two *distinct* replicas: at
  small N it balances a little better than the mean field); at N = 2 it is least outstanding;
- ``least_outstanding``: join-the-shortest-queue, taken as one pooled queue of N·c workers
  (JSQ is close to a central queue; the N → ∞ supermarket limit with d = N understates the
  wait of a small fleet by half);
- ``round_robin``: each replica sees every N-th request (Erlang-N gaps, squared coefficient
  of variation 1/N): M/M/c per replica with the waits scaled by Allen–Cunneen's
  ``(1/N + c_s²) / 2`` (the wait is ~30 % high at N >= 3; the p50 up to 7 %).

The service is not exponential: every policy's waits are scaled by Allen–Cunneen's
``(c_a² + c_s²) / 2`` with ``c_s²`` the service's squared coefficient of variation (the
reasoning time's exact, the capped tool calls' from the draws) and ``c_a² = 1`` except for
round robin.

A request's wait, given ``k >= c`` ahead of it in FIFO order, is Erlang(k - c + 1, cμ / scale);
its completion adds the execution (the scenario's service distribution, sampled with a fixed
seed), the network latencies, the first chunk and the chunk cadence.

Retries (the retry policy): a request times out when its wait plus its time to the first
chunk (network, execution, first chunk; over :data:`QUANTILES` quantiles of the execution)
exceeds the turn-response timeout (with a progress directive: its wait alone); with
``known_task = "execute"`` each of the up to ``attempts`` retries is new work beside the
abandoned one (which still runs unless ``cancel_on_timeout``), with ``"retry"`` it joins the
abandoned execution.  The offered request rate and the timeout probability are solved together
(a damped fixed-point iteration from the healthy side: the healthy branch; the metastable
branch is :func:`rtalab.sim.fastmodel.fluid.fixed_points`'s job).  A turn completes unless all its
attempts time out or it is refused by a full queue.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import NamedTuple, cast

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaincc
from scipy.stats import binom, poisson

from rtalab.sim.fastmodel.params import FastParams, from_scenario
from rtalab.sim.scenario import Scenario

POLICIES = ("random", "round_robin", "least_outstanding", "power_of_two", "sticky")
SAMPLES = 100_000  # Monte-Carlo draws of a completion time (fixed seed)
QUANTILES = 64  # service quantiles the timeout probability averages over
TAIL = 1e-13  # queue levels are kept until the share of random routing falls below this
METRICS = ("goodput_turns_per_s", "success_rate", "worker_utilisation", "queue.p_wait",
           "queue.mean_wait_s", "completion_s.p50", "completion_s.p99", "p_timeout",
           "load_amplification")


class _Law(NamedTuple):
    """What a request finds: ``law[k]`` = P(k requests ahead of it with ``servers`` workers,
    ``law[cap]`` refused); waits are Erlang stages of rate ``servers·μ / scale``."""

    law: np.ndarray
    servers: int
    cap: int
    scale: float


def pooled(policy: str, replicas: int) -> bool:
    """Least outstanding (and power of two at N = 2, the same rule) ~ one pooled queue."""
    return replicas > 1 and (policy == "least_outstanding"
                             or (policy == "power_of_two" and replicas == 2))


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
    return _supermarket(lam, c, mu, d, cap)


def _backward(top: float, lam: float, c: int, mu: float, d: int, K: int, capped: bool
              ) -> np.ndarray:
    """``s_0..s_K`` from ``s_K = top`` by the fixed point's flux balance across each level
    ``k``: ``λ (s_{k-1}^d - s_K^d [capped]) = μ Σ_{j>=k} min(j, c) (s_j - s_{j+1})``."""
    s = np.zeros(K + 2)
    s[K] = top
    full = top ** d if capped else 0.0
    D = min(K, c) * top  # Σ_{j>=k} min(j, c) (s_j - s_{j+1}) at k = K
    for k in range(K, 0, -1):
        s[k - 1] = (mu * D / lam + full) ** (1.0 / d)
        if s[k - 1] > 1e6:  # far past s_0 = 1: the root lies below
            s[0] = s[k - 1]
            break
        D += min(k - 1, c) * (s[k - 1] - s[k])
    return s[:-1]


def _supermarket(lam: float, c: int, mu: float, d: int, cap: int) -> np.ndarray:
    """The JSQ(``d``) fixed point (``d >= 2``) without integrating the ODE: the flux balance
    across each level is solved backward from the top level, whose share is the one unknown
    (a root find on ``s_0 = 1``).  Above ``c + 64`` levels the doubly exponential tail is nil,
    so a longer queue is taken as unbounded: ``s_k = λ/(cμ) s_{k-1}^d`` for ``k > c``."""
    if cap <= c + 64:  # a queue limit the fleet can reach: s_K is the unknown
        def g(y: float) -> float:
            return cast("float", _backward(math.exp(y), lam, c, mu, d, cap, True)[0] - 1.0)
        if g(-745.0) < 0.0:
            y = brentq(g, -745.0, 0.0, xtol=1e-13, rtol=1e-13)
            top = _backward(math.exp(y), lam, c, mu, d, cap, True)
            return cast("np.ndarray", np.clip(top, 0.0, 1.0))
    rho = lam / (c * mu)

    def tail(sc: float) -> list[float]:
        out = [sc]
        while out[-1] > TAIL * 1e-3 and len(out) < min(cap - c, 64) + 1:
            out.append(rho * out[-1] ** d)
        return out

    def h(sc: float) -> float:
        return cast("float", _backward(sc, lam, c, mu, d, c, False)[0] - 1.0)

    sc = brentq(h, 1e-300, 1.0, xtol=1e-15, rtol=1e-13) if h(1.0) > 0 else 1.0
    low = _backward(sc, lam, c, mu, d, c, False)
    return cast("np.ndarray", np.clip(np.concatenate([low, tail(sc)[1:]]), 0.0, 1.0))


def _repairman(sources: int, c: int, mu: float, theta: float, cap: int) -> np.ndarray:
    """The stationary law of requests at a replica fed by ``sources`` pinned calls, each
    sending one request ``1/θ`` (exponential) after its last one ended; ``c`` workers of rate
    ``μ``, room for ``cap`` requests (``law[cap]``: full)."""
    top = min(max(sources, 0), cap)
    j = np.arange(top + 1)
    logp = np.zeros(top + 1)
    if top:
        birth = np.log((sources - j[:-1]) * theta)
        death = np.log(mu * np.minimum(j[1:], c))
        logp[1:] = np.cumsum(birth - death)
    p = np.exp(logp - logp.max())
    return cast("np.ndarray", p / p.sum())


def _throughput(sources: int, c: int, mu: float, theta: float, cap: int) -> float:
    """Requests a second served by a replica with ``sources`` pinned calls."""
    p = _repairman(sources, c, mu, theta, cap)
    return float((p * mu * np.minimum(np.arange(len(p)), c)).sum())


def join_law(s: np.ndarray, d: int) -> np.ndarray:
    """P(an arriving request finds ``k`` requests), k = 0..K (the last: refused if full)."""
    sd = np.minimum.accumulate(np.concatenate([s, [0.0]])) ** d
    return cast("np.ndarray", np.maximum(sd[:-1] - sd[1:], 0.0))


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

    def __init__(self, scenario: Scenario, params: FastParams | None = None, *,
                 sticky_hash: bool = False) -> None:
        self.sticky_hash = sticky_hash  # sticky: K Poisson (hashed ids), not dealt in turn
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
        self.service, tool = self._service_draws(scenario)
        # the service's squared coefficient of variation (Allen–Cunneen's wait scale): the
        # reasoning time's exact, the capped tool calls' from the draws
        self.service_scv = float((r.reasoning_time_s.variance + tool.var())
                                 / self.p.service_s ** 2)
        # the wait a request may spend queued before its turn-response timeout, at each of
        # QUANTILES quantiles of the time from sending to the first chunk
        qs = np.quantile(self.service, (np.arange(QUANTILES) + 0.5) / QUANTILES)
        if r.progress_directive:
            self.wait_allowance = np.full(QUANTILES, self.p.timeout_s)
        else:
            to_first = (qs + net.uplink.latency_s.mean + net.downlink.latency_s.mean
                        + r.first_chunk_s.mean)
            self.wait_allowance = scenario.live.timeouts.turn_response_s - to_first

    @staticmethod
    def _service_draws(s: Scenario) -> tuple[np.ndarray, np.ndarray]:
        """Execution times (reasoning, the side-effect share's tool call, base) and their
        tool-call parts, fixed seed."""
        r, w = s.reasoner, s.workload
        rng = np.random.default_rng(20261202)
        reason = np.array([r.reasoning_time_s.sample(rng) for _ in range(SAMPLES)])
        tool = np.array([r.tool_latency_s.sample(rng) for _ in range(SAMPLES)])
        if r.upstream_timeout_s > 0:
            tool = np.minimum(tool, r.upstream_timeout_s)
        se = rng.random(SAMPLES) < w.side_effect_share
        extra = np.where(se, tool, 0.0)
        return reason + extra + r.load_latency_base_s, extra

    @functools.cached_property
    def _pinned_calls(self) -> tuple[float, float]:
        """(:meth:`_calls`), drawn when a sticky fleet first needs them."""
        return self._calls(self.scenario)

    def _calls(self, s: Scenario) -> tuple[float, float]:
        """A pinned call's mean time away from the Reasoner per turn (the think times, the
        negotiation and the fixed latencies) and ``η = E[min(D, D')] / E[D]`` of the call
        duration ``D`` (Whitt's G/GI/∞ peakedness factor), by fixed-seed Monte Carlo."""
        w, net = s.workload, s.network
        rng = np.random.default_rng(20261203)
        n = SAMPLES // 10
        turns = np.array([max(1, math.ceil(w.turns_per_call.sample(rng))) for _ in range(n)])
        think = np.array([w.think_time_s.sample(rng) for _ in range(int(turns.sum()))])
        neg = net.uplink.latency_s.mean + net.downlink.latency_s.mean
        ends = np.cumsum(turns)
        thinks = np.add.reduceat(think, ends - turns) - think[ends - 1]  # M - 1 per call
        busy = rng.choice(self.service, size=int(turns.sum())) + self.other_s
        dur = neg + thinks + np.add.reduceat(busy, ends - turns)
        gap = float((thinks.sum() + neg * n) / turns.sum()) + self.other_s
        eta = float(np.minimum(dur, rng.permutation(dur)).mean() / dur.mean())
        return gap, eta

    def _pinned_law(self, lam: float, n: int) -> np.ndarray:
        """What a request finds at its replica when calls are pinned (sticky): a replica
        holds ``K`` active calls, each away for the mean gap of :meth:`_calls` then sending
        one request — the finite-source (machine-repairman) queue, whose arrivals see its
        stationary law with ``K - 1`` sources (the arrival theorem).  ``K`` has mean ``L``
        (solved so the replica's throughput is ``lam``) and variance ``z L``: the simulator
        deals calls by ``call_id % N`` (the call arrivals a replica sees have squared
        coefficient of variation ``1/N``), so ``z = 1 + (1/N - 1) η`` (Whitt) and ``K`` is
        binomial; with :attr:`sticky_hash` ``z = 1`` (Poisson)."""
        gap, eta = self._pinned_calls
        z = 1.0 if self.sticky_hash else 1.0 + (1.0 / n - 1.0) * eta
        c, mu, theta = self.workers, self.mu, 1.0 / gap

        def mix(L: float) -> tuple[float, np.ndarray]:
            top = int(L + 12 * math.sqrt(L) + 12)
            ks = np.arange(top + 1)
            if z < 1.0 - 1e-9:
                m = max(round(L / (1.0 - z)), 1)
                pk = binom.pmf(ks, m, min(L / m, 1.0))
            else:
                pk = poisson.pmf(ks, L)
            laws = [_repairman(int(k) - 1, c, mu, theta, self.cap) for k in ks]
            # throughput from K sources: Σ_j π_K(j) (K - j) θ = K θ (1 - E_{K-1}[busy share])
            thru = np.array([0.0] + [_throughput(k, c, mu, theta, self.cap) for k in ks[1:]])
            wts = pk * thru
            law = np.zeros(self.cap + 1 if self.cap < 10**6 else top + 1)
            for wt, q in zip(wts, laws, strict=True):
                law[: len(q)] += wt * q
            return float(wts.sum()), law / max(wts.sum(), 1e-300)

        hi = lam / theta + 1.0
        while mix(hi)[0] < lam:
            hi *= 2.0
            if hi > 1e6:
                raise FleetModelError("sticky routing: the replica cannot carry its calls")
        L = brentq(lambda x: mix(x)[0] - lam, 1e-9, hi, xtol=1e-10, rtol=1e-10)
        return mix(L)[1]

    def turns_per_s(self, calls_per_s: float) -> float:
        """Turns offered per second at a call rate (the scenario's mean turns per call)."""
        return calls_per_s * self.turns_per_call

    def _queue_law(self, lam: float, policy: str, n: int) -> _Law:
        """The law of requests a request finds at its replica (or, pooled, in the fleet)."""
        if policy == "sticky" and n > 1:
            return _Law(self._pinned_law(lam, n), self.workers, self.cap,
                        0.5 * (1.0 + self.service_scv))
        if pooled(policy, n):  # JSQ of N replicas ~ one queue of N·c workers
            c, cap = n * self.workers, n * self.cap
            law = join_law(occupancy(n * lam, c, self.mu, 1, cap), 1)
        else:
            d = choices(policy, n)
            c, cap = self.workers, self.cap
            law = join_law(occupancy(lam, c, self.mu, d, cap), d)
        ca2 = 1.0 / n if policy == "round_robin" else 1.0
        return _Law(law, c, cap, 0.5 * (ca2 + self.service_scv))

    def _p_timeout(self, q: _Law) -> float:
        """P(wait + the time to the first chunk > the turn-response timeout), the wait an
        Erlang mixture under ``q``, the time to the first chunk over the service quantiles."""
        if self.p.timeout_s <= 0:
            return 0.0
        ahead = np.arange(len(q.law)) - q.servers + 1
        served = q.law[: q.cap] if len(q.law) > q.cap else q.law
        waiting = ahead[: len(served)] > 0
        left = self.wait_allowance  # per service quantile: the wait the timeout allows
        rate = q.servers * self.mu / q.scale
        tail = gammaincc(ahead[: len(served)][waiting][:, None], rate * left[None, :])
        p_wait_over = (served[waiting][:, None] * tail).sum(axis=0)
        p_over = float(np.mean(p_wait_over + served[~waiting].sum() * (left <= 0)))
        return p_over / max(float(served.sum()), 1e-300)

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
            new_pto = self._p_timeout(self._queue_law(lam, policy, replicas))
            attempts = sum(new_pto ** j for j in range(K)) if retry_new else 1.0
            new_lam = lam_turn * attempts
            # keep the load below saturation: past it the healthy branch does not exist
            if self.p.queue_limit >= 10**6:
                new_lam = min(new_lam, 0.999 * self.workers * self.mu)
            if abs(new_lam - lam) <= 1e-9 * lam_turn and abs(new_pto - pto) < 1e-12:
                break
            lam, pto = 0.5 * (lam + new_lam), new_pto
        q = self._queue_law(lam, policy, replicas)
        pto = self._p_timeout(q)
        refused = float(q.law[q.cap]) if len(q.law) > q.cap else 0.0
        success = (1.0 - refused) * (1.0 - pto ** K)
        util = min(lam * (1.0 - refused) / (self.workers * self.mu), 1.0)
        ahead = np.maximum(np.arange(len(q.law)) - q.servers + 1, 0)
        served = q.law.copy()
        if len(served) > q.cap:
            served[q.cap] = 0.0
        served /= served.sum()
        p_wait = float(served[ahead > 0].sum())
        mean_wait = float((served * ahead).sum() * q.scale / (q.servers * self.mu))
        p50, p99 = self._completion(served, q)
        return FleetPoint(replicas, policy, turns, turns * success, success, util, p_wait,
                          mean_wait, p50, p99, pto, lam * replicas / turns if turns else 1.0,
                          refused)

    def _completion(self, served: np.ndarray, q: _Law) -> tuple[float, float]:
        """p50 and p99 of wait + execution + the fixed latencies (fixed-seed Monte Carlo)."""
        rng = np.random.default_rng(7)
        k = rng.choice(len(served), size=SAMPLES, p=served)
        ahead = np.maximum(k - q.servers + 1, 0)
        wait = np.zeros(SAMPLES)
        w = ahead > 0
        wait[w] = rng.gamma(ahead[w], q.scale / (q.servers * self.mu))
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

