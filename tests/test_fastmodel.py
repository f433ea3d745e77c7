"""The fast model (sim/fastmodel) against closed forms and the presets' known behaviour.

Closed forms: without retries and timeouts the CTMC is the M/M/c queue (Erlang C from
rtalab.sim.theory), and with a timeout its arrivals' timeout probability, averaged over the
stationary law (PASTA), is M/M/c's P(W > T) = C(c, a) exp(-(c mu - lambda) T); the fluid
model's fixed point without retries is L = lambda / mu.  Then the two presets: bistable
without backoff, one fixed point with jittered backoff or a Reasoner that joins retries.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rtalab.sim import theory
from rtalab.sim.fastmodel import ctmc
from rtalab.sim.fastmodel.fluid import fixed_points, p_timeout, trajectory
from rtalab.sim.fastmodel.params import FastParams, Phase, from_scenario
from rtalab.sim.scenario import load_scenario


def mmc(lam: float, c: int, service_s: float, timeout_s: float = 0.0,
        limit: int = 400) -> FastParams:
    """An open M/M/c queue as FastParams: calls of one turn, no retries."""
    return FastParams(phases=(Phase(0.0, lam, c),), service_s=service_s, load_k_s=0.0,
                      queue_limit=limit, timeout_s=timeout_s, attempts=1, backoff_s=(),
                      retry_after_s=0.0, think_s=1.0, turns_per_call=1.0, duration_s=400.0)


@pytest.mark.parametrize("lam,c,s", [(3.0, 4, 1.0), (9.0, 8, 0.6), (1.5, 2, 1.0)])
def test_the_chain_without_retries_is_erlang_c(lam: float, c: int, s: float) -> None:
    ch = ctmc.build(mmc(lam, c, s))
    pi = ctmc.stationary(ch)
    p_wait = float(pi[ch.q >= c].sum())
    assert p_wait == pytest.approx(theory.erlang_c(c, lam * s), rel=1e-6)
    lq = float((np.maximum(ch.q - c, 0) * pi).sum())
    assert lq == pytest.approx(theory.mmc_mean_queue_length(c, lam, s), rel=1e-6)


@pytest.mark.parametrize("timeout_s", [0.5, 2.0])
def test_timeout_probability_is_the_mmc_waiting_tail(timeout_s: float) -> None:
    lam, c, s = 9.0, 8, 0.6
    ch = ctmc.build(mmc(lam, c, s))
    pi = ctmc.stationary(ch)
    seen = sum(pi[i] * p_timeout(float(q), c, 1.0 / s, timeout_s) for i, q in enumerate(ch.q))
    closed = theory.erlang_c(c, lam * s) * math.exp(-(c / s - lam) * timeout_s)
    assert seen == pytest.approx(closed, rel=1e-4)


def test_fluid_fixed_point_without_retries_is_lambda_over_mu() -> None:
    for lam in (2.0, 7.0, 12.0):
        fp = fixed_points(mmc(lam, 8, 0.6))
        for f in fp:
            assert f.in_reasoner == pytest.approx(lam * 0.6, rel=1e-3)
            assert f.goodput_per_s == pytest.approx(lam, rel=1e-3)
            assert f.residual < 1e-3


def test_fluid_is_bistable_where_the_presets_say_metastable() -> None:
    spike = from_scenario(load_scenario("metastable_spike"))
    empty, congested = fixed_points(spike)
    assert empty.healthy and not congested.healthy
    assert congested.goodput_per_s < 0.05 * empty.goodput_per_s
    jitter = from_scenario(load_scenario("metastable_spike",
                                         ['live.backoff.strategy="full_jitter"']))
    assert all(f.healthy for f in fixed_points(jitter))
    joined = from_scenario(load_scenario("retry_storm", ['reasoner.known_task="retry"']))
    assert all(f.healthy for f in fixed_points(joined))
    storm = from_scenario(load_scenario("retry_storm"))
    assert [f.healthy for f in fixed_points(storm)] == [True, False]


def test_fluid_trajectory_tips_and_recovers_as_the_simulator_does() -> None:
    tr = trajectory(from_scenario(load_scenario("metastable_spike")))
    g = tr["goodput_per_s"].to_numpy()
    assert g[60:120].mean() == pytest.approx(10.7, rel=0.05)
    assert g[200:390].max() < 0.5  # the collapse outlives the 10-s drop
    tr = trajectory(from_scenario(load_scenario("metastable_spike",
                                                ['live.backoff.strategy="full_jitter"'])))
    g = tr["goodput_per_s"].to_numpy()
    assert g[150:390].min() > 0.9 * g[60:120].mean()


def test_hitting_times_separate_the_bistable_from_the_recovering() -> None:
    spike = from_scenario(load_scenario("metastable_spike"))
    stuck = ctmc.hitting_times(spike)
    assert stuck.overloaded_to_healthy_s > 1e6
    assert stuck.healthy_to_overloaded_s > 1e6  # a stable system without its trigger
    jitter = ctmc.hitting_times(from_scenario(load_scenario(
        "metastable_spike", ['live.backoff.strategy="full_jitter"'])))
    assert jitter.overloaded_to_healthy_s < 600


def test_scaled_params_divide_the_load() -> None:
    p = from_scenario(load_scenario("retry_storm"))
    half = p.scaled(load=0.5, workers=0.5)
    assert half.phases[0].calls_per_s == pytest.approx(p.phases[0].calls_per_s / 2)
    assert [ph.workers for ph in half.phases] == [round(ph.workers / 2) for ph in p.phases]
    assert replace(p, unexpressed=()).unexpressed == ()
    assert "live.budget.token_bucket" in from_scenario(load_scenario(
        "retry_storm", ["live.budget.token_bucket.enabled=true"])).unexpressed
