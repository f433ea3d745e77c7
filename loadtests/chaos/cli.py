"""``rtalab chaos --listen ADDR --upstream URL [--scenario FILE] ...``: the chaos proxy.

Flags override the scenario's ``[network]`` rates (docs/chaos.md has the
mapping).  Every mistake (bad address, URL, probability, outage spec, broken
scenario) exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rtalab.loadtests.chaos.config import ChaosConfig, with_overrides
from rtalab.loadtests.common.tls import (
    INSECURE_WARNING,
    add_client_tls,
    add_server_tls,
    client_tls_from_args,
    server_tls_from_args,
)
from rtalab.sim.scenario import (
    BALANCERS,
    OutageConfig,
    Scenario,
    apply_overrides,
    from_dict,
    load_scenario,
)
from rtalab.sim.shared.argtypes import (
    LOG_LEVEL,
    add_command,
    add_scenario,
    add_seed,
    checked,
    flag,
    non_negative,
    one_line_errors,
    opt,
    probability,
    repeatable,
    usage_error,
)

PROG = "rtalab chaos"


def listen_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1; port 0 = any free port)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if sep else ""
    p = checked(port, int, "expected HOST:PORT, got {text!r}", lambda v: 0 <= v <= 65535,
                "port must be in 0..65535, got {value}", shown=text)
    return host or "127.0.0.1", p


def upstream_url(text: str) -> str:
    """An ``http(s)://host[:port]`` URL."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http(s)://HOST:PORT URL, got {text!r}")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in {text!r}") from None
    return text.rstrip("/")


def grpc_upstream(text: str) -> tuple[str, bool]:
    """``grpc://HOST:PORT`` (or bare ``HOST:PORT``, plaintext) or ``grpcs://HOST:PORT`` (TLS):
    (address, secure)."""
    secure, rest = False, text
    for prefix, tls in (("grpcs://", True), ("grpc://", False)):
        if text.startswith(prefix):
            secure, rest = tls, text[len(prefix):]
    rest = rest.rstrip("/")
    parts = urlsplit(f"//{rest}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or "/" in rest:
        raise argparse.ArgumentTypeError(
            f"expected grpc://HOST:PORT or grpcs://HOST:PORT, got {text!r}")
    return rest, secure


def outage_spec(text: str) -> Any:
    """``START_S:DURATION_S[:uplink|downlink|both]``."""
    bits = text.split(":")
    if len(bits) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected START:DURATION[:DIRECTION], got {text!r}")
    try:
        start, dur = float(bits[0]), float(bits[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers in {text!r}") from None
    direction = bits[2] if len(bits) == 3 else "both"
    if not (start >= 0 and dur > 0) or direction not in ("uplink", "downlink", "both"):
        raise argparse.ArgumentTypeError(
            f"need START >= 0, DURATION > 0, DIRECTION uplink|downlink|both; got {text!r}")
    return OutageConfig(start_s=start, duration_s=dur, direction=direction)  # type: ignore[arg-type]  # direction checked just above


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab chaos``."""
    opt(p, "--listen HOST:PORT", "address to listen on (port 0: any free port, printed)",
        listen_addr, required=True)
    opt(p, "--upstream URL", "the Reasoner, e.g. http://127.0.0.1:8000; given several times: "
        "the replicas of a fleet, balanced by --balancer", upstream_url, required=True,
        action="append")
    add_scenario(p, option="whose [network] section gives the rates and outages")
    add_seed(p)
    opt(p, "--ledger FILE", "injection ledger (JSONL, appended; '' = none; {default})",
        default="chaos.jsonl")
    opt(p, "--duplicate P", "override uplink.duplication", probability)
    opt(p, "--duplicate-first P", "of the duplicated requests, the share whose copy reaches the "
        "Reasoner before the original ({default})", probability, default=0.5)
    opt(p, "--reorder P", "override downlink.reorder", probability)
    opt(p, "--reorder-delay-s S", "override downlink.reorder_delay_s (constant)", non_negative)
    opt(p, "--drop P", "override downlink.loss (P of a mid-stream cut at each event)",
        probability)
    opt(p, "--delay-s S", "override latency_s of both directions (constant)", non_negative)
    repeatable(p, "--outage START:DURATION[:DIR]", "add an outage window (repeatable)",
               outage_spec)
    flag(p, "--no-scenario-outages", "ignore the scenario's [[network.outages]]")
    opt(p, "--outage-mode", "what an outage does", choices=("blackhole", "refuse"),
        default="blackhole")
    flag(p, "--reorder-terminal", "let reordering move events past the terminal status")
    opt(p, "--start-at UNIX_TIME", "second 0 of the outage schedule (default: proxy start)",
        float)
    opt(p, "--start-file PATH", "second 0 of the outage schedule is the 't0' (unix time) of "
                                "this JSON file once it appears (a load run's "
                                "ledger/clock.json); no outage before that")
    opt(p, "--grpc-listen HOST:PORT", "also proxy the A2A gRPC binding on this address (port 0: "
        "any free port, printed); needs --grpc-upstream", listen_addr)
    opt(p, "--grpc-upstream URL", "the Reasoner's gRPC address: grpc://HOST:PORT, or "
        "grpcs://HOST:PORT for TLS (verified with --ca / --client-cert); with several "
        "--upstream, one per replica in the same order", grpc_upstream, action="append")
    opt(p, "--balancer POLICY", "with several --upstream: how each request picks its replica "
        "(default: the scenario's [fleet] balancer, else random)", choices=BALANCERS)
    opt(p, "--health-check-s S", "with several --upstream: a replica failing connects this long "
        "leaves the rotation (default: the scenario's [fleet] health_check_s)", non_negative)
    LOG_LEVEL.add(p, default="warning")
    add_server_tls(p)
    add_client_tls(p, "connecting to --upstream")


class FlagError(Exception):
    """A flag combination the user must fix."""


def settings_from_args(args: argparse.Namespace) -> Any:
    """Validate into ChaosSettings (raises ConfigError or FlagError)."""
    # lazy: +235 ms (uvicorn, httpx, rich) off rtalab's start-up
    from rtalab.loadtests.chaos.server import ChaosSettings

    scenario = load_scenario(args.scenario, list(args.set)) if args.scenario else None
    if scenario is None and args.set:
        scenario = from_dict(apply_overrides({}, list(args.set)))
    scenario = scenario or Scenario()
    network = scenario.network
    if args.no_scenario_outages:
        network = replace(network, outages=())
    cfg = ChaosConfig(network=network, outage_mode=args.outage_mode,
                      reorder_terminal=args.reorder_terminal,
                      seed=scenario.run.seed if args.seed is None else args.seed,
                      extra_outages=tuple(args.outage), duplicate_first=args.duplicate_first)
    cfg = with_overrides(cfg, duplicate=args.duplicate, reorder=args.reorder, drop=args.drop,
                         delay_s=args.delay_s, reorder_delay_s=args.reorder_delay_s)
    host, port = args.listen
    upstreams = tuple(args.upstream)
    for u in upstreams:
        up = urlsplit(u)
        if port and (up.hostname, up.port) == (host, port):
            raise FlagError("--listen and --upstream are the same address")
    if len(set(upstreams)) != len(upstreams):
        raise FlagError("an --upstream is given twice")
    if len(upstreams) == 1 and (args.balancer or args.health_check_s is not None):
        raise FlagError("--balancer and --health-check-s need several --upstream")
    if (args.grpc_listen is None) != (args.grpc_upstream is None):
        raise FlagError("--grpc-listen and --grpc-upstream go together")
    grpc_ups = list(args.grpc_upstream or ())
    if grpc_ups and len(grpc_ups) != len(upstreams):
        raise FlagError(f"{len(grpc_ups)} --grpc-upstream for {len(upstreams)} --upstream: "
                        "give one gRPC address per replica, in the same order")
    if len({secure for _, secure in grpc_ups}) > 1:
        raise FlagError("--grpc-upstream: mix of grpc:// and grpcs:// (one scheme for all)")
    if args.grpc_listen is not None and args.grpc_listen[1] and args.grpc_listen == (host, port):
        raise FlagError("--listen and --grpc-listen are the same address")
    g_up, g_secure = grpc_ups[0] if grpc_ups else ("", False)
    fleet = scenario.fleet
    return ChaosSettings(host=host, port=port, upstream=upstreams[0], cfg=cfg,
                         upstreams=upstreams, balancer=args.balancer or fleet.balancer,
                         health_check_s=fleet.health_check_s if args.health_check_s is None
                         else args.health_check_s,
                         grpc_listen=args.grpc_listen, grpc_upstream=g_up,
                         grpc_upstreams=tuple(a for a, _ in grpc_ups),
                         grpc_upstream_secure=g_secure,
                         ledger=Path(args.ledger) if args.ledger else None,
                         start_at_unix=args.start_at,
                         start_file=args.start_file, log_level=args.log_level,
                         tls=server_tls_from_args(args), upstream_tls=client_tls_from_args(args))


@one_line_errors(PROG, FlagError)
def cmd_chaos(args: argparse.Namespace) -> int:
    """L7 chaos proxy for JSON-RPC HTTP/SSE, HTTP+JSON, WebSocket and gRPC

    Proxy a Reasoner, injecting the scenario's [network] faults at the message level: duplicated
    requests, reordered and delayed stream events, mid-stream drops, refuse / black-hole outages.
    See docs/chaos.md.
    """
    # lazy: +277 ms (uvicorn, httpx, rich) off rtalab's start-up
    from rtalab.loadtests.chaos.server import run

    settings = settings_from_args(args)
    if settings.ledger is not None:
        try:
            settings.ledger.parent.mkdir(parents=True, exist_ok=True)
            settings.ledger.open("a").close()
        except OSError as e:
            return usage_error(f"{PROG}: error: cannot write --ledger {settings.ledger}: "
                               f"{e.strerror or e}")
    if settings.upstream_tls.insecure:
        print(f"{PROG}: WARNING: {INSECURE_WARNING}", file=sys.stderr)
    try:
        return run(settings)
    except KeyboardInterrupt:
        return 130


def register(subparsers: Any) -> None:
    """Add ``chaos`` to the root parser."""
    add_command(subparsers, "chaos", cmd_chaos, add_arguments)
