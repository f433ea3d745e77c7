"""``rtalab sim sweep-bench`` (issue 8, acceptance 5): it runs, and its ratios are right."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rtalab.benchmarks import sweep as sb

REPO = Path(__file__).resolve().parents[1]


def test_ratios_point_the_right_way() -> None:
    assert sb.speedup(10.0, 5.0).value == 2.0 and sb.speedup(10.0, 5.0).passed
    inverted = sb.speedup(5.0, 10.0)  # 2 processes slower than 1
    assert inverted.value == 0.5 and not inverted.passed
    assert sb.dask_relative(processes_s=9.0, dask_s=10.0).passed  # 0.9x >= 0.85
    assert not sb.dask_relative(processes_s=10.0, dask_s=12.5).passed  # 0.8x
    assert sb.coordinator_rss(499e6).passed and not sb.coordinator_rss(501e6).passed
    assert sb.replication_growth(118.0, 100.0).passed
    assert not sb.replication_growth(125.0, 100.0).passed
    assert not sb.replication_growth(100.0, 80.0).passed  # inverted operands: 1.25
    assert sb.speedup(1.0, 1.0).verdict() == "(target >= 1.8): WARN"
    with pytest.raises(ValueError):
        sb.ratio(1.0, 0.0)


def test_sweep_bench_runs_and_prints_consistent_arithmetic() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "sim", "sweep-bench", "--points",
                        "2", "--duration", "20", "--repeats", "1", "--rss-points", "6",
                        "--rss-duration", "10", "--many", "4", "--few", "2",
                        "--run-duration", "20", "--skip-dask"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    a = re.search(r"1 process ([\d.]+) s, 2 processes ([\d.]+) s: speed-up [\d.]+ / [\d.]+ = "
                  r"([\d.]+)x \(target >= 1.8\): (PASS|WARN)", out)
    assert a, out
    t1, t2, x = (float(g) for g in a.groups()[:3])
    # the printed operands are rounded to 1 ms and the ratio to 0.01: allow exactly that
    assert x == pytest.approx(t1 / t2, abs=0.005 + (t1 / t2) * (0.0005 / t1 + 0.0005 / t2) + 1e-9)
    assert (a.group(4) == "PASS") == (x >= 1.8)
    c = re.search(r"coordinator of a 6-point sweep .* peak RSS (\d+) MB", out)
    assert c and 20 < int(c.group(1)) < 2000, out
    d = re.search(r"4 replications peak RSS (\d+) MB .* 2 replications (\d+) MB .*ratio "
                  r"\d+ / \d+ = ([\d.]+)", out)
    assert d, out
    many, few, ratio = int(d.group(1)), int(d.group(2)), float(d.group(3))
    assert ratio == pytest.approx(many / few, abs=0.02)
