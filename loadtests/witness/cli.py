"""``rtalab serve witness`` / ``python -m loadtests.witness``: run the witness with uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from loadtests.witness.faults import ERROR_STATUSES, FaultError, Faults, parse_dist_text
from sim.shared.argtypes import non_negative, port, probability

PROG = "rtalab serve witness"
EXIT_USAGE = 2
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
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; the Reasoner's README port is 8090)")
    p.add_argument("--db", default="witness.db", metavar="PATH",
                   help="SQLite ledger file, created if missing (default ./witness.db)")
    p.add_argument("--latency-s", default="0", metavar="SPEC",
                   help="execution latency: seconds, or a distribution as JSON or a TOML "
                        "inline table, e.g. '{dist = \"exp\", mean = 0.05}' (default 0)")
    p.add_argument("--error-rate", type=probability, default=0.0, metavar="P",
                   help="probability of an injected 500/503 without side effect")
    p.add_argument("--error-status", type=_statuses, default=(500, 503), metavar="LIST",
                   help="statuses of injected errors, chosen uniformly (default 500,503)")
    p.add_argument("--timeout-p", type=probability, default=0.0, metavar="P",
                   help="probability of hanging --hang-s without side effect, then 504")
    p.add_argument("--hang-s", type=non_negative, default=30.0, metavar="S",
                   help="how long an injected hang lasts (default 30)")
    p.add_argument("--slow-success-p", type=probability, default=0.0, metavar="P",
                   help="probability of a slow success: recorded after --slow-success-delay-s")
    p.add_argument("--slow-success-delay-s", type=non_negative, default=5.0, metavar="S",
                   help="delay of a slow success; set it above the Reasoner's upstream "
                        "timeout (default 5)")
    p.add_argument("--seed", type=int, default=None, help="seed of the fault draws")
    p.add_argument("--test-hooks", action="store_true", help="enable POST /reset (tests only)")
    p.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="server log level (default warning)")


def faults_from_args(args: argparse.Namespace) -> Faults:
    """The startup faults (raise FaultError)."""
    return Faults(latency_s=parse_dist_text(args.latency_s), error_rate=args.error_rate,
                  error_status=tuple(args.error_status), timeout_p=args.timeout_p,
                  hang_s=args.hang_s, slow_success_p=args.slow_success_p,
                  slow_success_delay_s=args.slow_success_delay_s)


def run_witness(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; exit code 0, 1 if the server could not start, 2 on bad flags."""
    import uvicorn

    from loadtests.witness.app import create_app

    try:
        faults = faults_from_args(args)
    except FaultError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(args.db, faults, test_hooks=args.test_hooks, seed=args.seed)
    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # bound: say where, once (uvicorn logs only at info level)
                print(f"{PROG}: listening on http://{args.host}:{args.port} (ledger "
                      f"{args.db}); Ctrl-C to stop", file=sys.stderr, flush=True)

    server = Server(uvicorn.Config(app, host=args.host, port=args.port,
                                   log_level=args.log_level, access_log=False, lifespan="on"))
    try:
        server.run()
    except SystemExit as e:  # uvicorn exits (code 1 or 3) when it cannot bind
        return 1 if e.code else 0
    except KeyboardInterrupt:
        return 130
    return 0 if server.started else 1


def register_witness(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``witness`` sub-command (``func(args) -> int``) to ``subparsers``."""
    p = subparsers.add_parser("witness", help="the side-effect witness (tool upstream)",
                              description="Serve the witness: records every side effect in a "
                                          "SQLite ledger and injects tool faults.")
    add_witness_arguments(p)
    p.set_defaults(func=run_witness)
    return p
