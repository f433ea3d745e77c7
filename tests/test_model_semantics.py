"""Semantics of the model against errors.md / PROTOCOL.md, each on a tiny exact scenario.

Every test here pins one rule the model must follow (and failed before it did):
taskId renewal only after a FAILED state, the ``retryAfterMs`` hint on every
``rate-limited``, turn dedup that lets a retryable failure be retried while
running the side effect once per turn, escalation counting failed turns only,
the abandoned turn staying in progress until the handoff timeout, load latency
growing with the requests in flight, and the extension negotiation timeout.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rtalab.sim.runner import run_once
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared.summary import metric, summarize
from tests.scenarios import one_turn

# --------------------------------------------------------------------------- taskId renewal


def test_new_turn_id_is_taken_after_a_failed_state_only() -> None:
    """errors.md §4: a retry after FAILED takes a new taskId; a retry after a timeout (no
    terminal state seen) is the same turn and keeps it (§3)."""
    timeouts = run_once(one_turn(**{
        "reasoner.reasoning_time_s": 3.0, "reasoner.progress_directive": False,
        "live.timeouts.turn_response_s": 1.0, "live.retry.max_attempts": 3,
        "live.retry.new_turn_id": True,
        "reasoner.known_task": "execute"}), seed=1).attempts  # no joining: 3 timeouts
    assert timeouts["outcome"].astype(str).tolist() == ["timeout"] * 3
    assert timeouts["task_id"].nunique() == 1
    assert timeouts["request_guid"].nunique() == 3  # new requestGuid per retry (§3)

    failed = run_once(one_turn(**{
        "reasoner.errors": {"internal": 1.0}, "live.retry.max_attempts": 3,
        "live.retry.max_attempts_by_code": {}, "live.retry.new_turn_id": True}), seed=1).attempts
    assert failed["outcome"].astype(str).tolist() == ["failed"] * 3
    assert failed["task_id"].nunique() == 3

    kept = run_once(one_turn(**{
        "reasoner.errors": {"internal": 1.0}, "live.retry.max_attempts": 3,
        "live.retry.max_attempts_by_code": {}, "live.retry.new_turn_id": False}), seed=1).attempts
    assert kept["task_id"].nunique() == 1


# --------------------------------------------------------------------------- retryAfterMs


@pytest.mark.parametrize("new_guid", [True, False])
def test_injected_rate_limited_carries_the_retry_after_hint(new_guid: bool) -> None:
    """Every rate-limited FAILED carries rta/retryAfterMs ([reasoner] retry_after_ms for
    injected ones, as the reference Reasoner does) — also when replayed from the dedup store."""
    a = run_once(one_turn(**{
        "reasoner.errors": {"rate-limited": 1.0}, "reasoner.retry_after_ms": 1500,
        "live.retry.max_attempts": 3, "live.backoff.strategy": "none",
        "live.retry.new_request_guid": new_guid}), seed=1).attempts
    assert a["error_code"].astype(str).tolist() == ["rate-limited"] * 3
    assert a["retry_after_ms"].tolist() == [1500.0] * 3
    assert a["replayed"].tolist() == [False] + [not new_guid] * 2
    assert (a["delay_before_s"].iloc[1:] >= 1.5).all()
    gaps = a["send_s"].diff().iloc[1:]
    assert (gaps >= 1.5).all()


# --------------------------------------------------------------------------- turn dedup


def test_turn_dedup_lets_a_retryable_failure_be_retried() -> None:
    """errors.md §3: after a retryable code the Reasoner must be able to succeed on a repeat
    attempt; dedup by turn releases the turn's key instead of replaying the failure."""
    out = run_once(one_turn(**{
        "reasoner.errors": {"internal": 1.0}, "reasoner.dedup": "turn",
        "live.retry.max_attempts": 3, "live.retry.max_attempts_by_code": {},
        "live.retry.new_turn_id": False}), seed=1)
    assert out.attempts["task_id"].nunique() == 1
    assert not out.attempts["replayed"].any()
    assert (out.executions["disposition"].astype(str) == "executed").sum() == 3
    # a non-retryable outcome is still stored: a retry keeping the requestGuid... is never sent,
    # but a network copy arriving later gets it replayed
    dup = run_once(one_turn(**{
        "reasoner.errors": {"auth": 1.0}, "reasoner.dedup": "turn",
        "network.uplink.duplication": 1.0, "network.uplink.duplicate_delay_s": 2.0}), seed=1)
    assert dup.executions["disposition"].astype(str).tolist() == ["executed", "replayed"]


def test_turn_dedup_runs_the_side_effect_once_per_turn() -> None:
    """A slow tool (1 s > upstream timeout 0.5 s) fails every attempt with upstream-timeout,
    but the side effect happened.  Dedup by turn guards it: the retry (same turn) skips the
    tool and completes.  A new taskId per retry (§4) defeats the guard."""
    sc = one_turn(**{
        "workload.side_effect_share": 1.0, "reasoner.tool_latency_s": 1.0,
        "reasoner.upstream_timeout_s": 0.5, "reasoner.dedup": "turn",
        "live.retry.max_attempts": 3, "live.retry.new_turn_id": False})
    out = run_once(sc, seed=1)
    assert out.attempts["outcome"].astype(str).tolist() == ["failed", "completed"]
    assert len(out.side_effects) == 1
    t = out.turns.iloc[0]
    assert t["outcome"] == "completed" and t["side_effect_executions"] == 1
    ex = out.executions
    assert (ex["disposition"].astype(str) == "executed").sum() == 2
    ran = ex[ex["disposition"] == "executed"]
    svc = (ran["service_end_s"] - ran["service_start_s"]).to_numpy()
    assert svc == pytest.approx([1.0, 0.5])  # the second did not call the tool

    renewed = run_once(sc.with_overrides({"live.retry.new_turn_id": True}), seed=1)
    assert renewed.attempts["outcome"].astype(str).tolist() == ["failed"] * 3
    assert renewed.attempts["task_id"].nunique() == 3
    assert len(renewed.side_effects) == 3  # re-executed under each new turn

    guid = run_once(sc.with_overrides({"reasoner.dedup": "request-guid",
                                       "reasoner.known_task": "execute"}), seed=1)
    assert len(guid.side_effects) == 3  # a new requestGuid per retry re-runs the tool
    # ... unless the known-taskId rule (D2) holds: the retry gets the stored FAILED outcome
    task_rule = run_once(sc.with_overrides({"reasoner.dedup": "request-guid"}), seed=1)
    assert len(task_rule.side_effects) == 1
    assert task_rule.executions["disposition"].astype(str).tolist() == [
        "executed", "replayed", "replayed"]


# --------------------------------------------------------------------------- escalation


def _abandoning(**overrides: Any) -> Scenario:
    """Every turn is a handoff the caller answers after 10 s; the Live layer waits 5 s."""
    return one_turn(**{"workload.turns_per_call": 4, "workload.think_time_s": 1.0,
                   "workload.handoff_share": 1.0, "workload.caller_response_time_s": 10.0,
                   "live.timeouts.handoff_s": 5.0, **overrides})


def test_abandoned_turns_do_not_escalate() -> None:
    """The escalation rule ends a session after N *failed* turns in a row; an abandoned
    handoff (the caller did not answer) is not a failed turn."""
    out = run_once(_abandoning(**{"live.escalation.end_session_after_failed_turns": 2}), seed=1)
    assert out.turns["outcome"].astype(str).tolist() == ["abandoned"] * 4
    assert not out.turns["escalated"].any()
    assert out.calls["end_reason"].astype(str).tolist() == ["all-turns-done"]


def test_failed_turns_escalate_and_end_the_session() -> None:
    out = run_once(one_turn(**{"workload.turns_per_call": 5, "workload.think_time_s": 1.0,
                           "reasoner.errors": {"auth": 1.0},
                           "live.escalation.end_session_after_failed_turns": 2}), seed=1)
    assert out.turns["escalated"].tolist() == [False, True]
    c = out.calls.iloc[0]
    assert c["end_reason"] == "escalated" and c["turns_started"] == 2 and c["turns_planned"] == 5


def test_abandoned_turn_is_in_progress_until_the_handoff_timeout() -> None:
    out = run_once(_abandoning(**{"workload.turns_per_call": 1}), seed=1)
    t = out.turns.iloc[0]
    assert t["outcome"] == "abandoned"
    ts = out.timeseries.set_index("t_s")["turns_in_progress"]
    inside = [k for k in ts.index if t["start_s"] < k + 1 < t["end_s"]]  # gauge at k + 1
    assert len(inside) >= 4
    assert (ts.loc[inside] == 1).all()
    assert (ts.loc[[k for k in ts.index if k + 1 > t["end_s"]]] == 0).all()


# --------------------------------------------------------------------------- load latency


def test_load_latency_counts_every_request_in_flight() -> None:
    """Service time = reasoning + base + k × requests in flight at the Reasoner (queued and in
    service, this one included): one worker, three requests arriving together."""
    sc = Scenario().with_overrides({
        "workload.max_calls": 3, "workload.calls_per_s": 1e6, "workload.turns_per_call": 1,
        "workload.side_effect_share": 0.0, "network.uplink.latency_s": 0.0,
        "network.downlink.latency_s": 0.0, "reasoner.workers": 1,
        "reasoner.reasoning_time_s": 0.0, "reasoner.load_latency_k_s": 0.1,
        "run.duration_s": 10.0, "run.warmup_s": 0.0})
    ex = run_once(sc, seed=1).executions
    svc = (ex["service_end_s"] - ex["service_start_s"]).to_numpy()
    # the first starts alone (1 in flight); the second with the third still waiting (2)
    assert svc == pytest.approx([0.1, 0.2, 0.1])


# --------------------------------------------------------------------------- negotiation


def test_negotiation_delays_the_first_turn_by_the_round_trip() -> None:
    out = run_once(one_turn(**{"workload.turns_per_call": 2, "workload.think_time_s": 1.0}), seed=1)
    c, t = out.calls.iloc[0], out.turns
    assert not c["degraded"]
    assert t["start_s"].iloc[0] - c["arrival_s"] == pytest.approx(0.02)  # upgrade + echo
    a = out.attempts.iloc[0]
    assert a["first_response_s"] - a["send_s"] == pytest.approx(0.02)  # progress directive


def test_negotiation_timeout_zero_means_not_modelled() -> None:
    out = run_once(one_turn(**{"live.timeouts.negotiation_s": 0.0,
                           "network.uplink.latency_s": 5.0}), seed=1)
    assert out.turns["start_s"].iloc[0] == out.calls["arrival_s"].iloc[0]
    assert not out.calls["degraded"].iloc[0]


@pytest.mark.parametrize("cause", ["slow", "outage", "lost"])
def test_negotiation_timeout_falls_back_to_degraded_core_a2a(cause: str) -> None:
    """errors.md §5: no echo within negotiation_s → degraded core A2A: the first turn starts
    at the timeout, and the session has no profile features (no progress directive, no
    rta/requestGuid or rta/turnId to deduplicate by)."""
    over: dict[str, Any] = {"live.timeouts.negotiation_s": 0.3,
                            "network.uplink.duplication": 1.0,
                            "network.uplink.duplicate_delay_s": 2.0}
    if cause == "slow":
        over["network.downlink.latency_s"] = 0.3  # round trip 0.31 > 0.3
    elif cause == "outage":
        over["network.outages"] = [{"start_s": 0.0, "duration_s": 0.2, "direction": "uplink"}]
    else:
        over["network.downlink.loss"] = 1.0
        over["live.timeouts.turn_response_s"] = 0.0
        over["workload.max_calls"] = 1
    out = run_once(one_turn(**over), seed=1)
    c = out.calls.iloc[0]
    assert c["degraded"]
    assert out.turns["start_s"].iloc[0] - c["arrival_s"] == pytest.approx(0.3)
    if cause != "lost":
        a = out.attempts.iloc[0]
        down = 0.3 if cause == "slow" else 0.01
        # no progress directive: the first message is the first chunk
        assert a["first_response_s"] == pytest.approx(a["first_chunk_s"])
        assert a["first_chunk_s"] - a["send_s"] == pytest.approx(0.01 + 0.5 + 0.1 + down)
    # the network's copy of the request is not deduplicated: no requestGuid on the wire
    ex = out.executions
    assert ex["network_duplicate"].any()
    assert (ex["disposition"].astype(str) == "executed").all()


def test_degraded_sessions_in_the_summary() -> None:
    """Degraded calls are counted; their duplicates are no requestGuid MUST violation (no
    requestGuid was sent) but still show as side-effect executions per side-effect turn."""
    sc = one_turn(**{"workload.max_calls": 0, "workload.calls_per_s": 2.0,
                 "workload.side_effect_share": 1.0, "reasoner.upstream_timeout_s": 0.0,
                 "live.timeouts.negotiation_s": 0.5,
                 "network.uplink.duplication": 0.5, "network.uplink.duplicate_delay_s": 0.05,
                 "network.outages": [{"start_s": 50.0, "duration_s": 50.0,
                                      "direction": "downlink"}],
                 "live.timeouts.turn_response_s": 0.0, "live.timeouts.turn_total_s": 3.0,
                 "run.duration_s": 200.0, "run.warmup_s": 10.0})
    out = run_once(sc, seed=3)
    s = summarize([out], sc.run.warmup_s)
    json.dumps(s, allow_nan=False)
    calls = out.calls[out.calls["arrival_s"] >= 10.0]
    share = metric(s, "degraded_call_share")["mean"]
    assert share == pytest.approx(calls["degraded"].mean()) and 0.15 < share < 0.35
    degraded = out.calls.loc[out.calls["degraded"], "call_id"]
    assert (calls.loc[calls["degraded"], "arrival_s"].between(49.9, 100.0)).all()
    se = out.side_effects
    per_guid = se[se["call_id"].isin(degraded)].groupby("request_guid").size()
    assert (per_guid > 1).sum() > 10  # duplicates ran in degraded sessions...
    assert metric(s, "hazard.duplicate_request_executions_per_1k_turns")["mean"] == 0.0
    assert metric(s, "side_effect_executions_per_side_effect_turn")["mean"] > 1.05


# --------------------------------------------------------------------------- partitions


@pytest.mark.parametrize(("total_s", "outcome"), [(0.0, "unfinished"), (4.0, "total-timeout")])
def test_a_partition_silences_the_stream_until_a_timer_fires(total_s: float,
                                                            outcome: str) -> None:
    """A terminal state sent during a downlink outage is never noticed (no end of stream
    either): the progress directive satisfied the response timer, so only the total timer
    (or nothing at all) ends the attempt."""
    sc = one_turn(**{"network.outages": [{"start_s": 0.3, "duration_s": 100.0,
                                      "direction": "downlink"}],
                 "live.timeouts.turn_response_s": 1.0, "live.timeouts.turn_total_s": total_s,
                 "live.retry.max_attempts": 1, "run.drain_s": 20.0})
    a = run_once(sc, seed=1).attempts
    assert a["outcome"].astype(str).tolist()[0] == outcome  # not "timeout": progress got through
    if total_s:
        assert a["first_response_s"].iloc[0] < 0.3 + 0.05
        assert a["end_s"].iloc[0] - a["send_s"].iloc[0] == pytest.approx(total_s)
