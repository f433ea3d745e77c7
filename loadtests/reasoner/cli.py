"""``rtalab serve reasoner``: the reference Reasoner's command, its options and their checks.

``register(serve)`` adds ``reasoner`` to the ``serve`` group (:mod:`rtalab.loadtests.cli`);
``python -m rtalab.loadtests.reasoner`` parses the same options.  Every user mistake (bad flag
value, unreadable token file, broken scenario, bad store URL) exits 2 with one line on
stderr.  The options ``--dedup``, ``--dedup-mode`` and ``--unsafe-bug`` are also
``rtalab load run``'s, which passes them on to its embedded Reasoner.
"""

from __future__ import annotations

import argparse
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rtalab.loadtests.common.tls import (
    INSECURE_WARNING,
    add_client_tls,
    add_server_tls,
    client_tls_from_args,
    server_tls_from_args,
)
from rtalab.loadtests.dedup import parse_store_url
from rtalab.loadtests.reasoner.idempotency import MODES
from rtalab.loadtests.reasoner.settings import ServerSettings
from rtalab.loadtests.reasoner.unsafe import UNSAFE_BUGS, banner
from rtalab.loadtests.reasoner.wire import DEFAULT_EXT_URI
from rtalab.sim.shared.argtypes import (
    HOST,
    LOG_LEVEL,
    PORT,
    Option,
    add_command,
    add_scenario,
    flag,
    non_negative,
    one_line_errors,
    opt,
    positive_int,
    repeatable,
)

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


MAX_INSTANCE_CHARS = 64


def instance_name(text: str) -> str:
    """``--instance``: 1-64 printable characters, no spaces."""
    if not text or len(text) > MAX_INSTANCE_CHARS or not text.isprintable() or any(
            c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"expected 1-{MAX_INSTANCE_CHARS} printable characters without spaces, got {text!r}")
    return text


# the Reasoner's options that ``rtalab load run`` passes on to its embedded Reasoner
DEDUP = Option("--dedup URL", "dedup store: sqlite:///PATH, redis://HOST:PORT[/DB] or memory")
DEDUP_MODE = Option("--dedup-mode", "override [reasoner].dedup", choices=MODES)
UNSAFE_BUG = Option("--unsafe-bug BUG", "TEST ONLY: plant one class of bug in the Reasoner (a "
                                        "negative control of the release gate): "
                                        f"{', '.join(UNSAFE_BUGS)}",
                    choices=UNSAFE_BUGS, action="append", default=[])


def add_reasoner_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve reasoner``."""
    HOST.add(p)
    PORT.add(p, default=8000)
    opt(p, "--grpc-port", "also serve the A2A gRPC binding on this port (0: a free one; "
                          "advertised in the agent card; TLS as --tls-cert says); default: off",
        non_negative_int)
    opt(p, "--workers", "uvicorn worker processes sharing the dedup store", positive_int, 1)
    DEDUP.add(p, default="", shown="a SQLite file per port in the temp directory")
    DEDUP_MODE.add(p)
    opt(p, "--dedup-window-s", "override [reasoner].dedup_window_s", non_negative)
    opt(p, "--dedup-wait-s", "how long a duplicate waits for the in-flight original",
        non_negative, 30.0)
    add_scenario(p, option="whose [reasoner] section drives the behaviour")
    opt(p, "--witness URL", "witness service for side effects (POST <URL>/execute); default: "
                            "simulated in process")
    opt(p, "--instance NAME", "this Reasoner's name in the witness ledger (`server` of each "
        "side effect; a load run names a fleet's replicas r0, r1, ...); default: none",
        instance_name)
    repeatable(p, "--tokens FILE",
               "bearer tokens file: TOKEN=PRINCIPAL per line, or a JSON object")
    repeatable(p, "--token TOKEN=PRINCIPAL",
               "one bearer token (repeatable); env RTALAB_REASONER_TOKENS also read")
    opt(p, "--ext-uri", "the profile's extension URI", default=DEFAULT_EXT_URI)
    flag(p, "--test-hooks", "honour rta/test.forceError, rta/test.delayS and rta/test.raise "
                            "(tests only)")
    UNSAFE_BUG.add(p)
    opt(p, "--max-tasks", "executed tasks kept in memory per worker (fair per-principal LRU; "
                          "{default}, ~60 MiB); rejections: 1000 per principal apart",
        positive_int, 10_000)
    opt(p, "--header-timeout-s", "close a connection whose request headers take longer (0 = "
                                 "off; {default})", non_negative, 10.0)
    opt(p, "--body-timeout-s", "close a connection whose request body takes longer after its "
                               "headers (0 = off; {default})", non_negative, 30.0)
    opt(p, "--idle-timeout-s", "close a keep-alive connection idle this long", positive_float,
        5.0)
    opt(p, "--max-connections", "open client connections per worker process ({default}: the "
                                "open-file limit minus a reserve of max(128, 10%%))",
        non_negative_int, 0)
    opt(p, "--max-connections-per-client", "open connections per client IP address per worker "
                                           "({default}: half of --max-connections)",
        non_negative_int, 0)
    opt(p, "--max-pending-connections", "connections per worker that have not sent a "
                                        "complete request yet; beyond it the oldest of the "
                                        "address holding the most is closed ({default}: "
                                        "half of --max-connections)",
        non_negative_int, 0)
    LOG_LEVEL.add(p, default="info")
    flag(p, "--access-log", "uvicorn access log")
    opt(p, "--otlp-file FILE", "also export the metrics and a span per turn with "
                               "OpenTelemetry, as OTLP/JSON lines appended to FILE (every "
                               "worker; `rtalab calibrate --from otlp:FILE` reads them)")
    opt(p, "--otlp-interval S", "seconds between the OpenTelemetry exports ({default})",
        positive_float, 5.0)
    add_server_tls(p)
    add_client_tls(p, "calling the witness")


def settings_from_args(args: argparse.Namespace) -> Any:
    """Validate the flags into ServerSettings (raises FlagError or ConfigError)."""
    # lazy: +160 ms (httpx, rich, opentelemetry) off rtalab's start-up
    from rtalab.loadtests.reasoner.auth import TokenError, collect_tokens
    from rtalab.loadtests.reasoner.runtime import load_config

    try:
        tokens = collect_tokens(args.token, args.tokens)
    except TokenError as e:
        raise FlagError(str(e)) from None
    if args.witness is not None:
        parts = urlsplit(args.witness)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FlagError(f"--witness must be an http(s) URL, got {args.witness!r}")
    server_tls = server_tls_from_args(args)
    client_tls = client_tls_from_args(args)
    if not args.ext_uri.strip() or any(c.isspace() or c == "," for c in args.ext_uri):
        raise FlagError(f"--ext-uri must be a URI without spaces or commas, got {args.ext_uri!r}")
    settings = ServerSettings(
        host=args.host, port=args.port, grpc_port=args.grpc_port, workers=args.workers,
        dedup_url=args.dedup,
        dedup_mode=args.dedup_mode, dedup_window_s=args.dedup_window_s,
        dedup_wait_s=args.dedup_wait_s, scenario=args.scenario, overrides=tuple(args.set),
        witness=args.witness, instance=args.instance, tokens=tokens, ext_uri=args.ext_uri,
        test_hooks=args.test_hooks,
        max_tasks=args.max_tasks, log_level=args.log_level, access_log=args.access_log,
        header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
        idle_timeout_s=args.idle_timeout_s, max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        max_pending_connections=args.max_pending_connections,
        otlp_file=str(Path(args.otlp_file).resolve()) if args.otlp_file else None,
        otlp_interval_s=args.otlp_interval,
        unsafe_bugs=tuple(args.unsafe_bug), tls_cert=server_tls.cert, tls_key=server_tls.key,
        tls_client_ca=server_tls.client_ca, ca=client_tls.ca, client_cert=client_tls.client_cert,
        client_key=client_tls.client_key, insecure=client_tls.insecure)
    try:
        backend, target, _ = parse_store_url(settings.store_url)
    except ValueError as e:
        raise FlagError(str(e)) from None
    if backend == "sqlite":
        _check_sqlite_file(target)
    elif backend == "redis":
        _check_redis(target)
    if args.grpc_port:
        _check_port_free(args.host, args.grpc_port)
    load_config(settings)  # raises ConfigError on a broken scenario or override
    return settings


def _check_port_free(host: str, port: int) -> None:
    """Nothing listens on ``host:port`` yet (else FlagError, one line, naming "address already
    in use" so a caller racing for a free port knows to pick another): a taken gRPC port is
    a usage error before the server starts, not a lifespan traceback."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                       socket.SOCK_STREAM) as s:
        # as gRPC binds: a restart on its port while the last run's connections are in
        # TIME_WAIT must pass; only a socket listening there is refused
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise FlagError(f"--grpc-port {port}: cannot listen on {host}:{port}: "
                            f"{(e.strerror or str(e)).lower()}") from None


def _check_sqlite_file(target: str) -> None:
    """The dedup SQLite file can be created and opened (else FlagError, one line), so an
    unwritable path is a usage error before the server starts, not a startup traceback."""
    path = Path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(path).close()
    except OSError as e:
        raise FlagError(f"--dedup: cannot create {path.parent}: {e.strerror or e}") from None
    except sqlite3.Error as e:
        raise FlagError(f"--dedup: cannot open SQLite file {path}: {e}") from None


def _check_redis(target: str) -> None:
    """The dedup Redis answers PING (else FlagError, one line): a dead store is a usage error
    before the server starts, not a startup traceback."""
    # lazy: +201 ms (redis, opentelemetry, cryptography) off rtalab's start-up
    import redis

    client = redis.Redis.from_url(target, socket_connect_timeout=2.0, socket_timeout=2.0)
    try:
        client.ping()
    except (redis.exceptions.RedisError, OSError) as e:
        raise FlagError(f"--dedup: Redis at {target} does not answer: {e}") from None
    finally:
        client.close()


@one_line_errors(REASONER_PROG, FlagError)
def cmd_reasoner(args: argparse.Namespace) -> int:
    """the reference A2A Reasoner

    Serve the reference Reasoner (A2A JSON-RPC/SSE, REST, WebSocket /ws; gRPC with
    --grpc-port).
    """
    # lazy: +372 ms (uvicorn, httpx, rich) off rtalab's start-up
    from rtalab.loadtests.reasoner.server import run

    settings = settings_from_args(args)
    if settings.workers > 1 and settings.store_url.strip() == "memory":
        print(f"{REASONER_PROG}: warning: --dedup memory is per worker; duplicates reaching "
              "another worker are executed again (negative control)", file=sys.stderr)
    if settings.unsafe_bugs:
        print(f"{REASONER_PROG}: WARNING: {banner(settings.unsafe_bugs)}", file=sys.stderr)
    if settings.insecure:
        print(f"{REASONER_PROG}: WARNING: {INSECURE_WARNING}", file=sys.stderr)
    if not settings.tokens:
        print(f"{REASONER_PROG}: warning: no bearer tokens configured; authentication is off",
              file=sys.stderr)
    return run(settings)


def register(serve: Any) -> None:
    """Add ``reasoner`` to the ``serve`` group's sub-parsers."""
    add_command(serve, "reasoner", cmd_reasoner, add_reasoner_arguments)
