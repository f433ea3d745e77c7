"""``[fleet]``: N Reasoner replicas behind a balancer, hazards split by cause, per-replica load."""

from __future__ import annotations

import math

import pytest

from rtalab.sim.config import ConfigError
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import replication_metrics

CAUSES = ("cross_replica", "after_restart", "same_replica")


def metrics(preset: str, seed: int = 3, **over: object) -> dict:
    sc = load_scenario(preset).with_overrides({f"fleet.{k}": v for k, v in over.items()})
    return replication_metrics(run_once(sc, seed), sc.run.warmup_s)


def split(m: dict, what: str) -> float:
    return sum(m[f"fleet.{what}_{c}_per_1k_turns"] for c in CAUSES)


def test_per_replica_state_with_random_routing_duplicates_across_replicas() -> None:
    per = metrics("lossy_network", replicas=3, state="per-replica", balancer="random")
    shared = metrics("lossy_network", replicas=3, state="shared", balancer="random")
    # the causes add up to the hazards the summary counts
    assert math.isclose(split(per, "dup_request_guid"), per[S.M_DUP_GUID_PER_1K])
    assert math.isclose(split(per, "reexecuted_turn"), per[S.M_REEXEC_TURN_PER_1K])
    # a retry landing on another replica finds no dedup entry there: the duplicates are all
    # cross-replica, and one shared store (the same routing) has none
    assert per["fleet.dup_request_guid_cross_replica_per_1k_turns"] > 5.0
    assert per["fleet.dup_request_guid_same_replica_per_1k_turns"] == 0.0
    assert shared[S.M_DUP_GUID_PER_1K] == 0.0


def test_sticky_routing_keeps_a_call_on_one_replica() -> None:
    m = metrics("lossy_network", replicas=3, state="per-replica", balancer="sticky")
    assert m["fleet.dup_request_guid_cross_replica_per_1k_turns"] == 0.0
    assert m["fleet.reexecuted_turn_cross_replica_per_1k_turns"] == 0.0
    assert m[S.M_DUP_GUID_PER_1K] == 0.0


def test_round_robin_splits_requests_evenly_and_shares_add_up() -> None:
    m = metrics("baseline", replicas=4, balancer="round_robin")
    shares = [m[f"fleet.replica_requests_share.r{r}"] for r in range(4)]
    assert math.isclose(sum(shares), 1.0)
    assert m["fleet.requests_imbalance"] < 1.01
    rnd = metrics("baseline", replicas=4, balancer="random")
    assert rnd["fleet.requests_imbalance"] > m["fleet.requests_imbalance"]


def test_load_aware_balancers_wait_less_than_random_under_load() -> None:
    """At high utilisation, join-the-shorter-of-two and least-outstanding cut the queue wait
    of random routing (the power-of-two-choices result): 4 replicas of 2 workers."""
    over = {"replicas": 4}
    sc = load_scenario("baseline")
    load = {"reasoner.workers": 2, "workload.calls_per_s": sc.workload.calls_per_s * 1.0}
    waits = {}
    for b in ("random", "power_of_two", "least_outstanding"):
        s = sc.with_overrides({**load, **{f"fleet.{k}": v for k, v in over.items()},
                               "fleet.balancer": b})
        waits[b] = replication_metrics(run_once(s, 4), s.run.warmup_s)[S.M_QUEUE_MEAN_WAIT]
    assert waits["power_of_two"] < 0.8 * waits["random"], waits
    assert waits["least_outstanding"] < 0.8 * waits["random"], waits


def test_a_failed_replica_loses_requests_then_leaves_the_rotation() -> None:
    sc = load_scenario("baseline")
    fail = [{"replica": 1, "start_s": 100.0, "duration_s": 60.0}]
    m = metrics("baseline", replicas=3, balancer="round_robin", failures=fail,
                health_check_s=2.0)
    assert m["fleet.requests_lost_to_down_replica_per_1k_turns"] > 0
    # out of rotation for 58 s of the window: at most its share of the other time (the
    # others also take the retries of what it lost)
    share = m["fleet.replica_requests_share.r1"]
    window = sc.run.duration_s - sc.run.warmup_s
    at_most = (window - 58.0) / (3 * window - 2 * 58.0)
    assert 0.6 * at_most < share < at_most, (share, at_most)
    nofail = metrics("baseline", replicas=3, balancer="round_robin")
    assert m[S.M_RETRIES_PER_TURN] > nofail[S.M_RETRIES_PER_TURN]  # lost requests retried


def test_a_restart_with_per_replica_memory_is_a_cause_of_its_own() -> None:
    """Sticky routing keeps every retry on its call's replica; a restart wipes that replica's
    in-memory store, so a retry after it runs again: cause after_restart, never cross."""
    fail = [{"replica": 0, "start_s": 100.0, "duration_s": 5.0}]
    m = metrics("lossy_network", replicas=2, balancer="sticky", state="per-replica",
                failures=fail, health_check_s=10.0)
    assert m["fleet.dup_request_guid_cross_replica_per_1k_turns"] == 0.0
    assert math.isclose(split(m, "dup_request_guid"), m[S.M_DUP_GUID_PER_1K])


def test_records_none_on_a_fleet_gives_the_same_metrics() -> None:
    sc = load_scenario("lossy_network").with_overrides(
        {"fleet.replicas": 3, "fleet.state": "per-replica", "run.duration_s": 200.0})
    exact = replication_metrics(run_once(sc, 2), sc.run.warmup_s)
    folded = run_once(sc.with_overrides({"run.records": "none"}), 2).metrics
    fleet_keys = [k for k in exact if k.startswith("fleet.")]
    assert fleet_keys and all(folded[k] == exact[k] for k in fleet_keys)
    assert folded[S.M_DUP_GUID_PER_1K] == exact[S.M_DUP_GUID_PER_1K]


def test_one_replica_is_the_plain_pool() -> None:
    sc = load_scenario("baseline").with_overrides({"run.duration_s": 60.0})
    a = run_once(sc, 1)
    b = run_once(sc.with_overrides({"fleet.replicas": 1}), 1)
    assert a.turns.equals(b.turns) and a.executions.equals(b.executions)


def test_a_failure_of_a_replica_that_does_not_exist_is_named() -> None:
    with pytest.raises(ConfigError, match="failures"):
        load_scenario("baseline").with_overrides(
            {"fleet.replicas": 2, "fleet.failures": [{"replica": 2}]})


def test_capacity_searches_the_replica_count() -> None:
    """``capacity`` with knob fleet.replicas: 2 workers a replica, baseline's load ×2; the
    answer is the smallest fleet whose utilisation SLO holds, and one fewer replica fails."""
    from rtalab.sim.answers.capacity import find_capacity, make_knob
    from rtalab.sim.answers.slo import parse_slo

    sc = load_scenario("baseline").with_overrides({"reasoner.workers": 2,
                                                   "run.duration_s": 90.0,
                                                   "run.warmup_s": 10.0})
    rate = 2 * sc.workload.calls_per_s
    res = find_capacity(sc, load_key="workload.calls_per_s", loads=[rate],
                        knob=make_knob(sc, "fleet.replicas", 1, 12),
                        slos=[parse_slo("worker_utilisation<=0.7")], replications=2)
    need = res.required[rate]
    assert need is not None and 2 <= need < 12
    util = {p.value: p.summary["metrics"]["worker_utilisation"]["mean"]
            for p in res.probes if p.load == rate}
    assert util[need] <= 0.7
    if need - 1 in util:
        assert util[need - 1] > 0.6
