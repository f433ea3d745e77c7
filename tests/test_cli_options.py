"""Options mean the same everywhere (issue 20, point 6).

An option that several commands have is declared once (``sim/shared/argtypes.py``: ``Option``,
``add_scenario``, ``add_seed`` ...), so its type, metavar, choices and help cannot drift apart;
only its default may differ per command, and the help's ``(default ...)`` part is written from
it.  The tables below are the expected state, written out: every option name that two or more
``rtalab`` commands have is either shared (``SHARED``: the same in every command listed) or a
different option under the same name (``DISTINCT``, with the reason).  A new command that adds
an option by a known name, or a command whose option drifts, fails here.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from typing import Any

import pytest

from rtalab.sim.cli import build_parser, commands
from rtalab.sim.shared.argtypes import OneLineParser, Option, default_text, opt, with_default

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
UNSAFE_BUGS = ("late-claim", "turn-key", "turn-key-rewrite", "volatile", "continuation-twice",
               "refuse-auth", "no-input-required", "sse-skips-dedup", "rest-skips-dedup",
               "ws-skips-dedup", "grpc-skips-dedup")
SIM_ANSWERS = ("sim capacity", "sim metastability", "sim storm", "sim tune")
SERVERS = ("chaos", "serve reasoner", "serve witness")
TLS_CLIENTS = ("calibrate", "chaos", "load probe", "load run", "predict", "serve fuzz",
               "serve reasoner")

# option: [(commands, (kind, type, default, metavar, choices, help)), ...]
# Rows of one option differ only in the default and the "(default ...)" part of the help,
# except the options in HELP_SAYS_WHAT.
SHARED: dict[str, list[tuple[tuple[str, ...], tuple[Any, ...]]]] = {
    "scenario": [
        (("load probe", "load run", "predict", "sim capacity", "sim fleet-size",
          "sim metastability", "sim run", "sim show", "sim storm", "sim sweep", "sim tune"),
         ("store", None, None, "SCENARIO", None,
          "scenario file path or preset name; preset:NAME always means the preset "
          "(see 'rtalab sim presets')"))],
    "--scenario": [
        (("chaos",), ("store", None, None, "FILE|PRESET", None,
                      "scenario whose [network] section gives the rates and outages "
                      "(file path or preset name)")),
        (("serve reasoner",), ("store", None, None, "FILE|PRESET", None,
                               "scenario whose [reasoner] section drives the behaviour "
                               "(file path or preset name)"))],
    "--set": [
        (("chaos", "load probe", "load run", "predict", "serve reasoner", "sim capacity",
          "sim fleet-size", "sim metastability", "sim run", "sim show", "sim storm",
          "sim sweep", "sim tune"),
         ("extend", None, [], "KEY.PATH=VALUE", None,
          "override a scenario value (TOML syntax, e.g. run.seed=7 "
          "network.uplink.loss=0.05); repeatable"))],
    "--seed": [
        (("chaos", "sim capacity", "sim fleet-size", "sim metastability", "sim run",
          "sim storm", "sim sweep", "sim tune"),
         ("store", "int", None, None, None, "root seed (default: the scenario's run.seed)")),
        (("bench fleet", "bench sim", "predict"),
         ("store", "int", 1, None, None, "root seed (default 1)"))],
    "--quiet": [
        (("load probe", "load run", "load worker", "predict"),
         ("flag", None, False, None, None, "no progress lines")),
        (("serve fuzz", "sim storm", "sim sweep", "sim tune", "sim capacity",
          "sim metastability"),
         ("flag", None, False, None, None, "no progress bar")),
        (("sim run",), ("flag", None, False, None, None,
                        "no progress bar or table; print only the run folder")),
        (("report",), ("flag", None, False, None, None,
                       "no progress line; print only the report's path")),
        (("results prune",), ("flag", None, False, None, None, "no table")),
        (("calibrate",), ("flag", None, False, None, None, "print only the output path")),
        (("check",), ("flag", None, False, None, None, "print nothing (exit status only)"))],
    "--results": [
        (("bench all", "load probe", "load run", "load worker", "sim run"),
         ("store", "Path", "results", "DIR", None,
          "folder under which the new run folder <UTC time>-<kind>-<name>-s<seed> is created "
          "(default results)"))],
    "--junit": [
        (("check", "load run", "sim capacity", "sim tune"),
         ("store", "Path", None, "FILE", None,
          "also write the verdict as JUnit XML (one test case per rule or SLO) for CI; the "
          "exit status stays the pass/fail"))],
    "--replications": [
        (("sim run",), ("store", "positive_int", None, "R", None,
                        "independent replications (default: run.replications)")),
        (("sim sweep",), ("store", "positive_int", None, "R", None,
                          "replications per point (default: run.replications)")),
        (("sim storm",), ("store", "positive_int", None, "R", None,
                          "replications per strategy (default: run.replications)")),
        (("sim metastability",), ("store", "positive_int", 4, "R", None,
                                  "replications of a simulated cell (>= 2; default 4)")),
        (("bench metastability",), ("store", "positive_int", 3, "R", None,
                                    "replications of a simulated cell (default 3)")),
        (("sim capacity",), ("store", "positive_int", 3, "R", None,
                             "replications per probe (>= 2; default 3)")),
        (("sim tune",), ("store", "positive_int", 2, "R", None,
                         "replications per trial (default 2)")),
        (("predict",), ("store", "positive_int", 10, None, None,
                        "simulator replications per case (default 10)"))],
    # the storm detector's options (sim/answers/storm.py Detector)
    "--fraction": [(("sim metastability", "sim storm"), (
        "store", "float", 0.9, None, None,
        "recovered = goodput >= this share of offered load (default 0.9)"))],
    "--hold": [(("sim metastability", "sim storm"), (
        "store", "float", 60.0, "S", None,
        "... within S seconds after the trigger ends (default 60)"))],
    "--window": [(("sim metastability", "sim storm"), (
        "store", "float", 10.0, "S", None, "sliding window of the rates (default 10 s)"))],
    "--from": [(("calibrate", "predict"),
             ('store', 'telemetry_source', None, 'SOURCE', None,
              "calibrate from telemetry: prometheus:URL_OR_FILE (a /metrics URL "
              "scraped over --window, or a file of text exposition) or otlp:FILE (OTLP/JSON "
              "metrics lines, as OpenTelemetry's file exporter writes them)"))],
    "--every": [(("calibrate", "predict"),
             ('store', 'non_negative', 5.0, 'S', None,
              "prometheus URL: seconds between scrapes (default 5)"))],
    "--map": [(("calibrate", "predict"),
             ('store', None, None, 'FILE.toml', None,
              "metric names of a server with its own ([metrics] role = name; "
              "docs/calibration.md)"))],
    "--save": [(("calibrate", "predict"),
             ('store', None, None, 'FILE', None,
              "prometheus URL: write the scrapes (timestamped exposition) here"))],
    "--noise-z": [(("sim metastability", "sim storm"), (
        "store", "float", 3.0, "Z", None,
        "Poisson noise allowance in standard errors (rtalab.sim.shared.recovery; default 3)"))],
    # the simulator's commands that run many simulations
    "--processes": [
        (("sim run", "sim sweep", *SIM_ANSWERS), ("store", "positive_int", None, "N", None,
                                       "local worker processes (default: every usable CPU)"))],
    "--dask": [
        (("sim run", "sim sweep", *SIM_ANSWERS),
         ("store", None, None, "ADDRESS", None,
          "tcp://HOST:8786 (an existing Dask scheduler) or local[:N] (start a LocalCluster of "
          "N single-threaded worker processes)"))],
    "--out": [
        (("sim sweep", "sim fleet-size", *SIM_ANSWERS),
         ("store", "Path", None, "DIR", None,
          "the output folder (default: a new results/<time>-<command>-<name>-s<seed>)"))],
    "--keep-records": [
        (SIM_ANSWERS, ("flag", None, False, None, None,
                       "keep every probe's record tables (by default only what the answer "
                       "and its report need stays: summaries, tables, plots)"))],
    "--no-plots": [
        (("calibrate", "load run", "sim run", "sim sweep"),
         ("flag", None, False, None, None, "skip the PNG plots"))],
    # the servers
    "--host": [
        (("serve reasoner", "serve witness"),
         ("store", None, "127.0.0.1", None, None, "bind address (default 127.0.0.1)"))],
    "--port": [
        (("serve reasoner",), ("store", "port", 8000, None, None, "TCP port (default 8000)")),
        (("serve witness",), ("store", "port", 8091, None, None, "TCP port (default 8091)"))],
    "--log-level": [
        (("chaos", "serve witness"),
         ("store", None, "warning", None, LOG_LEVELS, "server log level (default warning)")),
        (("serve reasoner",),
         ("store", None, "info", None, LOG_LEVELS, "server log level (default info)"))],
    # TLS (loadtests/common/tls.py): what a server presents and requires ...
    "--tls-cert": [(SERVERS, ("store", "pem_file", None, "FILE", None,
                              "serve HTTPS with this certificate chain (PEM; default: plain "
                              "HTTP)"))],
    "--tls-key": [(SERVERS, ("store", "pem_file", None, "FILE", None,
                             "private key (PEM) of --tls-cert (default: in the --tls-cert "
                             "file)"))],
    "--tls-client-ca": [(SERVERS, ("store", "pem_file", None, "FILE", None,
                                   "require client certificates signed by these CAs (PEM; "
                                   "mutual TLS)"))],
    # ... and what a client trusts and presents
    "--ca": [(TLS_CLIENTS, ("store", "pem_file", None, "FILE", None,
                            "CA certificates (PEM) that sign the servers' certificates "
                            "(default: the system's CAs)"))],
    "--client-cert": [(TLS_CLIENTS, ("store", "pem_file", None, "FILE", None,
                                     "client certificate (PEM) presented to the servers "
                                     "(mutual TLS)"))],
    "--client-key": [(TLS_CLIENTS, ("store", "pem_file", None, "FILE", None,
                                    "private key (PEM) of --client-cert (default: in the "
                                    "--client-cert file)"))],
    "--insecure": [(TLS_CLIENTS, ("flag", None, False, None, None,
                                  "do NOT verify server certificates (a loud warning in the "
                                  "terminal and the verdict; tests of a throwaway setup "
                                  "only)"))],
    # the deployment a load command drives, and the Reasoner's options load run passes on
    "--target": [
        (("load probe", "load run"),
         ("store", "http_url", None, "URL", None,
          "base URL of the deployment to test (default: start the reference Reasoner and "
          "witness here)"))],
    "--token": [
        (("load probe", "load run"),
         ("append", None, [], None, None,
          "bearer token for --target (repeatable: calls alternate between the principals, so "
          "per-call turnIds are reused across principals)"))],
    "--witness": [
        (("load probe", "load run"),
         ("store", "http_url", None, "URL", None,
          "with --target: the witness the deployment sends its tool calls to"))],
    "--workers": [
        (("load probe", "load run"), ("store", "positive_int", None, None, None,
                                      "embedded Reasoner worker processes (default 1)")),
        (("predict",), ("store", "positive_int", 2, None, None,
                        "embedded Reasoner worker processes (default 2)"))],
    # an outage on the run's own clock (issue 28): the same in both worlds
    "--outage-at": [(("sim run", "load run"), (
        "store", "non_negative", None, "S", None,
        "an outage starting S s into the run (the run's own clock)"))],
    "--outage-for": [(("sim run", "load run"), (
        "store", "non_negative", 10.0, "S", None, "with --outage-at: its length (default 10)"))],
    "--outage-kind": [(("sim run", "load run"), (
        "store", None, "blackhole", "K", ("blackhole", "reset", "reasoner-down", "loss"),
        "with --outage-at: blackhole (packets vanish, connections hang until a timer), reset "
        "(connections cut at once), reasoner-down (connection refused) or loss (each message "
        "lost with --outage-loss) (default blackhole)"))],
    "--outage-loss": [(("sim run", "load run"), (
        "store", "probability", 0.5, "P", None,
        "with --outage-kind loss: the loss probability (default 0.5)"))],
    "--duration": [
        (("load run",), ("store", "non_negative", None, "S", None,
                         "seconds of call arrivals (default: [run].duration_s)")),
        (("predict",), ("store", "non_negative", 60.0, "S", None,
                        "seconds of call arrivals (default 60)"))],
    "--drain": [
        (("load run",), ("store", "non_negative", None, "S", None,
                         "at most this long for open calls to end (default: [run].drain_s)")),
        (("predict",), ("store", "non_negative", 20.0, "S", None,
                        "at most this long for open calls to end (default 20)"))],
    "--dedup": [
        (("load run",), ("store", None, None, "URL", None,
                         "dedup store: sqlite:///PATH, redis://HOST:PORT[/DB] or memory "
                         "(default: SQLite in the run folder)")),
        (("serve reasoner",), ("store", None, "", "URL", None,
                               "dedup store: sqlite:///PATH, redis://HOST:PORT[/DB] or memory "
                               "(default: a SQLite file per port in the temp directory)"))],
    "--dedup-mode": [
        (("load run", "serve reasoner"),
         ("store", None, None, None, ("request-guid", "turn", "none"),
          "override [reasoner].dedup"))],
    "--unsafe-bug": [
        (("load run", "serve reasoner"),
         ("append", None, [], "BUG", UNSAFE_BUGS,
          "TEST ONLY: plant one class of bug in the Reasoner (a negative control of the "
          "release gate): " + ", ".join(UNSAFE_BUGS)))],
    # rtalab results list | prune
    "--root": [
        (("results list", "results prune"),
         ("store", None, "results", "DIR", None, "the results folder (default: results)"))],
    "--kind": [
        (("results list", "results prune"),
         ("store", None, None, None, ("run", "load", "sweep", "capacity", "tune", "storm",
                                      "unfinished", "other", "file"),
          "only items of this kind"))],
    "--older-than": [
        (("results list", "results prune"),
         ("store", "parse_duration", None, "DURATION", None,
          "only items last changed longer ago than this (30m, 12h, 7d, 2w)"))],
    "--unfinished": [
        (("results list", "results prune"),
         ("flag", None, False, None, None,
          "only folders without results (failed, interrupted, running)"))],
}

# one declaration, but the help says something of the command by design
HELP_SAYS_WHAT = {
    "--quiet": "what the command leaves out",
    "--scenario": "what the command takes from the scenario",
    "--replications": "what one replication is of (a run, a point, a probe ...)",
}

# (option, command): why this is another option that has the same name
DISTINCT: dict[tuple[str, str], str] = {
    ("--seed", "serve witness"): "the seed of the witness's fault draws (it has no scenario)",
    ("--seed", "serve fuzz"): "the fuzz generator's seed (>= 1)",
    ("--out", "report"): "the HTML file written, not a folder",
    ("--out", "calibrate"): "the calibrated TOML file written, not a folder",
    ("--out", "predict"): "the results root (what --results is elsewhere; kept as it was)",
    ("--results", "serve fuzz"): "the results root, a plain string (loadtests/fuzz/cli.py)",
    ("--processes", "load run"): "Locust processes, not simulator processes",
    ("--token", "serve reasoner"): "a token the server accepts (TOKEN=PRINCIPAL), not one a "
                                   "client sends",
    ("--witness", "serve reasoner"): "the witness the server calls, checked with its own "
                                     "message",
    ("--workers", "serve reasoner"): "the server's own uvicorn workers (default 1, always "
                                     "set), not the embedded Reasoner's",
    ("--scenario", "bench metastability"): "the preset the benchmark maps",
    ("--processes", "bench metastability"): "local processes of the benchmark's maps",
    ("--strategies", "sim metastability"): "strategies mapped side by side (default two)",
    ("--strategies", "sim storm"): "strategies run through the trigger (default all)",
    ("--duration", "bench sweep"): "simulated seconds per point of the benchmark",
    ("--warmup", "predict"): "the warm-up of predict's runs and simulations",
    ("--warmup", "serve bench"): "untimed turns before the benchmark's rounds",
    ("--slo", "sim capacity"): "the SLO the capacity search must meet (checked later)",
    ("--slo", "load run"): "a release gate on the run's summary (checked when parsed)",
    ("--slo", "sim fleet-size"): "an SLO the fleet mean field must meet (its own metrics)",
    ("--binding", "load run"): "sse, ws or both",
    ("--binding", "predict"): "sse or ws (each load run has one binding)",
    ("--binding", "load bench"): "which Live users the benchmark measures",
    ("--chaos", "load run"): "default: on when any [network] key is not zero",
    ("--chaos", "predict"): "default: on when --outage > 0",
    ("--outage", "chaos"): "an outage window START:DURATION[:DIR] (repeatable)",
    ("--outage", "predict"): "the seconds of the predicted outage",
    ("--test-hooks", "serve reasoner"): "the Reasoner's test hooks",
    ("--test-hooks", "serve witness"): "the witness's POST /reset",
    ("--rows", "check"): "--bench: rows of the checker's benchmark",
    ("--rows", "bench calibrate"): "rows of the calibration benchmark",
    ("--repeat", "check"): "--bench: repetitions of the checker's benchmark",
    ("--repeat", "bench calibrate"): "repetitions of the calibration benchmark",
    ("--repeats", "bench sim"): "timed runs of the simulator benchmark",
    ("--repeats", "bench sweep"): "timed sweeps per executor",
    ("--turns", "bench sim"): "simulated turns per timed run",
    ("--turns", "serve bench"): "timed HTTP turns per store and round",
    ("--turns", "bench grpc"): "timed turns per binding and round",
    ("--rounds", "bench grpc"): "alternating rounds of the gRPC server benchmark",
    ("--concurrency", "bench grpc"): "closed-loop users of the gRPC server benchmark",
    ("--concurrency", "serve bench"): "keep-alive connections of the server benchmark",
    ("--rounds", "load bench"): "alternating rounds of the Live-user benchmark",
    ("--rounds", "serve bench"): "interleaved rounds of the server benchmark",
    ("--rounds", "bench report"): "timed reports of the report benchmark",
    ("--no-pin", "load bench"): "its own benchmark's CPU pinning",
    ("--no-pin", "serve bench"): "its own benchmark's CPU pinning (stores pin=False)",
    ("run_dir", "check"): "the folder judged (optional with --bench)",
    ("run_dir", "load summarize"): "the folder whose gathered ledger is summarised",
    ("runs", "compare"): "any run folders (>= 2)",
    ("runs", "calibrate"): "load-run folders",
    ("--window", "calibrate"): "seconds of Prometheus scrapes, not a sliding window of rates",
    ("--window", "predict"): "seconds of Prometheus scrapes, not a sliding window of rates",
}

KINDS = {argparse._HelpAction: "help", argparse._StoreAction: "store",
         argparse._StoreTrueAction: "flag",
         argparse._StoreFalseAction: "flag-off", argparse._AppendAction: "append",
         argparse._ExtendAction: "extend", argparse.BooleanOptionalAction: "on/off"}


def describe(a: argparse.Action) -> tuple[Any, ...]:
    """(kind, type, default, metavar, choices, help) of an option, comparable with the table."""
    default = str(a.default) if a.default is not None and a.type is not None and \
        getattr(a.type, "__name__", "") == "Path" else a.default
    return (KINDS[type(a)], getattr(a.type, "__name__", None), default, a.metavar,
            tuple(a.choices) if a.choices is not None else None, a.help)


def options_by_name(parsers: dict[str, argparse.ArgumentParser]) -> dict[str, dict[str, Any]]:
    """{option name: {command: its action}}: the first long flag, or a positional's dest."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for path, p in parsers.items():
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction | argparse._HelpAction |
                          argparse._VersionAction) or a.help == argparse.SUPPRESS:
                continue
            name = next((s for s in a.option_strings if s.startswith("--")), a.dest)
            out[name][path] = a
    return out


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    parser, failed = build_parser()  # no command: every plugin is loaded
    assert failed == {}
    return commands(parser)


@pytest.fixture(scope="module")
def options(parsers) -> dict[str, dict[str, Any]]:
    return options_by_name(parsers)


def test_every_shared_option_is_as_the_table_says(options) -> None:
    problems = []
    for name, rows in SHARED.items():
        listed = set()
        for cmds, expected in rows:
            for cmd in cmds:
                listed.add(cmd)
                action = options[name].get(cmd)
                if action is None:
                    problems.append(f"{cmd}: has no {name}")
                elif describe(action) != expected:
                    problems.append(f"{cmd} {name}: {describe(action)} != {expected}")
        for cmd in set(options[name]) - listed:
            if (name, cmd) not in DISTINCT:
                problems.append(f"{cmd} {name}: not in the table (shared? distinct?)")
    assert not problems, "\n".join(problems)


def test_an_option_name_two_commands_have_is_in_the_table(options) -> None:
    """A new command that adds an option by a name another command has must say which."""
    for name, cmds in options.items():
        if len(cmds) < 2:
            continue
        known = {c for cmds_, _ in SHARED.get(name, []) for c in cmds_}
        unknown = [c for c in cmds if c not in known and (name, c) not in DISTINCT]
        assert not unknown, f"{name} of {unknown} is in neither SHARED nor DISTINCT"
    assert all(name in options and cmd in options[name] for name, cmd in DISTINCT), \
        [k for k in DISTINCT if k[0] not in options or k[1] not in options[k[0]]]


def _without_default(help: str) -> str:
    return re.sub(r";? ?\(?default:? [^);]*\)?", "", help).strip()


def test_shared_options_differ_only_in_their_default() -> None:
    for name, rows in SHARED.items():
        kinds = {(kind, type_, metavar, choices) for _, (kind, type_, _, metavar, choices, _) in
                 rows}
        assert len(kinds) == 1 or name == "--replications", (name, kinds)  # predict: no R
        helps = {_without_default(row[-1]) for _, row in rows}
        assert len(helps) == 1 or name in HELP_SAYS_WHAT, (name, helps)


def test_the_python_m_entry_points_have_the_commands_options(parsers) -> None:
    from rtalab.loadtests.chaos.cli import add_arguments as chaos_arguments
    from rtalab.loadtests.reasoner.cli import add_reasoner_arguments
    from rtalab.loadtests.witness.cli import add_witness_arguments

    for cmd, add in (("serve reasoner", add_reasoner_arguments),
                     ("serve witness", add_witness_arguments), ("chaos", chaos_arguments)):
        p = OneLineParser(prog="x")
        add(p)
        assert [describe(a) for a in p._actions] == [describe(a) for a in parsers[cmd]._actions]


# --------------------------------------------------------------------------- the helpers


def test_default_text_and_help() -> None:
    assert [default_text(v) for v in (1_000_000, 10_000, 8091, 0.9, 60.0, 1e-3, "sse", (500, 503),
                                      None, False, [], ())] == [
        "1,000,000", "10,000", "8091", "0.9", "60", "0.001", "sse", "500,503",
        None, None, None, None]
    assert with_default("TCP port", 8000) == "TCP port (default 8000)"
    assert with_default("per probe (>= 2; {default})", 3) == "per probe (>= 2; default 3)"
    assert with_default("workers", None, shown=1) == "workers (default 1)"
    assert with_default("seed", None, shown="the scenario's run.seed") == \
        "seed (default: the scenario's run.seed)"
    assert with_default("a flag", False) == "a flag"
    assert with_default("10 % of it", "5%") == "10 % of it (default 5%%)"  # argparse's %
    with pytest.raises(ValueError, match="no default"):
        with_default("({default})", None)


def test_opt_declares_as_help_shows_it() -> None:
    p = OneLineParser(prog="x")
    opt(p, "--turns N", "simulated turns", int, 100_000)
    opt(p, "--quiet/-q", "no bar", action="store_true")
    opt(p, "runs RUN", "folders", nargs="+")
    a = p.parse_args(["-q", "r1", "r2"])
    assert (a.turns, a.quiet, a.runs) == (100_000, True, ["r1", "r2"])
    text = p.format_help()
    assert "--turns N" in text and "simulated turns (default 100,000)" in text
    assert "--quiet, -q" in text


def test_an_option_changes_only_its_default() -> None:
    workers = Option("--workers", "worker processes", int, shown=1)
    p = OneLineParser(prog="x")
    workers.add(p)
    q = OneLineParser(prog="y")
    workers.add(q, default=2)
    assert p.get_default("workers") is None and q.get_default("workers") == 2
    assert "worker processes (default 1)" in p.format_help()
    assert "worker processes (default 2)" in q.format_help()
    with pytest.raises(TypeError, match="only the default"):
        workers.add(OneLineParser(prog="z"), help="another meaning")


def test_every_command_still_parses_under_python_OO() -> None:
    """``python -OO`` strips the docstrings the commands' help comes from: rtalab must still
    run (without help texts), not refuse to build its parser."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-OO", "-m", "rtalab.sim.cli", "load", "run", "--help"],
                       capture_output=True, text=True, check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--duration" in p.stdout
