"""``rtalab bench``: the benchmarks of the simulator side, registered via ``rtalab.commands``.

``rtalab sim bench`` and ``rtalab sim sweep-bench`` are aliases of ``rtalab bench sim`` and
``rtalab bench sweep`` (sim/cli.py rewrites them).  The load-side benchmarks keep their
commands (``rtalab serve bench``, ``rtalab load bench``, ``rtalab check --bench``); their
modules live here too.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``rtalab bench`` and its sub-commands."""
    from benchmarks import calibrate, run, sim, sweep

    bench = subparsers.add_parser("bench", help="benchmarks: simulator, sweeps, calibration",
                                  description="Measure rtalab's speed and memory against its "
                                              "stated targets (docs/benchmarks.md).")
    bench.set_defaults(func=lambda a: _help(bench))
    sub = bench.add_subparsers(title="commands", metavar="COMMAND")
    p = sub.add_parser("all", help="every benchmark, one table (make bench)",
                       description="Run every benchmark and write one table (figure, spread, "
                                   "target, PASS/WARN, command) as Markdown and CSV.")
    run.add_arguments(p)
    p.set_defaults(func=run.run_all)
    p = sub.add_parser("sim", help="simulator speed vs bare SimPy; --memory for peak RSS",
                       description="pyperf-style benchmark of the simulator.")
    sim.add_arguments(p)
    p.set_defaults(func=sim.run_bench)
    p = sub.add_parser("sweep", help="sweep engine figures: speed-ups, RSS",
                       description="Speed-up 1 -> 2 processes, Dask vs processes, coordinator "
                                   "RSS of a 200-point sweep, RSS of a 60- vs 3-replication run.")
    sweep.add_arguments(p)
    p.set_defaults(func=sweep.run_bench)
    p = sub.add_parser("calibrate", help="calibration time of N synthetic ledger rows",
                       description="Time `rtalab calibrate` on a synthetic load run.")
    calibrate.add_arguments(p)
    p.set_defaults(func=calibrate.run_bench)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2
