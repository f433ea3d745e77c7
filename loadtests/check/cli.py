"""``rtalab check RUN_DIR`` (and ``rtalab check --bench``), registered via ``rtalab.commands``.

Exit status: 0 every rule passed or was not checked, 1 a rule failed, 2 unusable
input (one line on stderr: missing folder, no attempts ledger, a line that is not
JSON, a bad flag).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sim.shared.argtypes import EXIT_USAGE, add_quiet, positive_int
from sim.shared.junit import add_junit_argument

PROG = "rtalab check"
EXIT_FAILED = 1


def hazard_limit(text: str) -> tuple[str, float]:
    """``NAME=PER_1K`` for a hazard rule."""
    from loadtests.check.rules import HAZARDS

    name, sep, value = text.partition("=")
    if not sep or name not in HAZARDS:
        raise argparse.ArgumentTypeError(
            f"expected NAME=PER_1K with NAME in {', '.join(HAZARDS)}, got {text!r}")
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"limit must be >= 0, got {value}")
    return name, v


def cmd_check(args: argparse.Namespace) -> int:
    """Run the checker (or its benchmark)."""
    if args.bench:
        from benchmarks.check import format_bench, run_bench

        print(format_bench(run_bench(rows=args.rows, repeat=args.repeat)), end="")
        return 0
    if not args.run_dir:
        print(f"{PROG}: error: RUN_DIR is required (or --bench)", file=sys.stderr)
        return EXIT_USAGE
    from loadtests.check import LedgerError, check_run

    try:
        verdict = check_run(args.run_dir, dict(args.hazard_limit))
    except LedgerError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"{PROG}: error: cannot write the verdict: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.junit:
        import json
        from pathlib import Path

        from sim.shared import junit

        try:
            data = json.loads((Path(args.run_dir) / "verdict.json").read_text(encoding="utf-8"))
            junit.write(args.junit, f"rtalab check {args.run_dir}", junit.verdict_cases(data))
        except OSError as e:
            print(f"{PROG}: error: cannot write {args.junit}: {e.strerror or e}",
                  file=sys.stderr)
            return EXIT_USAGE
    if not args.quiet:
        from loadtests.check.show import verdict_lines

        print("\n".join(verdict_lines(verdict.to_dict())))
    return 0 if verdict.ok else EXIT_FAILED


def register(subparsers: Any) -> None:
    """Add ``check`` to the root parser."""
    p = subparsers.add_parser(
        "check", help="Jepsen-style delivery verdict of a load run",
        description="Judge a load run from its ledgers (lost, duplicated, ghost successes, "
                    "unexpected, incomplete, ordering, retries, echo, sequenceId); writes "
                    "verdict.json and verdict.txt. Exit 1 on a failed rule, 2 on unusable "
                    "input. See docs/check.md.")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a load-run folder")
    p.add_argument("--hazard-limit", type=hazard_limit, action="append", default=[],
                   metavar="NAME=PER_1K",
                   help="fail a hazard rule above this rate per 1,000 turns (repeatable)")
    add_quiet(p, "print nothing (exit status only)")
    add_junit_argument(p)
    p.add_argument("--bench", action="store_true",
                   help="time the checker on synthetic ledger rows instead")
    p.add_argument("--rows", type=positive_int, default=1_000_000,
                   help="--bench: synthetic ledger rows (default 1,000,000)")
    p.add_argument("--repeat", type=positive_int, default=3, help="--bench: repetitions")
    p.set_defaults(func=cmd_check)
