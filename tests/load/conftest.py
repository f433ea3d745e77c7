"""Load-run tests: ``rtalab load run`` as a real subprocess against real servers on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FAST = """
name = "loadtest"
[workload]
calls_per_s = 4.0
turns_per_call = 3
think_time_s = { dist = "exp", mean = 0.2 }
side_effect_share = 0.5
handoff_share = 0.2
caller_response_time_s = { dist = "exp", mean = 0.2 }
[live.timeouts]
turn_response_s = 2.0
[reasoner]
reasoning_time_s = 0.05
chunks = 3
chunk_interval_s = 0.02
tool_latency_s = 0.02
[run]
duration_s = 4
warmup_s = 0.5
drain_s = 10
seed = 3
"""


def load_run(tmp: Path, *args: str, scenario: str = FAST, timeout_s: float = 150.0
             ) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    """Run ``rtalab load run`` on ``scenario``; return the process and the run folder."""
    sc = tmp / "scenario.toml"
    sc.write_text(scenario, encoding="utf-8")
    out = tmp / "results"
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "run", str(sc), "--out",
                        str(out), "--quiet", "--no-plots", *args], capture_output=True, text=True,
                       timeout=timeout_s)
    runs = sorted(out.glob("*-load-*")) if out.exists() else []
    return p, (runs[-1] if runs else None)


def jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.fixture
def read_json():
    """Read a JSON file."""
    return lambda p: json.loads(Path(p).read_text(encoding="utf-8"))
