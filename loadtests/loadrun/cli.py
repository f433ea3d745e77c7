"""``rtalab load run|bench``, registered through the ``rtalab.commands`` entry point.

Mistakes (bad flag, broken scenario, unreachable target) exit 2 with one
``rtalab: ...`` line; a run whose verdict (or ledger) fails exits 1.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from sim.argtypes import EXIT_USAGE, add_results_root, help_of, non_negative, positive_int
from sim.junit import add_junit_argument
from sim.policy.codes import ALL_CODES, is_retryable

PROG = "rtalab load run"


def _code(text: str) -> str:
    if text not in ALL_CODES:
        raise argparse.ArgumentTypeError(f"unknown error code {text!r} "
                                         f"(one of {', '.join(ALL_CODES)})")
    return text


def _url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL, got {text!r}")
    return text.rstrip("/")


def _slo(text: str) -> str:
    from sim.answers.slo import SloError, parse_slo

    try:
        parse_slo(text)
    except SloError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text.strip()


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab load run``."""
    p.add_argument("scenario", metavar="SCENARIO", help="scenario file or preset name")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="scenario override, e.g. workload.calls_per_s=5 (repeatable)")
    p.add_argument("--target", type=_url, default=None, metavar="URL",
                   help="base URL of a deployment to test (default: start the reference "
                        "Reasoner, witness and chaos proxy here)")
    p.add_argument("--token", default=None, help="bearer token for --target")
    p.add_argument("--witness", type=_url, default=None, metavar="URL",
                   help="with --target: the witness the deployment sends its tool calls to")
    p.add_argument("--binding", choices=("sse", "ws", "both"), default="sse",
                   help="HTTP/SSE, WebSocket, or both (calls alternate) (default sse)")
    p.add_argument("--processes", type=positive_int, default=1,
                   help="Locust processes: 1 = local, N > 1 = master + N workers (default 1)")
    p.add_argument("--duration", type=non_negative, default=None, metavar="S",
                   help="seconds of call arrivals (default [run].duration_s)")
    p.add_argument("--drain", type=non_negative, default=None, metavar="S",
                   help="at most this long for open calls to end (default [run].drain_s)")
    p.add_argument("--chaos", action=argparse.BooleanOptionalAction, default=None,
                   help="put the L7 chaos proxy (scenario [network]) in front; default: when "
                        "any [network] key is not zero; --no-chaos: the real loopback")
    p.add_argument("--crash-at", type=non_negative, action="append", default=[], metavar="S",
                   help="SIGKILL the embedded Reasoner at S s and restart it (repeatable)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="embedded Reasoner worker processes (default 1)")
    p.add_argument("--dedup", default=None, metavar="URL",
                   help="embedded Reasoner dedup store (default SQLite in the run folder)")
    p.add_argument("--dedup-mode", choices=("request-guid", "turn", "none"), default=None,
                   help="override [reasoner].dedup")
    p.add_argument("--slo", type=_slo, action="append", default=[], metavar="'METRIC<=X'",
                   help="a release gate on the run's summary.json (same syntax as sim "
                        "capacity, e.g. 'turn_completion_p99_s<=4', 'success_rate>=0.99'; "
                        "repeatable); without --slo the availability gate applies")
    add_results_root(p)
    add_junit_argument(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    test = p.add_argument_group("test-only switches (negative controls and conformance)")
    test.add_argument("--no-reorder", action="store_true",
                      help="TEST ONLY: Live users play events in arrival order")
    test.add_argument("--unsafe-test-retry-code", type=_code, action="append", default=[],
                      metavar="CODE", help="TEST ONLY: also retry this non-retryable code")
    test.add_argument("--test-force-error", type=_code, action="append", default=[],
                      metavar="CODE", help="TEST ONLY: turn i forces code i %% n through the "
                                           "Reasoner's --test-hooks (embedded only)")


def cmd_run(args: argparse.Namespace) -> int:
    """``rtalab load run``."""
    from loadtests.loadrun.orchestrate import RunError, RunOptions, run_load
    from loadtests.procs import ProcessError
    from sim.config import ConfigError
    from sim.scenario import load_scenario

    try:
        sc = load_scenario(args.scenario, list(args.set))
    except ConfigError as e:
        print(f"rtalab: scenario error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for c in args.unsafe_test_retry_code:
        if is_retryable(c):
            print(f"rtalab: --unsafe-test-retry-code {c}: already retryable", file=sys.stderr)
            return EXIT_USAGE
    if args.target and (args.crash_at or args.workers or args.dedup or args.dedup_mode
                        or args.test_force_error):
        print("rtalab: --crash-at/--workers/--dedup/--dedup-mode/--test-force-error need the "
              "embedded Reasoner (no --target)", file=sys.stderr)
        return EXIT_USAGE
    opts = RunOptions(
        scenario=sc, target=args.target, binding=args.binding, processes=args.processes,
        duration_s=args.duration, drain_s=args.drain, chaos=args.chaos,
        crash_at=tuple(args.crash_at), workers=args.workers, dedup=args.dedup,
        dedup_mode=args.dedup_mode, results=Path(args.out), token=args.token,
        no_reorder=args.no_reorder, unsafe_test_retry_codes=tuple(args.unsafe_test_retry_code),
        force_error_codes=tuple(args.test_force_error), witness_url=args.witness,
        argv=["rtalab", *getattr(args, "rtalab_argv", [])], quiet=args.quiet,
        plots=not args.no_plots, slo=tuple(args.slo))
    if args.target:
        from loadtests.procs import url_ready

        if not url_ready(f"{args.target}/.well-known/agent-card.json", timeout_s=5.0):
            print(f"rtalab: target {args.target} does not answer", file=sys.stderr)
            return EXIT_USAGE
    try:
        run_dir, rc = run_load(opts)
    except (RunError, ProcessError) as e:
        print(f"rtalab: load run failed: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_USAGE
    if args.junit:
        try:
            _write_junit(args.junit, run_dir)
        except OSError as e:
            print(f"rtalab: cannot write {args.junit}: {e.strerror or e}", file=sys.stderr)
            return EXIT_USAGE
    _print_end(run_dir)
    return rc


def _print_end(run_dir: Path) -> None:
    """The end of every run: files, then the verdict line, failed rules and key figures."""
    from loadtests.check import Verdict

    print(f"results: {run_dir}")
    for name in ("report.html", "verdict.txt", "summary.json", "locust/locust.html"):
        if (run_dir / name).exists():
            print(f"  {name}: {run_dir / name}")
    verdict = Verdict.read(run_dir)
    if verdict is not None:
        from loadtests.check.show import wrap_text

        print(wrap_text(verdict.summary_text()), end="")


def _write_junit(path: Path, run_dir: Path) -> None:
    """The run's verdict as JUnit XML: ledger and count checks, then every rule."""
    import json

    from sim import junit

    def read(p: Path) -> dict[str, Any] | None:
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    counts = read(run_dir / "ledger" / "counts.json") or {}
    junit.write(path, f"rtalab load run {run_dir.name}",
                junit.load_run_cases(run_dir, read(run_dir / "verdict.json"), counts))


def cmd_summarize(args: argparse.Namespace) -> int:
    """``rtalab load summarize RUN_DIR``."""
    from loadtests.loadrun.orchestrate import summarize_run

    run = Path(args.run_dir)
    if not (run / "ledger" / "attempts.jsonl").exists() or not (
            run / "ledger" / "clock.json").exists():
        print(f"rtalab: {run}: not a load run folder with a gathered ledger", file=sys.stderr)
        return EXIT_USAGE
    from loadtests.check import LedgerError

    try:
        rc, verdict = summarize_run(run)
    except LedgerError as e:
        print(f"rtalab: {e}", file=sys.stderr)
        return EXIT_USAGE
    if verdict.interrupted:
        print(f"rtalab load summarize: {run} was interrupted: tables, summary and verdict "
              "are over the partial ledger gathered before the interrupt")
    _print_end(run)
    return rc



def register(subparsers: Any) -> None:
    """Add ``load`` with ``run`` and ``bench`` to the root parser."""
    load = subparsers.add_parser("load", help="load-test a Reasoner with Locust Live users",
                                 description="Load runs with Locust Live users, ledgers "
                                             "and a delivery verdict.")
    load.set_defaults(func=help_of(load))
    sub = load.add_subparsers(title="commands", metavar="COMMAND")
    run = sub.add_parser("run", help="run a scenario against a Reasoner",
                         description="Run SCENARIO's workload with Locust Live users; gather "
                                     "ledgers, tables, summary and verdict in results/.")
    add_run_arguments(run)
    run.set_defaults(func=cmd_run)
    summ = sub.add_parser("summarize", help="tables, summary and verdict of a gathered ledger",
                          description="Rebuild the tables, summary.json and the verdict of a "
                                      "load run folder (e.g. gathered by a Locust master "
                                      "on another host).")
    summ.add_argument("run_dir", metavar="RUN_DIR",
                      help="a load-run folder whose ledger/ holds the gathered JSONL files")
    summ.set_defaults(func=cmd_summarize)
    try:
        from loadtests.loadrun.bench import add_arguments, run_bench
    except ImportError:
        return
    bench = sub.add_parser("bench", help="Live user turns/s vs a bare FastHttpUser",
                           description="Turns/s of the SSE and WebSocket Live users against "
                                       "a bare client reading the same canned stream.")
    add_arguments(bench)
    bench.set_defaults(func=run_bench)
