"""The fleet answers' safeguards one by one (issue 31: each planted bug of the "fleet answers"
area of tests/oneoff/mutate.py fails one of these): the fast model's view of a fleet, the
capacity answer sized by replicas, the storm's and the map's fleet sentences -- no runs."""

from __future__ import annotations

from rtalab.sim.answers.capacity import CapacityResult, make_knob
from rtalab.sim.answers.metastability import fleet_note
from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.answers.storm import Detector, StormResult
from rtalab.sim.fastmodel.params import from_scenario, replica_params
from rtalab.sim.scenario import load_scenario

FLEET = load_scenario("retry_storm").with_overrides({"fleet.replicas": 4,
                                                     "reasoner.workers": 2})


def test_power_of_two_is_a_share_of_the_load_from_three_replicas_on() -> None:
    p2 = replica_params(FLEET.with_overrides({"fleet.balancer": "power_of_two"}))
    assert p2 == replica_params(FLEET.with_overrides({"fleet.balancer": "random"}))
    assert p2.phases[0].workers == 2
    pair = FLEET.with_overrides({"fleet.balancer": "power_of_two", "fleet.replicas": 2})
    assert replica_params(pair).phases[0].workers == 4  # N = 2: least outstanding, pooled


def test_per_replica_state_adds_no_note_when_a_retry_is_work_anyway() -> None:
    sc = FLEET.with_overrides({"fleet.state": "per-replica", "reasoner.known_task": "execute"})
    p = replica_params(sc)
    assert p.retry_is_work and p.unexpressed == from_scenario(sc).unexpressed


def test_replica_failures_are_listed_as_not_expressed() -> None:
    sc = FLEET.with_overrides({"fleet.failures": [{"replica": 0, "start_s": 50.0,
                                                    "duration_s": 5.0}]})
    assert "fleet.failures" in replica_params(sc).unexpressed
    assert "fleet.failures" not in replica_params(FLEET).unexpressed


def _by_replicas() -> CapacityResult:
    """An answer sized by the replica count of 2-worker replicas (fleet of 3 as scenario)."""
    sc = FLEET.with_overrides({"fleet.replicas": 3})
    return CapacityResult(sc.name, "workload.calls_per_s", make_knob(sc, "fleet.replicas", 1, 8),
                          (parse_slo("queue.p_wait<=0.1"),), 3, 1, required={10.0: 5},
                          fleet=sc.fleet, workers=2)


def test_an_answer_sized_by_replicas_names_the_fleets_workers() -> None:
    res = _by_replicas()
    assert res.fleet_at(5) == (5, 2)
    row = res.table().iloc[0]
    assert (row["replicas"], row["workers_per_replica"], row["fleet_workers"]) == (5, 2, 10)
    text = res.sentence()
    assert "fleet.replicas (replicas of 2 workers each" in text
    assert "is 5 (5 × 2 = 10 workers) at workload.calls_per_s = 10" in text


def test_the_storms_fleet_sentence_counts_the_replica_failures() -> None:
    sc = FLEET.with_overrides({"fleet.failures": [{"replica": 1, "start_s": 50.0,
                                                    "duration_s": 5.0}]})
    res = StormResult(sc.name, (120.0, 160.0), Detector(), fleet=sc.fleet)
    assert res.fleet_sentence().startswith("fleet: 4 replicas behind a random balancer, "
                                           "shared state and 1 replica failure(s);")
    assert "failure" not in StormResult(sc.name, (0.0, 1.0), Detector(),
                                        fleet=FLEET.fleet).fleet_sentence()


def test_the_maps_fleet_note_tells_a_share_from_a_pooled_queue() -> None:
    assert "one replica at 1/4 of the load" in fleet_note(FLEET)
    lo = FLEET.with_overrides({"fleet.balancer": "least_outstanding"})
    assert "one pooled queue of 8 workers" in fleet_note(lo)
    assert fleet_note(load_scenario("retry_storm")) == ""
