"""One outage of each kind, the same event in both worlds (issue 28, point 2).

For each kind (``blackhole``, ``reset``, ``reasoner-down``, ``loss``): the simulator's
replications of a short run with one outage (``--outage-at``/``--outage-for``/
``--outage-kind`` on the run's own clock) against one load run of the embedded deployment
with the same outage, enacted by the chaos proxy from the load's start.  The check: the
predicted success rate (the replications' mean) lies inside the measured run's 99 %
bootstrap CI over calls (:func:`sim.calibrate.validate.bootstrap`; 1 % false failure per
kind for a twin).  The kinds differ in what an attempt at an edge costs: a blackhole
attempt hangs until its turn-response timer, a reset or refused one fails at once and the
retries are spent while the window lasts, so the success rates differ by kind and a kind
realised differently in one world fails its test (planted: the simulator treating a reset
as a blackhole, and the proxy ignoring the kind: see the commit).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.calibrate.validate import bootstrap, turn_metrics
from sim.runner import run_once
from sim.scenario import load_scenario, resolve_path
from tests.load.conftest import load_run

DURATION_S, WARMUP_S, DRAIN_S = 20.0, 4.0, 10.0
OUTAGE_AT_S, OUTAGE_FOR_S = 9.0, 5.0
REPLICATIONS = 40
SIM_SEED = 2812
# baseline with short calls (think 1 s) and a patient Live layer that retries 3 times
OVERRIDES = ("workload.think_time_s={dist='exp', mean=1.0}",)
KINDS = ("blackhole", "reset", "reasoner-down", "loss")


def _outage(kind: str) -> list[str]:
    return ["--outage-at", str(OUTAGE_AT_S), "--outage-for", str(OUTAGE_FOR_S),
            "--outage-kind", kind] + (["--outage-loss", "0.5"] if kind == "loss" else [])


def _predicted(kind: str) -> list[float]:
    sc = load_scenario("baseline", list(OVERRIDES)).with_overrides({
        "run.duration_s": DURATION_S, "run.warmup_s": WARMUP_S, "run.drain_s": DRAIN_S,
        "network.outages": [{"start_s": OUTAGE_AT_S, "duration_s": OUTAGE_FOR_S,
                             "kind": kind, "loss": 0.5}]})
    return [turn_metrics(run_once(sc, SIM_SEED, i).turns, WARMUP_S, DURATION_S)["success_rate"]
            for i in range(REPLICATIONS)]


@pytest.mark.parametrize("kind", KINDS)
def test_one_outage_of_each_kind_means_the_same_in_both_worlds(tmp_path: Path, kind: str
                                                                ) -> None:
    pred = _predicted(kind)
    sets = [a for o in OVERRIDES for a in ("--set", o)]
    p, run = load_run(tmp_path, "--duration", str(DURATION_S), "--drain", str(DRAIN_S),
                      "--set", f"run.warmup_s={WARMUP_S}", "--chaos", *sets, *_outage(kind),
                      scenario=resolve_path("baseline").read_text(),
                      timeout_s=DURATION_S + DRAIN_S + 120.0)
    assert run is not None and (run / "turns.parquet").is_file(), p.stderr[-2000:]
    turns = pd.read_parquet(run / "turns.parquet")
    measured = turn_metrics(turns, WARMUP_S, DURATION_S)["success_rate"]
    lo, hi = bootstrap(turns, WARMUP_S, DURATION_S, seed=1, rounds=1000,
                       quantiles=(0.005, 0.995))["success_rate"]
    chaos = [json.loads(x) for x in (run / "ledger" / "chaos.jsonl").read_text().splitlines()
             if x]
    starts = [e for e in chaos if e.get("kind") == "outage-start"]
    mean = float(np.mean(pred))
    print(f"\n{kind}: predicted success {mean:.4f} (replications {min(pred):.3f}-"
          f"{max(pred):.3f}), measured {measured:.4f} [99 % CI {lo:.4f}, {hi:.4f}], "
          f"proxy: {[(e.get('mode'), e.get('start_s')) for e in starts]}")
    assert [e.get("mode") for e in starts] == [kind], starts
    assert lo <= mean <= hi, (kind, mean, (lo, hi), measured)
