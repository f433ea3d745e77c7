"""Tiny exact scenarios shared by the model tests."""

from __future__ import annotations

from typing import Any

from rtalab.sim.scenario import Scenario


def one_turn(**overrides: Any) -> Scenario:
    """One call of one plain turn, constant 10 ms each way, 0.5 s of reasoning."""
    base: dict[str, Any] = {
        "workload.max_calls": 1, "workload.calls_per_s": 1000.0, "workload.turns_per_call": 1,
        "workload.side_effect_share": 0.0, "workload.handoff_share": 0.0,
        "network.uplink.latency_s": 0.01, "network.downlink.latency_s": 0.01,
        "reasoner.reasoning_time_s": 0.5, "reasoner.first_chunk_s": 0.1, "reasoner.chunks": 3,
        "reasoner.chunk_interval_s": 0.2, "run.duration_s": 10.0, "run.warmup_s": 0.0,
        "run.drain_s": 30.0,
    }
    base.update(overrides)
    return Scenario().with_overrides(base)
