"""``rtalab load probe``: the step-load finds the knee of the embedded Reasoner, and
``rtalab calibrate`` of its folder takes the capacity from it (docs/load.md "Probe")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtalab.loadtests.loadrun.probe import ProbeOptions, knee, saturated, stop_reason
from rtalab.sim.cli import main

# 2 concurrent turns x a constant 0.2-s reasoning time, no tool: the capacity is
# 2 / 0.2 = 10 turns/s. Steps of 4 s at 6, 12, 24 (, 48) turns/s.
DEPLOYMENT = ["--set", "reasoner.workers=2", "--set", "reasoner.reasoning_time_s=0.2",
              "--set", "workload.side_effect_share=0", "--set", "workload.handoff_share=0",
              "--set", "reasoner.errors={}"]
CAPACITY_TURNS_PER_S = 10.0
TOLERANCE = 0.2  # the knee's throughput within 20 % of the capacity


def _step(offered: float, completed: float, p50: float = 0.2) -> dict[str, float]:
    return {"offered_turns_per_s": offered, "completed_turns_per_s": completed,
            "mean_service_s": 0.2, "ttfc_p50_s": p50, "ttfc_p99_s": 2 * p50, "success": 1.0}


def test_stop_rules_written_out() -> None:
    opts = ProbeOptions(scenario=None, max_p99_s=1.0, min_success=0.9)
    first = _step(5.0, 5.0)
    # a shortfall without a queue (p50 as in the first step) is Poisson noise: go on
    noisy = _step(7.0, 6.0, p50=0.21)
    assert not saturated(noisy, first)
    assert stop_reason([first, noisy], opts) is None
    # the same shortfall with TTFC p50 3.5 x the first step's: saturated
    queued = _step(11.25, 10.0, p50=0.7)
    assert saturated(queued, first)
    free = ProbeOptions(scenario=None)
    assert stop_reason([first, queued], free) is None  # saturated once: one more step
    deeper = _step(22.5, 10.2, p50=1.5)
    assert stop_reason([first, queued, deeper], free).startswith("saturated: 10.2 of 22.5")
    assert stop_reason([first, noisy, _step(14.0, 12.0, p50=0.21)], free) is None
    assert stop_reason([first, _step(10.0, 5.1, p50=0.21)], opts) == \
        "throughput stopped growing"
    assert stop_reason([first, _step(10.0, 10.0, p50=0.6)], opts).startswith("TTFC p99 1.2")
    low = {**_step(10.0, 10.0), "success": 0.8}
    assert stop_reason([first, low], opts).startswith("success 0.8")
    k = knee([first, queued, _step(20.0, 9.0, p50=1.5)])
    assert k["throughput_turns_per_s"] == 10.0 and k["saturated"]
    assert k["concurrent_turns"] == pytest.approx(2.0)
    assert not knee([first, noisy])["saturated"]
    # past the knee a busier server serves slower: 12.33/s x 0.61 s = 7.5 turns in service
    # beat 15/s x 0.456 s = 6.8 (a probe of the 8-turn deployment at load average 6)
    slow = knee([_step(15.5, 15.0) | {"mean_service_s": 0.456},
                 _step(23.8, 12.33, p50=3.3) | {"mean_service_s": 0.61}])
    assert slow["throughput_turns_per_s"] == 12.33
    assert slow["concurrent_turns"] == pytest.approx(7.5213)


def test_probe_finds_the_knee_and_calibrate_uses_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["load", "probe", "baseline", *DEPLOYMENT, "--start-rate", "6", "--factor", "2",
               "--step-seconds", "4", "--step-warmup", "1", "--step-drain", "2",
               "--max-seconds", "90", "--results", str(tmp_path)])
    assert rc == 0
    err = capsys.readouterr().err
    (folder,) = tmp_path.glob("*-probe-baseline-s1")
    probe = json.loads((folder / "probe.json").read_text())
    n = len(probe["steps"])
    seen = (probe["stopped"], [(round(s["offered_turns_per_s"], 2),
                                round(s["completed_turns_per_s"], 2), round(s["ttfc_p50_s"], 3))
                               for s in probe["detail"]])
    assert 2 <= n <= 4, seen
    assert all(f"step {i}: offered" in err for i in range(1, n + 1))  # a progress line each
    assert probe["elapsed_s"] <= 90
    assert (folder / "probe.png").stat().st_size > 5_000
    k = probe["knee"]
    assert k["saturated"], seen
    # stopped by what it saw past the knee (saturation, a flat throughput, or the callers'
    # success collapsing as their timeouts fire), not by the time bound
    assert probe["stopped"].startswith(("saturated", "throughput stopped growing",
                                        "success")), seen
    assert abs(k["throughput_turns_per_s"] / CAPACITY_TURNS_PER_S - 1) <= TOLERANCE, seen
    # never below the 0.2-s reasoning time; above it by the server's own time per turn, which
    # a busy machine stretches (0.211 s seen in CI with other jobs on both cores)
    assert 0.2 * 0.98 <= k["mean_service_s"] <= 0.2 * 1.15, seen
    assert k["concurrent_turns"] == pytest.approx(2.0, rel=TOLERANCE), seen
    # the steps below the knee followed the offer
    first = probe["steps"][0]
    assert first["completed_turns_per_s"] >= 0.8 * first["offered_turns_per_s"]

    out = tmp_path / "calibrated.toml"
    assert main(["calibrate", str(folder), "--out", str(out), "--no-plots", "--quiet"]) == 0
    fig = json.loads(out.with_suffix(".calibration.json").read_text())
    workers = next(v for v in fig["values"] if v["key"] == "reasoner.workers")
    assert workers["value"] == 2, (workers, seen)
    assert "knee" in workers["source"]
    assert "step-load knee" in out.read_text()


@pytest.mark.parametrize("flags, message", [
    (["--step-seconds", "2", "--step-warmup", "2"], "--step-warmup must be < --step-seconds"),
    (["--max-seconds", "5"], "leaves no time for one step"),
    (["--factor", "1"], "expected a number > 1"),
    (["--target", "http://127.0.0.1:9", "--workers", "2"], "--workers needs the embedded"),
])
def test_probe_bad_input_one_line_exit_2(flags: list[str], message: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "probe", "baseline", *flags, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.glob("*-probe-*")), "nothing started, no folder"


def test_calibrate_of_an_unsaturated_probe_leaves_capacity_unidentified(tmp_path: Path) -> None:
    """A probe folder whose steps never saturated: workers is not identified by it."""
    from rtalab.sim.calibrate import calibrate, from_run_dir
    from rtalab.sim.calibrate.synth import Truth, synth_observations

    obs = synth_observations(Truth(), 1, server_timings=False)
    run = tmp_path / "probe"
    run.mkdir()
    (run / "probe.json").write_text(json.dumps({"steps": [], "detail": []}))
    with pytest.raises(ValueError, match="no steps"):
        from_run_dir(run)
    from rtalab.sim.calibrate.observations import Probe

    obs.probe = [Probe(5.0, 5.0, 0.2), Probe(10.0, 9.8, 0.2)]
    cal = calibrate(obs)
    assert "reasoner.workers" in dict(cal.unidentified)


def test_predict_says_when_capacity_is_not_identified() -> None:
    """`rtalab predict` (and the demo) state on screen and in the report whether the capacity
    was identified; without queueing or a probe the default is kept, and said so."""
    from rtalab.loadtests.loadrun.predict import capacity_statement
    from rtalab.sim.calibrate import calibrate
    from rtalab.sim.calibrate.observations import Probe
    from rtalab.sim.calibrate.synth import Truth, synth_observations

    light = Truth(rate_per_s=1.0, n=2_000)  # 8 workers at ~7 % utilisation: no turn waits
    cal = calibrate(synth_observations(light, 3))
    st = capacity_statement(cal, default=8, probe="never", probe_dir=None)
    assert st["identified"] is False and st["workers"] == 8 and st["source"] == "default"
    assert "NOT identified" in st["text"] and "default 8" in st["text"]
    assert "rtalab load probe" in st["text"] and "--probe" in st["text"]
    obs = synth_observations(light, 3)
    obs.probe = [Probe(4.0, 4.0, 0.5), Probe(8.0, 7.9, 0.5), Probe(16.0, 12.0, 0.5)]
    st = capacity_statement(calibrate(obs), default=8, probe="auto", probe_dir=Path("p"))
    assert st["identified"] is True and st["workers"] == 6  # 12 turns/s x 0.5 s
    assert "knee" in st["text"]


def test_predict_runs_the_probe_when_a_leaves_capacity_unidentified(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`predict --probe auto` on a calibration run without queueing goes to the probe (here
    bounded too tightly for one step: one line, exit 2, before any server starts)."""
    from rtalab.sim.calibrate.synth import Truth, write_run_dir

    run_a = write_run_dir(Truth(rate_per_s=1.0, n=2_000), tmp_path / "a", seed=3)
    rc = main(["predict", "docs/examples/calibration_deployment.toml", "--calibration-run",
               str(run_a), "--probe-seconds", "5", "--outage", "0", "--quiet",
               "--out", str(tmp_path / "out")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "leaves no time for one step" in err and len(err.splitlines()) == 1
    assert not list((tmp_path / "out").glob("*/probe/*")), "no probe folder was started"


def test_first_step_is_half_the_scenarios_capacity_not_its_call_rate() -> None:
    """baseline: 8 workers, mean service 0.6 + 0.3 x 0.3 = 0.69 s -> capacity 11.6 turns/s;
    the first step offers half of it (5.8), not the scenario's 2 calls/s (issue 28: the
    probe started 4x too low with 4 turns per call).  --start-rate wins."""
    from rtalab.loadtests.loadrun.probe import first_step_rate
    from rtalab.sim.scenario import load_scenario

    sc = load_scenario("baseline")
    rate, why = first_step_rate(sc, None)
    assert rate == pytest.approx(0.5 * 8 / 0.69, rel=1e-6)
    assert "capacity" in why and "8 workers" in why
    assert first_step_rate(sc, 3.0) == (3.0, "--start-rate")
    small = sc.with_overrides({"reasoner.workers": 2})
    assert first_step_rate(small, None)[0] == pytest.approx(rate / 4)
