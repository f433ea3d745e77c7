"""The metastability map (sim/answers/metastability.py, ``rtalab sim metastability``).

Pure pieces first (Wilson interval, the 0.5 crossing, censored quantiles, trigger and load
scaling, where the fast model sends the replications), then the published behaviour on
``metastable_spike``: without backoff a trigger of the scenario's size tips the system into a
collapse it does not leave, with jittered backoff it recovers — on the map at the right place,
in the simulator and in the fast model alike; the map's files and one-line errors from the
command.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.answers.metastability import (
    MapError,
    MapSpec,
    cell_scenario,
    censored_quantile,
    crossing,
    load_overrides,
    model_cell,
    plan_cells,
    run_length,
    trigger_overrides,
    wilson,
)
from rtalab.sim.answers.storm import STRATEGIES, Detector, trigger_window
from rtalab.sim.scenario import load_scenario


def test_wilson_interval_contains_the_estimate_and_narrows() -> None:
    for k, n in ((0, 4), (2, 4), (4, 4), (7, 20)):
        lo, hi = wilson(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert wilson(10, 20)[1] - wilson(10, 20)[0] < wilson(2, 4)[1] - wilson(2, 4)[0]
    # the textbook value: 0 of 4 -> upper bound 0.490
    assert wilson(0, 4)[1] == pytest.approx(0.4899, abs=1e-3)


def test_crossing_interpolates_and_pools_violations() -> None:
    sizes = [1.0, 2.0, 3.0, 4.0]
    assert crossing(sizes, [1.0, 1.0, 0.0, 0.0]) == pytest.approx(2.5)
    assert crossing(sizes, [1.0, 0.75, 0.25, 0.0]) == pytest.approx(2.5)
    assert crossing(sizes, [1.0, 1.0, 1.0, 1.0]) == math.inf
    assert crossing(sizes, [0.0, 0.0, 0.0, 0.0]) == 0.0
    # a non-monotone estimate (noise) is pooled first: 1, 0, 1, 0 -> 1, .5, .5, 0
    assert crossing(sizes, [1.0, 0.0, 1.0, 0.0]) == pytest.approx(3.0)


def test_censored_quantile() -> None:
    assert censored_quantile([1.0, 2.0, None, None], 0.5, 60) == 2.0
    assert censored_quantile([1.0, None, None, None], 0.5, 60) is None
    assert censored_quantile([1.0, 70.0, 3.0], 0.9, 60) is None  # 70 s is past the hold


def test_trigger_and_load_scaling() -> None:
    s = load_scenario("retry_storm")  # capacity drop 8 -> 2 workers at 120 s for 40 s
    ov = trigger_overrides(s, 0.5, "length")
    assert ov["reasoner.capacity_drops"] == [{"start_s": 120, "duration_s": 20.0, "workers": 2}]
    deep = trigger_overrides(s, 0.5, "depth")  # half of the 6 workers lost
    assert deep["reasoner.capacity_drops"][0]["workers"] == 5
    assert trigger_window(s.with_overrides(ov)) == (120, 140)
    assert load_overrides(s, 1.5)["workload.calls_per_s"] == pytest.approx(3.0)
    closed = load_scenario("metastable_spike")
    assert load_overrides(closed, 0.5)["workload.max_calls"] == 14
    with pytest.raises(MapError, match="> 0"):
        trigger_overrides(s, 0.0)
    with pytest.raises(MapError, match="loads must increase"):
        MapSpec(loads=(1.0, 0.5), sizes=(1.0, 2.0))


def test_the_fast_model_guides_replications_to_its_boundary() -> None:
    ok = np.array([[True, True, True, False, False],
                   [True, True, False, False, False],
                   [True, False, False, False, False]])
    full, spot = plan_cells(ok, MapSpec(loads=(1.0, 2.0, 3.0), sizes=(1, 2, 3, 4, 5)))
    assert full.sum() <= math.floor(0.3 * ok.size)
    # the cells right at each row's crossing come first
    for i, j in ((0, 2), (0, 3), (1, 1), (1, 2)):
        assert full[i, j], (i, j)
    assert not (full & spot).any() and spot[0, 0] and spot[0, 4]


def _spike(hold: float = 40.0) -> tuple:
    s = load_scenario("metastable_spike")
    det = Detector(hold_s=hold)
    return s.with_overrides({"run.duration_s": run_length(s, (0.2, 1.0), "length", det)}), det


def test_fast_model_places_the_collapse_where_the_published_behaviour_is() -> None:
    s, det = _spike()
    at = {name: model_cell(cell_scenario(s, 1.0, 1.0, "length", STRATEGIES[name][1]), det)
          for name in ("no_backoff", "full_jitter")}
    assert not at["no_backoff"].recovered and at["full_jitter"].recovered
    assert at["no_backoff"].seconds < 1.0 and at["full_jitter"].seconds < 1.0
    # a trigger a fifth as long is absorbed without backoff too, and so is the full one at
    # half the load: the boundary crosses the grid
    small = model_cell(cell_scenario(s, 1.0, 0.2, "length", STRATEGIES["no_backoff"][1]), det)
    light = model_cell(cell_scenario(s, 0.5, 1.0, "length", STRATEGIES["no_backoff"][1]), det)
    assert small.recovered and light.recovered


@pytest.fixture(scope="module")
def spike_map(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    out = tmp_path_factory.mktemp("meta") / "map"
    cmd = [sys.executable, "-m", "rtalab.sim.cli", "sim", "metastability", "metastable_spike",
           "--loads", "1", "--sizes", "0.2,1", "--replications", "2", "--full-grid",
           "--hold", "40", "--strategies", "no_backoff,full_jitter", "--processes", "2",
           "--no-hitting", "--out", str(out), "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def test_map_shows_collapse_without_backoff_and_recovery_with_jitter(spike_map: tuple) -> None:
    out, stdout = spike_map
    cells = pd.read_csv(out / "cells.csv")
    at = cells[(cells["load"] == 1.0) & (cells["size"] == 1.0)].set_index("strategy")
    assert at.loc["no_backoff", "region"] == "metastable"
    assert at.loc["no_backoff", "p_recover.ci_high"] < 0.9
    assert at.loc["full_jitter", "region"] in ("stable", "recovers")
    assert at.loc["full_jitter", "p_recover"] == 1.0
    # the collapse is sustained by retries and work nobody waits for
    nb = at.loc["no_backoff"]
    assert nb["stale_work_share"] > 0.5 and nb["retry_work_share"] > 0.3
    assert nb["goodput_lost_share"] > 0.5
    assert at.loc["full_jitter", "goodput_lost_share"] < nb["goodput_lost_share"]
    th = pd.read_csv(out / "thresholds.csv").set_index("strategy")
    assert th.loc["no_backoff", "threshold"] <= 1.0
    assert th.loc["no_backoff", "threshold.ci_low"] <= th.loc["no_backoff", "threshold"] \
        <= th.loc["no_backoff", "threshold.ci_high"]
    assert th.loc["full_jitter", "threshold"] > 1.0
    # where its assumptions hold the fast model agrees with the simulator here
    assert (pd.read_csv(out / "disagreements.csv").empty
            if (out / "disagreements.csv").stat().st_size > 1 else True)
    assert (out / "map.png").stat().st_size > 10_000
    text = (out / "answer.txt").read_text()
    assert "no_backoff tips at" in text and "full_jitter" in text
    assert "no_backoff tips at" in " ".join(stdout.split())


@pytest.mark.parametrize("extra,message", [
    (["--sizes", "0,1"], "trigger sizes must be > 0"),
    (["--loads", "a,b"], "--loads must be comma-separated numbers"),
    (["--strategies", "nope"], "unknown strategy 'nope'"),
    (["--replications", "1"], ">= 2 replications"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, extra: list[str], message: str) -> None:
    cmd = [sys.executable, "-m", "rtalab.sim.cli", "sim", "metastability", "retry_storm",
           "--out", str(tmp_path / "o"), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_scenario_without_trigger_is_refused(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "sim", "metastability", "baseline",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "has no trigger" in r.stderr
