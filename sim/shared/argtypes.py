"""argparse ``type=`` converters shared by every rtalab command (one clear message each)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def port(text: str) -> int:
    """A TCP port number 1..65535."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {v}")
    return v


def positive_int(text: str) -> int:
    """An integer >= 1 (underscores allowed, e.g. 1_000_000)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def non_negative(text: str) -> float:
    """A finite number >= 0 (e.g. seconds)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def probability(text: str) -> float:
    """A probability in [0, 1]."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1], got {text}")
    return v


def help_of(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """A command function printing ``parser``'s help (for a command group run bare)."""

    def func(args: argparse.Namespace) -> int:
        """Print the help on stderr; a group run bare is a usage mistake (exit 2, as
        ``rtalab sim``)."""
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return func


def add_results_root(p: argparse.ArgumentParser, default: str = "results") -> None:
    """``--results DIR``: the folder under which a command creates its new run folder
    (``sim run``, ``load run``).  ``--out`` names the output folder itself in every other
    command (sweep, capacity, tune, storm) and the file in ``report``; here it is still
    accepted, hidden, as the old spelling of ``--results``."""
    p.add_argument("--results", dest="out", type=Path, default=Path(default), metavar="DIR",
                   help=f"folder under which the new run folder <UTC time>-<kind>-<name>-s<seed> "
                        f"is created (default: {default})")
    p.add_argument("--out", dest="out", type=Path, help=argparse.SUPPRESS)
