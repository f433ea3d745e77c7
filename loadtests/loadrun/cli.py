"""``rtalab load run|bench``, registered through the ``rtalab.commands`` entry point.

Mistakes (bad flag, broken scenario, unreachable target) exit 2 with one
``rtalab: ...`` line; a run whose verdict (or ledger) fails exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, cast

from rtalab.loadtests.common.procs import ProcessError
from rtalab.loadtests.common.tls import INSECURE_WARNING, add_client_tls, client_tls_from_args
from rtalab.loadtests.dedup import parse_store_url
from rtalab.loadtests.live.bindings import help_text, parse_bindings
from rtalab.loadtests.live.config import TestSwitches
from rtalab.loadtests.loadrun.fleet import fleet_problem, fleet_warnings
from rtalab.loadtests.loadrun.orchestrate import (
    RunError,
    RunOptions,
    reachable,
    run_load,
    run_worker,
    summarize_run,
)
from rtalab.loadtests.loadrun.probe import add_arguments as probe_arguments
from rtalab.loadtests.loadrun.probe import cmd_probe
from rtalab.loadtests.reasoner.cli import DEDUP, DEDUP_MODE, UNSAFE_BUG
from rtalab.sim.answers.slo import SloError, parse_slo
from rtalab.sim.config import ConfigError
from rtalab.sim.policy.codes import ALL_CODES, is_retryable
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import junit
from rtalab.sim.shared.argtypes import (
    DRAIN,
    DURATION,
    NO_PLOTS,
    TARGET,
    TOKEN,
    WITNESS,
    WORKERS,
    Option,
    UsageError,
    add_command,
    add_group,
    add_outage,
    add_quiet,
    add_results_root,
    add_scenario,
    flag,
    non_negative,
    opt,
    outage_overrides,
    positive_int,
    repeatable,
    usage_error,
)
from rtalab.sim.shared.junit import add_junit_argument

PROG = "rtalab load run"


def _code(text: str) -> str:
    if text not in ALL_CODES:
        raise argparse.ArgumentTypeError(f"unknown error code {text!r} "
                                         f"(one of {', '.join(ALL_CODES)})")
    return text


def binding_set(text: str) -> str:
    """--binding: a name, a comma list, 'all' or 'both' -> the canonical comma list."""
    try:
        return ",".join(parse_bindings(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _binding_help() -> str:
    return help_text()


def _slo(text: str) -> str:
    try:
        parse_slo(text)
    except SloError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text.strip()


def _hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


DEFAULT_MASTER_BIND = ("0.0.0.0", 5557)  # Locust's own default
TLS = Option("--tls", "the embedded witness, Reasoner and chaos proxy serve mutual TLS with a "
                      "throwaway CA made in the run folder (tls/); every client verifies them "
                      "and presents a client certificate", action="store_true")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab load run``."""
    add_scenario(p)
    TARGET.add(p)
    TOKEN.add(p)
    WITNESS.add(p)
    opt(p, "--binding NAMES", _binding_help(), binding_set, "sse")
    opt(p, "--processes", "Locust processes: 1 = local, N > 1 = master + N workers",
        positive_int, 1)
    opt(p, "--workers-expected N", "run only the Locust master here and wait for N workers "
                                   "started with 'rtalab load worker --master HOST:PORT' (on "
                                   "other hosts)", positive_int)
    opt(p, "--master-bind HOST:PORT", "with --workers-expected: where the master listens for "
                                      "its workers (default 0.0.0.0:5557)", _hostport)
    DURATION.add(p, shown="[run].duration_s")
    DRAIN.add(p, shown="[run].drain_s")
    add_outage(p)
    opt(p, "--chaos", "put the L7 chaos proxy (scenario [network]) in front; default: when any "
                      "[network] key is not zero; --no-chaos: the real loopback",
        action=argparse.BooleanOptionalAction)
    repeatable(p, "--crash-at S", "SIGKILL the embedded Reasoner at S s and restart it "
                                  "(repeatable; the embedded case of --restart-at)",
               non_negative)
    repeatable(p, "--restart-at S", "restart the Reasoner S s after the load started "
                                    "(repeatable): with --target, run --restart-cmd; embedded, "
                                    "SIGKILL and restart it", non_negative)
    opt(p, "--restart-cmd CMD", "with --target: shell command that restarts the deployment "
                                "(e.g. 'docker restart reasoner'); the run waits for it and for "
                                "the agent card")
    WORKERS.add(p, shown=1)
    DEDUP.add(p, shown="SQLite in the run folder")
    DEDUP_MODE.add(p)
    repeatable(p, "--slo 'METRIC<=X'", "a release gate on the run's summary.json (same syntax "
                                       "as sim capacity, e.g. 'turn_completion_p99_s<=4', "
                                       "'success_rate>=0.99'; repeatable); without --slo the "
                                       "availability gate applies", _slo)
    add_results_root(p)
    add_junit_argument(p)
    add_quiet(p, "no progress lines")
    NO_PLOTS.add(p)
    add_client_tls(p, "connecting to --target, --witness and the metrics")
    TLS.add(p)
    test = p.add_argument_group("test-only switches (negative controls and conformance)")
    flag(test, "--no-reorder", "TEST ONLY: Live users play events in arrival order")
    repeatable(test, "--unsafe-test-retry-code CODE",
               "TEST ONLY: also retry this non-retryable code", _code)
    repeatable(test, "--test-force-error CODE", "TEST ONLY: turn i forces code i %% n through "
                                                "the Reasoner's --test-hooks (embedded only)",
               _code)
    UNSAFE_BUG.add(test)


def _duration(args: argparse.Namespace, sc: Any) -> float:
    return cast("float", args.duration if args.duration is not None else sc.run.duration_s)


def restart_times(args: argparse.Namespace, sc: Any) -> tuple[float, ...]:
    """When the run restarts the Reasoner: --crash-at, --restart-at and the scenario's
    ``load.restart_at_s`` (skipped for a --target without --restart-cmd)."""
    times = {*args.crash_at, *args.restart_at}
    if not args.target or args.restart_cmd:
        times |= set(sc.load.restart_at_s)
    return tuple(sorted(times))


def check_flags(args: argparse.Namespace, sc: Any) -> str | None:
    """The one-line reason a flag combination cannot run, or None."""
    embedded_only = [name for name, on in (
        ("--crash-at", args.crash_at), ("--workers", args.workers), ("--dedup", args.dedup),
        ("--dedup-mode", args.dedup_mode), ("--test-force-error", args.test_force_error),
        ("--unsafe-bug", args.unsafe_bug)) if on]
    if args.target and embedded_only:
        return (f"{'/'.join(embedded_only)} need the embedded Reasoner (no --target); "
                "with --target use --restart-cmd CMD --restart-at S")
    if args.tls and args.target:
        return ("--tls makes certificates for the embedded servers; a --target has its own: "
                "give its CA with --ca FILE (and --client-cert/--client-key for mutual TLS)")
    given = [name for name, on in (("--ca", args.ca), ("--client-cert", args.client_cert),
                                   ("--insecure", args.insecure)) if on]
    if args.tls and given:
        return f"--tls makes its own CA and client certificate: drop {'/'.join(given)}"
    if args.master_bind and not args.workers_expected:
        return "--master-bind needs --workers-expected N"
    if args.workers_expected and args.processes > 1:
        return "--workers-expected (remote workers) and --processes (local ones) exclude each other"
    if args.restart_cmd and not args.target:
        return "--restart-cmd needs --target (the embedded Reasoner is restarted by --restart-at)"
    if args.target and args.restart_at and not args.restart_cmd:
        return "--restart-at with --target needs --restart-cmd CMD (how to restart it)"
    if args.target and args.restart_cmd and not (args.restart_at or sc.load.restart_at_s):
        return "--restart-cmd needs at least one --restart-at S (or load.restart_at_s)"
    if args.dedup:
        try:
            parse_store_url(args.dedup)
        except ValueError as e:
            return f"--dedup: {e}"

    problem = fleet_problem(sc, target=args.target, chaos=args.chaos,
                            crash_at=restart_times(args, sc), dedup=args.dedup,
                            workers=args.workers)
    if problem:
        return problem
    duration = _duration(args, sc)
    for name, times in (("--crash-at", args.crash_at), ("--restart-at", args.restart_at),
                        ("load.restart_at_s", restart_times(args, sc))):
        late = [t for t in times if t >= duration]
        if late:
            return (f"{name} {late[0]:g} is not before the end of arrivals (--duration "
                    f"{duration:g}): it would restart nothing the load can see")
    return None


def flag_warnings(args: argparse.Namespace, sc: Any) -> list[str]:
    """Flag combinations that run but prove less than the user may think."""
    out = []
    warmup = min(sc.run.warmup_s, _duration(args, sc) / 2)
    if args.target and not args.restart_cmd and sc.load.restart_at_s:
        out.append("the scenario restarts the Reasoner (load.restart_at_s) but --target has no "
                   "--restart-cmd: no restart, resends across a restart not exercised")
    if args.target and args.chaos:
        out.append("--chaos with --target: the chaos proxy goes in front of the target")
    if args.workers_expected and (not args.target or args.chaos):
        out.append("--workers-expected: the embedded servers and the chaos proxy listen on "
                   "127.0.0.1 only; workers on other hosts need a --target they can reach "
                   "(without --chaos)")
    for t in restart_times(args, sc):
        if t < warmup:
            out.append(f"restart at {t:g} s falls inside the {warmup:g}-s warm-up, which the "
                       "key figures drop (the verdict still sees it)")

    out += fleet_warnings(sc, args.target, _duration(args, sc))
    if args.insecure:
        out.append(f"WARNING: {INSECURE_WARNING}")
    if args.unsafe_bug:
        out.append(f"TEST ONLY: the embedded Reasoner runs with planted bugs "
                   f"({', '.join(args.unsafe_bug)}): this run must FAIL")
    return out


def test_switches(args: argparse.Namespace) -> TestSwitches:
    """The test-only switches of the command line (its "test-only switches" group)."""
    return TestSwitches(no_reorder=args.no_reorder,
                        unsafe_test_retry_codes=tuple(args.unsafe_test_retry_code),
                        force_error_codes=tuple(args.test_force_error),
                        unsafe_bugs=tuple(args.unsafe_bug))


def run_options(args: argparse.Namespace, sc: Any) -> RunOptions:
    """``rtalab load run``'s flags and scenario as one :class:`RunOptions` (the Live users'
    options built here, once)."""
    return RunOptions.of(
        sc, test_switches(args), target=args.target, binding=args.binding,
        processes=args.workers_expected or args.processes,
        master_bind=(args.master_bind or DEFAULT_MASTER_BIND) if args.workers_expected else None,
        duration_s=args.duration, drain_s=args.drain, chaos=args.chaos,
        crash_at=restart_times(args, sc), restart_cmd=args.restart_cmd, workers=args.workers,
        dedup=args.dedup, dedup_mode=args.dedup_mode, results=Path(args.out),
        token=args.token[0] if args.token else None, tokens=tuple(args.token),
        witness_url=args.witness, argv=["rtalab", *getattr(args, "rtalab_argv", [])],
        quiet=args.quiet, plots=not args.no_plots, slo=tuple(args.slo),
        tls=client_tls_from_args(args), serve_tls=args.tls)


def cmd_run(args: argparse.Namespace) -> int:
    """run a scenario against a Reasoner

    Run SCENARIO's workload with Locust Live users; gather ledgers, tables, summary and verdict in
    results/.
    """
    try:
        sc = load_scenario(args.scenario, list(args.set))
        sc = sc.with_overrides(outage_overrides(args, sc.network.outages))
    except ConfigError as e:
        return usage_error(f"rtalab: scenario error: {e}")
    except UsageError as e:
        return usage_error(f"rtalab: {e}")
    for c in args.unsafe_test_retry_code:
        if is_retryable(c):
            return usage_error(f"rtalab: --unsafe-test-retry-code {c}: already retryable")
    problem = check_flags(args, sc)
    if problem:
        return usage_error(f"rtalab: {problem}")
    for warning in flag_warnings(args, sc):
        print(f"rtalab load: warning: {warning}", file=sys.stderr)
    opts = run_options(args, sc)

    problem = reachable(opts)
    if problem:
        return usage_error(f"rtalab: {problem}")
    try:
        run_dir, rc = run_load(opts)
    except (RunError, ProcessError) as e:
        return usage_error(f"rtalab: load run failed: {str(e).splitlines()[0]}")
    if args.junit:
        try:
            _write_junit(args.junit, run_dir)
        except OSError as e:
            return usage_error(f"rtalab: cannot write {args.junit}: {e.strerror or e}")
    _print_end(run_dir)
    return rc


def _print_end(run_dir: Path) -> None:
    """The end of every run: files, then the verdict line, failed rules and key figures."""
    # lazy: +1.91 s (scipy, pandas, pyarrow) off rtalab's start-up
    from rtalab.loadtests.check import Verdict

    print(f"results: {run_dir}")
    for name in ("report.html", "verdict.txt", "summary.json", "locust/locust.html"):
        if (run_dir / name).exists():
            print(f"  {name}: {run_dir / name}")
    verdict = Verdict.read(run_dir)
    if verdict is not None:
        # lazy: +1.69 s (scipy, pandas, pyarrow) off rtalab's start-up
        from rtalab.loadtests.check.show import wrap_text

        print(wrap_text(verdict.summary_text()), end="")


def _write_junit(path: Path, run_dir: Path) -> None:
    """The run's verdict as JUnit XML: ledger and count checks, then every rule."""
    def read(p: Path) -> dict[str, Any] | None:
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    counts = read(run_dir / "ledger" / "counts.json") or {}
    junit.write(path, f"rtalab load run {run_dir.name}",
                junit.load_run_cases(run_dir, read(run_dir / "verdict.json"), counts))


def cmd_summarize(args: argparse.Namespace) -> int:
    """tables, summary and verdict of a gathered ledger

    Rebuild the tables, summary.json and the verdict of a load run folder (e.g. gathered by a Locust
    master on another host).
    """
    run = Path(args.run_dir)
    if not (run / "ledger" / "attempts.jsonl").exists() or not (
            run / "ledger" / "clock.json").exists():
        return usage_error(f"rtalab: {run}: not a load run folder with a gathered ledger")
    # lazy: +1.66 s (scipy, pandas, pyarrow) off rtalab's start-up
    from rtalab.loadtests.check import LedgerError

    try:
        rc, verdict = summarize_run(run)
    except LedgerError as e:
        return usage_error(f"rtalab: {e}")
    if verdict.interrupted:
        print(f"rtalab load summarize: {run} was interrupted: tables, summary and verdict "
              "are over the partial ledger gathered before the interrupt")
    _print_end(run)
    return rc


def cmd_worker(args: argparse.Namespace) -> int:
    """a Locust worker for a master on another host

    Join the load run of 'rtalab load run ... --workers-expected N --master-bind HOST:PORT' as one
    of its N workers: settings and scenario come from the master, the ledger rows go to it; this
    host keeps its logs in its own run folder.
    """
    host, port = args.master
    run_dir, rc = run_worker(host, port, Path(args.out), quiet=args.quiet,
                             timeout_s=args.timeout)
    print(f"worker folder: {run_dir} (exit {rc})")
    return rc


def _summarize_arguments(p: argparse.ArgumentParser) -> None:
    opt(p, "run_dir RUN_DIR", "a load-run folder whose ledger/ holds the gathered JSONL files")


def _worker_arguments(p: argparse.ArgumentParser) -> None:
    opt(p, "--master HOST:PORT", "the master's --master-bind address", _hostport, required=True)
    add_results_root(p)
    opt(p, "--timeout S", "give up after S seconds (default: until the master ends the run)",
        non_negative)
    add_quiet(p, "no progress lines")


def register(subparsers: Any) -> None:
    """Add ``load`` with ``run``, ``summarize``, ``worker`` and ``probe`` to the root parser (the
    benchmarks add ``bench`` through the entry point ``load.bench``)."""
    sub = add_group(subparsers, "load", help="load-test a Reasoner with Locust Live users",
                    description="Load runs with Locust Live users, ledgers "
                                "and a delivery verdict.")
    add_command(sub, "run", cmd_run, add_run_arguments)
    add_command(sub, "summarize", cmd_summarize, _summarize_arguments)
    add_command(sub, "worker", cmd_worker, _worker_arguments)

    add_command(sub, "probe", cmd_probe, probe_arguments)
