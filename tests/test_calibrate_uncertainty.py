"""Parameter uncertainty (rtalab.sim.calibrate.uncertainty): each replication of a prediction draws
the calibrated means and error rates from what the calibration knows, so a prediction
interval holds the calibration's uncertainty as well as one run's randomness.

The draws are judged the way they are used: over many small calibrations of a known truth,
the truth lies inside the central 90 % of the draws about 90 % of the time -- not always
(draws too wide) and not rarely (draws too narrow, or none: the point estimate alone).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rtalab.sim.calibrate import calibrate
from rtalab.sim.calibrate.synth import Truth, synth_observations
from rtalab.sim.calibrate.uncertainty import parameter_draws, spreads
from rtalab.sim.dist import DistError, Gamma, Histogram, parse_dist, scaled
from rtalab.sim.scenario import Scenario
from rtalab.sim.stream import replication_plan, run_streaming

BASELINE = Path(__file__).resolve().parents[1] / "sim" / "scenarios" / "baseline.toml"
TRUTH = Truth(n=200, error_share=0.05, mean_s=0.5, cv=0.5)
CALIBRATIONS = 60
DRAWS = 400


@pytest.fixture(scope="module")
def coverage() -> dict[str, int]:
    """How many of the calibrations' central 90 % of draws hold the true mean / error rate."""
    hits = {"mean": 0, "error": 0}
    for seed in range(CALIBRATIONS):
        cal = calibrate(synth_observations(TRUTH, seed))
        draws = parameter_draws(cal, DRAWS, seed)
        means = [parse_dist(d["reasoner.reasoning_time_s"]).mean for d in draws]
        errors = [d["reasoner.errors"]["internal"] for d in draws]
        for name, values, true in (("mean", means, TRUTH.mean_s),
                                   ("error", errors, TRUTH.error_share)):
            lo, hi = np.quantile(values, [0.05, 0.95])
            hits[name] += bool(lo <= true <= hi)
    return hits


@pytest.mark.parametrize("name", ["mean", "error"])
def test_the_draws_hold_the_truth_about_as_often_as_they_claim(coverage, name: str) -> None:
    # Binomial(60, 0.9): mean 54, sd 2.3; 47..59 holds 99.5 % of right calibrations.  The point
    # estimate alone (no spread) holds the truth 0 times; a doubled spread about 60 times.
    assert 47 <= coverage[name] <= 59, coverage


def test_the_same_calibration_and_seed_draw_the_same_and_more_replications_keep_the_first(
        ) -> None:
    cal = calibrate(synth_observations(TRUTH, 1))
    assert parameter_draws(cal, 5, 7) == parameter_draws(cal, 5, 7)
    assert parameter_draws(cal, 8, 7)[:5] == parameter_draws(cal, 5, 7)
    assert parameter_draws(cal, 5, 7) != parameter_draws(cal, 5, 8)
    keys = {s.key for s in spreads(cal)}
    assert {"reasoner.reasoning_time_s", "reasoner.errors"} <= keys
    # the cv and the family of a law stay; only its scale moves
    d = parse_dist(parameter_draws(cal, 1, 7)[0]["reasoner.reasoning_time_s"])
    point = parse_dist(cal.value("reasoner.reasoning_time_s"))
    assert type(d) is type(point)
    assert math.isclose(d.variance / d.mean**2, point.variance / point.mean**2, rel_tol=1e-9)
    assert d.mean != point.mean


def test_a_calibration_without_intervals_draws_nothing() -> None:
    cal = calibrate(synth_observations(TRUTH, 1))
    cal.values = [v for v in cal.values
                  if v.key not in ("reasoner.reasoning_time_s", "reasoner.first_chunk_s",
                                   "network.uplink.latency_s", "reasoner.errors")]
    assert spreads(cal) == []
    assert parameter_draws(cal, 3, 1) == [{}, {}, {}]


def test_scaled_multiplies_every_law_by_the_factor() -> None:
    rng = np.random.default_rng(3)
    for spec in (0.4, {"dist": "exp", "mean": 0.4}, {"dist": "uniform", "low": 0.1, "high": 0.5},
                 {"dist": "gamma", "mean": 0.4, "cv": 0.5},
                 {"dist": "lognormal", "mean": 0.4, "cv": 0.5},
                 {"dist": "weibull", "shape": 1.5, "scale": 0.4},
                 {"dist": "empirical", "values": [0.1, 0.3, 0.9]},
                 {"dist": "histogram", "le": [0.1, 0.5, "+Inf"], "counts": [3, 9, 10]}):
        d = parse_dist(spec)
        s = scaled(d, 1.5)
        assert s.mean == pytest.approx(1.5 * d.mean), spec
        assert s.variance == pytest.approx(2.25 * d.variance), spec
        assert parse_dist(s.to_toml()) == s  # it writes back as a valid scenario value
        assert s.sample(np.random.default_rng(1)) == pytest.approx(
            1.5 * d.sample(np.random.default_rng(1))), spec
    assert isinstance(scaled(Gamma(0.4, 0.5), 2.0), Gamma)
    assert scaled(Histogram((0.1, math.inf), (1, 2)), 2.0).le == (0.2, math.inf)
    with pytest.raises(DistError, match="finite number > 0"):
        scaled(Gamma(0.4, 0.5), 0.0)
    del rng


def test_run_streaming_runs_each_replication_with_its_own_scenario() -> None:
    sc = Scenario().with_overrides({"workload.calls_per_s": 2.0, "run.duration_s": 30.0,
                                    "run.warmup_s": 0.0, "run.drain_s": 5.0})
    plan = replication_plan(3, 2)
    same = run_streaming(sc, plan, plots=False)
    assert run_streaming(sc, plan, plots=False, scenarios=[sc, sc]) == same
    slow = sc.with_overrides({"reasoner.reasoning_time_s": 3.0})
    mixed = run_streaming(sc, plan, plots=False, scenarios=[sc, slow])
    p50 = [mixed["metrics"]["completion_s.p50"]["values"],
           same["metrics"]["completion_s.p50"]["values"]]
    assert p50[0][0] == p50[1][0]  # replication 0: the same scenario, the same numbers
    assert p50[0][1] > p50[1][1] + 2.0  # replication 1: 3-s reasoning
    with pytest.raises(ValueError, match="1 scenarios for 2 replications"):
        run_streaming(sc, plan, plots=False, scenarios=[sc])


def test_a_high_error_rate_is_drawn_around_its_estimate_with_its_binomial_spread() -> None:
    cal = calibrate(synth_observations(Truth(n=200, error_share=0.4), 2))
    k, n = cal.figures["errors"]["internal"]["count"], cal.figures["executions"]
    p = k / n
    drawn = np.array([d["reasoner.errors"]["internal"] for d in parameter_draws(cal, 2000, 2)])
    # Jeffreys Beta(k + 1/2, n - k + 1/2): mean (k + 1/2) / (n + 1), sd ~ sqrt(p (1 - p) / n)
    assert drawn.mean() == pytest.approx((k + 0.5) / (n + 1), abs=0.005)
    assert drawn.std() == pytest.approx(math.sqrt(p * (1 - p) / n), rel=0.1)


def test_predict_gives_each_replication_its_draw_and_says_so(tmp_path) -> None:
    """``rtalab predict`` on a synthetic calibration run, the prediction alone: with parameter
    uncertainty every replication runs its own draw (their figures differ from the point
    estimates' with the same seeds); without, none is drawn."""
    import json
    import subprocess
    import sys

    from rtalab.sim.calibrate.synth import write_run_dir

    run = write_run_dir(Truth(n=400, rate_per_s=4.0, processes=1, workers_per_process=2,
                              mean_s=0.3, error_share=0.05), tmp_path / "run")
    got = {}
    for flag in ("--parameter-uncertainty", "--no-parameter-uncertainty"):
        out = tmp_path / flag
        p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "predict", str(BASELINE),
                            "--calibration-run", str(run), "--no-measure", "--outage", "0",
                            "--duration", "20", "--warmup", "2", "--drain", "5",
                            "--replications", "4", "--predict-rate", "3", "--out", str(out),
                            flag], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        (folder,) = out.glob("*-predict-*")
        got[flag] = json.loads((folder / "prediction.json").read_text())
        html = (folder / "prediction.html").read_text()
        assert "parameter uncertainty (per replication)" in html
    on, off = got["--parameter-uncertainty"], got["--no-parameter-uncertainty"]
    assert on["parameter_uncertainty"]["on"] and not off["parameter_uncertainty"]["on"]
    assert len(on["parameter_uncertainty"]["draws"]) == 4 and off["parameter_uncertainty"][
        "draws"] == []
    assert any(s.startswith("reasoner.reasoning_time_s: mean") for s in on[
        "parameter_uncertainty"]["spreads"])
    # the first_chunk_s of the synthetic truth is a constant: nothing to draw
    assert not any("first_chunk" in s for s in on["parameter_uncertainty"]["spreads"])
    reps_on = [r["completion_s.p50"] for r in on["cases"][0]["replications"]]
    reps_off = [r["completion_s.p50"] for r in off["cases"][0]["replications"]]
    assert all(a != b for a, b in zip(reps_on, reps_off, strict=True)), (reps_on, reps_off)
