"""Small results folders of every kind rtalab writes (tests and ``make report-screenshots``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sim import cli
from tests.load.conftest import FAST

REPO = Path(__file__).resolve().parents[1]
TINY = ["run.duration_s=60", "run.warmup_s=10", "run.drain_s=10"]
MMC = ["workload.turns_per_call=1", "workload.side_effect_share=0.0",
       "workload.handoff_share=0.0", "reasoner.errors={}", "live.retry.max_attempts=1",
       "live.timeouts.turn_response_s=0.0", "reasoner.reasoning_time_s=1.0",
       "run.duration_s=200", "run.warmup_s=20"]


def rtalab(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``rtalab ARGS`` as a subprocess of this checkout at 80 columns."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=REPO, env=env,
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
