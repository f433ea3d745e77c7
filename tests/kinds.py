"""Small results folders of every kind rtalab writes (tests and ``make report-screenshots``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from rtalab.sim import cli
from tests.load.conftest import FAST

REPO = Path(__file__).resolve().parents[1]
TINY = ["run.duration_s=60", "run.warmup_s=10", "run.drain_s=10"]
WARMUP, DURATION = 5.0, 35.0  # the synthetic predict folder's window
MMC = ["workload.turns_per_call=1", "workload.side_effect_share=0.0",
       "workload.handoff_share=0.0", "reasoner.errors={}", "live.retry.max_attempts=1",
       "live.timeouts.turn_response_s=0.0", "reasoner.reasoning_time_s=1.0",
       "run.duration_s=200", "run.warmup_s=20"]


def rtalab(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``rtalab ARGS`` as a subprocess of this checkout at 80 columns."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "rtalab.sim.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def make_folders(tmp: Path) -> dict[str, Path]:
    """One small folder of each kind rtalab writes under ``tmp``: run, sweep, capacity, tune,
    storm and load (about 40 s on two cores)."""
    out: dict[str, Path] = {}
    assert cli.main(["sim", "run", "baseline", "--set", *TINY, "workload.barge_in_share=0.3",
                     "--replications", "2", "--out", str(tmp / "runs"), "-q"]) == 0
    out["run"] = next((tmp / "runs").iterdir())
    assert cli.main(["sim", "sweep", "baseline", "--set", *TINY, "--grid",
                     "reasoner.workers=2,8", "--replications", "3", "--processes", "1",
                     "--no-plots", "--out", str(tmp / "sweep"), "-q"]) == 0
    out["sweep"] = tmp / "sweep"
    assert cli.main(["sim", "capacity", "baseline", "--set", *MMC, "--load",
                     "workload.calls_per_s=0.5,1", "--knob", "reasoner.workers", "--range",
                     "1:8", "--slo", "p_wait<=0.5", "--replications", "2", "--processes", "1",
                     "--out", str(tmp / "cap"), "-q"]) == 0
    out["capacity"] = tmp / "cap"
    space = tmp / "space.toml"
    space.write_text('[tune]\n"live.timeouts.turn_response_s" = { low = 1.0, high = 3.0 }\n')
    assert cli.main(["sim", "tune", "baseline", "--set", *TINY, "--minimize",
                     "turn_completion_p99_s", "--constraint", "success_rate>=0.9", "--trials",
                     "2", "--space", str(space), "--replications", "2", "--top", "1",
                     "--processes", "1", "--out", str(tmp / "tune"), "-q"]) == 0
    out["tune"] = tmp / "tune"
    assert cli.main(["sim", "storm", "retry_storm", "--strategies", "exponential,breaker",
                     "--replications", "1", "--processes", "1", "--out", str(tmp / "storm"),
                     "-q"]) == 0
    out["storm"] = tmp / "storm"
    sc = tmp / "load.toml"
    sc.write_text(FAST, encoding="utf-8")
    p = rtalab("load", "run", str(sc), "--results", str(tmp / "load"), "--quiet",
               "--junit", str(tmp / "load.xml"), timeout=150)
    assert p.returncode == 0, p.stderr
    out["load"] = next((tmp / "load").glob("*-load-*"))
    return out


def _turns(rng: np.random.Generator, n: int, scale: float, fail: float = 0.005
           ) -> pd.DataFrame:
    """Synthetic turns of one run: lognormal completion, TTFC a share of it."""
    start = np.sort(rng.uniform(0, DURATION, n))
    comp = scale * rng.lognormal(0.0, 0.45, n)
    ok = rng.random(n) >= fail
    return pd.DataFrame({
        "call_id": [f"c{i // 4}" for i in range(n)], "start_s": start,
        "end_s": start + comp, "outcome": np.where(ok, "completed", "failed"),
        "ttfc_s": comp * 0.6, "completion_s": comp,
        "attempts": np.where(rng.random(n) < 0.02, 2, 1)})


def make_predict_folder(root: Path, measured_scale: tuple[float, float] = (1.0, 1.6),
                        reps: int = 20) -> Path:
    """A synthetic ``rtalab predict`` folder as ``make demo`` reads it, in a few seconds:
    ``prediction.json`` (the ``one_run`` rows from the real functions, on lognormal turns
    whose scale is ``measured_scale`` x the simulated one per case), ``sim-*/turns.parquet``,
    the measured turns, ``prediction.section.html`` and one small simulated run under
    ``runs/`` (where the real folder has its load runs)."""
    from rtalab.sim.calibrate.validate import (
        bootstrap,
        compare,
        html_section,
        one_run_json,
        one_run_rows,
        turn_metrics,
    )

    folder = root / "20261202T000000Z-predict-demo-s1"
    rng = np.random.default_rng(7)
    cases, report_cases = [], []
    for name, scale, meas, tag in (("B", 1.0, measured_scale[0], "b"),
                                   ("B + 10-s outage", 1.6, measured_scale[1], "b-outage")):
        sim = pd.concat([_turns(rng, 400, scale).assign(replication=r) for r in range(reps)])
        (folder / f"sim-{tag}").mkdir(parents=True)
        sim.to_parquet(folder / f"sim-{tag}" / "turns.parquet")
        measured_turns = _turns(rng, 400, meas)
        (folder / f"measured-{tag}").mkdir()
        measured_turns.to_parquet(folder / f"measured-{tag}" / "turns.parquet")
        predicted = [turn_metrics(g, WARMUP, DURATION) for _, g in sim.groupby("replication")]
        measured = turn_metrics(measured_turns, WARMUP, DURATION)
        ci = bootstrap(measured_turns, WARMUP, DURATION, rounds=50)
        rows = compare(predicted, measured, ci, run_s=DURATION, turns=len(measured_turns))
        one = one_run_rows(rows, predicted)
        cases.append({"name": name, "rate_calls_per_s": 3.2,
                      "load_run": str(folder / f"measured-{tag}"),
                      "simulation": str(folder / f"sim-{tag}"), "one_run": one_run_json(one)})
        report_cases.append({"name": name, "rows": rows, "png": "", "client_cpu": 0.2,
                             "void": False, "notes": []})
    (folder / "prediction.json").write_text(json.dumps({
        "rate_a": 2.6, "rate_b": 3.2, "utilisation_a": 0.69, "warmup_s": WARMUP,
        "duration_s": DURATION, "calibrate_duration_s": 40, "replications": reps,
        "capacity": {"identified": True, "workers": 8, "text": "capacity identified: 8"},
        "cases": cases}), encoding="utf-8")
    (folder / "prediction.section.html").write_text(
        html_section(report_cases, {"calibrated on": "runs/A", "B (calls/s)": "3.2"}),
        encoding="utf-8")
    assert cli.main(["sim", "run", "baseline", "--set", "run.duration_s=30", "--set",
                     "run.warmup_s=5", "--replications", "2", "--no-plots", "--out",
                     str(folder / "runs"), "-q"]) == 0
    return folder
