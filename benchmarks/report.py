"""``rtalab bench report``: how long ``rtalab report`` takes on a 50-point sweep (target <= 5 s).

Simulates a real 50-point sweep once (10 worker counts × 5 attempt limits, 3 short
replications; kept in ``--sweep`` for the next time), then times the whole command --
Python start-up included -- ``--rounds`` times and prints wall and CPU time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rtalab.sim.shared.argtypes import positive_int

TARGET_S = 5.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab bench report``."""
    p.add_argument("--sweep", type=Path, default=Path("results/bench-report-sweep50"),
                   metavar="DIR", help="the 50-point sweep timed; simulated into DIR when "
                                       "missing (default results/bench-report-sweep50)")
    p.add_argument("--rounds", type=positive_int, default=3, metavar="K",
                   help="timed reports; median and range are printed (default 3)")


def time_report(sweep_dir: Path, out: Path) -> tuple[float, float, str]:
    """``rtalab report`` of ``sweep_dir`` as a fresh process: (wall s, CPU s, stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "report", str(sweep_dir),
                        "--out", str(out)], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise RuntimeError(f"rtalab report failed ({p.returncode}): {p.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stderr


def simulate_sweep(out: Path) -> int:
    """The 50-point sweep the benchmark times (about a minute on two cores)."""
    from rtalab.sim import cli

    return cli.main(["sim", "sweep", "baseline", "--set", "run.duration_s=30",
                     "run.warmup_s=5", "run.drain_s=5",
                     "--grid", "reasoner.workers=1,2,3,4,5,6,7,8,9,10",
                     "--grid", "live.retry.max_attempts=1,2,3,4,5", "--replications", "3",
                     "--no-plots", "--out", str(out), "-q"])


def run_bench(args: argparse.Namespace) -> int:
    """Time ``rtalab report`` of the sweep; print one line per round and the summary."""
    if not (args.sweep / "sweep.parquet").is_file():
        print(f"simulating the 50-point sweep into {args.sweep} (once) ...", file=sys.stderr)
        rc = simulate_sweep(args.sweep)
        if rc:
            return rc
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            try:
                wall, cpu, _ = time_report(args.sweep, Path(tmp) / f"r{i}.html")
            except RuntimeError as e:
                print(f"rtalab: {e}", file=sys.stderr)
                return 1
            walls.append(wall)
            cpus.append(cpu)
            print(f"round {i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"rtalab report, 50-point sweep: median {statistics.median(walls):.2f} s wall "
          f"(range {min(walls):.2f}-{max(walls):.2f}), {statistics.median(cpus):.2f} s CPU; "
          f"target <= {TARGET_S:g} s")
    return 0
