"""The simulator drives the published budgets through their hooks correctly.

Each test replays a budget's definition over the run's own attempt records
(first sends, attempt ends, retry decisions, outcomes) and checks that every
``retry`` decision was one the definition allows and every ``budget`` refusal
one it refuses; the replayed state must also end where the simulator's budget
ended.  A hook the Live layer forgets (``on_attempt_end``), or a flag it gets
wrong (a retry after a timeout), breaks the agreement.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rtalab.sim.policy import is_retryable
from rtalab.sim.runner import RunOutput, run_once
from rtalab.sim.scenario import Scenario
from tests.stats import seed

TIMED_OUT = {"timeout", "total-timeout", "response-lost"}


def stormy(**overrides: Any) -> Scenario:
    """One Live instance, many concurrent failing turns, some timeouts; constant downlink
    latency so an attempt ends exactly when it is recorded to end."""
    base: dict[str, Any] = {
        "workload.calls_per_s": 6.0,
        "workload.turns_per_call": 3,
        "workload.think_time_s": {"dist": "exp", "mean": 0.5},
        "workload.side_effect_share": 0.0,
        "workload.handoff_share": 0.2,
        "workload.caller_response_time_s": 0.5,
        "live.instances": 1,
        "live.retry.max_attempts": 4,
        "live.retry.max_attempts_by_code": {},
        "live.escalation.end_session_after_failed_turns": 0,
        "live.timeouts.turn_response_s": 0.6,
        "live.backoff.base_s": 0.2,
        "network.uplink.latency_s": {"dist": "exp", "mean": 0.02},
        "network.downlink.latency_s": 0.01,
        "reasoner.workers": 64,
        "reasoner.reasoning_time_s": {"dist": "exp", "mean": 0.3},
        "reasoner.first_chunk_s": 0.0,
        "reasoner.progress_directive": False,
        "reasoner.errors": {"internal": 0.4, "auth": 0.03},
        "run.duration_s": 120.0,
        "run.warmup_s": 0.0,
        "run.drain_s": 30.0,
    }
    base.update(overrides)
    return Scenario().with_overrides(base)


def _events(out: RunOutput) -> pd.DataFrame:
    """Attempt rows in the order the Live layer handled their ends."""
    a = out.attempts.copy()
    for col in ("outcome", "decision", "error_code"):
        a[col] = a[col].astype(object)
    return a[np.isfinite(a["end_s"])].sort_values("end_s", kind="stable")


def _successor_ends(a: pd.DataFrame) -> dict[tuple[int, str, int], float]:
    """(interaction, phase, attempt) -> end of the next attempt of that phase (inf: never)."""
    ends = {(int(r.interaction_id), str(r.phase), int(r.attempt)): r.end_s
            for r in a.itertuples()}
    return {k: ends.get((k[0], k[1], k[2] + 1), np.inf) for k in ends}


def _key(r: Any) -> tuple[int, str, int]:
    return int(r.interaction_id), str(r.phase), int(r.attempt)


def test_envoy_budget_decisions_follow_active_concurrency() -> None:
    out = run_once(stormy(**{"live.budget.envoy.enabled": True}), seed=seed(3))
    a = out.attempts
    send = a["send_s"].to_numpy()
    end = np.where(np.isfinite(a["end_s"]), a["end_s"], np.inf)
    ev = _events(out)
    nxt = _successor_ends(ev)
    grants: list[tuple[float, float]] = []  # (granted at, its retry attempt ended at)
    checked = {"retry": 0, "budget": 0}
    for r in ev.itertuples():
        if r.decision not in checked:
            continue
        g = r.end_s
        requests = int(((send <= g) & (end > g)).sum())
        retries = sum(1 for t0, t1 in grants if t0 < g < t1)
        limit = max(3, int(20.0 / 100.0 * requests))
        assert (retries < limit) == (r.decision == "retry"), (g, retries, requests, r.decision)
        checked[r.decision] += 1
        if r.decision == "retry":
            grants.append((g, nxt[_key(r)]))
    assert checked["retry"] > 500 and checked["budget"] > 20, checked
    tail = ev[(ev["decision"] == "retry") & (ev["end_s"] > 100.0)]
    assert len(tail) > 50  # released grants keep retries flowing to the end of the run


def test_aws_quota_replays_from_the_records() -> None:
    sc = stormy(**{"live.budget.aws_quota.enabled": True,
                   "live.budget.aws_quota.initial_tokens": 60})
    out = run_once(sc, seed=seed(4))
    ev = _events(out)
    tokens, cap = 60, 60
    cost_of: dict[tuple[int, str, int], int] = {}  # retry attempt -> what its grant cost
    seen = {"retry": 0, "budget": 0, "refund10": 0}
    for r in ev.itertuples():
        if r.decision in ("retry", "budget"):
            cost = 10 if r.outcome in TIMED_OUT else 5
            assert (cost <= tokens) == (r.decision == "retry"), (r.end_s, tokens, cost)
            seen[r.decision] += 1
            if r.decision == "retry":
                tokens -= cost
                i, ph, n = _key(r)
                cost_of[(i, ph, n + 1)] = cost
        elif r.outcome in ("completed", "input-required"):
            refund = cost_of[_key(r)] if r.attempt > 1 else 1
            seen["refund10"] += refund == 10
            tokens = min(cap, tokens + refund)
    assert out.counters["budget.0.aws_tokens"] == tokens
    assert seen["retry"] > 200 and seen["budget"] > 50 and seen["refund10"] > 5, seen


def test_call_bucket_and_retry_breaker_replay_from_the_records() -> None:
    for name in ("call_bucket", "retry_breaker"):
        sc = stormy(**{f"live.budget.{name}.enabled": True,
                       "live.budget.retry_breaker.max_failure_ratio": 0.6,
                       "live.budget.retry_breaker.window_s": 0.0})
        out = run_once(sc, seed=seed(5))
        a = out.attempts
        firsts = np.sort(a.loc[a["attempt"] == 1, "send_s"].to_numpy())
        ev = _events(out)
        failed = ev[ev["outcome"].isin(TIMED_OUT) | (ev["outcome"].eq("failed") & ev[
            "error_code"].map(lambda c: isinstance(c, str) and is_retryable(c)))]
        fail_times = failed["end_s"].to_numpy()
        milli, seen = 5000, {"retry": 0, "budget": 0}
        last = -np.inf
        for r in ev.itertuples():
            if r.decision not in seen:
                continue
            g = r.end_s
            if name == "call_bucket":
                started = ((firsts > last) & (firsts <= g)).sum()
                for _ in range(int(started)):
                    milli = min(5000, milli + 100)
                last = g
                allowed = milli > 1000
                if r.decision == "retry":
                    milli -= 1000
            else:
                calls = (firsts <= g).sum()
                fails = (fail_times <= g).sum()
                allowed = not fails / calls > 0.6
            assert allowed == (r.decision == "retry"), (name, g, r.decision)
            seen[r.decision] += 1
        assert seen["retry"] > 200 and seen["budget"] > 50, (name, seen)
        # a refused first send ends its turn with reason budget and leaves no attempt row:
        # every budget-ended turn here is a refused retry (neither refuses first sends)
        budget_turns = out.turns["end_reason"].astype(str).eq("budget").sum()
        assert budget_turns == (a["decision"].astype(str) == "budget").sum() > 0, name
