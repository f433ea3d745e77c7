"""``make bench-report``: how long ``rtalab report`` takes on a 50-point sweep (target <= 5 s).

Simulates a real 50-point sweep once (10 worker counts × 5 attempt limits, 3 short
replications; kept in ``results/bench-report-sweep50`` for the next time), then times the
whole command -- Python start-up included -- three times and prints wall and CPU time.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from sim import cli
from tests.test_reports import time_report

SWEEP = Path("results/bench-report-sweep50")


def main() -> int:
    if not (SWEEP / "sweep.parquet").is_file():
        print(f"simulating the 50-point sweep into {SWEEP} (once) ...", file=sys.stderr)
        rc = cli.main(["sim", "sweep", "baseline", "--set", "run.duration_s=30",
                       "run.warmup_s=5", "run.drain_s=5",
                       "--grid", "reasoner.workers=1,2,3,4,5,6,7,8,9,10",
                       "--grid", "live.retry.max_attempts=1,2,3,4,5", "--replications", "3",
                       "--no-plots", "--out", str(SWEEP), "-q"])
        if rc:
            return rc
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(3):
            wall, cpu, _ = time_report(SWEEP, Path(tmp) / f"r{i}.html")
            walls.append(wall)
            cpus.append(cpu)
            print(f"round {i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"rtalab report, 50-point sweep: median {statistics.median(walls):.2f} s wall "
          f"(range {min(walls):.2f}-{max(walls):.2f}), {statistics.median(cpus):.2f} s CPU; "
          f"target <= 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
