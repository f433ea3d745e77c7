"""``rtalab serve witness`` / ``python -m rtalab.loadtests.witness``: run the witness with
uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from rtalab.loadtests.common.tls import add_server_tls, server_tls_from_args
from rtalab.loadtests.witness.faults import ERROR_STATUSES, FaultError, Faults, parse_dist_text
from rtalab.sim.shared.argtypes import (
    HOST,
    LOG_LEVEL,
    PORT,
    add_command,
    flag,
    non_negative,
    one_line_errors,
    opt,
    probability,
)

PROG = "rtalab serve witness"
DEFAULT_PORT = 8091


def _statuses(text: str) -> tuple[int, ...]:
    """A comma-separated list of error statuses."""
    try:
        values = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of status numbers: {text!r}") from None
    if not values or any(v not in ERROR_STATUSES for v in values):
        raise argparse.ArgumentTypeError(f"statuses must be among {ERROR_STATUSES}, got {text}")
    return values


def add_witness_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve witness``."""
    HOST.add(p)
    PORT.add(p, default=DEFAULT_PORT)
    opt(p, "--db PATH", "SQLite ledger file, created if missing", default="witness.db")
    opt(p, "--latency-s SPEC", "execution latency: seconds, or a distribution as JSON or a TOML "
                               "inline table, e.g. '{dist = \"exp\", mean = 0.05}'", default="0")
    opt(p, "--error-rate P", "probability of an injected 500/503 without side effect",
        probability, 0.0)
    opt(p, "--error-status LIST", "statuses of injected errors, chosen uniformly", _statuses,
        (500, 503))
    opt(p, "--timeout-p P", "probability of hanging --hang-s without side effect, then 504",
        probability, 0.0)
    opt(p, "--hang-s S", "how long an injected hang lasts", non_negative, 30.0)
    opt(p, "--slow-success-p P", "probability of a slow success: recorded after "
                                 "--slow-success-delay-s", probability, 0.0)
    opt(p, "--slow-success-delay-s S", "delay of a slow success; set it above the Reasoner's "
                                       "upstream timeout", non_negative, 5.0)
    opt(p, "--seed", "seed of the fault draws", int)
    flag(p, "--test-hooks", "enable POST /reset (tests only)")
    LOG_LEVEL.add(p, default="warning")
    add_server_tls(p)


def faults_from_args(args: argparse.Namespace) -> Faults:
    """The startup faults (raise FaultError)."""
    return Faults(latency_s=parse_dist_text(args.latency_s), error_rate=args.error_rate,
                  error_status=tuple(args.error_status), timeout_p=args.timeout_p,
                  hang_s=args.hang_s, slow_success_p=args.slow_success_p,
                  slow_success_delay_s=args.slow_success_delay_s)


@one_line_errors(PROG, FaultError)
def run_witness(args: argparse.Namespace) -> int:
    """the side-effect witness (tool upstream)

    Serve the witness: records every side effect in a SQLite ledger and injects tool faults.
    """
    # lazy: +116 ms (uvicorn, starlette, sqlite3) off rtalab's start-up
    import uvicorn

    from rtalab.loadtests.witness.app import create_app

    faults = faults_from_args(args)
    tls = server_tls_from_args(args)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(args.db, faults, test_hooks=args.test_hooks, seed=args.seed)
    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # bound: say where, once (uvicorn logs only at info level)
                print(f"{PROG}: listening on {tls.scheme}://{args.host}:{args.port} (ledger "
                      f"{args.db}); Ctrl-C to stop", file=sys.stderr, flush=True)

    server = Server(uvicorn.Config(app, host=args.host, port=args.port,
                                   log_level=args.log_level, access_log=False, lifespan="on",
                                   **tls.uvicorn_kwargs()))
    try:
        server.run()
    except SystemExit as e:  # uvicorn exits (code 1 or 3) when it cannot bind
        return 1 if e.code else 0
    except KeyboardInterrupt:
        return 130
    return 0 if server.started else 1


def register_witness(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``witness`` sub-command (``func(args) -> int``) to ``subparsers``."""
    return add_command(subparsers, "witness", run_witness, add_witness_arguments)
