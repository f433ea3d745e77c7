"""The fluid (mean-field ODE) model of the Reasoner's queue and the retry orbit.

State (expected numbers, continuous): ``A`` calls arrived so far (for ``max_calls``), ``H``
callers thinking, ``L`` *live* requests at the Reasoner (their caller will see the work start
before its timeout), ``S`` *stale* requests (their caller timed out or will: work nobody
waits for), and the orbit — per attempt ``k`` the callers waiting for their timer and backoff
(an Erlang chain of ``STAGES`` stages with mean ``timeout + backoff(k)``) and those refused by
a full queue (one stage with mean ``max(backoff(k), retry_after)``).  Plus three counters
(completed turns, turns offered, executions) so that per-second counts come out exactly.

The assumptions, each a place where the simulator can differ:

1. an arrival finding ``q`` requests in the Reasoner (``c`` workers, service rate ``μ(q)``)
   times out with the M/M/c FIFO probability that fewer than ``q - c + 1`` services end
   within the timeout, ``P(Poisson(c μ T) <= q - c)`` (regularised gamma, continuous in q),
   judged with the inputs in force at its arrival;
2. services are shared between live and stale work in proportion to their numbers (FIFO
   mixes them); exponential-like variability only enters through 1.;
3. the timer and the backoff are Erlang-distributed around their means (the simulator's are
   fixed or uniform);
4. a call's length is geometric with the mean number of turns; think times enter by their
   mean;
5. ``known_task = "retry"``: a retry that sees the work start revives one stale request
   (it joins it); if none is left it completes at once (a replay);
6. ``cancel_on_timeout``: stale requests get no service and leave ``timeout`` after they
   arrived (on average); the retry is new work;
7. Finagle's budget caps the retry *rate*; the other budgets are not modelled
   (:attr:`~rtalab.sim.fastmodel.params.FastParams.unexpressed`).

Without retries and timeouts the fixed point is the M/M/c fluid limit ``L = λ / μ`` (for
``λ < c μ``); the waiting-time distribution of a finite system is the CTMC's job
(:mod:`rtalab.sim.fastmodel.ctmc`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp
from scipy.special import gammaincc

from rtalab.sim.fastmodel.params import FastParams, Phase

STAGES = 3  # Erlang stages of each timer + backoff delay
MIN_DELAY_S = 0.04  # a round trip: the shortest delay between a refusal and the retry
RTOL, ATOL = 1e-5, 1e-6  # LSODA tolerances
_A, _H, _L, _S = 0, 1, 2, 3
_FIXED = 4
COLUMNS = ("t_s", "offered_turns_per_s", "goodput_per_s", "executions_per_s", "in_reasoner",
           "live", "stale", "orbit", "p_timeout")


def p_timeout(q: float, workers: float, mu: float, timeout_s: float) -> float:
    """Probability that an arrival finding ``q`` requests (``workers`` servers, rate ``mu``
    each) waits longer than ``timeout_s`` in FIFO order: ``P(Poisson(c μ T) <= q - c)``."""
    if timeout_s <= 0:
        return 0.0
    a = q - workers + 1.0
    if a <= 0:
        return 0.0
    if workers <= 0 or mu <= 0:
        return 1.0
    return float(gammaincc(a, workers * mu * timeout_s))


@dataclass(frozen=True)
class _Layout:
    attempts: int

    @property
    def size(self) -> int:
        return _FIXED + self.attempts * (STAGES + 1) + 3

    def timer(self, k: int) -> slice:  # attempt k = 1..attempts
        i = _FIXED + (k - 1) * (STAGES + 1)
        return slice(i, i + STAGES)

    def refused(self, k: int) -> int:
        return _FIXED + (k - 1) * (STAGES + 1) + STAGES

    @property
    def counters(self) -> slice:  # completed, offered, executions
        return slice(self.size - 3, self.size)


class FluidModel:
    """The ODE of the module docstring for one :class:`FastParams`."""

    def __init__(self, params: FastParams) -> None:
        self.p = params
        self.lay = _Layout(params.attempts)
        k = params.attempts
        # mean delay of attempt k's timer chain: timeout, plus the backoff before retry k
        self.timer_s = [max(params.timeout_s + (params.backoff_s[i] if i < k - 1 else 0.0),
                            MIN_DELAY_S) for i in range(k)]
        self.refused_s = [max(params.backoff_s[i] if i < k - 1 else 0.0, params.retry_after_s,
                              MIN_DELAY_S) for i in range(k)]

    def mu(self, q: float) -> float:
        """Service rate of one worker with ``q`` requests in the Reasoner."""
        return 1.0 / (self.p.service_s + self.p.load_k_s * max(q, 0.0))

    def rates(self, y: np.ndarray, ph: Phase) -> dict[str, float]:
        """The main flows in state ``y`` under phase ``ph`` (diagnostics)."""
        f = self._flows(list(map(float, y)), ph)
        return dict(zip(("mu", "dep", "dep_live", "p_to", "full", "first", "q"), f[:7],
                        strict=True))

    def _flows(self, y: list[float], ph: Phase) -> tuple[float, ...]:
        p = self.p
        live, stale = max(y[_L], 0.0), max(y[_S], 0.0)
        q_all = live + stale
        q_serv = live if p.cancel_on_timeout else q_all
        c = ph.workers
        mu = 1.0 / (p.service_s + p.load_k_s * q_all)
        dep = min(q_serv, c) * mu
        dep_live = dep * live / q_serv if q_serv > 1e-12 else 0.0
        p_to = 1.0 if ph.downlink_down else p_timeout(q_serv, c, mu, p.timeout_s)
        full = min(max(q_all - c - p.queue_limit + 1.0, 0.0), 1.0)
        arrive = ph.calls_per_s * (1.0 if p.max_calls <= 0 else
                                   min(max(p.max_calls - y[_A], 0.0), 1.0))
        first = arrive + max(y[_H], 0.0) / max(p.think_s, 1e-3)
        return mu, dep, dep_live, p_to, full, first, q_all, arrive

    def deriv(self, y: np.ndarray, ph: Phase) -> np.ndarray:
        """dy/dt (plain floats: this runs thousands of times per trajectory)."""
        p = self.p
        yl = y.tolist()
        _mu, dep, dep_live, p_to, full, first, _q, arrive = self._flows(yl, ph)
        K = p.attempts
        d = [0.0] * len(yl)
        out_timer, out_ref = [], []
        for k in range(K):
            i = _FIXED + k * (STAGES + 1)
            rate = STAGES / self.timer_s[k]
            prev = 0.0
            for j in range(STAGES):
                v = max(yl[i + j], 0.0) * rate
                d[i + j] += prev - v
                prev = v
            out_timer.append(prev)
            v = max(yl[i + STAGES], 0.0) / self.refused_s[k]
            d[i + STAGES] -= v
            out_ref.append(v)
        retries = sum(out_timer[:-1]) + sum(out_ref[:-1])
        allowed = retries
        if p.retry_cap_per_s != math.inf:
            allowed = min(retries, p.retry_cap_per_s + p.retry_share * first)
        f_retry = allowed / retries if retries > 1e-12 else 1.0
        done = dep_live + out_timer[-1] + out_ref[-1] + (retries - allowed)
        stale_in = live_in = revive = replay = 0.0
        s_now = max(yl[_S], 0.0)
        share = s_now / (s_now + 1.0)
        for k in range(K):
            x = first if k == 0 else f_retry * (out_timer[k - 1] + out_ref[k - 1])
            i = _FIXED + k * (STAGES + 1)
            if ph.uplink_down:  # lost on the way: the caller waits for its timer
                d[i] += x
                continue
            refused = x * full
            d[i + STAGES] += refused
            acc = x - refused
            doomed = acc * p_to
            d[i] += doomed
            if k == 0 or p.retry_is_work or p.cancel_on_timeout:
                stale_in += doomed
                live_in += acc - doomed
            else:  # joins the abandoned execution
                revive += (acc - doomed) * share
                replay += (acc - doomed) * (1.0 - share)
        done += replay
        cancel = s_now / max(p.timeout_s, MIN_DELAY_S) if p.cancel_on_timeout else 0.0
        d[_A] = arrive
        d[_H] = done * (1.0 - 1.0 / p.turns_per_call) - max(yl[_H], 0.0) / max(p.think_s, 1e-3)
        d[_L] = live_in + revive - dep_live
        d[_S] = stale_in - (dep - dep_live) - revive - cancel
        c0 = len(yl) - 3
        d[c0] = dep_live + replay
        d[c0 + 1] = first
        d[c0 + 2] = dep
        return np.array(d)

    def orbit(self, y: np.ndarray) -> float:
        """Callers waiting for a timer, a backoff or a refusal's retry."""
        return float(sum(y[self.lay.timer(k)].sum() + y[self.lay.refused(k)]
                         for k in range(1, self.p.attempts + 1)))

    def initial(self, congested: bool = False) -> np.ndarray:
        """An empty system, or (``congested``) one whose queue is full of stale work."""
        y = np.zeros(self.lay.size)
        if congested:
            ph = self.p.phases[0]
            y[_S] = ph.workers + self.p.queue_limit
        return y

    def integrate(self, t_end_s: float, y0: np.ndarray | None = None, t0_s: float = 0.0,
                  phase: Phase | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(times 0, 1, ... s, states) from ``t0_s`` to ``t_end_s``; the scenario's phases, or
        one constant ``phase`` throughout."""
        y = self.initial() if y0 is None else np.asarray(y0, dtype=float).copy()
        cuts = [t0_s] + [b for b in self.p.breakpoints() if t0_s < b < t_end_s] + [t_end_s]
        if phase is not None:
            cuts = [t0_s, t_end_s]
        ts = np.arange(math.ceil(t0_s), math.floor(t_end_s) + 1, dtype=float)
        out = np.empty((len(ts), len(y)))
        for a, b in itertools.pairwise(cuts):
            ph = phase if phase is not None else self.p.phase_at(a)
            inside = (ts >= a) & (ts < b) if b < t_end_s else (ts >= a) & (ts <= b)
            t_eval = np.append(ts[inside], b) if b < t_end_s else ts[inside]
            def rhs(_t: float, yy: np.ndarray, ph: Phase = ph) -> np.ndarray:
                return self.deriv(yy, ph)
            sol = solve_ivp(rhs, (a, b), y,
                            method="LSODA", t_eval=t_eval, rtol=RTOL, atol=ATOL)
            if not sol.success:
                raise RuntimeError(f"fluid model: integration failed at t={a:g} s: "
                                   f"{sol.message}")
            n = int(inside.sum())
            out[inside] = sol.y.T[:n]
            y = sol.y[:, -1]
        return ts, out

    def series(self, ts: np.ndarray, ys: np.ndarray) -> pd.DataFrame:
        """Per-second table (:data:`COLUMNS`): counts in ``[t, t+1)`` and the state at ``t``."""
        c0 = self.lay.counters.start
        cum = ys[:, c0:c0 + 3]
        per = np.vstack([np.diff(cum, axis=0), np.full((1, 3), np.nan)])
        rows = {"t_s": ts, "offered_turns_per_s": per[:, 1], "goodput_per_s": per[:, 0],
                "executions_per_s": per[:, 2], "in_reasoner": ys[:, _L] + ys[:, _S],
                "live": ys[:, _L], "stale": ys[:, _S],
                "orbit": [self.orbit(y) for y in ys],
                "p_timeout": [self.rates(y, self.p.phase_at(t))["p_to"] for t, y in zip(ts, ys,
                                                                                       strict=True)]}
        return pd.DataFrame(rows, columns=list(COLUMNS))


def trajectory(params: FastParams, t_end_s: float | None = None) -> pd.DataFrame:
    """The fluid trajectory of the scenario from an empty system, one row per second
    (:data:`COLUMNS`; the last row's counts are NaN: its second is not integrated)."""
    m = FluidModel(params)
    ts, ys = m.integrate(params.duration_s if t_end_s is None else t_end_s)
    return m.series(ts, ys)


@dataclass(frozen=True)
class FixedPoint:
    """A state the fluid model settles in under constant inputs."""

    start: str  # "empty" or "congested": where the integration started
    goodput_per_s: float
    offered_turns_per_s: float
    in_reasoner: float
    stale: float
    orbit: float
    p_timeout: float
    residual: float  # |dy/dt| at the end (small: a fixed point)

    @property
    def healthy(self) -> bool:
        """Goodput at least 90 % of the turns offered."""
        return self.goodput_per_s >= 0.9 * self.offered_turns_per_s


def fixed_points(params: FastParams, phase: Phase | None = None,
                 settle_s: float = 1500.0) -> list[FixedPoint]:
    """Where the fluid model settles under constant ``phase`` (default: the first phase),
    started empty and started congested (queue full of stale work): two different healthy
    flags mean the system is bistable there — the metastable region."""
    m = FluidModel(params)
    ph = phase or params.phases[0]
    out = []
    for start in ("empty", "congested"):
        y0 = m.initial(start == "congested")
        _ts, ys = m.integrate(settle_s, y0=y0, phase=ph)
        y, y_prev = ys[-1], ys[-2]
        c0 = m.lay.counters.start
        good, offered = y[c0] - y_prev[c0], y[c0 + 1] - y_prev[c0 + 1]
        r = m.rates(y, ph)
        dy = m.deriv(y, ph)[_H:c0]  # the counters and A grow by design
        out.append(FixedPoint(start, float(good), float(offered), float(r["q"]),
                              float(max(y[_S], 0.0)), m.orbit(y), float(r["p_to"]),
                              float(np.abs(dy).max())))
    return out
