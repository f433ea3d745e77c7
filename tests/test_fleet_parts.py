"""A fleet's replications as independent parts on processes or a real Dask LocalCluster:
the same summary, bit for bit, whichever executor ran them, with pooled percentiles from
the merged sketches."""

from __future__ import annotations

import json

import pytest

from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared.sketch import Sketch
from rtalab.sim.stream import replication_plan, run_streaming
from rtalab.sim.sweep import make_executor

SCENARIO = {"fleet.replicas": 3, "fleet.state": "per-replica", "fleet.balancer": "random",
            "run.records": "none", "run.duration_s": 60.0, "run.warmup_s": 10.0}


def summary(executor: object = None) -> str:
    sc = load_scenario("lossy_network").with_overrides(SCENARIO)
    out = run_streaming(sc, replication_plan(5, 3), None, executor=executor)  # type: ignore[arg-type]
    return json.dumps(out, sort_keys=True)


def test_processes_and_dask_give_the_summary_of_one_process() -> None:
    pytest.importorskip("distributed")
    here = summary()
    with make_executor(processes=2) as ex:
        procs = summary(ex)
    with make_executor(dask="local:2") as ex:
        dask = summary(ex)
    assert procs == here
    assert dask == here
    pooled = json.loads(here)["pooled"]
    assert pooled["completion_s.p99"] is not None
    # the pooled p50 lies between the replications' own p50s (the merge is of all turns)
    values = json.loads(here)["metrics"]["completion_s.p50"]["values"]
    assert min(values) <= pooled["completion_s.p50"] <= max(values)


def test_merging_is_exact_whatever_the_split() -> None:
    import numpy as np

    x = np.random.default_rng(2).exponential(1.0, 9000)
    one = Sketch()
    one.add(x)
    parts = [Sketch() for _ in range(3)]
    for i, p in enumerate(parts):
        p.add(x[i::3])
    merged = parts[2]
    merged.merge(parts[0])
    merged.merge(parts[1])
    assert np.array_equal(np.ctypeslib.as_array(merged.hist.counts),
                          np.ctypeslib.as_array(one.hist.counts))
