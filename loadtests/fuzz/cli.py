"""``rtalab serve fuzz``: the long fuzz run (not in CI; ``make fuzz-long``).

Starts a Reasoner (1 worker, SQLite store, test hooks, the tests' fast
scenario and tokens) unless ``--url`` names one, fuzzes each binding with
``--requests`` requests (:mod:`rtalab.loadtests.fuzz.engine`), and prints per binding: the
requests, the share that reached turn parsing, completed turns, 5xx,
unanswered, sockets lost, server-side unhandled exceptions and the oracle's
verdict, plus the server's RSS before and after (own server only).  Writes
``summary.json`` to a new folder under ``results/``.  Exit 0 when every binding
passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import psutil

from rtalab.loadtests.common.procs import start_reasoner, url_problem
from rtalab.loadtests.common.tls import add_client_tls, client_tls_from_args
from rtalab.loadtests.fuzz.engine import BINDINGS, MIN_REACHED, BindingReport, fuzz_binding
from rtalab.loadtests.wireclient import FAST_SCENARIO, TOKENS, Client
from rtalab.sim.shared.argtypes import UsageError, add_command, add_quiet, positive_int
from rtalab.sim.shared.progress import progress_bar, should_show
from rtalab.sim.shared.results import RunLifecycle

DEFAULT_REQUESTS = 10_000


def _bindings(text: str) -> tuple[str, ...]:
    """``jsonrpc,rest,ws`` -> a tuple (argparse type)."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in BINDINGS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"bindings must be among {', '.join(BINDINGS)}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve fuzz``."""
    p.add_argument("--requests", type=positive_int, default=DEFAULT_REQUESTS, metavar="N",
                   help=f"requests per binding (default {DEFAULT_REQUESTS:,})")
    p.add_argument("--bindings", type=_bindings, default=BINDINGS, metavar="LIST",
                   help="comma-separated bindings (default jsonrpc,rest,ws)")
    p.add_argument("--seed", type=positive_int, default=1, help="generator seed (default 1)")
    p.add_argument("--threads", type=positive_int, default=4,
                   help="client threads per binding (default 4)")
    p.add_argument("--url", default=None,
                   help="fuzz this running Reasoner (needs --test-hooks and the test tokens) "
                        "instead of starting one")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="results root (default results/)")
    add_client_tls(p, "connecting to --url")
    add_quiet(p)


def _rss_mib(client: Client) -> float | None:
    """RSS of the worker answering /healthz, in MiB (local servers only)."""
    try:
        pid = int(client.get_json("/healthz")["pid"])
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except (OSError, KeyError, ValueError, psutil.Error):
        return None


def _fmt(v: float | None) -> str:
    """MiB with one decimal, or ``-``."""
    return "-" if v is None else f"{v:.1f}"


def _run(client: Client, args: argparse.Namespace) -> tuple[list[BindingReport], dict[str, Any]]:
    """Fuzz every binding; the reports and the RSS figures."""
    rss: dict[str, Any] = {"beforeMiB": _rss_mib(client)}
    reports = []
    for binding in args.bindings:
        with progress_bar(f"fuzz {binding}", enabled=should_show(args.quiet)) as bar:
            reports.append(fuzz_binding(client, binding, args.requests, seed=args.seed,
                                        threads=args.threads, progress=bar))
        rss[f"after_{binding}MiB"] = _rss_mib(client)
    rss["afterMiB"] = _rss_mib(client)
    return reports, rss


def run_fuzz(args: argparse.Namespace) -> int:
    """Run the long fuzz; print the table; 0 if every binding passed."""
    if args.url:
        url, tls = args.url.rstrip("/"), client_tls_from_args(args)
        problem = url_problem(url + "/healthz", tls, json_keys=("pid",))
        if problem:
            raise UsageError(problem)
        reports, rss = _run(Client(url, tls), args)
    else:
        with tempfile.TemporaryDirectory(prefix="rtalab-fuzz-") as tmp:
            base = Path(tmp)
            (base / "scenario.toml").write_text(FAST_SCENARIO, encoding="utf-8")
            extra = ["--test-hooks", "--log-level", "warning"]
            for token, principal in TOKENS.items():
                extra += ["--token", f"{token}={principal}"]
            with start_reasoner(dedup=f"sqlite:///{base / 'dedup.sqlite'}",
                                scenario=base / "scenario.toml", extra_args=extra,
                                log_path=base / "reasoner.log") as proc:
                reports, rss = _run(Client(proc.url), args)
    print("rtalab serve fuzz")
    print(f"{'binding':8} {'requests':>8} {'reached':>8} {'completed':>9} {'5xx':>4} "
          f"{'unanswered':>10} {'lost ws':>7} {'unhandled':>9}  verdict")
    for r in reports:
        verdict = "ok" if not r.failures() else "FAIL: " + "; ".join(r.failures())
        print(f"{r.binding:8} {r.requests:8,} {r.reached_share:8.1%} {r.completed:9,} "
              f"{r.http_5xx:4} {r.unanswered:10} {r.sockets_lost:7} {r.unhandled:9g}  {verdict}")
    print(f"server RSS: {_fmt(rss['beforeMiB'])} MiB before, {_fmt(rss['afterMiB'])} MiB after "
          f"(reached turn parsing must be >= {MIN_REACHED:.0%})")
    out = RunLifecycle.new(args.results, "serve-fuzz", scenario_name="fast", seed=args.seed).path
    (out / "summary.json").write_text(json.dumps(
        {"command": "rtalab serve fuzz", "requestsPerBinding": args.requests, "seed": args.seed,
         "threads": args.threads, "rss": rss, "bindings": [r.as_dict() for r in reports]},
        indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out / 'summary.json'}")
    return 0 if all(not r.failures() for r in reports) else 1


def cmd_fuzz(args: argparse.Namespace) -> int:
    """long fuzz run of the Reasoner on every binding

    Fuzz the Reasoner over JSON-RPC/SSE, REST and WebSocket with mostly valid, mutated requests;
    report 5xx, unanswered, crashes and RSS.
    """
    return run_fuzz(args)


def register(serve: Any) -> None:
    """Add ``fuzz`` to the ``serve`` group's sub-parsers."""
    add_command(serve, "fuzz", cmd_fuzz, add_arguments)
