"""A fleet run split by replica: when the replicas of a ``[fleet]`` are independent, each is
simulated as a one-pool part fed ``1/N`` of the calls, the parts run anywhere (processes, a
Dask cluster) and are merged into the replication of the fleet.

**When the split is exact (in law).**  Calls arrive as a Poisson process; with ``balancer =
"random"`` every request copy goes to a replica drawn uniformly and independently.  If each
call sends exactly *one* request copy over its life, the requests are the calls delayed by
independent latencies (still Poisson) and the uniform choice splits them into ``N``
independent Poisson streams of rate ``calls_per_s / N`` — exactly what ``N`` one-pool runs fed
``calls_per_s / N`` see.  Each replica then evolves from its own stream alone: its workers,
queue, service draws and load latency are its own, a capacity drop hits every replica alike,
and a shared dedup store or session table is never consulted twice for one call.  So
:func:`split_reason` accepts a scenario exactly when

- it is a fleet (``replicas`` > 1) with ``balancer = "random"`` and no ``[[fleet.failures]]``;
- the calls are an open Poisson stream (``max_calls = 0``; a schedule's phases are split too);
- a call sends one request copy: ``turns_per_call`` is the constant 1, ``max_attempts`` is 1,
  no handoffs (the resume is a second request), no uplink duplication (a duplicate copy is
  routed on its own).  A retry that ``max_attempts_by_code`` still allows (e.g. after an
  injected ``internal`` error) is caught when the parts are merged: any call of a part with a
  second attempt, a duplicated request or two requests raises :class:`SplitError` then.

``state`` does not matter then (no request finds another's entry).  CancelTask follows its
task's replica in the fleet, so barge-in is allowed.

**When it is not.**  Anything that lets one call reach the Reasoner twice couples the
replicas under random routing: a retry (or the next turn, or a handoff's resume) is re-routed
at random, so its replica's load depends on how congested *another* replica was when it
timed out — the feedback of a retry storm is spread over the fleet, while a split would keep
each call's retries on its own replica (that is sticky routing, a different system).  No
stated approximation is offered for that case; :func:`split_reason` names the first cause
and the CLI says it in one line.  Load-aware and sequence policies (round robin, least
outstanding, power of two) route by the fleet's state or order, sticky deals calls by
``call_id % N`` (a round robin of calls, not a Poisson split), and a replica failure
re-routes the down replica's retries to the others: none splits.

**Merge.**  Part ``i`` of replication ``r`` of root seed ``s`` runs :func:`part_seed`'s
seed.  The parts' records are concatenated (ids interleaved, ``id × N + i``, so they stay
distinct), their per-second time series added (every column is a count or a gauge), their
counters added (``end_s`` and ``trigger_s`` are the parts' own, the dedup store's peak is
the sum of the parts' peaks: an upper bound of the fleet's), and the ``fleet.*`` counters
computed from the parts: utilisation and requests (arrivals at the Reasoner) of each part
over the measurement window, the imbalance (max / mean), and zero hazards by cause and
requests lost to a down replica (none can occur under these conditions).  The parts always
keep every record row; the merged replication's metrics are computed from them, and its rows
are written only with ``run.records = "all"`` (otherwise none: no pooled sketches either).
The merged output is summarised like any replication, so the numbers differ from the whole
fleet's run (other random draws) but not in law; the same seed gives the same numbers bit
for bit, whichever executor ran the parts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import replication_metrics

SPLITS = ("replications", "replicas")
# id columns made distinct across parts (value × N + part)
ID_COLUMNS = (S.CALL_ID, S.INTERACTION_ID, S.REQUEST_GUID, S.TASK_ID, S.CONTEXT_ID,
              S.LIVE_INSTANCE)


class SplitError(ValueError):
    """A fleet that cannot be split by replica (the message is one line: why)."""


def split_reason(scenario: Scenario) -> str | None:
    """None when ``scenario``'s fleet splits exactly into independent replicas (module
    docstring), else why not (one line)."""
    f, w, live = scenario.fleet, scenario.workload, scenario.live
    if f.replicas < 2:
        return "it is one pool (fleet.replicas = 1): there are no replicas to split"
    if f.balancer != "random":
        why = {"round_robin": "a replica sees every N-th request, not an independent share",
               "least_outstanding": "it routes by the replicas' load",
               "power_of_two": "it routes by the replicas' load",
               "sticky": "it deals calls by call_id % N, a round robin of calls, not a "
                         "Poisson split"}[f.balancer]
        return f"fleet.balancer = {f.balancer!r}: {why}; only random routing splits"
    if f.failures:
        return ("fleet.failures: a down replica's lost requests are retried on the others, "
                "which couples them")
    if w.max_calls > 0:
        return ("workload.max_calls: a closed population couples the replicas' arrivals "
                "(the shares of a fixed number of calls are not independent)")
    tpc = w.turns_per_call
    if not (tpc.kind == "const" and tpc.mean == 1):
        return ("workload.turns_per_call is not the constant 1: a call's next turn is routed "
                "at random again, after a delay that depends on its first replica's load")
    if live.retry.max_attempts > 1:
        return (f"live.retry.max_attempts = {live.retry.max_attempts}: {_RETRY}")
    if w.handoff_share > 0:
        return "workload.handoff_share > 0: a handoff's resume is a second request, re-routed"
    if scenario.network.uplink.duplication > 0:
        return "network.uplink.duplication > 0: a duplicate copy is routed on its own"
    return None


_RETRY = ("a retry is re-routed at random, so a congested replica's timeouts load the others "
          "(set live.retry.max_attempts = 1 and keep max_attempts_by_code at 1 for the codes "
          "that can occur, or run the fleet whole)")


def _second_request(parts: Sequence[Any]) -> str | None:
    """Why a call of these parts reached the Reasoner twice (None: none did) — a retry the
    static check let through (``max_attempts_by_code`` above 1 for a code that occurred)."""
    for i, p in enumerate(parts):
        a = p.attempts
        retried = a[a[S.ATTEMPT].to_numpy() > 1]
        if len(retried):
            r = retried.iloc[0]
            before = a[(a[S.INTERACTION_ID] == r[S.INTERACTION_ID])
                       & (a[S.ATTEMPT] == r[S.ATTEMPT] - 1)]
            code = str(before[S.ERROR_CODE].iloc[0]) if len(before) else "?"
            return (f"a call of part {i} retried (attempt {int(r[S.ATTEMPT])} after '{code}', "
                    f"allowed by live.retry.max_attempts_by_code): {_RETRY}")
        if p.executions[S.NETWORK_DUPLICATE].to_numpy(dtype=bool).any():
            return f"a request of part {i} was duplicated on the way: a copy is routed on its own"
        if len(a) and a[S.CALL_ID].duplicated().any():
            return f"a call of part {i} sent two requests: the second is re-routed at random"
    return None


def check_split(scenario: Scenario) -> None:
    """Raise :class:`SplitError` (one line) unless the fleet splits by replica."""
    why = split_reason(scenario)
    if why is not None:
        raise SplitError(f"cannot split this fleet by replica: {why}")


def part_scenario(scenario: Scenario) -> Scenario:
    """The one-pool scenario of one replica: ``1/N`` of the calls (every schedule phase),
    every record row kept."""
    n = scenario.fleet.replicas
    w = scenario.workload
    over: dict[str, Any] = {"fleet.replicas": 1, "workload.calls_per_s": w.calls_per_s / n,
                            "run.records": "all"}
    if w.schedule:
        over["workload.schedule"] = [{"start_s": p.start_s, "calls_per_s": p.calls_per_s / n}
                                     for p in w.schedule]
    return scenario.with_overrides(over)


def part_seed(seed: int, replication: int, part: int) -> int:
    """The seed of part ``part`` of replication ``replication`` of root seed ``seed``:
    SHA-256("rtalab-replica-part-v1|seed|replication|part")[:8] >> 1 (63-bit)."""
    text = f"rtalab-replica-part-v1|{seed}|{replication}|{part}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1


def part_plan(scenario: Scenario, seed: int, replication: int) -> list[tuple[int, int]]:
    """(seed, replication) of each part of one replication (run with :func:`part_scenario`)."""
    return [(part_seed(seed, replication, i), replication)
            for i in range(scenario.fleet.replicas)]


def _interleave(df: pd.DataFrame, n: int, i: int) -> pd.DataFrame:
    df = df.copy()
    for c in ID_COLUMNS:
        if c in df.columns:
            df[c] = df[c].to_numpy(dtype=np.int64) * n + i
    return df


def _concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Rows of every part in part order, categories kept (union of the parts' categories)."""
    out = pd.concat(frames, ignore_index=True)
    for c in frames[0].columns:
        if isinstance(frames[0][c].dtype, pd.CategoricalDtype):
            out[c] = union_categoricals([f[c] for f in frames], ignore_order=True)
    return out


def merge_parts(scenario: Scenario, parts: Sequence[Any], seed: int, replication: int) -> Any:
    """One replication of the fleet from its parts' RunOutputs (module docstring)."""
    # lazy: +103 ms (simpy, hdrh) off importing rtalab.sim.fleetsplit
    from rtalab.sim.runner import RunOutput

    n = len(parts)
    if n != scenario.fleet.replicas:
        raise ValueError(f"{n} parts for a fleet of {scenario.fleet.replicas}")
    why = _second_request(parts)
    if why is not None:
        raise SplitError(f"cannot split this fleet by replica: {why}")
    tables = {name: _concat([_interleave(getattr(p, name), n, i) for i, p in enumerate(parts)])
              for name in ("attempts", "turns", "calls", "executions", "side_effects")}
    ts = parts[0].timeseries.copy()
    for p in parts[1:]:
        if len(p.timeseries) != len(ts):
            raise ValueError("parts with time series of different lengths")
        for c in ts.columns:
            if c not in (S.REPLICATION, S.T_S):
                ts[c] = ts[c].to_numpy() + p.timeseries[c].to_numpy()
    counters: dict[str, Any] = {}
    for p in parts:
        for k, v in p.counters.items():
            if k in ("end_s", "trigger_s"):
                counters[k] = v
            elif isinstance(v, int | float) and not isinstance(v, bool):
                counters[k] = counters.get(k, 0) + v
    counters.update(_fleet_counters(scenario, parts, tables["turns"]))
    out = RunOutput(attempts=tables["attempts"], turns=tables["turns"], calls=tables["calls"],
                    executions=tables["executions"], side_effects=tables["side_effects"],
                    timeseries=ts, counters=counters, seed=seed, replication=replication,
                    warmup_s=scenario.run.warmup_s, duration_s=scenario.run.duration_s,
                    workers=scenario.reasoner.workers)
    if scenario.run.records != "all":  # the metrics of every row, then no rows written

        empty = {name: frame.head(0) for name, frame in tables.items()}
        out = dataclasses.replace(out, metrics=replication_metrics(out, scenario.run.warmup_s),
                                  attempts=empty["attempts"], turns=empty["turns"],
                                  calls=empty["calls"], executions=empty["executions"],
                                  side_effects=empty["side_effects"])
    return out


def _fleet_counters(scenario: Scenario, parts: Sequence[Any], turns: pd.DataFrame,
                    ) -> dict[str, Any]:
    """The ``fleet.*`` counters of the merged replication (as rtalab.sim.model.fleet defines them,
    over the measurement window ``[ceil(warmup_s), ceil(duration_s))`` of 1-s samples)."""
    lo, hi = math.ceil(scenario.run.warmup_s), math.ceil(scenario.run.duration_s)
    busy = np.array([p.timeseries[S.BUSY_WORKERS].to_numpy()[lo:hi].sum() for p in parts],
                    dtype=float)
    cap = np.array([p.timeseries[S.WORKER_CAPACITY].to_numpy()[lo:hi].sum() for p in parts],
                   dtype=float)
    routed = np.array([p.timeseries[S.SERVER_REQUESTS_PER_S].to_numpy()[lo:hi].sum()
                       for p in parts], dtype=float)
    # lazy: +98 ms (simpy, hdrh) off importing rtalab.sim.fleetsplit
    from rtalab.sim.model.fleet import load_counters

    counted = int((turns[S.START_S].to_numpy() >= scenario.run.warmup_s).sum())
    out: dict[str, Any] = {}
    for c in ("cross_replica", "after_restart", "same_replica"):
        out[f"fleet.dup_request_guid_{c}_per_1k_turns"] = 0.0 if counted else None
        out[f"fleet.reexecuted_turn_{c}_per_1k_turns"] = 0.0 if counted else None
    out["fleet.requests_lost_to_down_replica_per_1k_turns"] = 0.0 if counted else None
    out.update(load_counters(busy, cap, routed))
    out["fleet.replicas"] = len(parts)
    return out


def run_replication(scenario: Scenario, seed: int, replication: int) -> Any:
    """One replication of a splittable fleet, its parts run here one after the other."""
    # lazy: +115 ms (simpy, hdrh) off importing rtalab.sim.fleetsplit
    from rtalab.sim.runner import run_once

    check_split(scenario)
    part = part_scenario(scenario)
    outs = [run_once(part, s, r) for s, r in part_plan(scenario, seed, replication)]
    return merge_parts(scenario, outs, seed, replication)
