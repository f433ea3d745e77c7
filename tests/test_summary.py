"""The summary: CI arithmetic, warm-up removal, and every metric on hand-made records."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rtalab.sim.runner import RunOutput, empty_output
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import mean_ci, metric, queue_metrics, summarize, t_quantile_975

# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 19, 29, 30, 31, 45, 100, 1000])
def test_t_quantile_matches_scipy(df: int) -> None:
    assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-6)


def test_mean_ci_values_and_nulls() -> None:
    one = mean_ci([2.0])
    assert one == {"mean": 2.0, "ci_low": None, "ci_high": None, "values": [2.0]}
    m = mean_ci([1.0, 2.0, 3.0, None, float("nan")])
    half = t_quantile_975(2) * 1.0 / math.sqrt(3)
    assert m["mean"] == 2.0
    assert m["ci_low"] == pytest.approx(2.0 - half) and m["ci_high"] == pytest.approx(2.0 + half)
    assert m["values"] == [1.0, 2.0, 3.0, None, None]
    assert mean_ci([None, None])["mean"] is None


def test_mean_ci_covers_95_percent() -> None:
    rng = np.random.default_rng(0)
    hits = 0
    trials = 4000
    for _ in range(trials):
        m = mean_ci(list(rng.normal(10.0, 3.0, size=5)))
        hits += m["ci_low"] <= 10.0 <= m["ci_high"]
    assert hits / trials == pytest.approx(0.95, abs=0.012)


# --------------------------------------------------------------------------- hand-made run


def _frame(table: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A DataFrame with the schema's columns and dtypes (missing cells: NaN / 0 / False)."""
    spec = dict(S.TABLES[table])
    data: dict[str, Any] = {S.REPLICATION: [0] * len(rows)}
    for name, kind in spec.items():
        vals = [r.get(name) for r in rows]
        if isinstance(kind, tuple):
            data[name] = pd.Categorical(vals, categories=list(kind))
        elif kind == "f8":
            data[name] = np.array([np.nan if v is None else v for v in vals], dtype=float)
        elif kind == "bool":
            data[name] = np.array([bool(v) for v in vals], dtype=bool)
        else:
            data[name] = np.array([-1 if v is None else v for v in vals], dtype=np.int64)
    return pd.DataFrame(data, columns=list(S.columns(table)))


def _turn(i: int, start: float, outcome: str, **kw: Any) -> dict[str, Any]:
    row = {S.CALL_ID: i, S.INTERACTION_ID: i, S.START_S: start, S.OUTCOME: outcome,
           S.END_REASON: "completed" if outcome == "completed" else "attempts-exhausted",
           S.ATTEMPTS: 1, S.RETRIES: 0}
    if outcome == "completed":
        row.update({S.END_S: start + 1.0, S.TTFC_S: 0.5, S.COMPLETION_S: 1.0})
    row.update(kw)
    return row


@pytest.fixture
def run() -> RunOutput:
    """Warm-up 10 s, duration 100 s.  Turn 0 is in the warm-up and must not count."""
    turns = _frame("turns", [
        _turn(0, 5.0, "completed", **{S.ATTEMPTS: 9, S.SIDE_EFFECT: True}),
        _turn(1, 20.0, "completed", **{S.TTFC_S: 0.2, S.COMPLETION_S: 2.0}),
        _turn(2, 30.0, "completed", **{S.SIDE_EFFECT: True, S.ATTEMPTS: 2, S.RETRIES: 1}),
        _turn(3, 40.0, "failed", **{S.ERROR_CODE: "internal", S.ATTEMPTS: 3, S.RETRIES: 2,
                                    S.SIDE_EFFECT: True}),
        _turn(4, 50.0, "completed", **{S.HANDOFF: True, S.TTFC_S: 0.8, S.COMPLETION_S: 3.0}),
    ])
    calls = _frame("calls", [{S.CALL_ID: i, S.ARRIVAL_S: t, S.SESSIONS_OPENED: n}
                             for i, t, n in ((0, 5.0, 3), (1, 20.0, 1), (2, 30.0, 2),
                                             (3, 40.0, 1), (4, 50.0, 1))])
    ex_rows = []
    # turn 0 (warm-up): 9 executions — ignored
    ex_rows += [{S.INTERACTION_ID: 0, S.REQUEST_GUID: 100 + k, S.ARRIVAL_S: 5.0,
                 S.DISPOSITION: "executed", S.SERVICE_START_S: 5.0} for k in range(9)]
    ex_rows += [{S.INTERACTION_ID: 1, S.REQUEST_GUID: 1, S.ARRIVAL_S: 20.0,
                 S.DISPOSITION: "executed", S.SERVICE_START_S: 22.0}]
    ex_rows += [{S.INTERACTION_ID: 2, S.REQUEST_GUID: g, S.ARRIVAL_S: 30.0,
                 S.DISPOSITION: "executed", S.SERVICE_START_S: 30.0} for g in (2, 3)]
    ex_rows += [{S.INTERACTION_ID: 2, S.REQUEST_GUID: 3, S.ARRIVAL_S: 30.1,
                 S.DISPOSITION: "joined", S.NETWORK_DUPLICATE: True}]
    ex_rows += [{S.INTERACTION_ID: 3, S.REQUEST_GUID: g, S.ARRIVAL_S: 40.0,
                 S.DISPOSITION: d, S.SERVICE_START_S: s}
                for g, d, s in ((4, "executed", 40.0), (5, "queue-full", None),
                                (6, "executed", 44.0))]
    ex_rows += [{S.INTERACTION_ID: 4, S.REQUEST_GUID: g, S.ARRIVAL_S: 50.0,
                 S.DISPOSITION: "executed", S.SERVICE_START_S: 50.0} for g in (7, 8)]
    ex_rows += [{S.INTERACTION_ID: 5, S.REQUEST_GUID: 9, S.ARRIVAL_S: 95.0,
                 S.DISPOSITION: "unserved"}]  # arrived in the window, never served
    # side effects: turn 0 (warm-up, ignored) 2x guid 100; turn 2: guid 2 twice + guid 3;
    # turn 3: guid 4 once
    se = _frame("side_effects", [
        {S.INTERACTION_ID: i, S.REQUEST_GUID: g, S.EXECUTED_S: t}
        for i, g, t in ((0, 100, 6.0), (0, 100, 6.5), (2, 2, 31.0), (2, 2, 31.5),
                        (2, 3, 32.0), (3, 4, 41.0))])
    ts = pd.DataFrame({
        S.REPLICATION: 0, S.T_S: np.arange(120, dtype=float),
        **{c: np.zeros(120, dtype=np.int64) for c in S.TIMESERIES_RATES},
        **{c: np.zeros(120, dtype=np.int64) for c in S.TIMESERIES_GAUGES},
    }, columns=list(S.TIMESERIES_COLUMNS))
    ts[S.COMPLETED_TURNS_PER_S] = np.where(ts[S.T_S] < 10, 100, 2)
    ts[S.BUSY_WORKERS] = 3
    ts[S.WORKER_CAPACITY] = 4
    ts[S.DEDUP_BYTES] = np.where(ts[S.T_S] < 10, 10_000, 512)
    base = empty_output(Scenario())
    return RunOutput(**{**base.__dict__, "turns": turns, "calls": calls,
                        "executions": _frame("executions", ex_rows), "side_effects": se,
                        "timeseries": ts, "warmup_s": 10.0, "duration_s": 100.0,
                        "counters": {"end_s": 120.0, "dedup_peak_entries": 7,
                                     "dedup_peak_bytes": 7 * 512}})


def test_turn_metrics_exclude_warmup(run: RunOutput) -> None:
    m = {k: v["mean"] for k, v in summarize([run], 10.0)["metrics"].items()}
    assert m["turns"] == 4 and m["calls"] == 4
    assert m["success_rate"] == 0.75 and m["failed_share"] == 0.25
    assert m["failure_rate.internal"] == 0.25 and m["failure_rate.auth"] == 0.0
    assert m["attempts_per_turn"] == (1 + 2 + 3 + 1) / 4
    assert m["retries_per_turn"] == 3 / 4
    assert m["ttfc_s.p50"] == 0.5 and m["completion_s.p50"] == 2.0
    # the one percentile definition: inverse empirical CDF (an observed value)
    assert m["ttfc_s.p99"] == 0.8


def test_load_amplification_and_hazards(run: RunOutput) -> None:
    m = {k: v["mean"] for k, v in summarize([run], 10.0)["metrics"].items()}
    # executions of counted turns: 1 + 2 + 2 + 2 = 7, per offered (counted) turn
    assert m["load_amplification"] == 7 / 4
    assert m["server_rejections_per_turn"] == 1 / 4
    # guid 2 ran twice: 1 extra; turn 2 ran under guids 2 and 3; call 2 opened 2 sessions
    assert m["hazard.duplicate_request_executions_per_1k_turns"] == 1000 * 1 / 4
    assert m["hazard.reexecuted_turns_per_1k_turns"] == 1000 * 1 / 4
    assert m["hazard.duplicated_sessions_per_1k_turns"] == 1000 * 1 / 4
    assert m["side_effect_executions_per_side_effect_turn"] == 4 / 2


def _means(run: RunOutput, warmup_s: float = 10.0) -> dict[str, Any]:
    return {k: v["mean"] for k, v in summarize([run], warmup_s)["metrics"].items()}


def test_a_turn_starting_exactly_at_the_warmup_counts(run: RunOutput) -> None:
    """``run.warmup_s``: turns starting *earlier* are excluded -- turn 1 starts at 20.0."""
    m = _means(run, 20.0)
    assert m["turns"] == 4 and m["calls"] == 4
    assert m["success_rate"] == 0.75


def test_a_request_run_three_times_is_two_duplicate_executions(run: RunOutput) -> None:
    """docs/metrics.md: duplicate request executions are the executions beyond the first of
    each requestGuid (guid 2 runs a third time here: 2 extra, not 1 guid)."""
    se = pd.concat([run.side_effects, _frame("side_effects", [
        {S.INTERACTION_ID: 2, S.REQUEST_GUID: 2, S.EXECUTED_S: 33.0}])], ignore_index=True)
    m = _means(dataclasses.replace(run, side_effects=se))
    assert m[S.M_DUP_GUID_PER_1K] == 1000 * 2 / 4
    assert m["hazard.reexecuted_turns_per_1k_turns"] == 1000 * 1 / 4  # still one turn


def test_a_ghost_success_is_a_failed_turn_only(run: RunOutput) -> None:
    """A side effect that ran for a turn the caller was told COMPLETED is no ghost: only the
    failed turn 3 is one."""
    turns = run.turns.copy()
    turns.loc[turns[S.INTERACTION_ID].isin([2, 3]), S.SIDE_EFFECT_EXECUTIONS] = 1
    m = _means(dataclasses.replace(run, turns=turns))
    assert m[S.M_GHOST_PER_1K] == 1000 * 1 / 4


def test_timeseries_metrics_use_the_window(run: RunOutput) -> None:
    m = {k: v["mean"] for k, v in summarize([run], 10.0)["metrics"].items()}
    assert m["goodput_turns_per_s"] == 2.0
    assert m["dedup.mean_bytes"] == 512.0
    assert m["worker_utilisation"] == 0.75
    assert m["dedup.peak_bytes"] == 7 * 512


def test_queue_metrics_exact(run: RunOutput) -> None:
    q = queue_metrics(run.executions, 10.0, 100.0, 120.0)
    # admitted in [10, 100): guids 1,2,3,4,6,7,8 and the unserved 9 → 8 arrivals
    assert q["queue.arrival_rate_per_s"] == pytest.approx(8 / 90)
    waits = [2.0, 0, 0, 0, 4.0, 0, 0, 25.0]  # the unserved waits until the end of the run
    assert q["queue.mean_wait_s"] == pytest.approx(np.mean(waits))
    assert q["queue.p_wait"] == pytest.approx(3 / 8)
    # time waiting inside the window: 2 + 4 + (100 - 95) = 11 request-seconds
    assert q["queue.mean_length"] == pytest.approx(11 / 90)
    assert q["queue.throughput_per_s"] == pytest.approx(7 / 90)


def test_summary_shape_and_json(run: RunOutput) -> None:
    s = summarize([run, run], 10.0)
    assert s["replications"] == 2 and s["schema_version"] == S.SCHEMA_VERSION
    m = metric(s, "success_rate")
    assert m["values"] == [0.75, 0.75] and m["ci_low"] == m["ci_high"] == 0.75
    # plain JSON: an infinite caller-perceived percentile is null
    assert metric(s, "caller_completion_s.p99")["mean"] is None
    json.dumps(s, allow_nan=False)
    with pytest.raises(ValueError):
        summarize([], 0.0)


def test_summary_of_an_empty_run_is_all_nulls() -> None:
    s = summarize([empty_output(Scenario())], 0.0)
    assert metric(s, "turns")["mean"] == 0.0
    assert metric(s, "success_rate")["mean"] is None
    assert metric(s, "ttfc_s.p95")["mean"] is None
    json.dumps(s, allow_nan=False)


def test_ci_is_clipped_to_the_metric_domain() -> None:
    """A rare non-negative rate gets no negative lower bound; a share never exceeds 1."""
    from rtalab.sim.shared.summary import domain, mean_ci

    rare = mean_ci([0.0, 0.0, 9.0], domain("hazard.reexecuted_turns_per_1k_turns"))
    assert rare["ci_low"] == 0.0 and rare["ci_high"] > 9.0
    share = mean_ci([1.0, 0.7, 1.0], domain("success_rate"))
    assert share["ci_high"] == 1.0 and 0.0 <= share["ci_low"] < 0.9
    assert domain("failure_rate.internal") == (0.0, 1.0)
    assert domain("ttfc_s.p99") == (0.0, float("inf"))
    free = mean_ci([0.0, 0.0, 9.0])  # no domain given: the plain t interval
    assert free["ci_low"] < 0.0


def test_caller_perceived_latency_counts_turns_not_served_as_inf(run: RunOutput) -> None:
    """Counted turns: completion 2.0, 1.0, failed, 3.0 (TTFC 0.2, 0.5, -, 0.8).  Completed-only
    p99 ignores the failure; the caller-perceived figures count it as +inf."""
    s = summarize([run], 10.0)["metrics"]
    m = {k: v["mean"] for k, v in s.items()}
    assert m["completion_s.p99"] == 3.0
    assert m["caller_completion_s.p50"] == 2.0
    # infinite (more than 5 % / 1 % not served): null, as summary.json is plain JSON
    assert m["caller_completion_s.p95"] is None and m["caller_completion_s.p99"] is None
    assert m["caller_ttfc_s.p50"] == 0.5 and m["caller_ttfc_s.p99"] is None
    assert m["not_served_share"] == 0.25
    assert s["caller_completion_s.p99"]["values"] == [None]


@pytest.mark.parametrize(("failed", "p99", "completed_p99"),
                         [(0, 99.0, 99.0), (1, 99.0, 99.0), (2, None, 98.0)])
def test_caller_p99_is_inf_when_more_than_one_percent_are_not_served(
        failed: int, p99: float, completed_p99: float) -> None:
    """100 offered turns, completion 1..100 s in order, the last ``failed`` of them failed
    (plus one cancelled turn, withdrawn by the caller: not offered).  p99 is the 99th
    smallest value: 99 s with one failure, +inf with two."""
    rows = [_turn(i, 20.0, "completed", **{S.COMPLETION_S: float(i + 1),
                                           S.TTFC_S: 0.1 if i else np.nan})
            for i in range(100 - failed)]
    rows += [_turn(100 - failed + k, 20.0, "failed" if k % 2 == 0 else "abandoned")
             for k in range(failed)]
    rows.append(_turn(200, 20.0, "cancelled"))
    base = empty_output(Scenario())
    out = RunOutput(**{**base.__dict__, "turns": _frame("turns", rows), "warmup_s": 0.0})
    m = {k: v["mean"] for k, v in summarize([out], 0.0)["metrics"].items()}
    assert m["caller_completion_s.p99"] == p99
    assert m["caller_completion_s.p50"] == 50.0
    assert m["not_served_share"] == failed / 100
    # the completed turn that never played a chunk (TTFC NaN) was not served a first chunk
    assert m["caller_ttfc_s.p99"] == (0.1 if failed == 0 else None)  # None: infinite
    assert m["completion_s.p99"] == completed_p99  # blind to the failures


def test_completed_turns_that_never_played_a_chunk_were_not_served_a_first_chunk() -> None:
    """100 completed turns, TTFC 0.1 s but for two that never played a chunk (NaN): the
    caller waited for a first chunk that never came in 2 % of turns, so the caller's TTFC
    p99 is infinite (None) while the completed-only TTFC p99 and the completion p99 are
    finite; nothing failed."""
    rows = [_turn(i, 20.0, "completed", **{S.COMPLETION_S: 1.0,
                                           S.TTFC_S: np.nan if i < 2 else 0.1})
            for i in range(100)]
    base = empty_output(Scenario())
    out = RunOutput(**{**base.__dict__, "turns": _frame("turns", rows), "warmup_s": 0.0})
    m = {k: v["mean"] for k, v in summarize([out], 0.0)["metrics"].items()}
    assert m["not_served_share"] == 0.0 and m["caller_completion_s.p99"] == 1.0
    assert m["caller_ttfc_s.p50"] == 0.1 and m["ttfc_s.p99"] == 0.1
    assert m["caller_ttfc_s.p99"] is None  # infinite: 2 % never got a first chunk


def test_mean_ci_inf_keeps_inf() -> None:
    from rtalab.sim.shared.summary import mean_ci_inf

    assert mean_ci_inf([1.0, 3.0])["mean"] == 2.0
    r = mean_ci_inf([1.0, None])  # one replication infinite: the mean is too
    assert (r["mean"], r["ci_low"], r["ci_high"]) == (None, None, None)
    assert r["values"] == [1.0, None]
    assert mean_ci([1.0, None])["mean"] == 1.0  # (an ordinary metric: undefined is left out)
