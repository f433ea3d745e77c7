"""Calibration recovers a known deployment from synthetic observations (issue 17, point 2).

The truth (sim/calibrate/synth.py): Poisson sends, FIFO queues on 2 processes x 4 workers,
known reasoning law, tool latency, first-chunk delay, chunk cadence, network and error
share.  Tolerances (stated in docs/calibration.md): the family that generated the data is
chosen; mean within 3 %, cv within 8 %; capacity exact; tool mean within 10 %; the error
share inside the reported 95 % CI; the round trip within 10 %.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rtalab.loadtests.reasoner.metrics import TIMING_BUCKETS
from rtalab.sim.calibrate import (
    Observations,
    Probe,
    calibrate,
    capacity_from_concurrency,
    from_run_dir,
    parse_histograms,
    write,
)
from rtalab.sim.calibrate.censored import _moments, fit_buckets
from rtalab.sim.calibrate.synth import Truth, synth_attempts, synth_observations, write_run_dir
from rtalab.sim.cli import main
from rtalab.sim.scenario import load_scenario

RTALAB = [str(Path(sys.executable).parent / "rtalab")]


def _find(cal, key):
    return next(v for v in cal.values if v.key == key)


@pytest.mark.parametrize("family", ["gamma", "lognormal", "weibull"])
@pytest.mark.parametrize("seed", [1, 2])
def test_recovers_the_reasoning_law_from_server_timings(family: str, seed: int) -> None:
    truth = Truth(reasoning=family)
    cal = calibrate(synth_observations(truth, seed))
    assert cal.method == "server-timings"
    f = cal.fits["reasoning_time_s"]
    assert f.chosen == family
    assert f.mean == pytest.approx(0.5, rel=0.03)
    expected_cv = 0.5 if family != "weibull" else 0.5227  # Weibull shape 2: sqrt(4/pi - 1)
    assert f.cv == pytest.approx(expected_cv, rel=0.08)
    assert f.mean_ci[0] < 0.5 < f.mean_ci[1] or abs(f.mean - 0.5) < 0.01
    assert f.ks < 0.03


def test_no_family_fits_a_bimodal_law_so_the_samples_are_used(tmp_path: Path) -> None:
    cal = calibrate(synth_observations(Truth(reasoning="bimodal"), 3))
    f = cal.fits["reasoning_time_s"]
    assert f.chosen == "empirical"
    assert min(fam.ks for fam in f.families) > 0.03
    # written as a samples file the scenario names; the scenario loads and samples it
    p = write(cal, tmp_path / "cal.toml", plots=False)
    sc = load_scenario(p["toml"])
    d = sc.reasoner.reasoning_time_s
    assert d.kind == "empirical" and len(d.values) == min(f.n, 10_000)  # quantile-thinned
    assert Path(d.file).parent.name == "cal.samples"


@pytest.mark.parametrize(("processes", "per", "rate"), [(2, 4, 8.0), (1, 4, 5.0), (1, 8, 11.0)])
def test_capacity_from_the_queued_turns(processes: int, per: int, rate: float) -> None:
    truth = Truth(processes=processes, workers_per_process=per, rate_per_s=rate, n=15_000)
    cal = calibrate(synth_observations(truth, 4))
    w = _find(cal, "reasoner.workers")
    assert w.value == processes * per
    assert "reasoner.workers" not in dict(cal.unidentified)
    assert cal.figures["utilisation"] == pytest.approx(
        rate * (0.5 + 0.3 * 0.3) / (processes * per), rel=0.06)


@pytest.mark.parametrize("seed", [14, 15])
@pytest.mark.parametrize("shared", [True, False])
def test_capacity_tells_one_shared_pool_from_a_pool_per_process(shared: bool, seed: int) -> None:
    truth = Truth(rate_per_s=11.0, n=10_000, processes=2, workers_per_process=4,
                  shared_pool=shared)
    cal = calibrate(synth_observations(truth, seed))
    assert _find(cal, "reasoner.workers").value == 8
    cap = cal.figures["capacity"]
    assert cap["layout"] == ("one pool shared by the processes" if shared
                             else "one pool per process")


@pytest.mark.parametrize("seed", [16, 17])
def test_capacity_through_a_broker_whose_round_trip_is_in_every_queue_wait(seed: int) -> None:
    """Every wait carries the broker's ~15 ms: a 2-ms threshold would take every turn for a
    queued one (the count at its start is then anything up to the capacity)."""
    truth = Truth(rate_per_s=8.0, n=8000, shared_pool=True, queue_overhead_s=0.015)
    cal = calibrate(synth_observations(truth, seed))
    assert _find(cal, "reasoner.workers").value == 8
    assert cal.figures["capacity"]["queue_overhead_s"] > 0.005


@pytest.mark.parametrize("seed", [11, 12])
def test_capacity_survives_a_jittery_client_clock(seed: int) -> None:
    """The service that freed a worker ends when the waiting one starts; with a few ms of
    uplink jitter the client's reconstruction must not count it as still running."""
    truth = Truth(rate_per_s=9.0, n=8000, uplink_jitter_s=0.003)
    assert _find(calibrate(synth_observations(truth, seed)), "reasoner.workers").value == 8


def test_capacity_without_queueing_is_only_a_lower_bound() -> None:
    cal = calibrate(synth_observations(Truth(rate_per_s=0.5, n=800, workers_per_process=8), 5))
    why = dict(cal.unidentified)["reasoner.workers"]
    assert "at least" in why and "probe" in why
    assert not [v for v in cal.values if v.key == "reasoner.workers"]


def test_capacity_from_concurrency_reads_the_count_at_a_wait() -> None:
    # one process, 2 workers: [0,10), [1,5), third waits until 5 -> 2 in service at its start
    start = np.array([0.0, 1.0, 5.0, 20.0])
    end = np.array([10.0, 5.0, 8.0, 21.0])
    waited = np.array([False, False, True, False])
    out = capacity_from_concurrency(start, end, waited, np.array(["a"] * 4))
    assert out["per_process"]["a"]["max_concurrency"] == 2
    assert out["identified"] is False  # one waited turn is not enough
    many = capacity_from_concurrency(np.tile(start, 10) + np.repeat(np.arange(10) * 100, 4),
                                     np.tile(end, 10) + np.repeat(np.arange(10) * 100, 4),
                                     np.tile(waited, 10), np.array(["a"] * 40))
    assert many["workers"] == 2 and many["identified"] is True


def test_capacity_from_a_step_load_knee() -> None:
    obs = synth_observations(Truth(), 1, server_timings=False)
    obs.probe = [Probe(2, 2.0, 0.5), Probe(8, 7.9, 0.5), Probe(16, 12.1, 0.5),
                 Probe(24, 12.0, 0.5)]
    cal = calibrate(obs)
    w = _find(cal, "reasoner.workers")
    assert w.value == 6  # 12.1 turns/s x 0.5 s (Little's law at saturation)
    assert "knee" in w.source
    # a slower service past the knee: 11 turns/s x 0.7 s = 7.7 turns in service beat
    # 12.1 x 0.5 = 6.05
    obs.probe = [Probe(8, 7.9, 0.5), Probe(16, 12.1, 0.5), Probe(24, 11.0, 0.7)]
    assert _find(calibrate(obs), "reasoner.workers").value == 8


def test_tool_first_chunk_chunks_errors_and_network() -> None:
    truth = Truth()
    cal = calibrate(synth_observations(truth, 6))
    tool = _find(cal, "reasoner.tool_latency_s").value
    assert tool["mean"] == pytest.approx(0.3, rel=0.10)
    assert _find(cal, "reasoner.first_chunk_s").value == pytest.approx(0.05)
    assert _find(cal, "reasoner.chunks").value == 3
    assert _find(cal, "reasoner.chunk_interval_s").value == pytest.approx(0.2, abs=0.002)
    rep = cal.figures["errors"]["internal"]
    assert rep["ci"][0] <= 0.02 <= rep["ci"][1]
    assert _find(cal, "reasoner.errors").value["internal"] == pytest.approx(0.02, abs=0.005)
    # round trip: wire 4 ms + intake 2 ms; uplink gets intake + half the wire
    assert cal.figures["rtt_median_s"] == pytest.approx(0.006, rel=0.10)
    assert _find(cal, "network.downlink.latency_s").value == pytest.approx(0.002, rel=0.10)


def test_a_tool_that_takes_no_time_is_calibrated_to_zero_not_left_at_the_default() -> None:
    cal = calibrate(synth_observations(Truth(tool_mean_s=0.0), 13))
    tool = _find(cal, "reasoner.tool_latency_s")
    assert tool.value == 0.0 and "not measurably slower" in tool.source
    assert cal.scenario().reasoner.tool_latency_s.mean == 0.0


def test_client_only_calibration_says_what_it_could_not_separate() -> None:
    cal = calibrate(synth_observations(Truth(), 7, server_timings=False))
    assert cal.method == "client-only"
    f = cal.fits["reasoning_time_s"]
    assert f.mean == pytest.approx(0.55, rel=0.03)  # reasoning + the 50 ms first-chunk delay
    why = dict(cal.unidentified)
    assert "reasoner.first_chunk_s" in why and "reasoner.tool_latency_s" in why
    assert cal.figures["rtt_median_s"] == pytest.approx(0.006, rel=0.10)


def test_server_histograms_alone_become_interval_censored_fits() -> None:
    a = synth_attempts(Truth(), 8)
    svc = a["server_service_s"].to_numpy()
    bounds = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
    samples = {f'rta_reasoner_service_seconds_bucket{{le="{b}"}}': float((svc <= b).sum())
               for b in bounds}
    samples['rta_reasoner_service_seconds_bucket{le="+Inf"}'] = float(len(svc))
    hist = parse_histograms(samples)
    obs = Observations(attempts=a.drop(columns=[c for c in a.columns if c.startswith("server_")]),
                       duration_s=float(a["send_s"].max()), server_histograms=hist)
    cal = calibrate(obs)
    assert cal.method == "server-histograms"
    v = _find(cal, "reasoner.reasoning_time_s")
    # the service of every turn (tool turns too): a family or, where none fits, the histogram
    assert v.value["dist"] in ("gamma", "lognormal", "weibull", "histogram")
    assert "interval-censored" in v.quality and "the buckets widen the CI" in v.quality
    fit = cal.figures["bucket_fits"]["reasoner.reasoning_time_s"]
    assert fit["n"] == len(svc)
    assert fit["mean_ci"][0] <= svc.mean() * 1.02 and svc.mean() * 0.98 <= fit["mean_ci"][1]
    assert cal.scenario().reasoner.reasoning_time_s.mean == pytest.approx(svc.mean(), rel=0.05)
    assert _find(cal, "reasoner.tool_latency_s").value == 0.0  # folded into the service


def test_parse_histograms_sums_labels_and_needs_inf() -> None:
    s = {'x_bucket{le="0.5",outcome="a"}': 1, 'x_bucket{le="0.5",outcome="b"}': 2,
         'x_bucket{le="+Inf",outcome="a"}': 3, 'x_bucket{le="+Inf",outcome="b"}': 4,
         'y_bucket{le="1"}': 5, "x_count": 7}
    assert parse_histograms(s) == {"x": ((0.5, float("inf")), (3.0, 7.0))}


def test_written_toml_is_a_commented_valid_scenario(tmp_path: Path) -> None:
    cal = calibrate(synth_observations(Truth(), 9), load_scenario("baseline"))
    p = write(cal, tmp_path / "out" / "calibrated.toml")
    text = p["toml"].read_text()
    sc = load_scenario(p["toml"])
    assert sc == cal.scenario()
    assert sc.workload == load_scenario("baseline").workload  # client settings kept
    assert sc.reasoner.workers == 8
    lines = text.splitlines()
    i = lines.index("[reasoner.reasoning_time_s]")
    above = " ".join(lines[j] for j in range(i - 4, i))
    assert "server per-turn timings" in above and "KS" in above and "AIC" in above
    assert "# Not identified (defaults kept):" in text
    assert "#   reasoner.queue_limit:" in text
    report = json.loads(p["json"].read_text())
    assert report["fits"]["reasoning_time_s"]["chosen"] == "gamma"
    assert p["qq"].stat().st_size > 1000
    # the base's [reasoner] is not copied: baseline's lognormal reasoning is not told
    assert tomllib.loads(text)["reasoner"]["reasoning_time_s"]["dist"] == "gamma"


def test_cli_calibrates_a_run_folder_and_refuses_bad_input(tmp_path: Path, capsys) -> None:
    run = write_run_dir(Truth(n=3000), tmp_path / "run")
    obs = from_run_dir(run)
    assert obs.has_server_timings and len(obs.chunk_gaps_s) > 100
    out = tmp_path / "c.toml"
    p = subprocess.run([*RTALAB, "calibrate", str(run), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "reasoner.workers = 8" in p.stdout
    assert load_scenario(out).reasoner.workers == 8
    for args, expected in [((str(tmp_path / "nope"),), "is not a folder"),
                           ((str(tmp_path),), "not a load run folder")]:
        assert main(["calibrate", *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err


def test_capacity_lower_bound_is_the_pooled_maximum_without_waits() -> None:
    """No turn waited: the largest number of services at once over every process (2) is the
    lower bound, not the sum of per-process maxima reached at different times (4)."""
    start = np.array([0.0, 0.1, 2.0, 2.1])
    end = np.array([1.0, 1.1, 3.0, 3.1])
    out = capacity_from_concurrency(start, end, np.zeros(4, dtype=bool),
                                    np.array(["a", "a", "b", "b"]))
    assert out["identified"] is False
    assert out["workers"] == 2


def test_capacity_lower_bound_never_exceeds_the_pool_when_a_worker_changes_hands() -> None:
    """A pool of 6, never queued: six long services, and a seventh turn that starts as one of
    them ends (its start 0.4 ms before that end on the client's clock, jitter).  The largest
    count at once is 6, not 7 (issue 28: "at least 7" for a pool of 6)."""
    start = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.9996])
    end = np.array([1.0, 5.0, 5.0, 5.0, 5.0, 5.0, 2.0])
    out = capacity_from_concurrency(start, end, np.zeros(7, dtype=bool), np.array(["a"] * 7))
    assert out["identified"] is False
    assert out["workers"] == 6
    start[-1] = 0.5  # a real seventh service at once: the bound says 7
    out = capacity_from_concurrency(start, end, np.zeros(7, dtype=bool), np.array(["a"] * 7))
    assert out["workers"] == 7


def test_offered_utilisation_is_the_models_and_both_utilisations_are_named() -> None:
    """The model's offered utilisation at the scenario's rate (calls/s x turns/call x mean
    service / workers) is what --predict-utilisation scales: the same calibration gives the
    same B whatever the run's random arrivals; the run's busy share is printed as such."""
    from rtalab.loadtests.loadrun.predict import rate_b_for
    from rtalab.sim.calibrate.cli import describe

    base = load_scenario("baseline").with_overrides({"workload.calls_per_s": 1.5,
                                                     "workload.turns_per_call": 4})
    cal = calibrate(synth_observations(Truth(n=6000), 4), base)
    f = cal.figures
    workers = _find(cal, "reasoner.workers").value
    assert f["offered_utilisation"] == pytest.approx(1.5 * 4 * f["mean_service_s"] / workers)
    assert f["offered_utilisation"] != pytest.approx(f["utilisation"], rel=0.05)
    rate, note = rate_b_for(None, 0.85, 1.5, f["offered_utilisation"])
    assert note is None
    assert rate * 4 * f["mean_service_s"] / workers == pytest.approx(0.85)
    assert rate_b_for(3.0, 0.85, 1.5, f["offered_utilisation"]) == (3.0, None)
    assert rate_b_for(None, 0.85, 1.5, math.nan)[0] == 3.0  # unknown capacity: 2 x A
    text = "\n".join(describe(cal))
    assert "offered utilisation (model" in text and "measured busy share" in text


def test_a_clipped_negative_variance_is_said_in_the_output() -> None:
    """A fast tool (exponential, mean 0.08 s) timed on 300 turns: the variance by difference
    comes out negative (seed 24), so cv is clipped to 0; calibrate says so on screen, not
    only in the TOML comment (issue 28: "lognormal, cv = 0" without a word)."""
    from rtalab.sim.calibrate.cli import describe

    cal = calibrate(synth_observations(Truth(tool_mean_s=0.08, n=300), 24))
    tool = _find(cal, "reasoner.tool_latency_s")
    assert tool.value["cv"] == 0.0
    text = "\n".join(describe(cal))
    assert "NOTE cv clipped to 0" in text and "not identified" in text
    ok = calibrate(synth_observations(Truth(tool_mean_s=0.08, n=300), 23))
    assert "clipped" not in "\n".join(describe(ok))


def test_a_bucket_refit_far_out_has_infinite_moments_not_an_error() -> None:
    """A resample's refit can wander to a shape whose moments overflow a float: the mean and
    cv are then infinite (an unbounded end of the interval), never an OverflowError."""
    assert _moments("weibull", np.log([1e-12, 1.0])) == (math.inf, math.inf)
    assert _moments("lognormal", np.log([1e6, 1.0])) == (math.inf, math.inf)
    assert _moments("gamma", np.log([4.0, 0.05])) == pytest.approx((0.2, 0.5))


@pytest.mark.parametrize("family", ["lognormal", "gamma", "weibull"])
@pytest.mark.parametrize(("shape", "scale"), [(0.4, 0.2), (1.0, 1.0), (2.8, 0.07), (6.0, 3.0)])
def test_a_bucket_fits_closed_form_moments_are_scipys(family: str, shape: float,
                                                      scale: float) -> None:
    """The fit's (mean, cv) from log-parameters, in closed form, against the scipy law's."""
    law = {"lognormal": stats.lognorm, "gamma": stats.gamma,
           "weibull": stats.weibull_min}[family](shape, 0, scale)
    mean, cv = _moments(family, np.log([shape, scale]))
    assert mean == pytest.approx(float(law.mean()), rel=1e-9)
    assert cv == pytest.approx(float(law.std() / law.mean()), rel=1e-9)


def test_a_histogram_kept_states_its_own_intervals() -> None:
    """Two modes 100x apart: no family describes the buckets, the histogram is kept, and
    its mean and cv intervals are the histogram's own (holding its estimates and, here, the
    sample's), not those of the rejected family."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.gamma(50, 0.0004, 300), rng.gamma(50, 0.04, 300)])
    f = fit_buckets("x", (*TIMING_BUCKETS, math.inf),
                    (*(float((x <= b).sum()) for b in TIMING_BUCKETS), float(len(x))))
    assert f is not None and f.chosen == "histogram" and f.supported == []
    assert f.mean_ci[0] <= f.mean <= f.mean_ci[1] and f.cv_ci[0] <= f.cv <= f.cv_ci[1]
    assert f.mean_ci[0] <= x.mean() <= f.mean_ci[1]
    assert f.cv_ci[0] <= x.std() / x.mean() <= f.cv_ci[1]
    assert "CIs of the histogram itself" in f.comment()
