"""A load run's ``[fleet]``: N reference-Reasoner processes behind the chaos proxy as balancer.

What the embedded deployment makes of each key (docs/contracts.md has the table):

- ``replicas = N``: N Reasoner processes (``logs/reasoner-r<i>.log``), each with
  ``[reasoner]``'s workers, queue and limits (its own capacity pool) and its own gRPC port;
- ``state = "shared"``: all of them on one dedup store, the run's SQLite file (or the
  ``--dedup`` URL: Redis too); ``"per-replica"``: each its own in-memory store (``memory``),
  emptied by a restart; tasks are per process either way (docs/reasoner.md "Known gaps");
- ``balancer``, ``health_check_s``: the chaos proxy's (:mod:`rtalab.loadtests.chaos.balancer`),
  given every replica as an ``--upstream``; the proxy is always in front of a fleet;
- ``[[fleet.failures]]``: replica ``replica`` SIGKILLed ``start_s`` after the load's start
  and started again on its port ``start_s + duration_s`` in (a row of
  ``ledger/restarts.jsonl`` each, ``how = "replica"``);
- the ``fleet.replica_requests_share.r<i>`` / ``fleet.requests_imbalance`` metrics: from the
  attempts' ``server_worker`` (``r<i>/<pid>``: the proxy names the replica that answered);
  the hazards by cause (``fleet.dup_request_guid_<cause>_per_1k_turns`` ...): from the
  witness rows, whose ``server`` is the replica's ``--instance r<i>``.

Every binding is balanced (gRPC per call: each replica's gRPC address is a
``--grpc-upstream`` of the proxy).  Not driven: requests lost to a down replica and
per-replica utilisation (server-side).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtalab.sim.scenario import FleetConfig, Scenario
from rtalab.sim.shared.fleet_hazards import hazards_by_cause

RESTART_HOW = "replica"


def embedded_fleet(sc: Scenario, target: str | None) -> FleetConfig | None:
    """The scenario's fleet when it drives this run (embedded deployment, ``is_fleet``)."""
    return sc.fleet if target is None and sc.fleet.is_fleet else None


def fleet_problem(sc: Scenario, *, target: str | None, chaos: bool | None,
                  crash_at: tuple[float, ...] | list[float], dedup: str | None,
                  workers: int | None) -> str | None:
    """The one-line reason this run cannot drive the scenario's ``[fleet]``, or None."""
    fleet = embedded_fleet(sc, target)
    if fleet is None:
        return None
    n = fleet.replicas
    if n > 1 and chaos is False:
        return (f"--no-chaos with [fleet] replicas = {n}: the chaos proxy is the fleet's "
                "balancer (drop --no-chaos)")
    if crash_at:
        return ("--crash-at / --restart-at / load.restart_at_s with a [fleet]: schedule "
                "replica failures with [[fleet.failures]] replica, start_s, duration_s")
    if fleet.state == "per-replica" and dedup:
        return ('--dedup with [fleet] state = "per-replica": each replica keeps its own '
                'in-memory store (state = "shared" puts them all on one store)')
    if fleet.state == "shared" and n > 1 and dedup == "memory":
        return ('--dedup memory with [fleet] state = "shared": a memory store is each '
                'process\'s own (state = "per-replica" says so; SQLite or Redis is shared)')
    if fleet.state == "per-replica" and (workers or 1) > 1:
        return ('--workers N with [fleet] state = "per-replica": a replica\'s in-memory store '
                "would be split between its processes (use --workers 1)")
    return None


def fleet_warnings(sc: Scenario, target: str | None, duration_s: float) -> list[str]:
    """What a run with a ``[fleet]`` does not do although the scenario says so."""
    if not sc.fleet.is_fleet:
        return []
    if target is not None:
        return ["[fleet] drives only the embedded deployment: with --target the keys are "
                "ignored (the target's own replicas and balancer are measured)"]
    return [f"[[fleet.failures]] replica {f.replica}: the restart at "
            f"{f.start_s + f.duration_s:g} s comes after the end of arrivals ({duration_s:g} s)"
            for f in sc.fleet.failures if f.start_s + f.duration_s >= duration_s]


def replica_dedup(fleet: FleetConfig, shared: str) -> str:
    """The dedup store of each replica: ``shared`` (one URL for all), or ``memory``."""
    return shared if fleet.state == "shared" else "memory"


@dataclass
class Failure:
    """One scheduled ``[[fleet.failures]]`` entry while the load runs."""

    replica: int
    kill_s: float
    restart_s: float
    killed_unix: float | None = None  # when the process was SIGKILLed
    done: bool = False


class FailureSchedule:
    """``[[fleet.failures]]`` on the load's clock: SIGKILL, later restart, a restarts row."""

    def __init__(self, fleet: FleetConfig | None) -> None:
        self.items = [Failure(f.replica, f.start_s, f.start_s + f.duration_s)
                      for f in (fleet.failures if fleet is not None else ())]

    def __bool__(self) -> bool:
        return any(not f.done for f in self.items)

    def step(self, now_s: float, t0: float, kill: Callable[[int], None],
             restart: Callable[[int], None], row: Callable[[dict[str, Any]], None],
             say: Callable[[str], None]) -> None:
        """Do what is due at ``now_s`` seconds since the load's start ``t0``."""
        for f in self.items:
            if f.done:
                continue
            if f.killed_unix is None and now_s >= f.kill_s:
                f.killed_unix = time.time()
                kill(f.replica)
                say(f"rtalab load: replica r{f.replica} killed at {f.killed_unix - t0:.1f} s "
                    "([[fleet.failures]])")
            if f.killed_unix is not None and now_s >= f.restart_s:
                start = time.time()
                restart(f.replica)
                end = time.time()
                row(self._row(f, t0, end, ready=True))
                f.done = True
                say(f"rtalab load: replica r{f.replica} restarted at {start - t0:.1f} s, "
                    f"answering again after {end - start:.1f} s")

    def finish(self, t0: float | None, row: Callable[[dict[str, Any]], None]) -> None:
        """The load ended: a replica still down gets its row (``ready`` false)."""
        for f in self.items:
            if not f.done and f.killed_unix is not None and t0 is not None:
                row(self._row(f, t0, time.time(), ready=False))
                f.done = True

    @staticmethod
    def _row(f: Failure, t0: float, end: float, ready: bool) -> dict[str, Any]:
        assert f.killed_unix is not None
        return {"t": f.killed_unix, "at_s": f.kill_s, "start_s": f.killed_unix - t0,
                "start_unix": f.killed_unix, "end_s": end - t0, "end_unix": end,
                "took_s": end - f.killed_unix, "how": RESTART_HOW, "replica": f.replica,
                "command": None, "exit_code": None, "ready": ready}


def kill_replica(proc: Any) -> None:
    """SIGKILL a replica's process group (its queue and work in progress are lost)."""
    proc.kill(signal.SIGKILL)


def write_restart_row(run_dir: Path, row: dict[str, Any]) -> None:
    """Append ``row`` to ``ledger/restarts.jsonl``."""
    with open(run_dir / "ledger" / "restarts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")


def sum_metrics(parts: list[dict[str, float] | None]) -> dict[str, float] | None:
    """The fleet's ``/metrics``: every replica's counters added up (None if none answered)."""
    got = [p for p in parts if p is not None]
    if not got:
        return None
    out: dict[str, float] = {}
    for p in got:
        for k, v in p.items():
            out[k] = out.get(k, 0.0) + v
    return out


def replica_of(worker: Any) -> int | None:
    """The replica index of a ``server_worker`` the balancing proxy stamped (``r<i>/pid``)."""
    if not isinstance(worker, str):
        return None
    head, sep, _ = worker.partition("/")
    return replica_of_instance(head) if sep else None


def share_counters(attempts: list[dict[str, Any]], t0: float, replicas: int,
                   window: tuple[float, float]) -> dict[str, Any]:
    """``fleet.replica_requests_share.r<i>`` and ``fleet.requests_imbalance`` (max / mean
    over replicas, as ``rtalab.sim.model.fleet``) from the attempts answered by a replica whose
    send falls in ``window`` (seconds since ``t0``: the measurement window); ``{}`` when no
    attempt names a replica (no balancing proxy)."""
    lo, hi = window
    counts = np.zeros(max(replicas, 1), dtype=np.int64)
    named = False
    for a in attempts:
        r = replica_of(a.get("server_worker"))
        if r is None:
            continue
        named = True
        send = a.get("send_s")
        if send is None or not lo <= float(send) - t0 < hi:
            continue
        if r >= len(counts):
            counts = np.concatenate([counts, np.zeros(r + 1 - len(counts), dtype=np.int64)])
        counts[r] += 1
    if not named:
        return {}
    total = int(counts.sum())
    out: dict[str, Any] = {f"fleet.replica_requests_share.r{r}": (float(c / total) if total
                                                                  else None)
                           for r, c in enumerate(counts)}
    out["fleet.requests_imbalance"] = float(counts.max() / counts.mean()) if total else None
    return out


def hazard_counters(witness: list[dict[str, Any]], turns: list[dict[str, Any]],
                    restarts: list[dict[str, Any]], t0: float, warmup_s: float,
                    ignore_guids: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The hazards by cause, as ``rtalab.sim.model.fleet`` counts them, from the witness rows of a
    fleet (``server`` = ``r<i>``, the replica's ``--instance``): per 1000 turns started
    after the warm-up, ``fleet.dup_request_guid_<cause>_per_1k_turns`` (an execution of a
    requestGuid that already ran) and ``fleet.reexecuted_turn_<cause>_per_1k_turns`` (a
    turn run again under another requestGuid, once per turn), with cause ``cross_replica``
    (another replica than the first execution), ``after_restart`` (the same replica, killed
    by ``[[fleet.failures]]`` in between: its memory is gone) or ``same_replica``.  The
    executions of ``ignore_guids`` are left out (the Live users' injected copies under a
    requestGuid of their own, ``[load]`` concurrent duplicates: the simulator has none).
    ``{}`` when no witness row names a replica."""
    if not any(replica_of_instance(w.get("server")) is not None for w in witness):
        return {}
    counted = {str(t["interaction_id"]) for t in turns
               if t.get("start_s") is not None and float(t["start_s"]) - t0 >= warmup_s}
    kills: dict[Any, list[float]] = {}
    for r in restarts:
        if r.get("how") == RESTART_HOW:
            kills.setdefault(int(r["replica"]), []).append(float(r["t"]))
    executions = [(w.get("requestGuid"), w.get("requestGuid") is None,
                   str(w.get("interactionId")), replica_of_instance(w.get("server")),
                   float(w.get("tEnd") or 0.0))
                  for w in witness if str(w.get("interactionId")) in counted
                  and w.get("requestGuid") not in ignore_guids]
    return dict(hazards_by_cause(executions, lambda r: kills.get(r, ()),
                                 len(counted)))


def replica_of_instance(name: Any) -> int | None:
    """The replica index of a witness row's ``server`` (``r<i>``), else None."""
    if isinstance(name, str) and name.startswith("r") and name[1:].isdigit():
        return int(name[1:])
    return None
