"""The fleet mean field (sim/fastmodel/fleet.py) against the event simulator at small N.

Scenario: baseline's turn mix (lognormal reasoning, the side-effect share's tool calls,
think times, the turn-response timeout) without handoffs and injected errors (which the mean
field does not express), 2 workers a replica, utilisation 0.75 a replica, N = 2..4 replicas,
every balancer policy, with the retry policy (a timed-out turn is retried) and without
(``max_attempts = 1``).  The simulator: 6 replications of 1,200 s each, a 95 % t interval.

Checked: goodput and the turn-completion p50 within 5 % of the simulator's mean.  The model is
evaluated at the simulator's measured offered turn rate (the arrival counts' noise, ±2 % a
replication, is the input's, not the model's).  Where it is worse, said and asserted here:

- ``round_robin`` at N >= 3: the p50 is overstated by up to 7 % (Allen–Cunneen's Erlang-N
  arrival correction leaves the wait ~30 % high);
- ``power_of_two`` at N >= 3: the p50 is understated by up to 5 % (the simulator samples two
  distinct replicas, the mean field with replacement);
- ``sticky``: modelled as finite-source queues (a replica's calls each send one request at a
  time; the calls it holds vary with the simulator's ``call_id % N`` deal) it is within 5 %;
  the simpler Poisson-split approximation (the random policy's law) is not — its p50 is
  5-10 % high at N = 3, 4 (asserted in
  :func:`test_sticky_as_a_poisson_split_overstates_the_p50`).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy import stats

from rtalab.sim.fastmodel.fleet import POLICIES, FleetModel
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario

SEEDS = range(1, 7)
TOL = 0.05


def scenario(policy: str, n: int, retries: bool):
    over = {"reasoner.workers": 2, "workload.calls_per_s": 0.5 * n, "fleet.replicas": n,
            "fleet.balancer": policy, "run.records": "none", "run.duration_s": 1200.0,
            "workload.handoff_share": 0.0, "reasoner.errors": {}}
    if not retries:
        over["live.retry.max_attempts"] = 1
    return load_scenario("baseline").with_overrides(over)


@functools.cache
def runs_of(policy: str, n: int, retries: bool) -> tuple[dict, ...]:
    """The simulator's summaries over :data:`SEEDS` (cached: several tests read them)."""
    sc = scenario(policy, n, retries)
    return tuple(run_once(sc, s).metrics for s in SEEDS)


def compare(policy: str, n: int, retries: bool) -> dict[str, tuple[float, float, float]]:
    """metric -> (simulator mean, its 95 % half-width, mean-field value)."""
    return against(runs_of(policy, n, retries), scenario(policy, n, retries), policy, n)


def against(runs: tuple[dict, ...], sc, policy: str, n: int
            ) -> dict[str, tuple[float, float, float]]:
    """The simulator's ``runs`` (mean, 95 % half-width) beside the mean field's ``policy``."""
    model = FleetModel(sc)
    offered = float(np.mean([m["offered_turns_per_s"] for m in runs]))
    pt = model.point(offered / model.turns_per_call, n, policy)
    out = {}
    for k in ("goodput_turns_per_s", "completion_s.p50"):
        v = np.array([m[k] for m in runs], dtype=float)
        hw = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
        out[k] = (float(v.mean()), float(hw), pt.metric(k))
    return out


def p50_bound(policy: str, n: int) -> tuple[float, float]:
    """(lowest, highest) relative error of the model's p50 this test accepts."""
    if policy == "round_robin" and n >= 3:
        return -TOL, 0.07
    return -TOL, TOL


def check(policy: str, n: int) -> None:
    for retries in (True, False):
        res = compare(policy, n, retries)
        where = f"{policy} N={n} retries={retries}: {res}"
        for mean, hw, _ in res.values():
            assert hw < TOL / 2 * mean, where  # the interval is narrow enough to judge 5 %
        sim, _, mf = res["goodput_turns_per_s"]
        assert abs(mf - sim) <= TOL * sim, where
        sim, _, mf = res["completion_s.p50"]
        lo, hi = p50_bound(policy, n)
        assert lo * sim <= mf - sim <= hi * sim, where


@pytest.mark.parametrize("policy", ["random", "least_outstanding"])
def test_two_replicas_agree_with_the_simulator(policy: str) -> None:
    check(policy, 2)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_small_fleets_agree_with_the_simulator(policy: str, n: int) -> None:
    check(policy, n)


def test_retries_matter_here_and_the_model_sees_them() -> None:
    """Without retries a timed-out turn fails: goodput drops by ~3 % in the simulator, and by
    about as much in the model (so the retry arm of the comparison is not vacuous)."""
    on, off = compare("random", 2, True), compare("random", 2, False)
    sim_drop = 1 - off["goodput_turns_per_s"][0] / on["goodput_turns_per_s"][0]
    mf_drop = 1 - off["goodput_turns_per_s"][2] / on["goodput_turns_per_s"][2]
    assert sim_drop > 0.02 and mf_drop > 0.01
    assert abs(mf_drop - sim_drop) < 0.02


@pytest.mark.parametrize("n", [3, 4])
def test_sticky_as_a_poisson_split_overstates_the_p50(n: int) -> None:
    """The approximation the finite-source model replaces, and its error: sticky routing
    taken as a Poisson split of the requests (the random policy's mean field) puts the p50
    5-10 % above the simulator's at N = 3, 4 (on the safe side, but outside 5 %)."""
    runs = runs_of("sticky", n, True)
    _, _, mf = against(runs, scenario("sticky", n, True), "random", n)["completion_s.p50"]
    sim = float(np.mean([m["completion_s.p50"] for m in runs]))
    assert 0.05 * sim < mf - sim < 0.10 * sim


def test_hashed_sticky_ids_wait_longer_than_dealt_ones() -> None:
    """Hashing random contextIds (``sticky_hash``) leaves the calls a replica holds Poisson,
    burstier than the simulator's deal: a longer wait."""
    sc = scenario("sticky", 3, True)
    dealt, hashed = FleetModel(sc), FleetModel(sc, sticky_hash=True)
    a, b = dealt.point(1.5, 3, "sticky"), hashed.point(1.5, 3, "sticky")
    assert b.mean_wait_s > 1.05 * a.mean_wait_s
