"""``rtalab bench``: the benchmarks, registered via ``rtalab.commands``.

``rtalab sim bench`` and ``rtalab sim sweep-bench`` are aliases of ``rtalab bench sim`` and
``rtalab bench sweep`` (sim/cli.py rewrites them).  The load-side benchmarks keep their
commands (``rtalab serve bench``, ``rtalab load bench``, ``rtalab check --bench``): this
module adds them to the commands of ``loadtests`` through the entry points ``serve.bench``,
``load.bench`` and ``check.bench`` (``register_*_bench(parser)``, given that command's
parser), so ``loadtests`` never imports the benchmarks.  ``rtalab bench all`` runs every one
of them.
"""

from __future__ import annotations

import argparse
from typing import Any

from rtalab.sim.shared.argtypes import add_command, add_group, flag, opt, positive_int, subcommands


def register(subparsers: Any) -> None:
    """Add ``rtalab bench`` and its sub-commands."""
    from rtalab.benchmarks import (
        calibrate,
        fleet,
        grpc_serve,
        metastability,
        report,
        run,
        sim,
        sweep,
    )

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


def cmd_serve_bench(args: argparse.Namespace) -> int:
    """Reasoner turns/s and CPU per turn per dedup store

    Reasoner turns/s, server CPU per turn and turn latency with dedup none, SQLite and Redis side by
    side (1 worker each, interleaved rounds, load generator in process).
    """
    from rtalab.benchmarks.serve import run_bench

    return run_bench(args)


def register_serve_bench(serve: argparse.ArgumentParser) -> None:
    """Add ``bench`` to the ``serve`` group (entry point ``serve.bench``)."""
    from rtalab.benchmarks.serve import add_arguments

    add_command(subcommands(serve), "bench", cmd_serve_bench, add_arguments)


def register_load_bench(load: argparse.ArgumentParser) -> None:
    """Add ``bench`` to the ``load`` group (entry point ``load.bench``)."""
    from rtalab.benchmarks.load import add_arguments, run_bench

    add_command(subcommands(load), "bench", run_bench, add_arguments,
                help="Live user turns/s vs a bare FastHttpUser",
                description="Turns/s of the SSE and WebSocket Live users against a bare client "
                            "reading the same canned stream.")


def register_check_bench(check: argparse.ArgumentParser) -> None:
    """Add ``--bench`` (with ``--rows``, ``--repeat``) to ``rtalab check`` (entry point
    ``check.bench``): with it, the checker is timed instead of run on a folder."""
    judge = check.get_default("func")

    def cmd_check(args: argparse.Namespace) -> int:
        if not args.bench:
            return int(judge(args))
        from rtalab.benchmarks.check import format_bench, run_bench

        print(format_bench(run_bench(rows=args.rows, repeat=args.repeat)), end="")
        return 0

    flag(check, "--bench", "time the checker on synthetic ledger rows instead")
    opt(check, "--rows", "--bench: synthetic ledger rows", positive_int, 1_000_000)
    opt(check, "--repeat", "--bench: repetitions", positive_int, 3)
    check.set_defaults(func=cmd_check)
