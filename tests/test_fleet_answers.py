"""Answers at fleet level (issue 27 point 5): capacity sizes the workers per replica of a fleet
and names the fleet; storm runs a fleet and shows its imbalance; the metastability map's fast
model sees one replica's share of a fleet (not the whole load on one replica's workers)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from rtalab.sim.answers.capacity import find_capacity, make_knob
from rtalab.sim.answers.metastability import MapSpec, cell_scenario, model_cell, run_map
from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.answers.storm import FLEET_COLUMNS, Detector, run_storm
from rtalab.sim.fastmodel.params import from_scenario, replica_params
from rtalab.sim.scenario import load_scenario
from tests.test_answers_capacity import MMC, TARGET, erlang_c_answer

# retry_storm (8 workers, a drop to 2 for 40 s) as 4 replicas of 2 workers (a drop to 1 each)
FLEET_STORM = {"fleet.replicas": 4, "reasoner.workers": 2,
               "reasoner.capacity_drops": [{"start_s": 120, "duration_s": 40, "workers": 1}]}


def test_capacity_sizes_the_workers_per_replica_of_a_fleet() -> None:
    """3 replicas under random routing, calls of one request each: the Poisson split makes
    each replica an M/M/c at a third of the load, so the workers per replica the search
    finds are Erlang C's answer for that third — and the sentence and table name the fleet."""
    a = 2.5  # Erlangs per replica (not razor-edge: tests/test_answers_capacity.py)
    sc = MMC.with_overrides({"fleet.replicas": 3, "fleet.balancer": "random",
                             "run.duration_s": 1000.0})
    res = find_capacity(sc, load_key="workload.calls_per_s", loads=[3 * a],
                        knob=make_knob(sc, "reasoner.workers", 1, 16),
                        slos=[parse_slo(f"queue.p_wait<={TARGET}")], replications=3,
                        root_seed=5)
    need = erlang_c_answer(a, TARGET)
    assert res.required == {3 * a: need}
    row = res.table().iloc[0]
    assert (row["replicas"], row["workers_per_replica"], row["fleet_workers"]) == (3, need,
                                                                                  3 * need)
    assert 1.0 <= row["utilisation_imbalance"] < 1.3
    text = res.sentence()
    assert "reasoner.workers per replica of a fleet of 3 replicas (random balancer" in text
    assert f"{need} (3 × {need} = {3 * need} workers)" in text
    # one pool: no fleet words, no fleet columns
    one = dataclasses.replace(res, fleet=load_scenario("baseline").fleet)
    assert "fleet" not in one.sentence() and "replicas" not in one.table()


def test_storm_on_a_fleet_shows_the_fleet_and_its_imbalance(tmp_path: Path) -> None:
    sc = load_scenario("retry_storm").with_overrides({
        "fleet.replicas": 2, "reasoner.workers": 4, "fleet.state": "per-replica",
        "reasoner.capacity_drops": [{"start_s": 120, "duration_s": 40, "workers": 1}]})
    res = run_storm(sc, tmp_path, strategies=["exponential", "breaker"], replications=2)
    assert res.verdict("exponential") == "metastable" and res.verdict("breaker") == "recovered"
    table = res.table().set_index("strategy")
    for name, run_dir in res.runs.items():
        met = json.loads((run_dir / "summary.json").read_text())["metrics"]
        assert met["fleet.replica_utilisation.r1"]["mean"] > 0  # the simulator ran 2 replicas
        assert "fleet.replica_utilisation.r2" not in met
        for col, metric in (("utilisation_imbalance", "utilisation_imbalance"),
                            ("requests_imbalance", "requests_imbalance"),
                            ("dup_cross_replica_per_1k",
                             "dup_request_guid_cross_replica_per_1k_turns"),
                            ("lost_to_down_replica_per_1k",
                             "requests_lost_to_down_replica_per_1k_turns")):
            assert table.loc[name, col] == pytest.approx(met[f"fleet.{metric}"]["mean"]), col
        assert set(FLEET_COLUMNS) <= set(table.columns)
        assert table.loc[name, "utilisation_imbalance"] >= 1.0
    assert res.fleet_sentence().startswith("fleet: 2 replicas behind a random balancer, "
                                           "per-replica state")
    one = run_storm(load_scenario("retry_storm"), tmp_path / "one", strategies=["breaker"],
                    replications=1)
    assert not set(FLEET_COLUMNS) & set(one.table()) and one.fleet_sentence() == ""


def test_the_fast_model_of_a_random_fleet_is_one_replica_at_a_share_of_the_load() -> None:
    sc = load_scenario("retry_storm").with_overrides(FLEET_STORM)
    one = sc.with_overrides({"fleet.replicas": 1,
                             "workload.calls_per_s": sc.workload.calls_per_s / 4})
    assert replica_params(sc) == replica_params(one) == from_scenario(one)
    assert replica_params(load_scenario("retry_storm")) == from_scenario(
        load_scenario("retry_storm"))  # one pool: unchanged
    # least outstanding ~ one pooled queue of every worker
    lo = replica_params(sc.with_overrides({"fleet.balancer": "least_outstanding"}))
    assert lo.phases[0].workers == 8 and lo.phases[0].calls_per_s == sc.workload.calls_per_s
    assert lo.queue_limit == 4 * sc.reasoner.queue_limit
    # per-replica state: a retry re-routed elsewhere does not join its abandoned execution
    per = sc.with_overrides({"reasoner.known_task": "retry", "fleet.state": "per-replica"})
    assert replica_params(per).retry_is_work and not from_scenario(per).retry_is_work
    assert any("per-replica" in u for u in replica_params(per).unexpressed)
    sticky = per.with_overrides({"fleet.balancer": "sticky"})
    assert not replica_params(sticky).retry_is_work


def test_the_map_of_a_fleet_agrees_with_its_simulation(tmp_path: Path) -> None:
    """At half load the fleet absorbs a quarter of the drop (simulated: every replication
    recovers within a window); the fast model on one replica's share agrees, where the whole
    load on one replica's 2 workers would call the cell overloaded."""
    sc = load_scenario("retry_storm").with_overrides(FLEET_STORM)
    det = Detector()
    cell = cell_scenario(sc, 0.5, 0.25)
    assert from_scenario(cell).phases[0].workers == 2
    res = run_map(sc, tmp_path, MapSpec(loads=(0.5,), sizes=(0.25, 1.0), replications=2,
                                        adaptive=False), strategies=["exponential"],
                  hitting=True)
    c = res.cells().set_index("size")
    assert c.loc[0.25, "p_recover"] == 1.0 and c.loc[0.25, "region"] == "stable"
    m = model_cell(cell, det)
    assert m.recovered and not m.overloaded
    assert bool(c.loc[0.25, "model_recovered"]) and not bool(c.loc[0.25, "model_overloaded"])
    assert "Fleet: 4 replicas behind a random balancer" in res.sentence()
    assert "one replica at 1/4 of the load" in res.sentence()
    h = res.hitting.iloc[0]
    assert math.isfinite(h["healthy_to_overloaded_s"])
