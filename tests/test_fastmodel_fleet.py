"""The fleet mean field (sim/fastmodel/fleet.py) against closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from rtalab.sim import theory
from rtalab.sim.fastmodel.fleet import FleetModel, occupancy
from rtalab.sim.scenario import Scenario

MMC = {"workload.turns_per_call": 1, "workload.side_effect_share": 0.0,
       "workload.handoff_share": 0.0, "live.timeouts.turn_response_s": 0.0,
       "live.timeouts.turn_total_s": 0.0, "live.retry.max_attempts": 1,
       "reasoner.workers": 2, "reasoner.reasoning_time_s": {"dist": "exp", "mean": 1.0},
       "reasoner.queue_limit": 1_000_000, "network.uplink.latency_s": 0.0,
       "network.downlink.latency_s": 0.0}


@pytest.mark.parametrize("n", [1, 4, 1000])
def test_random_split_is_erlang_c_per_replica(n: int) -> None:
    m = FleetModel(Scenario().with_overrides(MMC))
    pt = m.point(1.6 * n, n, "random")  # rho = 0.8 per replica
    assert pt.p_wait == pytest.approx(theory.erlang_c(2, 1.6), rel=1e-6)
    assert pt.mean_wait_s == pytest.approx(theory.mmc_mean_wait(2, 1.6, 1.0), rel=1e-6)
    assert pt.goodput_turns_per_s == pytest.approx(1.6 * n)


@pytest.mark.parametrize("lam", [0.5, 0.9])
def test_power_of_two_is_the_supermarket_fixed_point(lam: float) -> None:
    s = occupancy(lam, 1, 1.0, 2, 10**6)
    k = np.arange(len(s))  # levels are kept down to a share of ~1e-16
    assert len(s) >= 7 and lam ** (2.0 ** len(s) - 1) < 1e-16
    np.testing.assert_allclose(s, lam ** (2.0 ** k - 1), rtol=1e-5, atol=1e-12)
