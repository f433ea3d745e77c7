"""Calibration speed: ``python -m rtalab.benchmarks.calibrate [--rows N]``
(``make bench-calibrate``).

Writes a synthetic load-run folder of N attempt rows (``ledger/attempts.jsonl`` with the
columns a Live user writes that calibration reads, plus ids; sim/calibrate/synth.py's
known deployment), then times what ``rtalab calibrate`` does with it: read the ledger,
calibrate, write the TOML/JSON/QQ plot.  Target: 1,000,000 rows in <= 10 s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rtalab.sim.calibrate.synth import Truth, write_run_dir
from rtalab.sim.shared.argtypes import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab bench calibrate``."""
    p.add_argument("--rows", type=positive_int, default=1_000_000, metavar="N",
                   help="synthetic ledger rows (default 1,000,000)")
    p.add_argument("--repeat", type=positive_int, default=3, metavar="K",
                   help="timed calibrations; best and worst are printed (default 3)")


def run_bench(args: argparse.Namespace) -> int:
    """Time calibration of ``args.rows`` synthetic ledger rows; print one line."""
    from rtalab.sim.calibrate import calibrate, from_run_dir, write

    with tempfile.TemporaryDirectory() as tmp:
        run = write_run_dir(Truth(n=args.rows, rate_per_s=args.rows / 3600), Path(tmp) / "run")
        size = (run / "ledger" / "attempts.jsonl").stat().st_size
        times, cpus = [], []
        for i in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            cal = calibrate(from_run_dir(run))
            write(cal, Path(tmp) / f"out{i}" / "calibrated.toml")
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        load = os.getloadavg()[0]
    workers = cal.value("reasoner.workers")
    print(f"calibrate: {args.rows:,} ledger rows ({size / 1e6:.0f} MB JSONL): wall "
          f"{min(times):.2f} s best, {max(times):.2f} s worst of {args.repeat}; CPU (all "
          f"threads) {min(cpus):.2f}-{max(cpus):.2f} s (target <= 10 s; load average "
          f"{load:.1f} on {os.cpu_count()} CPUs: on a shared machine read the CPU time); "
          f"recovered workers = {workers} (truth 8)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m rtalab.benchmarks.calibrate`` (same as ``rtalab bench calibrate``)."""
    p = argparse.ArgumentParser(prog="python -m rtalab.benchmarks.calibrate")
    add_arguments(p)
    return run_bench(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
