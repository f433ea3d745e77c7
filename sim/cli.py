"""The ``rtalab`` command: ``rtalab sim run|presets|show|bench`` plus commands added by plugins.

Other packages add top-level commands through the entry-point group
``rtalab.commands``; each entry point is a ``register(subparsers)`` function
that adds one sub-parser with ``set_defaults(func=callable(args) -> int)``.  A
plugin that fails to import never breaks ``rtalab sim``: it is skipped, with a
one-line warning only when the user asked for that command.

Every mistake a user can make (a broken scenario, a missing file, a bad
``--set``, an unwritable ``--out``, bad arguments) exits with status 2 and one
line on stderr, never a traceback.  Ctrl-C exits with 130 and leaves the run
folder marked ``interrupted``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rtalab.sim.answers.cli import add_parsers as add_answer_parsers
from rtalab.sim.calibrate.cli import add_parser as add_calibrate_parser
from rtalab.sim.config import ConfigError
from rtalab.sim.shared import interrupt, results
from rtalab.sim.shared.argtypes import (  # UsageError re-exported: plugins raise
                                          # rtalab.sim.cli.UsageError
    EXIT_USAGE,
    NO_PLOTS,
    OUT_DIR,
    OneLineParser,
    UsageError,
    add_command,
    add_executor,
    add_group,
    add_outage,
    add_quiet,
    add_results_root,
    add_scenario,
    add_seed,
    flag,
    help_of,
    opt,
    outage_overrides,
    positive_int,
    repeatable,
)
from rtalab.sim.shared.manage import add_parser as add_results_parser
from rtalab.sim.shared.results import package_versions

PROG = "rtalab"
PLUGIN_GROUP = "rtalab.commands"
CORE_COMMANDS = ("sim", "report", "compare", "results", "calibrate")
EXIT_INTERRUPTED = 130


def _err(message: str) -> None:
    """Print one ``rtalab: ...`` line on stderr."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- sim commands


def _load(ref: str, overrides: Sequence[str] | None) -> Any:
    """Load a scenario file or preset with ``--set`` overrides (raises ConfigError)."""
    # lazy: +87 ms (9 modules) off rtalab's start-up
    from rtalab.sim.scenario import load_scenario_args

    return load_scenario_args(ref, overrides)


def cmd_presets(args: argparse.Namespace) -> int:
    """list the shipped scenarios"""
    # lazy: +59 ms (9 modules) off rtalab's start-up
    from rtalab.sim.scenario import load_scenario, preset_names

    names = preset_names()
    width = max((len(n) for n in names), default=0)
    for name in names:
        s = load_scenario(name)
        print(f"{name:<{width}}  {s.description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """print the resolved scenario as TOML"""
    # lazy: +70 ms (9 modules) off rtalab's start-up
    from rtalab.sim.scenario import dumps

    scenario = _load(args.scenario, args.set)
    sys.stdout.write(dumps(scenario))
    return 0


def _checked(scenario: Any, overrides: dict[str, Any]) -> Any:
    """``scenario.with_overrides(overrides)``; a scenario error is a usage error."""
    try:
        return scenario.with_overrides(overrides)
    except ConfigError as e:
        raise UsageError(f"scenario error: {e}") from None


def cmd_run(args: argparse.Namespace) -> int:
    """run a scenario and write a results folder

    Simulate SCENARIO (replications with CIs) and write <results>/<UTC time>-sim-<name>-s<seed>/.
    """
    scenario = _load(args.scenario, args.set)
    extra: dict[str, Any] = {}
    if args.seed is not None:
        extra["run.seed"] = args.seed
    if args.replications is not None:
        extra["run.replications"] = args.replications
    extra.update(outage_overrides(args, scenario.network.outages))
    if extra:
        scenario = _checked(scenario, extra)

    # lazy: +98 ms (19 modules) off rtalab's start-up
    from rtalab.sim.shared.progress import progress_bar, should_show
    from rtalab.sim.stream import replication_plan, seeds_meta

    if args.split == "replicas":
        # lazy: +673 ms (pandas, pyarrow) off rtalab's start-up
        from rtalab.sim.fleetsplit import SplitError, check_split

        try:  # before the folder is made
            check_split(scenario)
        except SplitError as e:
            raise UsageError(str(e)) from None
    seed, reps = scenario.run.seed, scenario.run.replications
    try:
        folder = results.RunLifecycle.new(args.out, "sim", scenario_name=scenario.name, seed=seed)
        run_dir = folder.path
        meta = results.collect_meta(
            kind="sim", scenario=scenario, seed=seed, replications=reps,
            argv=[PROG, *args.rtalab_argv],
            extra={"scenario_ref": args.scenario, "overrides": list(args.set),
                   **({"split": "replicas"} if args.split == "replicas" else {})},
        )
        folder.start(scenario, meta)
    except OSError as e:
        raise UsageError(f"cannot write results under {args.out}: {e.strerror or e}") from None

    label = f"{scenario.name} s{seed} ×{reps}"
    try:
        with folder.guard():
            plan = replication_plan(seed, reps)
            meta["replication_seeds"] = seeds_meta(plan)
            try:
                with progress_bar(label, enabled=should_show(args.quiet)) as progress:
                    summary = _run_plan(scenario, plan, run_dir, args, progress)
                # lazy: +504 ms (pandas, pyarrow) off rtalab's start-up
                from rtalab.sim.shared.agreement import one_run_intervals

                # where ONE run of this length and load falls (not the CI of the mean)
                summary["one_run_interval"] = one_run_intervals(summary)
                results.write_summary(run_dir, summary)
                folder.finish()
            except OSError as e:
                raise UsageError(f"cannot write results to {run_dir}: {e.strerror or e}") from None
    except KeyboardInterrupt:
        _err(f"interrupted; partial run left in {run_dir} (status: interrupted)")
        return EXIT_INTERRUPTED

    if args.quiet:
        print(run_dir)
    else:
        print_summary(summary, run_dir, meta)
    return 0


def _run_plan(scenario: Any, plan: Any, run_dir: Path, args: argparse.Namespace,
              progress: Any) -> dict[str, Any]:
    """The replications (or, ``--split replicas``, a fleet's replicas) here, or as independent
    parts on ``--processes`` / ``--dask``."""
    # lazy: +693 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.fleetsplit import SplitError
    from rtalab.sim.stream import run_streaming

    split = args.split
    try:
        if args.processes is None and args.dask is None:
            return run_streaming(scenario, plan, run_dir, plots=not args.no_plots,
                                 progress=progress, split=split)
        # lazy: +96 ms (28 modules) off rtalab's start-up
        from rtalab.sim.sweep import SweepError, make_executor

        try:
            with make_executor(args.processes, args.dask) as ex:
                return run_streaming(scenario, plan, run_dir, plots=not args.no_plots,
                                     progress=progress, executor=ex, split=split)
        except SweepError as e:
            raise UsageError(str(e)) from None
    except SplitError as e:  # a call of a part reached the Reasoner twice (rtalab.sim.fleetsplit)
        raise UsageError(str(e)) from None


# --------------------------------------------------------------------------- summary table

def print_summary(summary: dict[str, Any], run_dir: Path, meta: dict[str, Any]) -> None:
    """Print the key metrics with 95 % CIs and the run folder (rich table on stdout)."""
    # lazy: +55 ms (rich) off rtalab's start-up
    from rich.console import Console
    from rich.table import Table

    reps = meta.get("replications", 1)
    table = Table(title=f"{meta.get('scenario')}  seed {meta.get('seed')}  "
                        f"{reps} replication{'s' * (reps != 1)}  "
                        f"({meta.get('wall_time_s') or 0:.1f} s wall)",
                  title_justify="left", box=None, pad_edge=False)
    console = Console(soft_wrap=True)
    if not console.is_terminal:  # a file or a pipe: room for the four columns
        console = Console(soft_wrap=True, width=120)
    intervals = summary.get("one_run_interval") or {}
    shown = bool(intervals) and console.width >= 100
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("95 % CI over replications", justify="right")
    if shown:
        table.add_column("90 % one-run interval", justify="right")
    # lazy: +634 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.shared.fmt import summary_rows

    for row in summary_rows(summary, intervals=shown):
        table.add_row(*row)
    console.print(table)
    if intervals and not shown:
        console.print("one_run_interval: in summary.json (a terminal of >= 100 columns shows "
                      "it here)", highlight=False)
    elif intervals:
        n = max(iv["n"] for iv in intervals.values())
        how = (f"order statistics of {n} replications" if n >= 19 else
               f"Student's t over {n} replications, times on a log scale")
        console.print(f"one_run_interval: where ONE run of this length and load falls, 90 % of "
                      f"the time ({how}; summary.json)", highlight=False)
    console.print(f"results: {run_dir}", highlight=False)


def cmd_sweep(args: argparse.Namespace) -> int:
    """run a grid of scenario variants (local cores or Dask)

    Run every point of a factorial (and zipped) grid over scenario keys; each point is a run folder
    under DIR/points/, the tidy table is DIR/sweep.csv + .parquet. Rerunning into the same DIR skips
    finished points.
    """
    # lazy: +110 ms (28 modules) off rtalab's start-up
    from rtalab.sim import sweep

    scenario = _load(args.scenario, args.set)
    reps = args.replications or scenario.run.replications
    seed = scenario.run.seed if args.seed is None else args.seed
    try:
        points = sweep.expand_grid(sweep.parse_axes(args.grid), sweep.parse_axes(args.zip))
        sweep.resolve_points(scenario, points, reps)  # every point valid before anything runs
        if args.dask is not None:
            sweep.parse_dask(args.dask)
    except sweep.SweepError as e:
        raise UsageError(str(e)) from None
    try:
        folder = results.RunLifecycle.new_or_at(args.out, "results", "sweep",
                                             scenario_name=scenario.name, seed=seed)
        out = folder.path
    except OSError as e:
        raise UsageError(f"cannot write the sweep folder {args.out}: {e.strerror or e}") from None
    argv = [PROG, *args.rtalab_argv]
    # meta.json is written when the sweep ends (sweep.json holds the sweep meanwhile)
    folder.keep(results.collect_meta(kind="sweep", scenario=scenario, seed=seed,
                                     replications=reps, argv=argv,
                                     extra={"scenario_ref": args.scenario,
                                            "overrides": list(args.set),
                                            "grid": args.grid, "zip": args.zip,
                                            "points": len(points)}))
    try:  # a SweepError (e.g. --out holds another sweep) leaves the folder as it was
        with folder.guard(failures=(sweep.PointFailed,)), \
                sweep.make_executor(args.processes, args.dask) as ex:
            summaries = sweep.run_points(scenario, points, replications=reps, root_seed=seed,
                                         executor=ex, out_dir=out, progress=not args.quiet,
                                         plots=not args.no_plots, argv=argv)
    except sweep.SweepError as e:
        raise UsageError(str(e)) from None
    except (sweep.PointFailed, KeyboardInterrupt) as e:
        interrupted = isinstance(e, KeyboardInterrupt)
        again = ("rerun the same command" if args.out is not None
                 else f"rerun the same command with --out {out}")
        _err(f"{'interrupted' if interrupted else e}; finished points are kept in {out}: "
             f"{again} to {'finish the sweep' if interrupted else 'retry'}")
        return EXIT_INTERRUPTED if interrupted else 1
    folder.finish()
    if not args.quiet:
        print_sweep(points, summaries)
    print(f"{len(summaries)} points × {reps} replications: {out / sweep.SWEEP_CSV}")
    return 0


SWEEP_METRICS = ("success_rate", "caller_completion_s.p99", "completion_s.p99",
                 "load_amplification", "goodput_turns_per_s")


def print_sweep(points: Sequence[dict[str, Any]], summaries: Sequence[dict[str, Any]],
                limit: int = 40) -> None:
    """Key metrics (means with 95 % CIs) per point, the first ``limit`` points, one card each
    (sim/shared/cards.py: full names, units, 80 columns)."""
    # lazy: +584 ms (pandas, pyarrow) off rtalab's start-up
    import pandas as pd

    from rtalab.sim.shared.cards import frame_cards, render
    from rtalab.sim.shared.summary import unit

    rows = []
    for i, (p, s) in enumerate(zip(points[:limit], summaries[:limit], strict=True)):
        row: dict[str, Any] = {"point": i}
        row.update({f"param.{k}": v for k, v in p.items()})
        ms = s.get("metrics", {})
        for m in SWEEP_METRICS:
            mm = ms.get(m) or {}
            row[m], row[f"{m}.ci_low"], row[f"{m}.ci_high"] = (mm.get("mean"), mm.get("ci_low"),
                                                               mm.get("ci_high"))
        rows.append(row)
    if rows:
        print(render(frame_cards(pd.DataFrame(rows), lambda r: f"point {int(r['point'])}", unit,
                                 skip=("point",)),
                     "key metrics per point (means [95 % CI]; all metrics in sweep.csv)"))
    if len(points) > limit:
        print(f"... and {len(points) - limit} more points")


def _num(v: Any) -> str:
    """A number in 4 significant digits ("–" if undefined)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{float(v):.4g}"


def _load_runs(paths: Sequence[Path]) -> list[Any]:
    # lazy: +649 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.shared.compare import RunFolderError, load_run

    try:
        return [load_run(p) for p in paths]
    except RunFolderError as e:
        raise UsageError(str(e)) from None


def cmd_compare(args: argparse.Namespace) -> int:
    """compare results folders (runs, sweep points, load runs)

    Metrics of RUN_A RUN_B [RUN...] side by side with 95 % CIs; each run after the first is compared
    with the first (Welch CI of the difference over replications; ≠ marks differences significant
    after Holm).
    """
    # lazy: +602 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.shared.compare import RunFolderError, compare_table, differing, plot_compare

    if len(args.runs) < 2:
        raise UsageError("compare needs at least two run folders")
    runs = _load_runs(args.runs)
    table = compare_table(runs)
    if not args.no_plot:
        png = args.png or Path("results") / (
            dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-compare.png")
        try:
            plot_compare(runs, png)
        except OSError as e:
            raise UsageError(f"cannot write {png}: {e.strerror or e}") from None
        except RunFolderError as e:
            raise UsageError(str(e)) from None
        print(f"plot: {png}", file=sys.stderr)
    if args.csv:
        sys.stdout.write(table.to_csv(index=False, lineterminator="\n"))
        return 0
    print_compare(table, runs)
    # lazy: +504 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.shared.fmt import metric_label

    for k in range(1, len(runs)):
        print_prediction(runs[0], runs[k], k)

    width = min(shutil.get_terminal_size().columns, 100)
    for k in range(1, len(runs)):
        flagged = [metric_label(m, with_unit=False) for m in differing(table, k)]
        print(textwrap.fill(f"[{k}] vs [0]: {len(flagged)} metric(s) differ: "
                            f"{'; '.join(flagged) or 'none'}", width=width,
                            subsequent_indent="    "))
    return 0


COMPARE_FOOTER = ("means over replications; difference = run − [0] with Welch's 95 % CI; "
                  "pp = percentage points; ≠ differs after Holm's correction over all metrics; "
                  "· its CI excludes 0 but it is not significant after the correction; "
                  "– not defined (e.g. one replication: no CI). All columns: --csv.")


def print_compare(table: Any, runs: Sequence[Any], width: int | None = None) -> None:
    """The comparison as a terminal table readable at 80 columns: labels with units, both
    point estimates, the difference with its CI and a marker, and a footer saying what the
    markers mean."""
    # lazy: +528 ms (pandas, pyarrow, rich) off rtalab's start-up
    from rich.console import Console
    from rich.table import Table

    from rtalab.sim.shared.fmt import fmt_diff, fmt_value, metric_label

    console = Console(width=width, soft_wrap=False)
    for k, run in enumerate(runs):
        console.print(f"[{k}] {run.label}", highlight=False, markup=False)
    out = Table(box=None, pad_edge=False, show_edge=False)
    out.add_column("metric", overflow="fold", ratio=3)
    for k in range(len(runs)):
        out.add_column(f"[{k}]", justify="right", no_wrap=True)
        if k:
            out.add_column(f"[{k}] − [0]", justify="right", overflow="fold")
    for name, rows in table.groupby("metric", sort=False):
        if rows["mean"].isna().all():
            continue
        cells = [metric_label(str(name))]
        for _, r in rows.iterrows():
            mean = None if r["mean"] != r["mean"] else r["mean"]
            cells.append(fmt_value(mean, str(name)))
            if r["run"]:
                mark = " ≠" if r["differs"] is True else (" ·" if r["ci_excludes_0"] is True
                                                          else "  ")
                d = r["diff"]
                if d != d or d is None:  # no replication values: the difference of the means
                    m0 = rows.iloc[0]["mean"]
                    d = (r["mean"] - m0) if (m0 == m0 and r["mean"] == r["mean"]) else None
                cells.append(fmt_diff(d, _nan_none(r["diff_ci_low"]),
                                      _nan_none(r["diff_ci_high"]), str(name)) + mark)
        out.add_row(*cells)
    console.print(out)
    console.print(COMPARE_FOOTER, highlight=False, markup=False)


def print_prediction(ref: Any, other: Any, k: int) -> None:
    """A simulation against a load run: the prediction's verdict per metric (inside the 90 %
    one-run interval) and the accuracy targets (judged on runs >= 300 s); nothing otherwise."""
    # lazy: +585 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.shared.agreement import ACCURACY_MIN_RUN_S, is_load
    from rtalab.sim.shared.compare import prediction_rows
    from rtalab.sim.shared.fmt import fmt_value, metric_label

    if is_load(ref.summary) == is_load(other.summary):
        return
    rows = prediction_rows(ref, other)
    if not rows:
        return

    def f(v: float, name: str) -> str:
        return "∞" if v == math.inf else fmt_value(v, name)

    run_s, sim_s = rows[0]["run_s"], rows[0]["sim_run_s"]
    print("\n" + textwrap.fill(
        f"prediction (the simulation) against measurement (the load run), [{k}] and [0]: "
        "inside/outside the 90 % one-run prediction interval; accuracy p50 ±20 %, p95 ±30 %,"
        f" p99 ±35 % of the predicted mean (judged on runs >= {ACCURACY_MIN_RUN_S:g} s; this "
        f"one: {run_s:g} s)", 80))
    if sim_s is not None and run_s and abs(sim_s - run_s) > 1e-9:
        print(textwrap.fill(
            f"NOTE the simulated replications are {sim_s:g} s, the load run {run_s:g} s: the "
            "one-run interval is for a run as long as the replications", 80,
            initial_indent="  ", subsequent_indent="    "))
    for r in rows:
        name = r["metric"]
        inf = (f" (∞ in {r['infinite_replications']} of {r['replications']} replications: "
               "too many turns not served)") if r["infinite_replications"] else ""
        print(f"  {metric_label(name)}")
        print(textwrap.fill(
            f"predicted {f(r['predicted'], name)} [{f(r['low'], name)}, {f(r['high'], name)}]"
            f"  measured {f(r['measured'], name)}  {r['verdict']}  accuracy {r['accuracy']}{inf}",
            80, initial_indent="      ", subsequent_indent="        "))


def _nan_none(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and v != v) else v


def cmd_report(args: argparse.Namespace) -> int:
    """one self-contained HTML report of runs and sweeps

    Render run folders and sweep folders into one offline HTML file (every figure embedded).
    """
    # lazy: +706 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.report.render import render_report
    from rtalab.sim.shared.compare import RunFolderError

    out = args.out or Path("results") / (
        dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-report.html")
    try:
        html = render_report(args.paths, progress=not args.quiet)
    except RunFolderError as e:
        raise UsageError(str(e)) from None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(html, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
    if args.quiet:
        print(out)
    else:
        print(f"report: {out} (one self-contained file; open it in a browser)")
    return 0


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    opt(p, "runs RUN", "run folders (>= 2)", Path, nargs="+")
    flag(p, "--csv", "print the table as CSV on stdout")
    opt(p, "--png FILE", "the overlay plot (default: results/<UTC time>-compare.png)", Path)
    flag(p, "--no-plot", "no PNG")


def _report_arguments(p: argparse.ArgumentParser) -> None:
    opt(p, "paths PATH", "run folders and/or sweep folders", Path, nargs="+")
    opt(p, "--out FILE.html", "output file (default: results/<UTC time>-report.html)", Path)
    add_quiet(p, "no progress line; print only the report's path")


def add_results_parsers(subparsers: Any) -> None:
    """Register the top-level ``rtalab compare`` and ``rtalab report`` (any results folder)."""
    add_command(subparsers, "compare", cmd_compare, _compare_arguments)
    add_command(subparsers, "report", cmd_report, _report_arguments)

    add_results_parser(subparsers)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    add_seed(p)
    opt(p, "--replications R", "independent replications (default: run.replications)",
        positive_int)
    add_outage(p)
    add_executor(p)
    opt(p, "--split HOW", "what runs as independent parts: replications, or replicas (a fleet "
                          "whose replicas are independent: random routing, one request per "
                          "call; see docs/contracts.md)",
        choices=("replications", "replicas"), default="replications")
    add_results_root(p)
    NO_PLOTS.add(p)
    add_quiet(p, "no progress bar or table; print only the run folder")


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    repeatable(p, "--grid KEY.PATH=V1,V2,...",
               "a factorial axis (values are TOML); repeatable, axes are crossed")
    repeatable(p, "--zip KEY.PATH=V1,V2,...",
               "axes of equal length that vary together; repeatable")
    opt(p, "--replications R", "replications per point (default: run.replications)",
        positive_int)
    add_seed(p)
    add_executor(p)
    OUT_DIR.add(p)
    NO_PLOTS.add(p)
    add_quiet(p)


def add_sim_parser(subparsers: Any) -> None:
    """Register ``rtalab sim`` and its sub-commands."""
    sub = add_group(subparsers, "sim", help="simulate scenarios (SimPy)",
                    description="Simulate Live-layer clients and A2A Reasoners.")
    add_command(sub, "run", cmd_run, _run_arguments)
    add_command(sub, "sweep", cmd_sweep, _sweep_arguments)

    add_answer_parsers(sub)
    add_command(sub, "presets", cmd_presets)
    add_command(sub, "show", cmd_show, add_scenario)


# The benchmarks live in the ``benchmarks`` package (above sim; registered as ``rtalab bench``);
# the historical spellings under ``rtalab sim`` are kept as aliases, rewritten before parsing.
ALIASES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("sim", "bench"): ("bench", "sim"),
    ("sim", "sweep-bench"): ("bench", "sweep"),
}


def resolve_aliases(argv: Sequence[str]) -> list[str]:
    """``rtalab sim bench ...`` -> ``rtalab bench sim ...`` (see :data:`ALIASES`)."""
    words = list(argv)
    for old, new in ALIASES.items():
        if tuple(words[:len(old)]) == old:
            return [*new, *words[len(old):]]
    return words


# --------------------------------------------------------------------------- help texts

# one example per command, shown at the end of its --help (tests/test_cli_edges.py checks
# that every command has one)
EXAMPLES: dict[str, str] = {
    "": "rtalab sim run baseline",
    "sim": "rtalab sim run baseline --replications 5",
    "sim run": "rtalab sim run baseline --set network.uplink.loss=0.05 --replications 5",
    "sim sweep": "rtalab sim sweep baseline --grid reasoner.workers=4,8,16 --replications 3",
    "sim capacity": "rtalab sim capacity baseline --load workload.calls_per_s=1,2,4 "
                    "--knob reasoner.workers --slo 'turn_completion_p99_s<=4'",
    "sim tune": "rtalab sim tune baseline --minimize turn_completion_p99_s "
                "--constraint 'success_rate>=0.99' --trials 20",
    "sim storm": "rtalab sim storm retry_storm --strategies exponential,breaker",
    "sim metastability": "rtalab sim metastability metastable_spike --loads 0.5,0.75,1,1.25 "
                         "--sizes 0.25,0.5,1,2,4 --replications 5",
    "sim fleet-size": "rtalab sim fleet-size baseline --calls-per-hour 10e6 "
                      "--slo 'turn_completion_p99_s<=3' --balancers random,power_of_two",
    "sim presets": "rtalab sim presets",
    "sim show": "rtalab sim show preset:baseline --set reasoner.workers=4",
    "bench": "rtalab bench sim --memory",
    "bench all": "rtalab bench all --only sim,check --docs docs/benchmarks.md",
    "bench sim": "rtalab bench sim --memory",
    "bench sweep": "rtalab bench sweep",
    "bench calibrate": "rtalab bench calibrate --rows 1000000",
    "bench report": "rtalab bench report --rounds 5",
    "bench grpc": "rtalab bench grpc --turns 600 --rounds 3",
    "bench metastability": "rtalab bench metastability --cells 10 --replications 3",
    "bench fleet": "rtalab bench fleet --calls 1000000 --skip-all",
    "compare": "rtalab compare results/RUN_A results/RUN_B",
    "report": "rtalab report results/RUN_OR_SWEEP_OR_ANSWER_FOLDER --out report.html",
    "results": "rtalab results list",
    "results list": "rtalab results list --kind sweep",
    "results prune": "rtalab results prune --older-than 7d --yes",
    "calibrate": "rtalab calibrate results/LOAD_RUN --out calibrated.toml",
    "predict": "rtalab predict docs/examples/calibration_deployment.toml --calibrate-rate 1.8 "
               "--predict-utilisation 0.88 --outage 10 --workers 2",
    "chaos": "rtalab chaos --listen 127.0.0.1:8092 --upstream http://127.0.0.1:8090",
    "check": "rtalab check results/RUN --junit verdict.xml",
    "load": "rtalab load run baseline --duration 15 --drain 15",
    "load run": "rtalab load run baseline --duration 15 --drain 15 --binding both",
    "load summarize": "rtalab load summarize results/RUN",
    "load worker": "rtalab load worker --master 10.0.0.5:5557",
    "load probe": "rtalab load probe docs/examples/calibration_deployment.toml --max-seconds 90",
    "load bench": "rtalab load bench --seconds 5 --rounds 3 --users 50",
    "serve": "rtalab serve reasoner --port 8090",
    "serve reasoner": "rtalab serve reasoner --port 8090 --workers 2 --scenario baseline",
    "serve witness": "rtalab serve witness --port 8091 --db witness.db",
    "serve bench": "rtalab serve bench",
    "serve fuzz": "rtalab serve fuzz --requests 1000",
}


def commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, Any]:
    """Every parser under ``parser`` by its command path ("" the root, "sim run" ...)."""
    out = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(commands(sub, f"{path} {name}".strip()))
    return out


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Put each command's example (:data:`EXAMPLES`) at the end of its --help."""
    for path, p in commands(parser).items():
        example = EXAMPLES.get(path)
        if example and not (p.epilog or "").startswith("example:"):
            p.epilog = f"example:\n  {example}"
            p.formatter_class = argparse.RawDescriptionHelpFormatter


def normalise_sets(argv: Sequence[str]) -> list[str]:
    """``--set K=V K2=V2`` -> ``--set=K=V --set=K2=V2``, so ``--set`` may stand anywhere
    (before SCENARIO too) in every command: the words after ``--set`` that look like
    ``KEY=VALUE`` are its values; the first other word ends the list (``--`` too)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            break
        if a == "--set":
            j = i + 1
            while j < len(argv) and "=" in argv[j] and not argv[j].startswith("-"):
                out.append(f"--set={argv[j]}")
                j += 1
            if j == i + 1:  # no KEY=VALUE after it: leave it for argparse to complain
                out.append(a)
                j = i + 1
            i = j
            continue
        out.append(a)
        i += 1
    return out


# --------------------------------------------------------------------------- plugins


def _first_command(argv: Sequence[str]) -> str | None:
    """The top-level command word in ``argv`` (the first non-option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def load_plugins(subparsers: Any, command: str | None = None) -> dict[str, str]:
    """Register the ``rtalab.commands`` entry points; return {name: reason} of failures.

    An entry point named ``NAME`` registers the top-level command ``NAME``
    (``register(subparsers)``); one named ``NAME.PART`` extends that command
    (``register(parser)``, with ``NAME``'s parser: a group's sub-command, an option), after
    it: that is how the benchmarks add ``rtalab serve bench``, ``rtalab load bench`` and
    ``rtalab check --bench`` to commands of a package that never imports them.  With
    ``command`` one of the names, only its entry points are imported (``rtalab load run``
    does not pay for the benchmarks' imports, ~0.1-0.5 s of CPU per process); otherwise
    (no command, ``--help``, a typo) all are.  An extension of a command that failed is
    skipped."""
    failed: dict[str, str] = {}
    eps = list(entry_points(group=PLUGIN_GROUP))
    if any(ep.name == command for ep in eps):
        eps = [ep for ep in eps if ep.name.partition(".")[0] == command]
    for ep in sorted(eps, key=lambda ep: "." in ep.name):  # the commands, then their parts
        parent, dot, _ = ep.name.partition(".")
        target = subparsers
        if dot:
            if parent not in subparsers.choices:
                continue
            target = subparsers.choices[parent]
        try:
            ep.load()(target)
        except Exception as e:  # an optional extra may be missing: skip the command
            reason = f"{type(e).__name__}: {e}".splitlines()[0]
            failed[ep.name] = reason
    return failed


def _unavailable(argv: Sequence[str], failed: dict[str, str]) -> str | None:
    """The failed entry point the command line asks for: ``NAME`` (its first word) or
    ``NAME.PART`` (its first word, then ``PART`` or ``--PART``)."""
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return None
    for name in failed:
        parent, dot, part = name.partition(".")
        if parent == words[0] and (not dot or part in words[1:2] or f"--{part}" in argv):
            return name
    return None


def build_parser(argv: Sequence[str] = ()) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The root parser; plugins are loaded unless the command is ``sim``."""
    parser = OneLineParser(prog=PROG,
                           description="Simulate and load-test realtime-agent retry policies.")
    parser.add_argument("--version", action="version",
                        version=f"rtalab {package_versions().get('rtalab')}")
    parser.set_defaults(func=help_of(parser))
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_sim_parser(sub)
    add_results_parsers(sub)

    add_calibrate_parser(sub)
    # the core commands need no plugin: skip their imports (they cost ~0.2 s)
    command = _first_command(argv)
    failed = {} if command in CORE_COMMANDS else load_plugins(sub, command)
    add_examples(parser)
    return parser, failed


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rtalab`` console script; returns the exit status."""
    argv = resolve_aliases(normalise_sets(sys.argv[1:] if argv is None else argv))
    with interrupt.installed():  # a Ctrl-C that other code swallows is raised again
        return _main(argv)


def _main(argv: list[str]) -> int:
    try:
        parser, failed = build_parser(argv)
        asked = _unavailable(argv, failed)
        if asked is not None:
            _err(f"command {asked.replace('.', ' ')!r} is unavailable ({failed[asked]}); "
                 "is its optional extra installed?")
            return EXIT_USAGE
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
        args.rtalab_argv = argv
        return int(args.func(args) or 0)
    except ConfigError as e:
        _err(f"scenario error: {e}")
        return EXIT_USAGE
    except UsageError as e:
        _err(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `rtalab sim show baseline | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
