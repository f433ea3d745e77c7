"""``rtalab check RUN_DIR``, registered via ``rtalab.commands``.

The benchmarks add ``--bench`` (and its ``--rows``, ``--repeat``) through the entry point
``check.bench``: this package never imports them.

Exit status: 0 every rule passed or was not checked, 1 a rule failed, 2 unusable
input (one line on stderr: missing folder, no attempts ledger, a line that is not
JSON, a bad flag).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rtalab.loadtests.check import LedgerError, check_run
from rtalab.loadtests.check.rules import HAZARDS
from rtalab.loadtests.check.show import verdict_lines
from rtalab.sim.shared import junit
from rtalab.sim.shared.argtypes import (
    add_command,
    add_quiet,
    opt,
    repeatable,
    usage_error,
)
from rtalab.sim.shared.junit import add_junit_argument

PROG = "rtalab check"
EXIT_FAILED = 1


def hazard_limit(text: str) -> tuple[str, float]:
    """``NAME=PER_1K`` for a hazard rule."""
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
    """Jepsen-style delivery verdict of a load run

    Judge a load run from its ledgers (lost, duplicated, ghost successes, unexpected, incomplete,
    ordering, retries, echo, sequenceId); writes verdict.json and verdict.txt. Exit 1 on a failed
    rule, 2 on unusable input. See docs/check.md.
    """
    if not args.run_dir:
        return usage_error(f"{PROG}: error: RUN_DIR is required")

    try:
        verdict = check_run(args.run_dir, dict(args.hazard_limit))
    except LedgerError as e:
        return usage_error(f"{PROG}: error: {e}")
    except OSError as e:
        return usage_error(f"{PROG}: error: cannot write the verdict: {e}")
    if args.junit:
        try:
            data = json.loads((Path(args.run_dir) / "verdict.json").read_text(encoding="utf-8"))
            junit.write(args.junit, f"rtalab check {args.run_dir}", junit.verdict_cases(data))
        except OSError as e:
            return usage_error(f"{PROG}: error: cannot write {args.junit}: {e.strerror or e}")
    if not args.quiet:
        print("\n".join(verdict_lines(verdict.to_dict())))
    return 0 if verdict.ok else EXIT_FAILED


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab check``."""
    opt(p, "run_dir RUN_DIR", "a load-run folder", nargs="?")
    repeatable(p, "--hazard-limit NAME=PER_1K",
               "fail a hazard rule above this rate per 1,000 turns (repeatable)", hazard_limit)
    add_quiet(p, "print nothing (exit status only)")
    add_junit_argument(p)


def register(subparsers: Any) -> None:
    """Add ``check`` to the root parser."""
    add_command(subparsers, "check", cmd_check, add_arguments)
