"""Acceptance 1 and 2: an M/M/c Reasoner agrees with Erlang C, and Little's law holds."""

from __future__ import annotations

from typing import Any

import pytest

from sim import theory
from sim.runner import RunOutput, run_replications
from sim.scenario import Scenario, load_scenario
from sim.summary import metric, summarize

C, LAM, MEAN_S = 4, 3.2, 1.0  # ρ = 0.8
REPS = 20

MMC = {
    "workload.calls_per_s": LAM,
    "workload.turns_per_call": 1,
    "workload.side_effect_share": 0.0,
    "workload.handoff_share": 0.0,
    "live.timeouts.turn_response_s": 0.0,
    "live.timeouts.turn_total_s": 0.0,  # no Live-layer timer: every turn waits its turn
    "live.retry.max_attempts": 1,
    "reasoner.workers": C,
    "reasoner.reasoning_time_s": {"dist": "exp", "mean": MEAN_S},
    "reasoner.queue_limit": 1_000_000,
    "reasoner.dedup": "none",
    "network.uplink.latency_s": 0.0,
    "network.downlink.latency_s": 0.0,
    "run.duration_s": 2000.0,
    "run.warmup_s": 200.0,
    "run.drain_s": 100.0,
    "run.replications": REPS,
}


@pytest.fixture(scope="module")
def mmc() -> tuple[list[RunOutput], dict[str, Any]]:
    """20 replications of an M/M/4 Reasoner at ρ = 0.8, and their summary."""
    sc = Scenario().with_overrides(MMC)
    outs = run_replications(sc, seed=7)
    return outs, summarize(outs, sc.run.warmup_s)


def _inside(m: dict[str, Any], value: float) -> bool:
    return m["ci_low"] <= value <= m["ci_high"]


def test_theory_erlang_c_known_values() -> None:
    # M/M/1: P(wait) = ρ; M/M/2 with a = 1: C = 1/3 (textbook)
    assert theory.erlang_c(1, 0.5) == pytest.approx(0.5)
    assert theory.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert theory.mmc_mean_wait(1, 0.5, 1.0) == pytest.approx(1.0)  # ρ/(μ-λ) = 0.5/0.5
    with pytest.raises(ValueError):
        theory.erlang_c(2, 2.0)


def test_erlang_c_probability_of_waiting(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    p = metric(s, "queue.p_wait")
    expected = theory.erlang_c(C, LAM * MEAN_S)
    assert len(p["values"]) == REPS
    assert _inside(p, expected), (expected, p["mean"], p["ci_low"], p["ci_high"])


def test_erlang_c_mean_wait(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    w = metric(s, "queue.mean_wait_s")
    expected = theory.mmc_mean_wait(C, LAM, MEAN_S)
    assert _inside(w, expected), (expected, w["mean"], w["ci_low"], w["ci_high"])
    # the CI is informative, not vacuous: narrower than ±15 % of the value
    assert w["ci_high"] - w["ci_low"] < 0.3 * expected


def test_mmc_utilisation_and_throughput(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    assert _inside(metric(s, "worker_utilisation"), LAM * MEAN_S / C)
    assert _inside(metric(s, "queue.arrival_rate_per_s"), LAM)
    assert metric(s, "success_rate")["mean"] == 1.0


def test_erlang_c_check_can_fail(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    """The CI excludes the answer of a wrong model (one server fewer or more)."""
    _, s = mmc
    p = metric(s, "queue.p_wait")
    assert not _inside(p, theory.erlang_c(C + 1, LAM * MEAN_S))
    assert not _inside(metric(s, "queue.mean_wait_s"), theory.mmc_mean_wait(C + 1, LAM, MEAN_S))


def _little(s: dict[str, Any]) -> None:
    length = metric(s, "queue.mean_length")
    lam_w = metric(s, "queue.little_lambda_w")
    assert _inside(length, lam_w["mean"]), (length, lam_w["mean"])
    for a, b in zip(length["values"], lam_w["values"], strict=True):
        assert a == pytest.approx(b, rel=0.05, abs=0.05)


def test_littles_law_mmc(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    _little(s)
    assert _inside(metric(s, "queue.mean_length"), theory.mmc_mean_queue_length(C, LAM, MEAN_S))


def test_littles_law_with_faults_and_retries() -> None:
    """Little's law needs no Poisson/exponential assumptions: check it on a faulty, retrying run."""
    sc = load_scenario("lossy_network", {
        "run.duration_s": 600.0,
        "run.warmup_s": 60.0, "run.replications": 8})
    outs = run_replications(sc, seed=3)
    s = summarize(outs, sc.run.warmup_s)
    assert metric(s, "queue.mean_length")["mean"] > 0.2  # a queue worth testing
    _little(s)
