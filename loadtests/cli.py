"""``rtalab serve reasoner|witness|bench|fuzz``, registered via the ``rtalab.commands`` entry point.

``register(subparsers)`` adds the ``serve`` command to the root parser of
``sim.cli``.  The reasoner's options are also used by ``python -m
loadtests.reasoner``.  Every user mistake (bad flag value, unreadable token
file, broken scenario, bad store URL) exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import urlsplit

from sim.shared.argtypes import (
    add_command,
    add_group,
    add_scenario,
    non_negative,
    port,
    positive_int,
)

EXIT_USAGE = 2
REASONER_PROG = "rtalab serve reasoner"


class FlagError(Exception):
    """A flag value the user must fix (one line, exit 2)."""








def non_negative_int(text: str) -> int:
    """An integer >= 0 (0: derived default)."""
    return 0 if text.strip() == "0" else positive_int(text)


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds)."""
    v = non_negative(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be > 0, got 0")
    return v


def add_reasoner_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve reasoner``."""
    from loadtests.reasoner.idempotency import MODES
    from loadtests.reasoner.unsafe import UNSAFE_BUGS
    from loadtests.reasoner.wire import DEFAULT_EXT_URI

    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8000, help="TCP port (default 8000)")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="uvicorn worker processes sharing the dedup store (default 1)")
    p.add_argument("--dedup", metavar="URL", default="",
                   help="dedup store: sqlite:///PATH, redis://HOST:PORT[/DB] or memory "
                        "(default: a SQLite file per port in the temp directory)")
    p.add_argument("--dedup-mode", choices=MODES, default=None,
                   help="override [reasoner].dedup")
    p.add_argument("--dedup-window-s", type=non_negative, default=None,
                   help="override [reasoner].dedup_window_s")
    p.add_argument("--dedup-wait-s", type=non_negative, default=30.0,
                   help="how long a duplicate waits for the in-flight original (default 30)")
    add_scenario(p, option="whose [reasoner] section drives the behaviour")
    p.add_argument("--witness", metavar="URL", default=None,
                   help="witness service for side effects (POST <URL>/execute); "
                        "default: simulated in process")
    p.add_argument("--tokens", metavar="FILE", action="append", default=[],
                   help="bearer tokens file: TOKEN=PRINCIPAL per line, or a JSON object")
    p.add_argument("--token", metavar="TOKEN=PRINCIPAL", action="append", default=[],
                   help="one bearer token (repeatable); env RTALAB_REASONER_TOKENS also read")
    p.add_argument("--ext-uri", default=DEFAULT_EXT_URI, help="the profile's extension URI")
    p.add_argument("--test-hooks", action="store_true",
                   help="honour rta/test.forceError, rta/test.delayS and rta/test.raise "
                        "(tests only)")
    p.add_argument("--unsafe-bug", choices=UNSAFE_BUGS, action="append", default=[],
                   metavar="BUG", help="TEST ONLY: plant one class of bug (negative controls of "
                                       f"the release gate): {', '.join(UNSAFE_BUGS)}")
    p.add_argument("--max-tasks", type=positive_int, default=10_000,
                   help="executed tasks kept in memory per worker (fair per-principal LRU; "
                        "default 10000, ~60 MiB); rejections: 1000 per principal apart")
    p.add_argument("--header-timeout-s", type=non_negative, default=10.0,
                   help="close a connection whose request headers take longer (0 = off; "
                        "default 10)")
    p.add_argument("--body-timeout-s", type=non_negative, default=30.0,
                   help="close a connection whose request body takes longer after its "
                        "headers (0 = off; default 30)")
    p.add_argument("--idle-timeout-s", type=positive_float, default=5.0,
                   help="close a keep-alive connection idle this long (default 5)")
    p.add_argument("--max-connections", type=non_negative_int, default=0,
                   help="open client connections per worker process (default 0: the open-file "
                        "limit minus a reserve of max(128, 10%%))")
    p.add_argument("--max-connections-per-client", type=non_negative_int, default=0,
                   help="open connections per client IP address per worker (default 0: half "
                        "of --max-connections)")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="server log level (default info)")
    p.add_argument("--access-log", action="store_true", help="uvicorn access log")


def settings_from_args(args: argparse.Namespace) -> Any:
    """Validate the flags into ServerSettings (raises FlagError or ConfigError)."""
    from loadtests.dedup import parse_store_url
    from loadtests.reasoner.auth import TokenError, collect_tokens
    from loadtests.reasoner.runtime import load_config
    from loadtests.reasoner.settings import ServerSettings

    try:
        tokens = collect_tokens(args.token, args.tokens)
    except TokenError as e:
        raise FlagError(str(e)) from None
    if args.witness is not None:
        parts = urlsplit(args.witness)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FlagError(f"--witness must be an http(s) URL, got {args.witness!r}")
    if not args.ext_uri.strip() or any(c.isspace() or c == "," for c in args.ext_uri):
        raise FlagError(f"--ext-uri must be a URI without spaces or commas, got {args.ext_uri!r}")
    settings = ServerSettings(
        host=args.host, port=args.port, workers=args.workers, dedup_url=args.dedup,
        dedup_mode=args.dedup_mode, dedup_window_s=args.dedup_window_s,
        dedup_wait_s=args.dedup_wait_s, scenario=args.scenario, overrides=tuple(args.set),
        witness=args.witness, tokens=tokens, ext_uri=args.ext_uri, test_hooks=args.test_hooks,
        max_tasks=args.max_tasks, log_level=args.log_level, access_log=args.access_log,
        header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
        idle_timeout_s=args.idle_timeout_s, max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        unsafe_bugs=tuple(args.unsafe_bug))
    try:
        backend, target, _ = parse_store_url(settings.store_url)
    except ValueError as e:
        raise FlagError(str(e)) from None
    if backend == "sqlite":
        _check_sqlite_file(target)
    load_config(settings)  # raises ConfigError on a broken scenario or override
    return settings


def _check_sqlite_file(target: str) -> None:
    """The dedup SQLite file can be created and opened (else FlagError, one line), so an
    unwritable path is a usage error before the server starts, not a startup traceback."""
    import sqlite3
    from pathlib import Path

    path = Path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(path).close()
    except OSError as e:
        raise FlagError(f"--dedup: cannot create {path.parent}: {e.strerror or e}") from None
    except sqlite3.Error as e:
        raise FlagError(f"--dedup: cannot open SQLite file {path}: {e}") from None


def cmd_reasoner(args: argparse.Namespace) -> int:
    """``rtalab serve reasoner``."""
    from loadtests.reasoner.server import run
    from sim.config import ConfigError

    try:
        settings = settings_from_args(args)
    except FlagError as e:
        print(f"{REASONER_PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as e:
        print(f"{REASONER_PROG}: error: scenario: {e}", file=sys.stderr)
        return EXIT_USAGE
    if settings.workers > 1 and settings.store_url.strip() == "memory":
        print(f"{REASONER_PROG}: warning: --dedup memory is per worker; duplicates reaching "
              "another worker are executed again (negative control)", file=sys.stderr)
    if settings.unsafe_bugs:
        from loadtests.reasoner.unsafe import banner

        print(f"{REASONER_PROG}: WARNING: {banner(settings.unsafe_bugs)}", file=sys.stderr)
    if not settings.tokens:
        print(f"{REASONER_PROG}: warning: no bearer tokens configured; authentication is off",
              file=sys.stderr)
    return run(settings)


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve bench``."""
    from benchmarks.serve import add_arguments

    add_arguments(p)


def cmd_bench(args: argparse.Namespace) -> int:
    """``rtalab serve bench``."""
    from benchmarks.serve import run_bench

    return run_bench(args)


def add_fuzz_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve fuzz``."""
    from loadtests.fuzz.cli import add_arguments

    add_arguments(p)


def cmd_fuzz(args: argparse.Namespace) -> int:
    """``rtalab serve fuzz``."""
    from loadtests.fuzz.cli import run_fuzz

    return run_fuzz(args)


def _unavailable(name: str, reason: str) -> Any:
    """A command function that explains why ``name`` cannot run."""

    def func(args: argparse.Namespace) -> int:
        """Explain and fail."""
        print(f"rtalab serve {name}: {reason}", file=sys.stderr)
        return 1

    return func



def register(subparsers: Any) -> None:
    """Add ``serve`` with ``reasoner``, ``witness`` and ``bench`` to the root parser."""
    sub = add_group(subparsers, "serve", help="run the reference servers and benchmarks",
                    description="Run the reference Reasoner, the witness, "
                                "or the server benchmark.")
    add_command(sub, "reasoner", cmd_reasoner, add_reasoner_arguments,
                help="the reference A2A Reasoner",
                description="Serve the reference Reasoner (A2A JSON-RPC/SSE, REST, "
                            "WebSocket /ws).")
    try:
        from loadtests.witness.cli import register_witness
    except ImportError as e:
        witness = sub.add_parser("witness", help="the side-effect witness (unavailable)")
        witness.set_defaults(func=_unavailable("witness", f"not available ({e})"))
    else:
        register_witness(sub)
    bench = sub.add_parser("bench", help="Reasoner turns/s and CPU per turn per dedup store",
                           description="Reasoner turns/s, server CPU per turn and turn latency "
                                       "with dedup none, SQLite and Redis side by side (1 worker "
                                       "each, interleaved rounds, load generator in process).")
    add_bench_arguments(bench)
    bench.set_defaults(func=cmd_bench)
    fuzz = sub.add_parser("fuzz", help="long fuzz run of the Reasoner on every binding",
                          description="Fuzz the Reasoner over JSON-RPC/SSE, REST and WebSocket "
                                      "with mostly valid, mutated requests; report 5xx, "
                                      "unanswered, crashes and RSS.")
    add_fuzz_arguments(fuzz)
    fuzz.set_defaults(func=cmd_fuzz)
