"""A fleet split by replica (issue 27 point 3, sim/fleetsplit.py): exact (in law) for random
routing when each call reaches the Reasoner once, refused in one line otherwise; the same
numbers whichever executor ran the parts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rtalab.sim import theory
from rtalab.sim.fleetsplit import SplitError, part_scenario, split_reason
from rtalab.sim.scenario import load_scenario
from rtalab.sim.stream import replication_plan, run_streaming
from rtalab.sim.sweep import make_executor
from tests.test_answers_capacity import MMC

REPO = Path(__file__).resolve().parents[1]
# 4 replicas of 2 workers, 1.6 Erlangs each (rho = 0.8): M/M/2 per replica under random routing
FLEET = MMC.with_overrides({"fleet.replicas": 4, "fleet.balancer": "random",
                            "workload.calls_per_s": 4 * 1.6, "reasoner.workers": 2,
                            "run.duration_s": 1000.0})


def summary(split: str, executor: object = None, **over: object) -> dict:
    sc = FLEET.with_overrides(over) if over else FLEET
    return run_streaming(sc, replication_plan(3, 4), None, split=split,
                         executor=executor)  # type: ignore[arg-type]


def test_a_random_fleet_of_one_request_calls_splits_exactly() -> None:
    """Split or whole, the fleet is 4 M/M/2 queues: both estimate Erlang C, and the merged
    replication has the fleet's per-replica load metrics."""
    whole, split = summary("replications"), summary("replicas")
    expect = theory.erlang_c(2, 1.6)
    for s in (whole, split):
        m = s["metrics"]
        assert abs(m["queue.p_wait"]["mean"] - expect) < 0.04, m["queue.p_wait"]
        assert m["goodput_turns_per_s"]["mean"] == pytest.approx(6.4, rel=0.05)
        shares = [m[f"fleet.replica_requests_share.r{r}"]["mean"] for r in range(4)]
        assert sum(shares) == pytest.approx(1.0)
        assert 1.0 <= m["fleet.utilisation_imbalance"]["mean"] < 1.2
        assert m["fleet.dup_request_guid_cross_replica_per_1k_turns"]["mean"] == 0.0
    # the parts are one-pool runs of a quarter of the calls: the merged turns are all of them
    assert split["metrics"]["turns"]["mean"] == pytest.approx(whole["metrics"]["turns"]["mean"],
                                                              rel=0.05)
    part = part_scenario(FLEET)
    assert (part.fleet.replicas, part.workload.calls_per_s) == (1, 1.6)


def test_the_parts_give_the_same_numbers_on_any_executor() -> None:
    pytest.importorskip("distributed")
    here = json.dumps(summary("replicas", **{"run.duration_s": 200.0}), sort_keys=True)
    with make_executor(processes=2) as ex:
        procs = json.dumps(summary("replicas", ex, **{"run.duration_s": 200.0}),
                           sort_keys=True)
    with make_executor(dask="local:2") as ex:
        dask = json.dumps(summary("replicas", ex, **{"run.duration_s": 200.0}),
                          sort_keys=True)
    assert procs == here and dask == here


@pytest.mark.parametrize(("over", "why"), [
    ({"fleet.replicas": 1}, "one pool"),
    ({"fleet.balancer": "round_robin"}, "every N-th request"),
    ({"fleet.balancer": "sticky"}, "call_id % N"),
    ({"fleet.balancer": "power_of_two"}, "replicas' load"),
    ({"fleet.failures": [{"replica": 0, "start_s": 50.0, "duration_s": 5.0}]},
     "fleet.failures"),
    ({"workload.max_calls": 100}, "closed population"),
    ({"workload.turns_per_call": 2}, "turns_per_call"),
    ({"live.retry.max_attempts": 3}, "retry is re-routed"),
    ({"workload.handoff_share": 0.1}, "resume"),
    ({"network.uplink.duplication": 0.01}, "duplicate copy"),
])
def test_a_fleet_that_does_not_split_says_why(over: dict, why: str) -> None:
    sc = FLEET.with_overrides(over)
    reason = split_reason(sc)
    assert reason is not None and why in reason and "\n" not in reason
    with pytest.raises(SplitError, match="cannot split this fleet by replica"):
        run_streaming(sc, replication_plan(1, 1), None, split="replicas")
    assert split_reason(FLEET) is None


def test_a_retry_the_static_check_lets_through_is_caught_at_the_merge() -> None:
    """max_attempts = 1 but an injected internal error retried by its own limit (2)."""
    sc = FLEET.with_overrides({"reasoner.errors": {"internal": 0.2},
                               "live.retry.max_attempts_by_code": {"internal": 2},
                               "run.duration_s": 200.0})
    assert split_reason(sc) is None
    with pytest.raises(SplitError, match=r"retried .*'internal'"):
        run_streaming(sc, replication_plan(1, 1), None, split="replicas")


def test_the_cli_refuses_in_one_line_before_making_a_folder(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "sim", "run", "baseline", "--set",
                        "fleet.replicas=3", "--split", "replicas", "--results", str(tmp_path),
                        "-q"], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "rtalab: cannot split this fleet by replica: workload.turns_per_call"), p.stderr
    assert not list(tmp_path.iterdir())


def test_the_cli_runs_a_split_fleet(tmp_path: Path) -> None:
    from rtalab.sim import cli

    sets = [f"{k}={json.dumps(v)}" for k, v in {
        "workload.turns_per_call": 1, "live.retry.max_attempts": 1, "reasoner.errors": {},
        "workload.handoff_share": 0.0, "network.uplink.duplication": 0.0,
        "fleet.replicas": 3, "run.duration_s": 60.0, "run.warmup_s": 10.0}.items()]
    sc = load_scenario("baseline")
    assert sc.fleet.balancer == "random"
    assert cli.main(["sim", "run", "baseline", "--set", *sets, "--split", "replicas",
                     "--replications", "2", "--results", str(tmp_path), "--no-plots",
                     "-q"]) == 0
    run = next(tmp_path.iterdir())
    meta = json.loads((run / "meta.json").read_text())
    assert meta["split"] == "replicas"
    met = json.loads((run / "summary.json").read_text())["metrics"]
    assert "fleet.replica_utilisation.r2" in met


def test_the_merge_keeps_every_row_distinct_and_adds_the_series() -> None:
    from rtalab.sim.fleetsplit import merge_parts, part_plan
    from rtalab.sim.runner import run_once
    from rtalab.sim.shared import schema as S

    sc = FLEET.with_overrides({"run.duration_s": 200.0})
    part = part_scenario(sc)
    outs = [run_once(part, s, r) for s, r in part_plan(sc, 9, 0)]
    assert len({s for s, _ in part_plan(sc, 9, 0)}) == 4  # four distinct part seeds
    merged = merge_parts(sc, outs, 9, 0)
    for name, key in (("calls", S.CALL_ID), ("turns", S.INTERACTION_ID),
                      ("executions", S.REQUEST_GUID)):
        table = getattr(merged, name)
        assert len(table) == sum(len(getattr(o, name)) for o in outs)
        assert table[key].is_unique, name
    for col in (S.OFFERED_TURNS_PER_S, S.BUSY_WORKERS, S.WORKER_CAPACITY):
        assert (merged.timeseries[col].to_numpy()
                == sum(o.timeseries[col].to_numpy() for o in outs)).all()
    assert merged.counters["turns"] == sum(o.counters["turns"] for o in outs)
    assert merged.counters["end_s"] == outs[0].counters["end_s"]
    # each replica's utilisation is its part's own (the window of rtalab.sim.model.fleet)
    from rtalab.sim.shared.summary import replication_metrics

    m = replication_metrics(merged, sc.run.warmup_s)
    for i, o in enumerate(outs):
        own = replication_metrics(o, sc.run.warmup_s)["worker_utilisation"]
        assert m[f"fleet.replica_utilisation.r{i}"] == pytest.approx(own, abs=0.02)


def test_a_split_run_without_records_has_the_metrics_of_one_with_them() -> None:
    """``records = "none"``: the merged metrics are those of every row, and no row is kept
    (the run output is frozen: the merge builds a new one)."""
    over = {"run.duration_s": 200.0}
    kept = summary("replicas", **over)["metrics"]
    none = summary("replicas", **over, **{"run.records": "none"})["metrics"]
    for name in ("turns", "queue.p_wait", "goodput_turns_per_s", "fleet.requests_imbalance"):
        assert none[name]["mean"] == pytest.approx(kept[name]["mean"], rel=1e-9), name
