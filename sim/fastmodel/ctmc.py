"""The continuous-time Markov chain over (requests in the Reasoner ``q``, callers in the retry
orbit ``o``), under constant inputs (one :class:`~rtalab.sim.fastmodel.params.Phase`).

Transitions from ``(q, o)``, with ``c`` workers, ``μ(q)`` per worker, the timeout probability
``p(q)`` of :func:`rtalab.sim.fastmodel.fluid.p_timeout` and ``Q = c + queue_limit``:

- a first attempt (rate ``λ``: calls × turns per call in an open system; thinking callers ÷
  think time when ``max_calls`` bounds the population) joins the queue (``q + 1``); with
  probability ``p(q)`` its caller will time out and enters the orbit (``o + 1``);
- a retry (rate ``o ν``, ``ν = 1 / (timeout + mean backoff)``) leaves the orbit unless it
  times out again and its caller still has attempts left (probability ``r``), and is work
  (``q + 1``) when the Reasoner runs retries as new work (``known_task = "execute"``);
- a refusal (``q = Q``) sends the caller to the orbit as a timeout would, with no work;
- a service ends at rate ``min(q, c) μ(q)`` (``q - 1``).

The attempt limit ``K`` is folded into a geometric one: a timed-out retry re-enters the orbit
with ``r = (K - 2) / (K - 1)``, so a turn that always times out makes ``K`` attempts on
average.  ``cancel_on_timeout`` is taken as "a doomed attempt adds no work".  The orbit is
truncated at ``max_orbit`` (entries beyond it are dropped).  Without retries
(``attempts = 1``) and without a timeout the chain is the M/M/c/Q queue: its stationary law
gives Erlang C (tests/fastmodel).

:func:`hitting_time` solves ``Σ_y G(x, y) (h(y) - h(x)) = -1`` outside a target set (sparse
LU): the expected time to reach it — healthy → overloaded and overloaded → healthy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from rtalab.sim.fastmodel.fluid import p_timeout
from rtalab.sim.fastmodel.params import FastParams, Phase


@dataclass(frozen=True)
class Chain:
    """The generator of the chain and what each state means."""

    generator: sp.csr_matrix  # G[x, y] = rate x -> y, rows summing to 0
    q: np.ndarray  # requests in the Reasoner per state
    o: np.ndarray  # callers in the orbit per state
    p_timeout: np.ndarray  # p(q) per state
    goodput: np.ndarray  # live arrivals per second per state (turns that will complete)
    arrivals: float  # first attempts per second at an empty orbit
    nu: float  # retry rate per caller in the orbit

    def index(self, q: int, o: int) -> int:
        """The state number of ``(q, o)`` (clipped to the truncation)."""
        qmax, omax = int(self.q.max()), int(self.o.max())
        return int(min(max(o, 0), omax) * (qmax + 1) + min(max(q, 0), qmax))

    def healthy(self, p_max: float = 0.05, retry_share: float = 0.1) -> np.ndarray:
        """States where few arrivals time out and retries are a small share of the load."""
        return (self.p_timeout <= p_max) & (self.o * self.nu <= retry_share
                                            * max(self.arrivals, 1e-9))

    def overloaded(self, p_min: float = 0.5) -> np.ndarray:
        """States where most arrivals time out."""
        return self.p_timeout >= p_min


def build(params: FastParams, phase: Phase | None = None, max_orbit: int = 150,
          max_queue: int | None = None) -> Chain:
    """The chain of ``params`` under ``phase`` (default: the first phase)."""
    ph = phase or params.phases[0]
    c = ph.workers
    qmax = c + params.queue_limit if max_queue is None else max_queue
    k = params.attempts
    omax = 0 if k < 2 else max_orbit
    r = (k - 2) / (k - 1) if k >= 2 else 0.0
    mean_backoff = float(np.mean(params.backoff_s)) if params.backoff_s else 0.0
    nu = 1.0 / max(params.timeout_s + mean_backoff, 1e-3)
    closed = params.max_calls > 0
    lam_open = ph.calls_per_s * params.turns_per_call
    qs = np.arange(qmax + 1)
    mu = 1.0 / (params.service_s + params.load_k_s * qs)
    p = np.array([1.0 if ph.downlink_down or ph.uplink_down else
                  p_timeout(float(q), c, float(mu[q]), params.timeout_s) for q in qs])
    n = (qmax + 1) * (omax + 1)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    Qg, Og = np.meshgrid(qs, np.arange(omax + 1))  # state x = o * (qmax + 1) + q
    Q, Ob = Qg.ravel(), Og.ravel()
    idx = np.arange(n)
    P = p[Q]

    def add(mask: np.ndarray, dq: int | np.ndarray, do: int | np.ndarray,
            rate: np.ndarray) -> None:
        m = mask & (rate > 0)
        q2 = np.clip(Q[m] + (dq[m] if isinstance(dq, np.ndarray) else dq), 0, qmax)
        o2 = np.clip(Ob[m] + (do[m] if isinstance(do, np.ndarray) else do), 0, omax)
        rows.append(idx[m])
        cols.append(o2 * (qmax + 1) + q2)
        vals.append(rate[m])

    if closed:
        live = np.minimum(Q, np.maximum(params.max_calls - Ob, 0)) * (1.0 - P)
        lam = np.maximum(params.max_calls - Ob - live, 0.0) / max(params.think_s, 1e-3)
    else:
        lam = np.full(n, lam_open)
    full = qmax <= Q
    up = ph.uplink_down
    work_doomed = 0 if params.cancel_on_timeout else 1
    # first attempts
    to_orbit = 1 if k >= 2 else 0
    add(~full & ~np.bool_(up), 1, 0, lam * (1 - P))
    add(~full & ~np.bool_(up), work_doomed, to_orbit, lam * P)
    add(full | np.bool_(up), 0, to_orbit, lam)
    # retries
    ret = Ob * nu
    retry_work = 1 if params.retry_is_work or params.cancel_on_timeout else 0
    add(~full & ~np.bool_(up), retry_work, -1, ret * (1 - P))
    add(~full & ~np.bool_(up), retry_work * work_doomed, 0, ret * P * r)
    add(~full & ~np.bool_(up), retry_work * work_doomed, -1, ret * P * (1 - r))
    add(full | np.bool_(up), 0, -1, ret * (1 - r))
    # services
    add(Q > 0, -1, 0, np.minimum(Q, c) * mu[Q])
    R = np.concatenate(rows)
    C = np.concatenate(cols)
    V = np.concatenate(vals)
    keep = R != C
    G = sp.csr_matrix((V[keep], (R[keep], C[keep])), shape=(n, n))
    G = G - sp.diags(np.asarray(G.sum(axis=1)).ravel())
    good = (lam + ret) * (1 - P) * ~full
    return Chain(G.tocsr(), Q, Ob, P, good, float(lam_open if not closed else
                                                  params.max_calls / max(params.think_s, 1e-3)),
                 nu)


def stationary(chain: Chain) -> np.ndarray:
    """The stationary law π (π G = 0, Σ π = 1)."""
    n = chain.generator.shape[0]
    A = chain.generator.T.tolil()
    A[0, :] = np.ones(n)
    b = np.zeros(n)
    b[0] = 1.0
    pi = spsolve(A.tocsc(), b)
    pi = np.clip(pi, 0.0, None)
    return cast("np.ndarray", pi / pi.sum())


def hitting_time(chain: Chain, start: int, target: np.ndarray) -> float:
    """Expected time (s) from state ``start`` until the chain enters ``target`` (a mask);
    0 when ``start`` is in it, ``inf`` when it cannot be reached."""
    if target[start]:
        return 0.0
    rest = np.flatnonzero(~target)
    G = chain.generator[rest][:, rest].tocsc()
    with np.errstate(all="ignore"):
        h = spsolve(G, -np.ones(len(rest)))
    pos = int(np.searchsorted(rest, start))
    v = float(h[pos])
    return v if math.isfinite(v) and v >= 0 else math.inf


@dataclass(frozen=True)
class HittingTimes:
    """Expected times between the healthy and the overloaded sets of one chain."""

    healthy_to_overloaded_s: float
    overloaded_to_healthy_s: float
    states: int


def hitting_times(params: FastParams, phase: Phase | None = None, max_orbit: int = 60,
                  ) -> HittingTimes:
    """From the empty system to the overloaded set, and from a full queue with a busy orbit
    (half the truncation) back to the healthy set."""
    ch = build(params, phase, max_orbit)
    qmax, omax = int(ch.q.max()), int(ch.o.max())
    up = hitting_time(ch, ch.index(0, 0), ch.overloaded())
    down = hitting_time(ch, ch.index(qmax, omax // 2), ch.healthy())
    return HittingTimes(up, down, len(ch.q))
