"""Acceptance 1 and 2: an M/M/c Reasoner agrees with Erlang C, and Little's law holds.

Statistical checks are in standard errors over replications (tests/stats.py):
within 4 SE of the theory, and more than 4 SE from a wrong model that is at
least 8 SE away, so they hold on any seed (tests/oneoff/seeds.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rtalab.sim import theory
from rtalab.sim.runner import RunOutput, run_replications
from rtalab.sim.scenario import Scenario, load_scenario
from rtalab.sim.shared.summary import metric, summarize
from tests.stats import assert_close, assert_rejects, seed

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
    outs = run_replications(sc, seed=seed(7))
    return outs, summarize(outs, sc.run.warmup_s)


def _values(s: dict[str, Any], name: str) -> list[float | None]:
    return metric(s, name)["values"]


def test_theory_erlang_c_known_values() -> None:
    # M/M/1: P(wait) = ρ; M/M/2 with a = 1: C = 1/3 (textbook)
    assert theory.erlang_c(1, 0.5) == pytest.approx(0.5)
    assert theory.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert theory.mmc_mean_wait(1, 0.5, 1.0) == pytest.approx(1.0)  # ρ/(μ-λ) = 0.5/0.5
    with pytest.raises(ValueError):
        theory.erlang_c(2, 2.0)


def test_erlang_c_probability_of_waiting(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    p = _values(s, "queue.p_wait")
    assert len(p) == REPS
    assert_close(p, theory.erlang_c(C, LAM * MEAN_S), "P(wait)")


def test_erlang_c_mean_wait(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    expected = theory.mmc_mean_wait(C, LAM, MEAN_S)
    assert_close(_values(s, "queue.mean_wait_s"), expected, "mean wait")


def test_mmc_utilisation_and_throughput(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    _, s = mmc
    assert_close(_values(s, "worker_utilisation"), LAM * MEAN_S / C, "utilisation")
    assert_close(_values(s, "queue.arrival_rate_per_s"), LAM, "arrival rate")
    assert metric(s, "success_rate")["values"] == [1.0] * REPS


def test_erlang_c_check_can_fail(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    """The checks reject the answer of a wrong model (one server more; one fewer is unstable)."""
    _, s = mmc
    c = C + 1
    assert_rejects(_values(s, "queue.p_wait"), theory.erlang_c(C, LAM * MEAN_S),
                   theory.erlang_c(c, LAM * MEAN_S), f"P(wait) vs M/M/{c}")
    assert_rejects(_values(s, "queue.mean_wait_s"), theory.mmc_mean_wait(C, LAM, MEAN_S),
                   theory.mmc_mean_wait(c, LAM, MEAN_S), f"mean wait vs M/M/{c}")


def sampled_queue_length(outs: list[RunOutput], start_s: float, end_s: float) -> list[float]:
    """Per replication: the mean of the sampled ``queue_length`` gauge over [start_s, end_s)."""
    out = []
    for o in outs:
        ts = o.timeseries
        inside = (ts["t_s"] >= start_s) & (ts["t_s"] < end_s)
        out.append(float(ts.loc[inside, "queue_length"].mean()))
    return out


def _little(outs: list[RunOutput], sc: Scenario, s: dict[str, Any], mean_service_s: float) -> None:
    """L from the sampled gauge (not from the records) = λ·W from the records: their paired
    difference is 0 within 4 SE (one replication's sampled mean is off by up to ~10 % on a
    bursty queue: 1-s samples); and the check tells the queue from the system (L + λ·E[S])."""
    sampled = np.array(sampled_queue_length(outs, sc.run.warmup_s, sc.run.duration_s))
    lam_w = np.array(_values(s, "queue.little_lambda_w"), dtype=float)
    assert_close(sampled - lam_w, 0.0, "sampled L - λW")
    lam = float(np.mean(_values(s, "queue.arrival_rate_per_s")))
    assert_rejects(sampled - lam_w, 0.0, lam * mean_service_s, "queue vs system")


def test_littles_law_mmc(mmc: tuple[list[RunOutput], dict[str, Any]]) -> None:
    outs, s = mmc
    _little(outs, Scenario().with_overrides(MMC), s, MEAN_S)
    sampled = sampled_queue_length(outs, 200.0, 2000.0)
    assert_close(sampled, theory.mmc_mean_queue_length(C, LAM, MEAN_S), "Lq sampled")


def test_littles_law_with_faults_and_retries() -> None:
    """Little's law needs no Poisson/exponential assumptions: check it on a faulty, retrying run."""
    sc = load_scenario("lossy_network", {
        "run.duration_s": 600.0,
        "run.warmup_s": 60.0, "run.replications": 16})
    outs = run_replications(sc, seed=seed(3))
    s = summarize(outs, sc.run.warmup_s)
    assert metric(s, "queue.mean_length")["mean"] > 0.2  # a queue worth testing
    _little(outs, sc, s, sc.reasoner.reasoning_time_s.mean)
