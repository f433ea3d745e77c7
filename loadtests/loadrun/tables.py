"""A load run's ledgers as the simulator's tables (``sim/shared/schema.py``), then ``summarize``.

Ids are strings; times are seconds since the run's start (``ledger/clock.json``);
missing measurements are NaN.  What a client cannot see is left undefined,
never invented: the ``executions`` table (the Reasoner's per-request ledger)
is empty, so the server-side metrics (``load_amplification``, ``queue.*``,
``server_*_per_turn``, ``worker_utilisation``) are ``null`` in a load run's
summary.  Categorical columns keep the schema's categories and add what only
a load run has (``cancelled`` outcomes, ``barge-in`` end reason).

* ``attempts`` — the Live users' own attempts (injected copies excluded; an
  attempt with a copy has ``request_duplicated``);
* ``turns`` — plus ``side_effect_executions`` / ``side_effect_request_guids``
  from the witness ledger (by interactionId);
* ``calls`` — ``sessions_opened`` = distinct server contextIds the call saw;
* ``side_effects`` — the witness ledger; ``timeseries`` — 1-s bins of the client's records.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rtalab.loadtests.loadrun.fleet import hazard_counters, share_counters
from rtalab.loadtests.loadrun.uncertainty import add_uncertainty
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import summarize
from rtalab.sim.vocab import CallEndReason, EndReason, TurnOutcome

EXTRA_CATEGORIES = {S.OUTCOME: (TurnOutcome.CANCELLED.value,),
                    S.END_REASON: (EndReason.BARGE_IN.value,)}
# what only the Reasoner's own per-request records can tell (queue, workers, dedup store,
# what happened to abandoned work): undefined in a load run, never a misleading 0
SERVER_ONLY_METRICS = (S.M_LOAD_AMPLIFICATION, S.M_REJECTIONS_PER_TURN, S.M_UTILISATION,
                       S.M_DEDUP_MEAN_BYTES, S.M_DEDUP_PEAK_ENTRIES, S.M_DEDUP_PEAK_BYTES,
                       S.M_SPURIOUS_TIMEOUTS_PER_1K, S.M_SPURIOUS_TIMEOUT_SHARE)
SERVER_ONLY_PREFIXES = ("queue.", S.M_CANCEL_PREFIX)


def server_only(name: str) -> bool:
    """True for a metric a load run cannot measure from the client and witness ledgers."""
    return name in SERVER_ONLY_METRICS or name.startswith(SERVER_ONLY_PREFIXES)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file ([] if absent)."""
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _rel(v: Any, t0: float) -> float:
    return float(v) - t0 if isinstance(v, int | float) and math.isfinite(v) else math.nan


def _frame(rows: list[dict[str, Any]], spec: tuple[S.ColumnSpec, ...]) -> pd.DataFrame:
    """A DataFrame with the spec's columns and dtypes (strings for ids)."""
    data: dict[str, Any] = {S.REPLICATION: np.zeros(len(rows), dtype=np.int64)}
    for name, kind in spec:
        col = [r.get(name) for r in rows]
        if isinstance(kind, tuple):
            cats = list(kind) + [c for c in EXTRA_CATEGORIES.get(name, ()) if c not in kind]
            data[name] = pd.Categorical([c if c in cats else None for c in col],
                                        categories=cats)
        elif kind == "bool":
            data[name] = np.array([bool(v) for v in col], dtype=bool)
        elif kind == "f8":
            data[name] = np.array([math.nan if v is None else float(v) for v in col], dtype=float)
        elif name in (S.CALL_ID, S.INTERACTION_ID, S.REQUEST_GUID, S.TASK_ID, S.CONTEXT_ID):
            data[name] = pd.array([None if v is None else str(v) for v in col], dtype=object)
        else:
            data[name] = np.array([-1 if v is None else int(v) for v in col], dtype=np.int64)
    return pd.DataFrame(data)


def own_guid_copies(attempts: list[dict[str, Any]]) -> set[str]:
    """The requestGuids only client-injected copies carried (a copy under a guid of its own)."""
    injected = {a["request_guid"] for a in attempts if a.get("injected")}
    return injected - {a["request_guid"] for a in attempts if not a.get("injected")}


def build_output(run_dir: Path, duration_s: float, seed: int,
                 trigger_s: tuple[float, float] | None = None, replicas: int = 1,
                 warmup_s: float = 0.0) -> S.RunRecords:
    """Read ``ledger/*.jsonl`` of ``run_dir`` into schema tables; ``trigger_s`` (seconds
    since the load's start) makes the summary report ``recovery_s`` after it.  Attempts a
    balancing proxy stamped with their replica (``[fleet]``, ``replicas`` of them) add the
    per-replica request shares to the counters (the attempts sent in [``warmup_s``,
    ``duration_s``), every copy included, as the simulator counts what it routes)."""
    led = Path(run_dir) / "ledger"
    t0 = json.loads((led / "clock.json").read_text(encoding="utf-8"))["t0"]
    raw_attempts = read_jsonl(led / "attempts.jsonl")
    raw_turns = read_jsonl(led / "turns.jsonl")
    raw_calls = read_jsonl(led / "calls.jsonl")
    witness = read_jsonl(led / "witness.jsonl")
    attempts = _attempt_rows(raw_attempts, t0)
    turns = _turn_rows(raw_turns, raw_calls, witness, t0)
    calls = _call_rows(raw_calls, t0)
    side = []
    for w in witness:
        iid = str(w.get("interactionId"))
        side.append({S.CALL_ID: iid.rsplit(".", 1)[0], S.INTERACTION_ID: iid,
                     S.REQUEST_GUID: w.get("requestGuid"), S.CONTEXT_ID: w.get("contextId"),
                     S.EXECUTED_S: _rel(w.get("tEnd"), t0)})

    out = S.RunRecords(
        attempts=_frame(attempts, S.ATTEMPTS_TABLE),
        turns=_frame(turns, S.TURNS_TABLE + S.TURNS_WITNESS_COLUMNS),
        calls=_frame(calls, S.CALLS_TABLE + S.CALLS_SERVER_COLUMNS),
        executions=_frame([], S.EXECUTIONS_TABLE),
        side_effects=_frame(side, S.SIDE_EFFECTS_TABLE),
        timeseries=pd.DataFrame(), counters={}, seed=seed, replication=0,
        duration_s=duration_s)
    end = max([duration_s, *[x for x in out.turns[S.END_S].to_numpy() if math.isfinite(x)]])
    return replace(out, timeseries=timeseries(out, end), counters={
        "end_s": end, "calls": len(calls), "turns": len(turns), "attempts": len(attempts),
        "injected_copies": len(raw_attempts) - len(attempts), "witness_rows": len(witness),
        "trigger_s": trigger_s,
        **share_counters(raw_attempts, t0, replicas, (warmup_s, duration_s)),
        **hazard_counters(witness, raw_turns, read_jsonl(led / "restarts.jsonl"), t0,
                          warmup_s, own_guid_copies(raw_attempts))})


def _attempt_rows(raw_attempts: list[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    """The attempts table's rows (injected copies left out; times since ``t0``), by send."""
    copied = {a["request_guid"] for a in raw_attempts if a.get("injected")}
    attempts = []
    for a in raw_attempts:
        if a.get("injected"):
            continue
        r = dict(a)
        for k in (S.SEND_S, S.FIRST_RESPONSE_S, S.FIRST_CHUNK_S, S.END_S):
            r[k] = _rel(a.get(k), t0)
        r[S.CONTEXT_ID] = a.get("context_id") or a.get("context_id_learned")
        r[S.REQUEST_DUPLICATED] = a["request_guid"] in copied
        r[S.REPLAYED] = False
        r[S.REQUEST_LOST] = False
        r[S.CHUNKS_LOST] = None
        attempts.append(r)
    attempts.sort(key=lambda r: r[S.SEND_S])
    return attempts


def _turn_rows(raw_turns: list[dict[str, Any]], raw_calls: list[dict[str, Any]],
               witness: list[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    """The turns table's rows with the witness's executions and the escalation, by start."""
    se_by_turn: dict[str, list[str]] = {}
    for w in witness:
        se_by_turn.setdefault(str(w.get("interactionId")), []).append(str(w.get("requestGuid")))
    escalated_calls = {c["call_id"] for c in raw_calls
                       if c.get("end_reason") == CallEndReason.ESCALATED}
    last_turn: dict[str, int] = {}
    for t in raw_turns:
        last_turn[t["call_id"]] = max(last_turn.get(t["call_id"], -1), int(t["turn_index"]))
    turns = []
    for t in raw_turns:
        r = dict(t)
        r[S.START_S] = _rel(t.get("start_s"), t0)
        r[S.END_S] = _rel(t.get("end_s"), t0)
        r[S.ESCALATED] = (t["call_id"] in escalated_calls
                          and int(t["turn_index"]) == last_turn[t["call_id"]])
        guids = se_by_turn.get(str(t["interaction_id"]), [])
        r[S.SIDE_EFFECT_EXECUTIONS] = len(guids)
        r[S.SIDE_EFFECT_REQUEST_GUIDS] = len(set(guids))
        turns.append(r)
    turns.sort(key=lambda r: r[S.START_S])
    return turns


def _call_rows(raw_calls: list[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    """The calls table's rows (sessions opened: the contextIds seen), by arrival."""
    calls = []
    for c in raw_calls:
        r = dict(c)
        r[S.ARRIVAL_S] = _rel(c.get("arrival_s"), t0)
        r[S.END_S] = _rel(c.get("end_s"), t0)
        r[S.SESSIONS_OPENED] = len(c.get("context_ids") or ())
        calls.append(r)
    calls.sort(key=lambda r: r[S.ARRIVAL_S])
    return calls


def _in_progress(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Gauge sampled at the end of each 1-s bin: started before it and not yet ended."""
    open_end = np.where(np.isfinite(end), end, np.inf)
    # started before b and not ended before b: #(start < b) - #(end < b), exact once an end
    # before its start is read as the start (such a row counts in no bin either way)
    open_end = np.maximum(open_end, start)
    b = edges[1:]
    started = np.searchsorted(np.sort(start), b, side="left")
    ended = np.searchsorted(np.sort(open_end), b, side="left")
    return (started - ended).astype(float)  # an array: a frame takes it without conversion


def timeseries(out: S.RunRecords, end_s: float) -> pd.DataFrame:
    """1-s bins of the client's records; server gauges are NaN (not visible to a client)."""
    n = max(1, math.ceil(end_s))
    edges = np.arange(n + 1, dtype=float)

    def rate(x: np.ndarray) -> np.ndarray:
        # np.histogram over the integer edges, exactly (bin k holds [k, k+1), the last one
        # [n-1, n]; outside them, nothing), as a bincount of the floors: a tenth of the CPU
        x = x[np.isfinite(x)]
        x = x[(x >= 0.0) & (x <= n)]
        return np.bincount(np.minimum(x.astype(np.int64), n - 1), minlength=n).astype(float)

    t, a = out.turns, out.attempts
    start, end = t[S.START_S].to_numpy(), t[S.END_S].to_numpy()
    outcome = t[S.OUTCOME].astype(object).to_numpy()
    send = a[S.SEND_S].to_numpy()
    c = out.calls
    nan = np.full(n, math.nan)
    cols: dict[str, Any] = {  # one DataFrame built at once: the bootstrap calls this per draw
        S.REPLICATION: np.zeros(n, dtype=np.int64), S.T_S: edges[:-1],
        S.OFFERED_TURNS_PER_S: rate(start),
        S.ATTEMPTS_PER_S: rate(send),
        S.RETRIES_PER_S: rate(send[a[S.ATTEMPT].to_numpy() > 1]),
        S.COMPLETED_TURNS_PER_S: rate(end[outcome == "completed"]),
        S.FAILED_TURNS_PER_S: rate(end[outcome == "failed"]),
        S.SERVER_REQUESTS_PER_S: nan, S.SERVER_EXECUTIONS_PER_S: nan,
        S.TURNS_IN_PROGRESS: _in_progress(start, end, edges),
        S.CALLS_IN_PROGRESS: _in_progress(c[S.ARRIVAL_S].to_numpy(), c[S.END_S].to_numpy(),
                                          edges)}
    for g in (S.SERVER_IN_FLIGHT, S.QUEUE_LENGTH, S.BUSY_WORKERS, S.WORKER_CAPACITY,
              S.DEDUP_ENTRIES, S.DEDUP_BYTES):
        cols[g] = nan
    return pd.DataFrame({k: cols[k] for k in S.TIMESERIES_COLUMNS})


def split_by_binding(run_dir: Path, out: S.RunRecords) -> dict[str, S.RunRecords]:
    """The tables of each binding of a run over several (a call's rows go with its binding,
    from the ledgers' ``binding`` column; the timeseries rebuilt from each share); ``{}``
    with one binding."""
    of: dict[str, str] = {}
    for name in ("calls.jsonl", "turns.jsonl", "attempts.jsonl"):
        for row in read_jsonl(Path(run_dir) / "ledger" / name):
            if row.get("binding") and row.get("call_id") is not None:
                of.setdefault(str(row["call_id"]), str(row["binding"]))
    names = sorted(set(of.values()))
    if len(names) < 2:
        return {}
    parts = {}
    for b in names:
        def mine(df: pd.DataFrame, b: str = b) -> pd.DataFrame:
            if S.CALL_ID not in df.columns:
                return df
            return df[df[S.CALL_ID].astype(str).map(of).eq(b).to_numpy()].reset_index(drop=True)

        sub = replace(out, attempts=mine(out.attempts), turns=mine(out.turns),
                      calls=mine(out.calls), executions=mine(out.executions),
                      side_effects=mine(out.side_effects))
        parts[b] = replace(sub, timeseries=timeseries(sub, float(len(out.timeseries))))
    return parts


def load_summary(out: S.RunRecords, warmup_s: float, uncertainty: bool = True
                 ) -> dict[str, Any]:
    """``rtalab.sim.shared.summary.summarize`` of the load run, server-only metrics set undefined,
    every measured metric with its bootstrap ``se`` and 95 % CI
    (:mod:`rtalab.loadtests.loadrun.uncertainty`; ``uncertainty=False``: none, and
    ``summary["uncertainty"]`` says so)."""
    summary = summarize([out], warmup_s)
    for name in list(summary["metrics"]):
        if server_only(name):
            summary["metrics"][name] = {"mean": None, "ci_low": None, "ci_high": None,
                                        "values": [None]}
    summary["kind"] = "load"
    summary["not_measured"] = sorted(n for n in summary["metrics"] if server_only(n))
    if uncertainty:  # se + CI: a bootstrap over calls
        add_uncertainty(summary, out, warmup_s, out.seed, timeseries)
    else:
        summary["uncertainty"] = "none (not computed: the caller shows no CI of this run)"
    return summary
