"""``rtalab bench``: the benchmarks, registered via ``rtalab.commands``.

``rtalab sim bench`` and ``rtalab sim sweep-bench`` are aliases of ``rtalab bench sim`` and
``rtalab bench sweep`` (sim/cli.py rewrites them).  The load-side benchmarks keep their
commands (``rtalab serve bench``, ``rtalab load bench``, ``rtalab check --bench``); their
modules live here too, and ``rtalab bench all`` runs every one of them.
"""

from __future__ import annotations

from typing import Any

from sim.shared.argtypes import add_command, add_group


def register(subparsers: Any) -> None:
    """Add ``rtalab bench`` and its sub-commands."""
    from benchmarks import calibrate, fleet, grpc_serve, metastability, report, run, sim, sweep

    sub = add_group(subparsers, "bench", help="benchmarks against their stated targets",
                    description="Measure rtalab's speed and memory against its stated "
                                "targets (docs/benchmarks.md).")
    for name, module, help, description in (
            ("all", run, "every benchmark, one table (make bench)",
             "Run every benchmark and write one table (figure, spread, target, PASS/WARN, "
             "command) as Markdown and CSV."),
            ("sim", sim, "simulator speed vs bare SimPy; --memory for peak RSS",
             "pyperf-style benchmark of the simulator."),
            ("sweep", sweep, "sweep engine figures: speed-ups, RSS",
             "Speed-up 1 -> 2 processes, Dask vs processes, coordinator RSS of a 200-point "
             "sweep, RSS of a 60- vs 3-replication run."),
            ("calibrate", calibrate, "calibration time of N synthetic ledger rows",
             "Time `rtalab calibrate` on a synthetic load run."),
            ("grpc", grpc_serve, "the Reasoner's gRPC turns/s vs its JSON-RPC figure",
             "Turns/s and server CPU per turn of the reference Reasoner over the A2A gRPC "
             "binding and over JSON-RPC/SSE, same server, alternating rounds."),
            ("metastability", metastability, "the metastability map: guided vs full grid",
             "A 10 x 10 map of one strategy guided by the fast model vs the full grid."),
            ("fleet", fleet, "a simulated hour of 1 M calls in bounded memory",
             "Wall time and peak RSS of baseline scaled to 1 M calls/hour with records = "
             "\"none\", against the number of calls."),
            ("report", report, "rtalab report's time on a 50-point sweep",
             "Time `rtalab report` of a 50-point sweep, Python start-up included.")):
        add_command(sub, name, module.run_bench, module.add_arguments, help, description)
