"""argparse ``type=`` converters shared by every rtalab command (one clear message each)."""

from __future__ import annotations

import argparse
import math
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def checked(text: str, cast: Callable[[str], Any], bad: str, ok: Callable[[Any], bool],
            out_of_range: str, shown: str | None = None) -> Any:
    """``cast(text)`` if it parses and passes ``ok``; else an ArgumentTypeError: ``bad`` or
    ``out_of_range``, with ``{text}`` (``shown``, default ``text``) and ``{value}`` filled in."""
    shown = text if shown is None else shown
    try:
        v = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(bad.format(text=shown)) from None
    if not ok(v):
        raise argparse.ArgumentTypeError(out_of_range.format(value=v, text=shown))
    return v


def port(text: str) -> int:
    """A TCP port number 1..65535."""
    return checked(text, int, "not a port number: {text!r}", lambda v: 1 <= v <= 65535,
                   "port must be in 1..65535, got {value}")


def positive_int(text: str) -> int:
    """An integer >= 1 (underscores allowed, e.g. 1_000_000)."""
    return checked(text, int, "expected an integer, got {text!r}", lambda v: v >= 1,
                   "must be >= 1, got {value}")


def non_negative(text: str) -> float:
    """A finite number >= 0 (e.g. seconds)."""
    return checked(text, float, "not a number: {text!r}",
                   lambda v: math.isfinite(v) and v >= 0,
                   "must be a finite number >= 0, got {text}")


def probability(text: str) -> float:
    """A probability in [0, 1]."""
    return checked(text, float, "not a number: {text!r}", lambda v: 0.0 <= v <= 1.0,
                   "must be a probability in [0, 1], got {text}")


def http_url(text: str) -> str:
    """An ``http(s)://host...`` URL, without a trailing slash."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL, got {text!r}")
    return text.rstrip("/")


def help_of(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """A command function printing ``parser``'s help (for a command group run bare)."""

    def func(args: argparse.Namespace) -> int:
        """Print the help on stderr; a group run bare is a usage mistake (exit 2, as
        ``rtalab sim``)."""
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return func


def add_group(subparsers: Any, name: str, help: str, description: str) -> Any:
    """A command group ``name`` (run bare: its help, exit 2); returns its sub-parsers."""
    group = subparsers.add_parser(name, help=help, description=description)
    group.set_defaults(func=help_of(group))
    return group.add_subparsers(title="commands", metavar="COMMAND")


def add_command(sub: Any, name: str, func: Callable[[argparse.Namespace], int],
                arguments: Callable[[argparse.ArgumentParser], None], help: str,
                description: str) -> argparse.ArgumentParser:
    """A command ``name`` of ``sub``: its options from ``arguments``, run by ``func``."""
    p = sub.add_parser(name, help=help, description=description)
    arguments(p)
    p.set_defaults(func=func)
    return p


# --------------------------------------------------------------------------- option groups
# Written once, used by every command, so an option means the same everywhere.


def add_scenario(p: argparse.ArgumentParser, *, option: str | None = None) -> None:
    """SCENARIO (a positional; or the option ``option``, e.g. ``--scenario``, with the
    text saying what the command takes from it) and the repeatable ``--set KEY.PATH=VALUE``
    (``rtalab`` normalises ``--set K=V K2=V2`` to one ``--set`` per value)."""
    if option is None:
        p.add_argument("scenario", metavar="SCENARIO",
                       help="scenario file path or preset name; preset:NAME always means the "
                            "preset (see 'rtalab sim presets')")
    else:
        p.add_argument("--scenario", metavar="FILE|PRESET", default=None,
                       help=f"scenario {option} (file path or preset name)")
    p.add_argument("--set", metavar="KEY.PATH=VALUE", nargs="+", action="extend", default=[],
                   help="override a scenario value (TOML syntax, e.g. run.seed=7 "
                        "network.uplink.loss=0.05); repeatable")


def add_seed(p: argparse.ArgumentParser, default: int | None = None) -> None:
    """``--seed``: the root seed (default: the scenario's ``run.seed``, or ``default``)."""
    p.add_argument("--seed", type=int, default=default,
                   help="root seed (default: the scenario's run.seed)" if default is None
                   else f"root seed of every run (default {default})")


def add_quiet(p: argparse.ArgumentParser, what: str = "no progress bar") -> None:
    """``--quiet`` / ``-q``: ``what`` the command leaves out."""
    p.add_argument("--quiet", "-q", action="store_true", help=what)


def add_results_root(p: argparse.ArgumentParser, default: str = "results") -> None:
    """``--results DIR``: the folder under which a command creates its new run folder
    (``sim run``, ``load run``).  ``--out`` names the output folder itself in every other
    command (sweep, capacity, tune, storm) and the file in ``report``; here it is still
    accepted, hidden, as the old spelling of ``--results``."""
    p.add_argument("--results", dest="out", type=Path, default=Path(default), metavar="DIR",
                   help=f"folder under which the new run folder <UTC time>-<kind>-<name>-s<seed> "
                        f"is created (default: {default})")
    p.add_argument("--out", dest="out", type=Path, help=argparse.SUPPRESS)
