"""Wire one replication together (network, Reasoner, witness, Live layer, arrivals) and run it.

The run lasts ``run.duration_s + run.drain_s`` simulated seconds: calls arrive
until ``duration_s``; the drain lets open turns finish; whatever is still open
at the end is recorded as ``unfinished``.  A tick every simulated second
samples the gauges of the time series, compacts the record tables and reports
progress.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from rtalab.sim.model.clock import call_later, run, sim_time
from rtalab.sim.model.fleet import Fleet
from rtalab.sim.model.intsets import IntCounts, SettlingIntCounts, SettlingIntSet
from rtalab.sim.model.live import LiveLayer
from rtalab.sim.model.network import Link
from rtalab.sim.model.rand import Streams, sample_key
from rtalab.sim.model.reasoner import Reasoner
from rtalab.sim.model.recorder import Table
from rtalab.sim.model.tally import Tally
from rtalab.sim.model.witness import Witness
from rtalab.sim.model.workload import Arrivals
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import interrupt
from rtalab.sim.shared.recovery import trigger_span

Progress = Callable[[float], None]
MAX_PROGRESS_CALLS = 200
#: bounded-memory runs fold the rows written into the tally every this many simulated seconds
FOLD_EVERY_S = 10
#: the record tables are checked for a full chunk (``Table.chunk_rows`` rows) every this many
#: simulated seconds: a chunk's boundary moves, no row or value does
COMPACT_EVERY_S = 8
#: bounded-memory runs settle the Reasoner's per-call state every this many folds
SETTLE_SESSIONS_EVERY = 6
#: and fold while the run's end records the calls still open, after each this many
FLUSH_FOLD_CALLS = 4096


@dataclass
class WorldResult:
    """The raw records of one replication, before they become DataFrames."""

    attempts: Table
    turns: Table
    calls: Table
    executions: Table
    side_effects: Table
    # per 1-s bin: one value per gauge of ``rtalab.sim.shared.schema.SAMPLED_GAUGES``, in that order
    gauges: list[tuple[int, ...]]
    sessions_opened: IntCounts
    end_s: float
    dedup_entry_bytes: int
    counters: dict[str, Any]
    #: bounded-memory runs: the metrics folded in as the rows came (tables: sampled rows)
    tally: Tally | None = None


class World:
    """One replication of a scenario."""

    def __init__(self, scenario: Scenario, seed: int, replication: int = 0,
                 progress: Progress | None = None) -> None:
        self.scenario = scenario
        self.env = env = simpy.Environment()
        self.streams = streams = Streams(seed, replication)
        net = scenario.network
        self.uplink = Link(env, "uplink", net.uplink, net.outages, streams)
        self.downlink = Link(env, "downlink", net.downlink, net.outages, streams)
        self.witness = Witness()
        self.end_s = scenario.run.duration_s + scenario.run.drain_s
        cancellable = scenario.live.cancel_on_timeout or scenario.workload.barge_in_share > 0.0
        self.reasoner: Reasoner | Fleet
        if scenario.fleet.is_fleet:
            self.reasoner = Fleet(env, scenario, streams, self.downlink, self.witness,
                                  scenario.run.warmup_s, cancellable,
                                  lambda: (self.live.first_counted_uid, self.live._next_uid))
        else:
            self.reasoner = Reasoner(env, scenario.reasoner, streams, self.downlink,
                                     self.witness, scenario.run.warmup_s, cancellable)
        negotiation = None
        if scenario.live.timeouts.negotiation_s > 0.0:
            negotiation = (
                Link(env, "uplink", net.uplink, net.outages, streams, "negotiation.uplink"),
                Link(env, "downlink", net.downlink, net.outages, streams, "negotiation.downlink"),
            )
        self.live = LiveLayer(env, scenario, streams, self.uplink, self.reasoner, negotiation)
        self.reasoner.deliver = self.live.on_terminal  # responses go to the Live layer
        self.arrivals = Arrivals(env, scenario.workload, scenario.run.duration_s, streams,
                                 self.live.on_call)
        self.progress = progress
        self.n_bins = max(1, math.ceil(self.end_s))
        self._progress_every = max(1, math.ceil(self.n_bins / MAX_PROGRESS_CALLS))
        self.gauges: list[tuple[int, ...]] = []
        self.tally: Tally | None = None
        self._folds = 0
        share = scenario.run.record_share
        if share is not None:  # bounded memory: rows folded into the metrics as they come
            self.tally = Tally(scenario.run.warmup_s, scenario.run.duration_s, self.end_s,
                               self.n_bins, share, sample_key(seed, replication),
                               lambda: self.live.first_counted_uid)
            for name, table in self._tables().items():
                table.sink = self.tally.sinks[name]
            self._bound_reasoner_memory()

    def _replicas(self) -> list[Reasoner]:
        return self.reasoner.replicas if isinstance(self.reasoner, Fleet) else [self.reasoner]

    def _bound_reasoner_memory(self) -> None:
        """Bounded memory: the dedup stores hold their entries in generations
        (``GenerationStore``), the run-long per-call state settles its old ids
        (``SettlingIntSet``, ``SettlingIntCounts``): the same answers; shared objects of a
        fleet stay shared."""
        made: dict[int, Any] = {}
        for rep in self._replicas():
            if rep.store is not None:
                if id(rep.store) not in made:
                    made[id(rep.store)] = rep.store.bounded()
                rep.store = made[id(rep.store)]
            for name, kind in (("known_contexts", SettlingIntSet),
                               ("sessions_opened", SettlingIntCounts)):
                old = getattr(rep, name)
                if id(old) not in made:
                    if len(old):
                        raise RuntimeError(f"{name} filled before the run started")
                    made[id(old)] = kind()
                setattr(rep, name, made[id(old)])

    def _settle_sessions(self) -> None:
        """Settle the per-call state below the oldest open call, and the contextIds below the
        lowest one an open call holds or the Reasoner minted for one (exact either way: a
        late copy of an ended call's request reads and changes a settled id)."""
        sessions = self.live.sessions
        if not sessions:
            return
        oldest_call = next(iter(sessions))  # calls open in arrival (= id) order
        reps = self._replicas()
        held = [s.context_id for s in sessions.values() if s.context_id >= 0]
        for rep in reps:
            for by_guid in rep.minted.values():
                held.extend(by_guid.values())
        ctx = min(held, default=-1)
        done: set[int] = set()
        for rep in reps:
            opened, known = rep.sessions_opened, rep.known_contexts
            if isinstance(opened, SettlingIntCounts) and id(opened) not in done:
                done.add(id(opened))
                opened.settle(oldest_call)
            if isinstance(known, SettlingIntSet) and ctx >= 0 and id(known) not in done:
                done.add(id(known))
                known.settle(ctx)

    def _tables(self) -> dict[str, Table]:
        # folding order: attempts before turns (a turn's row comes after its attempts')
        return {"attempts": self.live.attempts, "executions": self.reasoner.executions,
                "side_effects": self.witness.ledger, "turns": self.live.turns,
                "calls": self.live.calls}

    def _fold(self) -> None:
        """Fold every row written so far into the tally; forget executions of ended turns."""
        assert self.tally is not None
        for table in self._tables().values():
            table.compact(force=True)
        open_uids = np.fromiter((s.turn.uid for s in self.live.sessions.values()
                                 if s.turn is not None), np.int64)
        self.tally.settle(open_uids)
        self._folds += 1
        if self._folds % SETTLE_SESSIONS_EVERY == 0:
            self._settle_sessions()

    # ------------------------------------------------------------------ scheduled things

    def _schedule_capacity_drops(self) -> None:
        drops = self.scenario.reasoner.capacity_drops
        if not drops:
            return
        workers = self.scenario.reasoner.workers
        times = sorted({t for d in drops for t in (d.start_s, d.start_s + d.duration_s)})

        def apply(_: Any = None) -> None:
            now = sim_time(self.env)
            cap = min([workers] + [d.workers for d in drops
                                   if d.start_s <= now < d.start_s + d.duration_s])
            self.reasoner.set_capacity(cap)

        for t in times:
            call_later(self.env, t, apply)

    def _tick(self, _: Any = None) -> None:
        """End of a 1-s bin: sample gauges, compact tables, report progress; schedule the next."""
        interrupt.check()  # a Ctrl-C that other code swallowed (rtalab.sim.shared.interrupt)
        env = self.env
        now = sim_time(env)
        self._sample(now)
        k = len(self.gauges)
        if self.tally is not None:
            if k % FOLD_EVERY_S == 0:
                self._fold()
        elif k % COMPACT_EVERY_S == 0:
            for table in (self.live.attempts, self.live.turns, self.reasoner.executions,
                          self.witness.ledger, self.live.calls):
                table.compact()  # only once a chunk's worth of rows is pending
        if self.progress is not None and k % self._progress_every == 0:
            self.progress(min(1.0, now / self.end_s))
        if k < self.n_bins and k + 1 <= self.end_s:
            call_later(env, (k + 1) - now, self._tick)

    def _sample(self, now: float) -> None:
        in_flight, queue, busy, cap = self.reasoner.gauges(now)
        store = self.reasoner.store
        entries = store.size(now) if store is not None else 0
        # the order of rtalab.sim.shared.schema.SAMPLED_GAUGES
        self.gauges.append((self.live.in_progress, len(self.live.sessions), in_flight, queue, busy,
                            cap, entries))

    # ------------------------------------------------------------------ run

    def run(self) -> WorldResult:
        """Run to the end and return the records.

        The cyclic garbage collector is paused meanwhile: the model creates no
        reference cycles (finished turns are freed by reference counting), and
        the collector's passes over millions of record tuples cost ~30 % of the run.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if was_enabled:
                gc.enable()

    def _run(self) -> WorldResult:
        env = self.env
        self._schedule_capacity_drops()
        self.arrivals.start()
        if self.end_s >= 1.0:
            call_later(env, 1.0, self._tick)
        run(env, self.end_s)
        while len(self.gauges) < self.n_bins:  # the last bin ends at (or after) end_s
            self._sample(sim_time(env))
        self.live.flush(None if self.tally is None else self._fold, FLUSH_FOLD_CALLS)
        self.reasoner.flush()
        if self.tally is not None:
            self._fold()
        if self.progress is not None:
            self.progress(1.0)
        counters: dict[str, Any] = {"end_s": self.end_s, "arrivals": self.arrivals.count}
        counters.update(self.live.counters())
        if isinstance(self.reasoner, Fleet):
            rc = self.scenario.run
            counters.update(self.reasoner.counters((math.ceil(rc.warmup_s),
                                                    math.ceil(rc.duration_s))))
        else:
            counters.update(self.reasoner.counters())
        counters["side_effect_executions"] = self.witness.executions
        link = self.uplink  # downlink messages are mostly computed, not counted
        counters["uplink.sent"] = link.sent
        counters["uplink.dropped"] = link.dropped
        counters["uplink.duplicated"] = link.duplicated

        counters["trigger_s"] = trigger_span(self.scenario)  # recovery_s in the summary
        return WorldResult(
            attempts=self.live.attempts, turns=self.live.turns, calls=self.live.calls,
            executions=self.reasoner.executions, side_effects=self.witness.ledger,
            gauges=self.gauges, sessions_opened=self.reasoner.sessions_opened,
            end_s=self.end_s, dedup_entry_bytes=self.scenario.reasoner.dedup_entry_bytes,
            counters=counters, tally=self.tally,
        )
