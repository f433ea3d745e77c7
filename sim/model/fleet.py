"""A fleet: ``[fleet] replicas`` Reasoners behind a load balancer (``[fleet] balancer``).

Each replica is a :class:`rtalab.sim.model.reasoner.Reasoner` with ``[reasoner]``'s workers, queue
and limits.  With ``state = "shared"`` they share one dedup store, the sessions, the task
index and the handoff state (a Redis deployment); with ``"per-replica"`` each remembers
only what it served (in-memory stores), so a retry the balancer sends to another replica
than its original's finds no dedup entry there and runs again.  All replicas write one
executions table (the records are those of one pool), share the witness and the
downlink, and draw their service times from the same seeded streams.

Balancer policies (per request copy; a CancelTask goes to the replica of its task):
``random`` (uniform), ``round_robin``, ``least_outstanding`` (fewest requests in service or
waiting, ties to the lowest index after the last pick), ``power_of_two`` (the less loaded
of two distinct random replicas) and ``sticky`` (by call, i.e. by contextId: the call's
replica among those in rotation).

A replica failure (``[[fleet.failures]]``): from ``start_s`` the replica answers nothing —
its queue is lost (rows ``unserved``), running work never answers, requests routed to it
are lost — and the balancer takes it out of rotation ``health_check_s`` later; at
``start_s + duration_s`` it restarts (with ``per-replica`` state: empty memory) and
rejoins.  Work still running at the restart answers (a simplification).

Hazards by cause (counters ``fleet.*``, turned into metrics by the summary): an extra
side-effect execution of a requestGuid, or a turn re-executed under a new requestGuid,
is ``cross_replica`` when it ran on another replica than the first execution,
``after_restart`` when it ran on the same replica after that replica restarted, else
``same_replica``.  Per-replica load: utilisation and requests per replica over the
measurement window, and their imbalance (max / mean).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

import rtalab.sim.model.reasoner as reasoner_module
from rtalab.sim.model.clock import call_later, sim_time
from rtalab.sim.model.dedup import DedupStore
from rtalab.sim.model.intsets import IntCounts
from rtalab.sim.model.messages import Request
from rtalab.sim.model.network import Link
from rtalab.sim.model.rand import Streams
from rtalab.sim.model.reasoner import DROPPED, QUEUED, UNSERVED, Reasoner
from rtalab.sim.model.recorder import row_writer
from rtalab.sim.model.witness import Witness
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared.fleet_hazards import CauseFold

#: the fleet folds its buffered side-effect executions into its hazards every this many
FOLD_ROWS = 4096

# the state a replica keeps of its sessions (aliased across replicas with shared state)
_SESSION_STATE = ("known_contexts", "sessions_opened", "minted", "tasks", "awaiting_input",
                  "buckets")


def _drop(_: Any) -> None:
    """A down replica's answers go nowhere."""


class _ReplicaWitness:
    """The shared witness, noting which replica ran each side effect (for the fleet's
    hazards by cause)."""

    def __init__(self, witness: Witness, fleet: Fleet, replica: int) -> None:
        self.witness, self.fleet, self.replica = witness, fleet, replica

    def record(self, executed_s: float, req: Request, context_id: int) -> None:
        fleet = self.fleet
        buf = fleet.side_effects
        buf.append((req.request_guid, req.interaction_id, self.replica, executed_s,
                    req.degraded))
        if len(buf) >= fleet.fold_at:
            fleet.fold_side_effects(sim_time(fleet.env))
        self.witness.record(executed_s, req, context_id)


class _Stores:
    """The fleet's dedup entries (World samples ``store.size(now)``)."""

    def __init__(self, stores: list[DedupStore]) -> None:
        self.stores = stores

    def size(self, now: float) -> int:
        return sum(s.size(now) for s in self.stores)


class Fleet:
    """N Reasoner replicas and the balancer; the Live layer's view of "the Reasoner"."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, streams: Streams,
                 downlink: Link, witness: Witness, peak_from_s: float, cancellable: bool,
                 turn_ids: Callable[[], tuple[int, int]]) -> None:
        cfg = self.cfg = scenario.fleet
        n = cfg.replicas
        self.env = env
        self.scenario = scenario
        #: (first counted turn id or -1, next turn id) of the Live layer
        self.turn_ids = turn_ids
        #: side-effect executions not yet folded into ``causes`` (guid, turn, replica, time,
        #: degraded): those at or after the last fold's time (a later one may come before)
        self.side_effects: list[tuple[int, int, int, float, bool]] = []
        self.fold_at = FOLD_ROWS
        self.restarts: list[list[float]] = [[] for _ in range(n)]
        self.causes = CauseFold(lambda r: self.restarts[r], IntCounts, lambda g: g + 1)
        self.replicas = [Reasoner(env, scenario.reasoner, streams, downlink,
                                  _ReplicaWitness(witness, self, r),  # type: ignore[arg-type]  # duck-types Witness (the methods a Reasoner calls)
                                  peak_from_s, cancellable) for r in range(n)]
        first = self.replicas[0]
        self.executions = first.executions
        for r, rep in enumerate(self.replicas):
            rep._next_context, rep._context_step = r, n  # distinct contextIds fleet-wide
            if r:
                rep.executions = first.executions
                rep._log = row_writer(first.executions, vars(reasoner_module),
                                      *reasoner_module.EXECUTION_ROW)
                if cfg.state == "shared":
                    rep.store = first.store
                    for name in _SESSION_STATE:
                        setattr(rep, name, getattr(first, name))
        self.shared = cfg.state == "shared"
        self.rng = streams.rng("balancer")
        self.policy = cfg.balancer
        self.up = [True] * n
        self.routable = list(range(n))
        self._rr = 0
        self.task_replica: dict[int, dict[int, int]] = {}  # call -> task -> replica
        self.lost_to_down = 0
        self.routed = np.zeros(n, dtype=np.int64)
        self._deliver: Callable[[Any], None] = reasoner_module._no_listener
        # per-second samples of each replica (busy, capacity) and requests routed
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.on_request = self._on_request
        self.on_copy = self._on_copy
        self.on_cancel = self._on_cancel
        for f in cfg.failures:
            call_later(env, f.start_s, lambda _=None, f=f: self._fail(f.replica))  # type: ignore[misc]  # f bound by default
            call_later(env, f.start_s + cfg.health_check_s,
                       lambda _=None, f=f: self._unroute(f.replica))  # type: ignore[misc]  # f bound by default
            call_later(env, f.start_s + f.duration_s, lambda _=None, f=f: self._restart(f.replica))  # type: ignore[misc]  # f bound by default

    # ------------------------------------------------------------------ the Reasoner's face

    @property
    def deliver(self) -> Callable[[Any], None]:
        return self._deliver

    @deliver.setter
    def deliver(self, fn: Callable[[Any], None]) -> None:
        self._deliver = fn
        for r, rep in enumerate(self.replicas):
            rep.deliver = fn if self.up[r] else _drop

    @property
    def store(self) -> _Stores | None:
        stores = [rep.store for rep in (self.replicas[:1] if self.shared else self.replicas)]
        return None if stores[0] is None else _Stores(stores)  # type: ignore[arg-type]  # all replicas have a store or none has

    @property
    def sessions_opened(self) -> IntCounts:
        if self.shared:
            return self.replicas[0].sessions_opened
        out = IntCounts()
        for rep in self.replicas:
            for k, v in rep.sessions_opened.items():
                out[k] = out.get(k, 0) + v
        return out

    def set_capacity(self, workers: int) -> None:
        for r, rep in enumerate(self.replicas):
            if self.up[r]:
                rep.set_capacity(workers)

    def end_call(self, call_id: int, context_id: int) -> None:
        self.task_replica.pop(call_id, None)
        for rep in self.replicas[:1] if self.shared else self.replicas:
            rep.end_call(call_id, context_id)

    def flush(self) -> None:
        for rep in self.replicas:
            rep.flush()

    def gauges(self, now: float) -> tuple[int, int, int, int]:
        g = np.array([rep.gauges(now) for rep in self.replicas], dtype=np.int64)
        self.samples.append((g[:, 2].copy(), g[:, 3].copy(), self.routed.copy()))
        return tuple(int(x) for x in g.sum(axis=0))  # type: ignore[return-value]  # the four gauges

    # ------------------------------------------------------------------ routing

    def _outstanding(self, r: int) -> int:
        rep = self.replicas[r]
        return rep.busy + len(rep.queue) - rep.q_dead

    def pick(self, req: Request) -> int:
        """The replica the balancer sends ``req`` to."""
        pool = self.routable
        k = len(pool)
        if k == 0:
            return -1
        if k == 1:
            return pool[0]
        p = self.policy
        if p == "random":
            return pool[int(self.rng.integers(k))]
        if p == "round_robin":
            self._rr = (self._rr + 1) % k
            return pool[self._rr]
        if p == "least_outstanding":
            self._rr = (self._rr + 1) % k
            order = pool[self._rr:] + pool[:self._rr]
            return min(order, key=self._outstanding)
        if p == "power_of_two":
            a, b = self.rng.choice(k, size=2, replace=False)
            ra, rb = pool[int(a)], pool[int(b)]
            return ra if self._outstanding(ra) <= self._outstanding(rb) else rb
        return pool[req.call_id % k]  # sticky: the call's replica among those in rotation

    def _route(self, req: Request, dup: bool) -> None:
        r = self.pick(req)
        if r >= 0:
            self.routed[r] += 1
        if r < 0 or not self.up[r]:
            self.lost_to_down += 1
            return
        tasks = self.task_replica.get(req.call_id)
        if tasks is None:
            tasks = self.task_replica[req.call_id] = {}
        tasks[req.task_id] = r
        self.replicas[r].arrive(req, dup)

    def _on_request(self, req: Request) -> None:
        self._route(req, False)

    def _on_copy(self, req: Request) -> None:
        self._route(req, True)

    def _on_cancel(self, req: Request) -> None:
        r = self.task_replica.get(req.call_id, {}).get(req.task_id)
        if r is None:
            r = self.pick(req)
        if r >= 0 and self.up[r]:
            self.replicas[r].on_cancel(req)
        else:
            self.lost_to_down += 1

    # ------------------------------------------------------------------ failures

    def _fail(self, r: int) -> None:
        rep = self.replicas[r]
        self.up[r] = False
        rep.deliver = _drop
        for job in rep.queue:  # the process's queue is gone
            if job.state == QUEUED:
                job.state = DROPPED
                rep.q_dead += 1
                rep._log(job.req, job.context_id, job.dup, job.arrival_s, UNSERVED)
        rep.set_capacity(0)

    def _unroute(self, r: int) -> None:
        if not self.up[r] and r in self.routable:
            self.routable = [x for x in self.routable if x != r]

    def _restart(self, r: int) -> None:
        now = sim_time(self.env)
        rep = self.replicas[r]
        self.restarts[r].append(now)
        if not self.shared:  # an empty memory
            cfg = self.scenario.reasoner
            if rep.store is not None:
                was = rep.store
                rep.store = type(was)(cfg.dedup, cfg.dedup_window_s, cfg.dedup_entry_bytes,
                                      self.scenario.run.warmup_s)  # bounded memory: bounded
            opened = rep.sessions_opened
            for name in _SESSION_STATE:
                getattr(rep, name).clear()
            rep.sessions_opened = opened  # the ledger of sessions opened survives (a count)
        self.up[r] = True
        rep.deliver = self._deliver
        rep.set_capacity(self.scenario.reasoner.workers)
        if r not in self.routable:
            self.routable = sorted([*self.routable, r])

    # ------------------------------------------------------------------ counters

    def counters(self, n_bins_window: tuple[int, int]) -> dict[str, Any]:
        """Totals of the replicas plus the ``fleet.*`` counters (hazards by cause, load)."""
        out: dict[str, Any] = {}
        for rep in self.replicas[:1] if self.shared else self.replicas:
            for k, v in rep.counters().items():
                out[k] = out.get(k, 0) + v
        if not self.shared:
            for k in ("server_requests", "server_executions"):
                out[k] = sum(rep.counters()[k] for rep in self.replicas)
        else:
            out["server_requests"] = sum(rep.requests for rep in self.replicas)
            out["server_executions"] = sum(rep.started for rep in self.replicas)
        out.update(self._hazards())
        out.update(self._load(*n_bins_window))
        out["fleet.replicas"] = len(self.replicas)
        return out

    def fold_side_effects(self, before: float) -> None:
        """Fold the buffered executions that ran before ``before`` (the time now, or +inf at
        the end) into ``causes``, in time order: every execution before now has been recorded
        (one is recorded when its tool call starts, at or before the time it ran) and so has
        every restart up to it.  Only the counted turns' (ids from the first counted one; -1
        before the warm-up ends, when no turn so far is counted)."""
        first, _ = self.turn_ids()
        buf = self.side_effects
        ready = [e for e in buf if e[3] < before]
        self.side_effects = [e for e in buf if e[3] >= before]
        self.fold_at = max(FOLD_ROWS, 2 * len(self.side_effects))
        add = self.causes.add
        if first >= 0:
            for guid, uid, r, t, degraded in sorted(ready, key=lambda e: e[3]):
                if uid >= first:
                    add(guid, degraded, uid, r, t)

    def _hazards(self) -> dict[str, Any]:
        first, next_uid = self.turn_ids()
        n = next_uid - first if first >= 0 else 0  # every started turn has a row
        self.fold_side_effects(math.inf)
        out: dict[str, Any] = self.causes.metrics(n)
        out["fleet.requests_lost_to_down_replica_per_1k_turns"] = (
            1000.0 * self.lost_to_down / n if n else None)
        return out

    def _load(self, lo: int, hi: int) -> dict[str, Any]:
        window = self.samples[lo:hi]
        if not window:
            return {}
        busy = np.sum([b for b, _, _ in window], axis=0).astype(float)
        cap = np.sum([c for _, c, _ in window], axis=0).astype(float)
        before = self.samples[lo - 1][2] if lo > 0 else np.zeros(len(self.replicas), np.int64)
        routed = (window[-1][2] - before).astype(float)
        return load_counters(busy, cap, routed)


def load_counters(busy: np.ndarray, cap: np.ndarray, routed: np.ndarray) -> dict[str, Any]:
    """The per-replica load counters from each replica's busy and capacity worker-seconds and
    requests over the measurement window: utilisation, requests share, and their imbalance
    (max / mean over replicas)."""
    out: dict[str, Any] = {}
    util = np.divide(busy, cap, out=np.zeros_like(busy), where=cap > 0)
    for r in range(len(util)):
        out[f"fleet.replica_utilisation.r{r}"] = float(util[r])
        out[f"fleet.replica_requests_share.r{r}"] = (float(routed[r] / routed.sum())
                                                    if routed.sum() else None)
    out["fleet.utilisation_imbalance"] = (float(util.max() / util.mean())
                                          if util.mean() > 0 else None)
    out["fleet.requests_imbalance"] = (float(routed.max() / routed.mean())
                                       if routed.mean() > 0 else None)
    return out
