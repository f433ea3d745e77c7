"""The CLI glue every rtalab command shares, written once: argparse ``type=`` converters (one
clear message each), the one-line-error parser, commands (:func:`add_command`: options and
function in one call, the help from the function's docstring), options declared as --help shows
them (:func:`opt`, the ``(default ...)`` part written from the default) and the options several
commands have (:class:`Option` and the ``add_*`` groups), so an option means the same everywhere."""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

EXIT_USAGE = 2
Command = Callable[[argparse.Namespace], int]
#: what options are added to (a parser or a group), and what ``add_subparsers()`` returns;
#: argparse names both types privately (the second is generic only in its stubs)
Options = argparse._ActionsContainer
if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
_T = TypeVar("_T")


class UsageError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def checked(text: str, cast: Callable[[str], _T], bad: str, ok: Callable[[_T], bool],
            out_of_range: str, shown: str | None = None) -> _T:
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


def add_group(subparsers: Subparsers, name: str, help: str, description: str) -> Subparsers:
    """A command group ``name`` (run bare: its help, exit 2); returns its sub-parsers."""
    group = subparsers.add_parser(name, help=help, description=description)
    group.set_defaults(func=help_of(group))
    return group.add_subparsers(title="commands", metavar="COMMAND")


def subcommands(group: argparse.ArgumentParser) -> Subparsers:
    """The sub-parsers of a command group made by :func:`add_group`, for a plugin that adds a
    command to a group it does not own (an entry point ``<group>.<command>``)."""
    for action in group._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise ValueError(f"{group.prog!r} is not a command group")


def add_command(sub: Subparsers, name: str, func: Command,
                arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                help: str | None = None, description: str | None = None
                ) -> argparse.ArgumentParser:
    """A command ``name`` of ``sub``: its options from ``arguments`` (None: it has none), run
    by ``func``.  What ``--help`` says of it is ``func``'s docstring unless given: the first
    paragraph is the one-line ``help`` in the command list, the rest the ``description``."""
    if help is None:
        doc = inspect.getdoc(func)
        if not doc and sys.flags.optimize < 2:  # python -OO strips every docstring: no help
            raise ValueError(f"command {name!r}: {func.__qualname__} has no docstring (its help)")
        doc = doc or ""
        first, _, rest = doc.partition("\n\n")
        help = " ".join(first.split())
        description = description or " ".join(rest.split()) or None
    p = sub.add_parser(name, help=help, description=description)
    if arguments is not None:
        arguments(p)
    p.set_defaults(func=func)
    return p


def one_line_errors(prog: str, *errors: type[Exception]) -> Callable[[Command], Command]:
    """Decorate a command function so that the user's mistakes it raises (``errors``, and a
    broken scenario) print ``prog: error: ...`` (one line) and exit 2."""

    def decorate(func: Command) -> Command:
        @functools.wraps(func)
        def command(args: argparse.Namespace) -> int:
            # lazy: +215 ms (numpy) off importing argtypes, which every server's options use
            from rtalab.sim.config import ConfigError

            try:
                return func(args)
            except ConfigError as e:
                return usage_error(f"{prog}: error: scenario: {e}")
            except errors as e:
                return usage_error(f"{prog}: error: {e}")

        return command

    return decorate


# --------------------------------------------------------------------------- declaring options
# One call per option, written as --help shows it:
#     opt(p, "--turns N", "simulated turns per timed run", positive_int, 100_000)
# The "(default ...)" part of the help is written from the default, so the two never disagree.


def default_text(value: Any) -> str | None:
    """A default as --help shows it: ``1,000,000``, ``8091``, ``0.9``, ``60``, ``sse``,
    ``500,503``; None when there is nothing to show (None, a flag, an empty list)."""
    if value is None or isinstance(value, bool) or (isinstance(value, list | tuple)
                                                     and not value):
        return None
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def with_default(help: str, default: Any = None, shown: Any = None) -> str:
    """``help`` with its ``(default ...)`` part, written from ``default``, or from ``shown``
    when the parser's default is None because the command derives the value later (a value:
    ``default 1``; a text: ``default: the scenario's run.seed``).  ``{default}`` in ``help``
    marks where it goes (``"replications per probe (>= 2; {default})"``); otherwise it ends
    the help in parentheses."""
    if help == argparse.SUPPRESS:
        return help
    if isinstance(shown, str):
        text: str | None = f"default: {shown}"
    else:
        value = default_text(default if shown is None else shown)
        text = None if value is None else f"default {value}"
    if text is None:
        if "{default}" in help:
            raise ValueError(f"help {help!r} has a {{default}} place but no default")
        return help
    text = text.replace("%", "%%")  # argparse formats the help with %
    return help.replace("{default}", text) if "{default}" in help else f"{help} ({text})"


def opt(p: Options, spec: str, help: str, type: Callable[[str], Any] | None = None,
        default: Any = None, *, shown: Any = None, **kw: Any) -> argparse.Action:
    """Add one option to ``p`` (a parser or an argument group).  ``spec`` is the option as
    --help shows it: the flags (``--quiet/-q``), then a space and the metavar if it has one
    (``--turns N``); a spec without a leading dash is a positional (``runs RUN``).  ``help``
    gets its ``(default ...)`` part from ``default`` / ``shown`` (:func:`with_default`);
    ``kw`` are further :meth:`~argparse.ArgumentParser.add_argument` keywords."""
    names, _, metavar = spec.partition(" ")
    if metavar:
        kw["metavar"] = metavar
    if type is not None:
        kw["type"] = type
    if default is not None:
        kw["default"] = list(default) if isinstance(default, list) else default
    return p.add_argument(*names.split("/"), help=with_default(help, default, shown), **kw)


def flag(p: Options, spec: str, help: str, **kw: Any) -> argparse.Action:
    """An on/off option (``store_true``)."""
    return opt(p, spec, help, action="store_true", **kw)


def repeatable(p: Options, spec: str, help: str, type: Callable[[str], Any] | None = None,
               **kw: Any) -> argparse.Action:
    """An option given any number of times; its values in a list (empty by default)."""
    return opt(p, spec, help, type, [], action="append", **kw)


class Option:
    """An option several commands share, declared once (:func:`opt`'s arguments).  ``add``
    puts it on a command's parser; the default is the only thing a command may change, and
    the help's ``(default ...)`` part follows it."""

    def __init__(self, spec: str, help: str, type: Callable[[str], Any] | None = None,
                 default: Any = None, *, shown: Any = None, **kw: Any) -> None:
        self.spec, self.help, self.type, self.default, self.shown = spec, help, type, default, shown
        self.kw = kw

    def add(self, p: Options, **changes: Any) -> argparse.Action:
        """Add the option to ``p``; ``default=`` and/or ``shown=`` are this command's default."""
        if set(changes) - {"default", "shown"}:
            raise TypeError(f"{self.spec}: only the default may differ, not "
                            f"{sorted(set(changes) - {'default', 'shown'})}")
        default = changes.get("default", self.default)
        shown = changes.get("shown", None if "default" in changes else self.shown)
        return opt(p, self.spec, self.help, self.type, default, shown=shown, **self.kw)


def usage_error(message: str) -> int:
    """Print ``message`` (one line) on stderr; return the exit status of a usage mistake."""
    print(message, file=sys.stderr)
    return EXIT_USAGE


# --------------------------------------------------------------------------- shared options
# Written once, used by every command that has them, so an option means the same everywhere
# (tests/test_cli_options.py holds the table of which command has which, with what default).


def add_scenario(p: argparse.ArgumentParser, *, option: str | None = None) -> None:
    """SCENARIO (a positional; or the option ``option``, e.g. ``--scenario``, with the
    text saying what the command takes from it) and the repeatable ``--set KEY.PATH=VALUE``
    (``rtalab`` normalises ``--set K=V K2=V2`` to one ``--set`` per value)."""
    if option is None:
        opt(p, "scenario SCENARIO", "scenario file path or preset name; preset:NAME always "
                                    "means the preset (see 'rtalab sim presets')")
    else:
        opt(p, "--scenario FILE|PRESET", f"scenario {option} (file path or preset name)")
    opt(p, "--set KEY.PATH=VALUE", "override a scenario value (TOML syntax, e.g. run.seed=7 "
                                   "network.uplink.loss=0.05); repeatable",
        nargs="+", action="extend", default=[])


SEED = Option("--seed", "root seed", int, shown="the scenario's run.seed")


def add_seed(p: argparse.ArgumentParser, default: int | None = None) -> None:
    """``--seed``: the root seed (default: the scenario's ``run.seed``, or ``default``)."""
    if default is None:
        SEED.add(p)
    else:
        SEED.add(p, default=default)


def add_quiet(p: argparse.ArgumentParser, what: str = "no progress bar") -> None:
    """``--quiet`` / ``-q``: ``what`` the command leaves out."""
    flag(p, "--quiet/-q", what)


def add_results_root(p: argparse.ArgumentParser, default: str = "results") -> None:
    """``--results DIR``: the folder under which a command creates its new run folder
    (``sim run``, ``load run``).  ``--out`` names the output folder itself in every other
    command (sweep, capacity, tune, storm) and the file in ``report``; here it is still
    accepted, hidden, as the old spelling of ``--results``."""
    opt(p, "--results DIR", "folder under which the new run folder <UTC time>-<kind>-<name>-"
                            "s<seed> is created", Path, Path(default), dest="out")
    p.add_argument("--out", dest="out", type=Path, help=argparse.SUPPRESS)


# the simulator's commands that run many simulations (sweep, capacity, tune, storm)
OUT_DIR = Option("--out DIR", "the output folder (default: a new results/<time>-<command>-"
                              "<name>-s<seed>)", Path)
NO_PLOTS = Option("--no-plots", "skip the PNG plots", action="store_true")


def add_executor(p: argparse.ArgumentParser) -> None:
    """Where the simulations run: ``--processes N`` or ``--dask ADDRESS`` (one of them)."""
    where = p.add_mutually_exclusive_group()
    opt(where, "--processes N", "local worker processes (default: every usable CPU)",
        positive_int)
    opt(where, "--dask ADDRESS", "tcp://HOST:8786 (an existing Dask scheduler) or local[:N] "
                                 "(start a LocalCluster of N single-threaded worker processes)")


# the servers (serve reasoner, serve witness; the chaos proxy has --listen, and a log level)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
HOST = Option("--host", "bind address", default="127.0.0.1")
PORT = Option("--port", "TCP port", port)
LOG_LEVEL = Option("--log-level", "server log level", choices=LOG_LEVELS)

# the deployment a load command drives (load run, load probe, predict)
TARGET = Option("--target URL", "base URL of the deployment to test (default: start the "
                                "reference Reasoner and witness here)", http_url)
TOKEN = Option("--token", "bearer token for --target (repeatable: calls alternate between the "
                          "principals, so per-call turnIds are reused across principals)",
               action="append", default=[])
WITNESS = Option("--witness URL", "with --target: the witness the deployment sends its tool "
                                  "calls to", http_url)
WORKERS = Option("--workers", "embedded Reasoner worker processes", positive_int)
DURATION = Option("--duration S", "seconds of call arrivals", non_negative)
DRAIN = Option("--drain S", "at most this long for open calls to end", non_negative)


# --------------------------------------------------------------------------- an outage
# on the run's own clock (``sim run`` and ``load run``; the chaos proxy counts from the
# load's start, ``ledger/clock.json``), appended to the scenario's ``network.outages``

OUTAGE_KINDS = ("blackhole", "reset", "reasoner-down", "loss")
OUTAGE_AT = Option("--outage-at S", "an outage starting S s into the run (the run's own clock)",
                   non_negative)
OUTAGE_FOR = Option("--outage-for S", "with --outage-at: its length", non_negative, 10.0)
OUTAGE_KIND = Option("--outage-kind K", "with --outage-at: blackhole (packets vanish, "
                                        "connections hang until a timer), reset (connections "
                                        "cut at once), reasoner-down (connection refused) or "
                                        "loss (each message lost with --outage-loss)",
                     None, "blackhole", choices=OUTAGE_KINDS)
OUTAGE_LOSS = Option("--outage-loss P", "with --outage-kind loss: the loss probability",
                     probability, 0.5)


def add_outage(p: argparse.ArgumentParser) -> None:
    """``--outage-at S --outage-for S --outage-kind K --outage-loss P``."""
    for o in (OUTAGE_AT, OUTAGE_FOR, OUTAGE_KIND, OUTAGE_LOSS):
        o.add(p)


def outage_overrides(args: argparse.Namespace, outages: Sequence[Any]) -> dict[str, Any]:
    """The ``network.outages`` override that appends the ``--outage-*`` one to ``outages``
    (the scenario's); ``{}`` without ``--outage-at``.  Raises :class:`UsageError` for an
    ``--outage-for`` of 0 or ``--outage-loss`` with another kind."""
    if args.outage_at is None:
        return {}
    if args.outage_for <= 0:
        raise UsageError("--outage-for must be > 0")
    if args.outage_kind != "loss" and args.outage_loss != OUTAGE_LOSS.default:
        raise UsageError("--outage-loss applies to --outage-kind loss only")
    # lazy: +215 ms (numpy) off importing argtypes, which every server's options use
    from rtalab.sim.config import to_plain

    new = {"start_s": args.outage_at, "duration_s": args.outage_for,
           "direction": "both", "kind": args.outage_kind, "loss": args.outage_loss}
    return {"network.outages": [to_plain(o) for o in outages] + [new]}
