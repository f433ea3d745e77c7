"""``[fleet]``: N Reasoner replicas behind a balancer, hazards split by cause, per-replica load."""

from __future__ import annotations

import math

import pytest

from rtalab.sim.config import ConfigError
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import replication_metrics
from tests.oneoff.metric_dump import MANY_DUPLICATES

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


# --------------------------------------------------------------------------- folded as it runs

FOLD_SCENARIOS = {  # between them every cause, re-executed turns and degraded calls
    "random": ("retry_storm", {**MANY_DUPLICATES, "fleet.replicas": 3,
                               "fleet.state": "per-replica", "fleet.balancer": "random"}),
    "sticky_restarts": ("retry_storm", {  # a retry after a restart of its replica runs again
        **MANY_DUPLICATES, "reasoner.dedup": "request-guid", "live.retry.new_request_guid": False,
        "fleet.replicas": 2, "fleet.balancer": "sticky", "fleet.state": "per-replica",
        "fleet.failures": [{"replica": 0, "start_s": s, "duration_s": 0.5}
                           for s in (60.0, 90.0, 150.0, 200.0)]}),
}


def _by_cause(m: dict) -> dict:
    return {k: v for k, v in m.items() if k.startswith(("fleet.dup_", "fleet.reexecuted_"))}


def test_the_fleet_folds_its_hazards_as_it_runs_to_the_counts_of_one_fold_at_the_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The side-effect executions are folded every few rows (those before now, in time
    order), not kept to the end: the same counts as folding all of them at the end."""
    import rtalab.sim.model.fleet as fleet

    seen: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
    for preset, over in FOLD_SCENARIOS.values():
        sc = load_scenario(preset).with_overrides({**over, "run.records": "none"})
        monkeypatch.setattr(fleet, "FOLD_ROWS", 10**9)  # one fold, at the end
        at_end = run_once(sc, 3).metrics
        monkeypatch.setattr(fleet, "FOLD_ROWS", 5)
        as_it_runs = run_once(sc, 3).metrics
        assert at_end is not None and as_it_runs is not None
        assert _by_cause(as_it_runs) == _by_cause(at_end)
        assert math.isclose(split(at_end, "dup_request_guid"), at_end[S.M_DUP_GUID_PER_1K])
        assert math.isclose(split(at_end, "reexecuted_turn"), at_end[S.M_REEXEC_TURN_PER_1K])
        for c in CAUSES:
            seen[c] += (at_end[f"fleet.dup_request_guid_{c}_per_1k_turns"]
                        + at_end[f"fleet.reexecuted_turn_{c}_per_1k_turns"])
    assert min(seen.values()) > 0, seen


def _by_cause_oracle(executions: list, restarts: dict, n: int) -> dict:
    """The rule as first written: every execution kept, sorted, first (replica, time) looked up."""
    extra = dict.fromkeys(CAUSES, 0)
    reexec = dict.fromkeys(CAUSES, 0)

    def cause(first: tuple, r: object, t: float) -> str:
        r0, t0 = first
        if r0 != r:
            return "cross_replica"
        return ("after_restart" if any(t0 < x <= t for x in restarts.get(r, ()))
                else "same_replica")

    first_of_guid: dict = {}
    first_of_turn: dict = {}
    reexec_seen: set = set()
    for guid, degraded, uid, r, t in sorted(executions, key=lambda x: x[4]):
        if degraded:
            pass
        elif guid in first_of_guid:
            extra[cause(first_of_guid[guid], r, t)] += 1
        else:
            first_of_guid[guid] = (r, t)
        f = first_of_turn.get(uid)
        if f is None:
            first_of_turn[uid] = (guid, r, t)
        elif guid != f[0] and uid not in reexec_seen:
            reexec_seen.add(uid)
            reexec[cause((f[1], f[2]), r, t)] += 1
    out = {}
    for c in CAUSES:
        out[f"fleet.dup_request_guid_{c}_per_1k_turns"] = 1000.0 * extra[c] / n
        out[f"fleet.reexecuted_turn_{c}_per_1k_turns"] = 1000.0 * reexec[c] / n
    return out


@pytest.mark.parametrize("dense", [False, True])
def test_cause_fold_counts_as_the_rule_on_executions_full_of_repeats(dense: bool) -> None:
    import numpy as np

    from rtalab.sim.model.intsets import IntCounts
    from rtalab.sim.shared.fleet_hazards import CauseFold, hazards_by_cause

    rng = np.random.default_rng(7)
    n_turns, n = 400, 6000
    guid_turn = rng.integers(0, n_turns, 1500)
    restarts = {0: [30.0, 70.0], 2: [50.0, 50.5]}
    executions = []
    for _ in range(n):
        g = int(rng.integers(0, 1500))
        t = float(np.round(rng.uniform(0, 100), 1))  # ties in time, and at a restart
        degraded = bool(rng.random() < 0.1)
        executions.append((None if degraded and not dense else g, degraded,
                           int(guid_turn[g]), int(rng.integers(0, 3)), t))
    want = _by_cause_oracle(executions, restarts, n_turns)
    assert min(want.values()) > 0  # every cause of both hazards exercised
    fold = (CauseFold(lambda r: restarts.get(r, ()), IntCounts, lambda g: g + 1) if dense
            else CauseFold(lambda r: restarts.get(r, ())))
    for e in sorted(executions, key=lambda x: x[4]):
        fold.add(*e)
    assert fold.metrics(n_turns) == want
    assert hazards_by_cause(executions, lambda r: restarts.get(r, ()), n_turns) == want


@pytest.mark.parametrize("state", ["shared", "per-replica"])
def test_bounded_memory_gives_every_replica_a_generation_store(state: str) -> None:
    """``records = "none"``: every replica's dedup store holds its entries in generations (a
    shared one stays one store), and so does the empty store of a restarted replica;
    ``records = "all"`` keeps the one dict."""
    from rtalab.sim.model.dedup import DedupStore, GenerationStore
    from rtalab.sim.model.world import World

    sc = load_scenario("baseline").with_overrides({"fleet.replicas": 3, "fleet.state": state})
    assert all(type(r.store) is DedupStore for r in World(sc, 1, 0).reasoner.replicas)
    fleet = World(sc.with_overrides({"run.records": "none"}), 1, 0).reasoner
    stores = [r.store for r in fleet.replicas]
    assert all(type(s) is GenerationStore for s in stores)
    assert len({id(s) for s in stores}) == (1 if state == "shared" else 3)
    fleet.up[1] = False
    fleet._restart(1)
    assert type(fleet.replicas[1].store) is GenerationStore
    assert (fleet.replicas[1].store is stores[1]) == (state == "shared")
