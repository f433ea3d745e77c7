"""``rtalab sim capacity | tune | storm``: thin command-line layers over :mod:`rtalab.sim.answers`.

Each command validates everything it can before simulating (bad SLO, unknown key,
bad range, unknown strategy: exit 2 with one ``rtalab: ...`` line), writes one new
folder under ``results/`` (or ``--out``), prints a table, a paste-able sentence and
where the files are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtalab.sim.config import ConfigError
from rtalab.sim.shared import junit, results
from rtalab.sim.shared.argtypes import (
    OUT_DIR,
    UsageError,
    add_command,
    add_executor,
    add_quiet,
    add_scenario,
    add_seed,
    flag,
    opt,
    positive_int,
    repeatable,
)
from rtalab.sim.shared.junit import add_junit_argument
from rtalab.sim.shared.manage import human_size, prune_records

if TYPE_CHECKING:
    import pandas as pd


def _usage(message: str) -> Exception:
    return UsageError(message)


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Turn the answers' input errors into the CLI's one-line usage error (exit 2)."""
    # lazy: +359 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.answers.slo import SloError
    from rtalab.sim.answers.storm import StormError
    from rtalab.sim.answers.tune import SpaceError
    from rtalab.sim.sweep import SweepError

    try:
        yield
    except (SloError, SpaceError, StormError, SweepError) as e:
        raise _usage(str(e)) from None


def _out_dir(args: argparse.Namespace, kind: str, scenario: Any) -> Path:
    try:
        return results.RunLifecycle.new_or_at(args.out, "results", kind,
                                           scenario_name=scenario.name,
                                           seed=scenario.run.seed).path
    except OSError as e:
        raise _usage(f"cannot write results under {args.out or 'results'}: "
                     f"{e.strerror or e}") from None


def _scenario(args: argparse.Namespace) -> Any:
    """The command's scenario: SCENARIO with its ``--set`` overrides and ``--seed``."""
    # lazy: +24 ms (9 modules) off rtalab's start-up
    from rtalab.sim.scenario import load_scenario_args

    scenario = load_scenario_args(args.scenario, args.set)
    if args.seed is not None:
        scenario = scenario.with_overrides({"run.seed": args.seed})
    return scenario


def _executor(args: argparse.Namespace) -> Any:
    # lazy: +39 ms (28 modules) off rtalab's start-up
    from rtalab.sim.sweep import make_executor

    return make_executor(args.processes, args.dask)


def _print_cards(df: pd.DataFrame, title: str, heading: Callable[[pd.Series], str],
                 skip: tuple[str, ...] = ()) -> None:
    """The table as one card per row (sim/shared/cards.py): full names, units, CIs, 80 columns."""
    # lazy: +233 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.shared.cards import frame_cards, render
    from rtalab.sim.shared.summary import unit

    print(render(frame_cards(df, heading, unit, skip=skip), title))


def _say(text: str, indent: str = "") -> None:
    """Print a sentence wrapped at 80 columns (the file copies keep one line)."""
    print(textwrap.fill(text, 80, subsequent_indent=indent, break_on_hyphens=False,
                        break_long_words=False))


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# --------------------------------------------------------------------------- capacity


def cmd_capacity(args: argparse.Namespace) -> int:
    """smallest knob value meeting SLOs with confidence, per load level

    For each load level, find the smallest value of --knob for which every --slo holds with 95 %
    confidence (bracketing + bisection).
    """
    # lazy: +308 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.answers.capacity import find_capacity, make_knob, plot_capacity
    from rtalab.sim.answers.slo import parse_slo
    from rtalab.sim.sweep import parse_axes

    scenario = _scenario(args)
    with _user_errors():
        slos = [parse_slo(s) for s in args.slo]
        if not slos:
            raise _usage("give at least one --slo 'METRIC<=X'")
        [(load_key, loads)] = parse_axes([args.load]).items()
        lo, hi = _range(args.range)
        knob = make_knob(scenario, args.knob, lo, hi, args.step)
        for v in loads:
            scenario.with_overrides({load_key: v})
    out = _out_dir(args, "capacity", scenario)
    with _user_errors(), _executor(args) as ex:
        res = find_capacity(scenario, load_key=load_key, loads=loads, knob=knob, slos=slos,
                            replications=args.replications, root_seed=scenario.run.seed,
                            executor=ex, out_dir=out, progress=not args.quiet)
    table = res.table()
    table.to_csv(out / "capacity.csv", index=False)
    plot_capacity(res, out / "capacity.png")
    sentence = res.sentence()
    bench = (f"search: {res.evaluations} points evaluated vs {res.full_sweep_evaluations} for "
             f"a full sweep of {knob.key} in [{knob.lo:g}, {knob.hi:g}] at every load "
             f"({100 * res.evaluations / res.full_sweep_evaluations:.0f} %)")
    (out / "answer.txt").write_text(sentence + "\n" + bench + "\n", encoding="utf-8")
    (out / "probes.json").write_text(json.dumps(
        [{"load": p.load, "value": p.value, "holds": p.holds, "failing": list(p.failing)}
         for p in res.probes], indent=1), encoding="utf-8")
    _print_cards(table, f"{scenario.name}: required {knob.key} per {load_key} "
                        "(means with 95 % CIs at the answer)",
                 lambda r: f"{load_key} = {_cell(r['load'])}", skip=("load",))
    _say(sentence)
    _say(bench)
    if args.junit:
        _write_junit(args.junit, "rtalab sim capacity", junit.capacity_cases(res, slos))
    _prune(args, out)
    print(f"results: {out}")
    return 0


def _prune(args: argparse.Namespace, out: Path, keep: tuple[str, ...] = ()) -> None:
    """Keep only what the answer and its report need, unless ``--keep-records``."""
    if args.keep_records:
        return

    freed = prune_records(out, keep)
    if freed and not args.quiet:
        print(f"record tables removed ({human_size(freed)}; --keep-records keeps them)")


def _write_junit(path: Path, suite: str, cases: list[Any]) -> None:
    try:
        junit.write(path, suite, cases)
    except OSError as e:
        raise _usage(f"cannot write {path}: {e.strerror or e}") from None


def _range(text: str | None) -> tuple[float | None, float | None]:
    if not text:
        return None, None
    try:
        lo, hi = text.split(":")
        conv: Callable[[str], float] = float
        vals = [int(v) if v.strip().lstrip("-").isdigit() else conv(v) for v in (lo, hi)]
    except ValueError:
        raise _usage(f"bad --range {text!r}: expected LO:HI, e.g. 1:64") from None
    return vals[0], vals[1]


# --------------------------------------------------------------------------- tune


def cmd_tune(args: argparse.Namespace) -> int:
    """Optuna search over the Live layer's knobs, then confirm on fresh seeds

    Search the [tune] space (scenario section, --space FILE, or the default policy space) with
    Optuna TPE; re-run the best candidates and today's settings on fresh seeds; recommend.
    """
    # lazy: +269 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.answers.slo import parse_slo
    from rtalab.sim.answers.tune import (
        default_space,
        objective,
        plot_pareto,
        read_space,
        scenario_space,
        tune,
        validate_space,
    )
    scenario = _scenario(args)
    with _user_errors():
        objs = [objective(m, "minimize") for m in args.minimize] + \
            [objective(m, "maximize") for m in args.maximize]
        if not objs:
            raise _usage("give at least one --minimize METRIC (or --maximize METRIC)")
        cons = [parse_slo(c) for c in args.constraint]
        space = read_space(args.space) if args.space else _scenario_space(args.scenario,
                                                                          scenario_space)
        if space is None:
            space, skipped = default_space(scenario)
        else:
            space, skipped = validate_space(scenario, space)
    out = _out_dir(args, "tune", scenario)
    with _user_errors(), _executor(args) as ex:
        res = tune(scenario, out, objectives=objs, constraints=cons, space=space,
                   trials=args.trials, replications=args.replications,
                   root_seed=scenario.run.seed, executor=ex, batch=args.batch, top=args.top,
                   confirm_replications=args.confirm_replications, progress=not args.quiet)
    res.trials.to_csv(out / "trials.csv", index=False)
    res.candidates.to_csv(out / "candidates.csv", index=False)
    plot_pareto(res, out / ("pareto.png" if len(objs) > 1 else "convergence.png"))
    sentence = res.sentence()
    (out / "answer.txt").write_text(sentence + "\n", encoding="utf-8")
    for name, why in skipped.items():
        _say(f"note: parameter {name} skipped: {why}")
    shown = res.candidates.drop(columns=[c for c in res.candidates
                                         if isinstance(c, str) and c.endswith("_pct")])
    _print_cards(shown, f"{scenario.name}: candidates and today's settings re-run on the same "
                        "fresh seeds (means [95 % CI]; change = candidate − current, paired, "
                        "[95 % CI], p before Holm)",
                 lambda r: str(r["candidate"]) + (" — recommended" if r["recommended"]
                                                  else ""),
                 skip=("candidate", "recommended"))
    _say(sentence)
    lines = res.range_lines()
    if lines:
        _say(f"indistinguishable from the best trial on {objs[0].metric} (Welch, 95 %):")
        for line in lines:
            _say(f"  {line}", "      ")
        (out / "answer.txt").write_text(sentence + "\n" + "\n".join(lines) + "\n",
                                        encoding="utf-8")
    if args.junit:
        _write_junit(args.junit, "rtalab sim tune", junit.tune_cases(res.candidates, cons))
    print(f"study: {res.study_path} ({len(res.trials)} trials, {res.evaluations} run now)")
    _prune(args, out)
    print(f"results: {out}")
    return 0


def _scenario_space(ref: str, reader: Callable[[str], Any]) -> Any:
    try:
        return reader(ref)
    except ConfigError:
        return None


# --------------------------------------------------------------------------- storm


def cmd_storm(args: argparse.Namespace) -> int:
    """every retry strategy through the scenario's trigger: who recovers

    Run each retry strategy through the scenario's outage, capacity drop or load spike; report
    amplification, goodput dip, recovery and hazards.
    """
    # lazy: +242 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.answers.storm import (
        Detector,
        StormError,
        plot_storm,
        run_storm,
        trigger_window,
        validate_strategies,
    )
    scenario = _scenario(args)
    names = [n for s in args.strategies for n in s.split(",") if n] or None
    det = Detector(args.fraction, args.hold, args.window, args.noise_z)
    with _user_errors():
        if not 0 < args.fraction <= 1:
            raise StormError(f"--fraction must be in (0, 1], got {args.fraction}")
        validate_strategies(scenario, names)
        trigger_window(scenario)
    out = _out_dir(args, "storm", scenario)
    with _user_errors(), _executor(args) as ex:
        res = run_storm(scenario, out, strategies=names, replications=args.replications,
                        detector=det, executor=ex, progress=not args.quiet)
    table = res.table()
    table.to_csv(out / "storm.csv", index=False)
    plot_storm(res, out / "storm.png")
    for name, why in res.skipped.items():
        _say(f"note: strategy {name} skipped: {why}")
    _print_cards(table.drop(columns=["run"]),
                 f"{scenario.name}: trigger {res.trigger[0]:g}–{res.trigger[1]:g} s; "
                 f"metastable = goodput < {det.fraction:g} × offered for {det.hold_s:g} s "
                 f"after it ({det.window_s:g} s windows); means [95 % CI]",
                 lambda r: f"{r['strategy']}: {r['verdict']}" if "verdict" in r
                 else str(r["strategy"]), skip=("strategy", "verdict"))
    rec = [n for n in res.runs if res.verdict(n) == "recovered"]
    stuck = [n for n in res.runs if res.verdict(n) == "metastable"]
    _say(f"recovered: {', '.join(rec) or 'none'}; metastable: {', '.join(stuck) or 'none'}")
    if res.fleet_sentence():
        _say(res.fleet_sentence())
    _prune(args, out, keep=("timeseries", "turns"))  # the storm analysis reads these two
    print(f"results: {out}")
    return 0


# --------------------------------------------------------------------------- metastability


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise _usage(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not vals:
        raise _usage(f"{what} is empty")
    return vals


def cmd_metastability(args: argparse.Namespace) -> int:
    """the metastability map: load x trigger size, recovery probability, tipping threshold

    Over offered load x trigger size, the probability of recovering within --hold after the
    trigger (CI from replications), recovery times, regions and the tipping threshold per load,
    for each strategy; the fast model places the replications where the boundary is.
    """
    # lazy: +322 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.answers.metastability import MapSpec, run_map, write_map
    from rtalab.sim.answers.storm import Detector, StormError, validate_strategies
    from rtalab.sim.shared.progress import progress_bar, should_show

    scenario = _scenario(args)
    names = [n for s in args.strategies for n in s.split(",") if n] or ["no_backoff",
                                                                        "full_jitter"]
    loads, sizes = _floats(args.loads, "--loads"), _floats(args.sizes, "--sizes")
    with _user_errors():
        if not 0 < args.fraction <= 1:
            raise StormError(f"--fraction must be in (0, 1], got {args.fraction}")
        det = Detector(args.fraction, args.hold, args.window, args.noise_z)
        spec = MapSpec(loads, sizes, args.trigger, args.replications, det,
                       adaptive=not args.full_grid, budget=args.budget)
        validate_strategies(scenario, names)
        # lazy: +413 ms (pandas, pyarrow) off rtalab's start-up
        from rtalab.sim.answers.metastability import cell_overrides, run_length

        for v in loads:
            for z in sizes:
                cell_overrides(scenario, v, z, args.trigger, {})
        run_length(scenario, sizes, args.trigger, det)
    out = _out_dir(args, "metastability", scenario)
    with (_user_errors(), _executor(args) as ex,
          progress_bar(f"metastability {scenario.name}", enabled=should_show(args.quiet))
          as bar):
        res = run_map(scenario, out, spec, strategies=names, executor=ex, progress=bar,
                      hitting=not args.no_hitting)
    write_map(res, out)
    for name, why in res.skipped.items():
        _say(f"note: strategy {name} skipped: {why}")
    for name, miss in res.unexpressed.items():
        if miss:
            _say(f"note: the fast model cannot express {', '.join(miss)} ({name}): its "
                 "guidance there is approximate")
    th = res.thresholds()
    _print_cards(th, f"{scenario.name}: tipping threshold (trigger size where recovery within "
                     f"{det.hold_s:g} s falls below 0.5; 1 = the scenario's trigger) per load, "
                     "[95 % interval]; model = the fluid model's",
                 lambda r: f"{r['strategy']} at load {r['load']:g}×", skip=("strategy", "load"))
    for name, m in res.maps.items():
        counts = m.cells["region"].value_counts().to_dict()
        dis = len(m.disagreements())
        _say(f"{name}: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in
                                       ("stable", "recovers", "metastable", "overloaded"))
             + f" cells; {m.full_share:.0%} simulated ({m.sim_runs} replications), fast model "
               f"{m.model_seconds / len(m.cells):.2f} s a cell; model and simulator disagree "
               f"on {dis} simulated cell(s)")
    _say(res.sentence())
    _prune(args, out, keep=("timeseries", "turns", "executions", "attempts"))
    print(f"results: {out}")
    return 0


# --------------------------------------------------------------------------- fleet-size


def _fleet_slo(text: str) -> tuple[str, str, float]:
    """An SLO on a metric the fleet model gives (caller-perceived names map to completed)."""
    # lazy: +722 ms (scipy) off rtalab's start-up
    from rtalab.sim.answers.slo import parse_slo
    from rtalab.sim.fastmodel.fleet import METRICS

    slo = parse_slo(text)
    name = slo.metric.replace("caller_completion_s.", "completion_s.")
    if name not in METRICS:
        raise _usage(f"the fleet model has no metric {slo.metric!r} (SLO {text!r}): use one of "
                     f"{', '.join(METRICS)} (or turn_completion_p50_s / _p99_s)")
    return name, slo.op, slo.target


def cmd_fleet_size(args: argparse.Namespace) -> int:
    """replicas a fleet needs per balancer policy, from the mean-field model (seconds)

    The fewest Reasoner replicas (each with the scenario's workers and queue) meeting every
    --slo at --calls-per-hour, per balancer policy, from the fleet mean field
    (sim/fastmodel/fleet.py: no simulation; its docstring says where it is approximate).
    """
    # lazy: +723 ms (scipy) off rtalab's start-up
    from rtalab.sim.fastmodel.fleet import POLICIES, FleetModel, FleetModelError, fleet_size

    scenario = _scenario(args)
    with _user_errors():
        slos = [_fleet_slo(s) for s in args.slo]
    if not slos:
        raise _usage("give at least one --slo 'METRIC<=X'")
    if not args.calls_per_hour > 0:
        raise _usage(f"--calls-per-hour must be > 0, got {args.calls_per_hour:g}")
    names = [n for s in args.balancers for n in s.split(",") if n] or list(POLICIES)
    bad = [n for n in names if n not in POLICIES]
    if bad:
        raise _usage(f"unknown balancer {bad[0]!r}: one of {', '.join(POLICIES)}")
    out = _out_dir(args, "fleet-size", scenario)
    t0 = time.perf_counter()
    calls_per_s = args.calls_per_hour / 3600.0
    try:
        model = FleetModel(scenario)
        rows = []
        for name in names:
            n, pt = fleet_size(model, calls_per_s, name, slos, args.max_replicas)
            row: dict[str, Any] = {"balancer": name, "replicas": n,
                                   "workers": None if n is None else n * model.workers}
            if pt is not None:
                row |= {k: v for k, v in pt.row().items() if k not in ("replicas", "policy")}
            rows.append(row)
    except FleetModelError as e:
        raise _usage(str(e)) from None
    took = time.perf_counter() - t0
    # lazy: +193 ms (pandas, pyarrow) off rtalab's start-up
    import pandas as pd

    table = pd.DataFrame(rows)
    table.to_csv(out / "fleet_size.csv", index=False)
    ok = [r for r in rows if r["replicas"] is not None]
    slo_text = " and ".join(args.slo)
    if ok:
        best = min(ok, key=lambda r: r["replicas"])
        sentence = (f"{scenario.name} at {args.calls_per_hour:,.0f} calls/hour "
                    f"({model.turns_per_s(calls_per_s):,.0f} turns/s) needs "
                    + "; ".join(f"{r['replicas']:,} replicas with {r['balancer']}"
                                for r in ok)
                    + f" ({model.workers} workers each) for {slo_text}; fewest: "
                      f"{best['balancer']} (fleet mean field, {took:.1f} s)")
    else:
        sentence = (f"{scenario.name}: no fleet of up to {args.max_replicas:,} replicas meets "
                    f"{slo_text} at {args.calls_per_hour:,.0f} calls/hour")
    (out / "answer.txt").write_text(sentence + "\n", encoding="utf-8")
    (out / "fleet_size.json").write_text(json.dumps(
        {"scenario": scenario.name, "calls_per_hour": args.calls_per_hour, "slos": args.slo,
         "workers_per_replica": model.workers, "seconds": took,
         "rows": table.astype(object).where(table.notna(), None).to_dict("records")},  # type: ignore[call-overload]  # pandas-stubs: where() takes no None
        indent=1), encoding="utf-8")
    shown = table[["balancer", "replicas", "worker_utilisation", "p_wait", "completion_p50_s",
                   "completion_p99_s", "success_rate"]] if ok else table
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    _say(sentence)
    print(f"results: {out}")
    return 0


# --------------------------------------------------------------------------- parsers


def _common_arguments(p: argparse.ArgumentParser) -> None:
    """The options after each command's own: where it runs, seed, output, what it keeps."""
    add_executor(p)
    add_seed(p)
    OUT_DIR.add(p)
    add_quiet(p)
    flag(p, "--keep-records", "keep every probe's record tables (by default only what the "
                              "answer and its report need stays: summaries, tables, plots)")


def _capacity_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    opt(p, "--load KEY.PATH=V1,V2,...", "the load levels, e.g. workload.calls_per_s=2,4,8,16",
        required=True)
    opt(p, "--knob KEY.PATH", "the integer or float key sized, e.g. reasoner.workers",
        required=True)
    opt(p, "--range LO:HI", "search range (default 1:64×current)")
    opt(p, "--step", "resolution of a float knob", float)
    repeatable(p, "--slo 'METRIC<=X'",
               "e.g. 'turn_completion_p99_s<=3', 'success_rate>=0.999'; repeatable")
    opt(p, "--replications R", "replications per probe (>= 2; {default})", positive_int, 3)
    _common_arguments(p)
    add_junit_argument(p)


def _tune_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    repeatable(p, "--minimize METRIC",
               "an objective to make small, e.g. turn_completion_p99_s; repeatable")
    repeatable(p, "--maximize METRIC",
               "an objective to make large, e.g. success_rate; repeatable")
    repeatable(p, "--constraint 'METRIC<=X'",
               "must hold with 95 %% confidence, e.g. 'success_rate>=0.99'; repeatable")
    opt(p, "--trials N", "trials in the study ({default}; a resumed study runs only the missing "
                         "ones)",
        positive_int, 30)
    opt(p, "--space FILE", "TOML file with a [tune] table", Path)
    opt(p, "--replications R", "replications per trial", positive_int, 2)
    opt(p, "--confirm-replications R", "replications of the confirmation runs "
                                       "(default max(2R, 3))", positive_int)
    opt(p, "--top K", "candidates confirmed", positive_int, 3)
    opt(p, "--batch B", "trials asked and evaluated together", positive_int, 2)
    _common_arguments(p)
    add_junit_argument(p)


def _recovery_arguments(p: argparse.ArgumentParser) -> None:
    """What "recovered" means (rtalab.sim.shared.recovery.Detector), shared by storm and
    metastability."""
    opt(p, "--fraction", "recovered = goodput >= this share of offered load", float, 0.9)
    opt(p, "--hold S", "... within S seconds after the trigger ends", float, 60.0)
    opt(p, "--window S", "sliding window of the rates ({default} s)", float, 10.0)
    opt(p, "--noise-z Z", "Poisson noise allowance in standard errors "
                          "(rtalab.sim.shared.recovery; {default})", float, 3.0)


def _storm_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    repeatable(p, "--strategies A,B,...", "strategies to run (default: all this build has)")
    opt(p, "--replications R", "replications per strategy (default: run.replications)",
        positive_int)
    _recovery_arguments(p)
    _common_arguments(p)


def _metastability_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    repeatable(p, "--strategies A,B,...", "strategies mapped side by side (default: no_backoff,"
                                          "full_jitter)")
    opt(p, "--loads X,Y,...", "offered load factors (x the scenario's call rate and max_calls)",
        default="0.5,0.75,1,1.25,1.5")
    opt(p, "--sizes X,Y,...", "trigger size factors (x the scenario's trigger; > 0)",
        default="0.25,0.5,1,2,4")
    opt(p, "--trigger KIND", "what a size scales: length (outage, drop, spike duration) or depth "
                             "(workers lost, spike height)", choices=("length", "depth"),
        default="length")
    opt(p, "--replications R", "replications of a simulated cell (>= 2; {default})",
        positive_int, 4)
    opt(p, "--budget SHARE", "most cells given full replications when guided ({default})",
        float, 0.3)
    flag(p, "--full-grid", "simulate every cell (no fast-model guidance)")
    flag(p, "--no-hitting", "skip the CTMC hitting times per load")
    _recovery_arguments(p)
    _common_arguments(p)


def _fleet_size_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario(p)
    opt(p, "--calls-per-hour N", "calls arriving per hour, fleet-wide, e.g. 10e6", float,
        required=True)
    repeatable(p, "--slo 'METRIC<=X'", "e.g. 'turn_completion_p99_s<=3', 'success_rate>=0.999',"
                                       " 'worker_utilisation<=0.8'; repeatable")
    repeatable(p, "--balancers A,B,...", "balancer policies compared (default: all five)")
    opt(p, "--max-replicas N", "largest fleet searched ({default})", positive_int, 10**7)
    add_seed(p)
    OUT_DIR.add(p)


def add_parsers(sub: Any) -> None:
    """Register ``capacity``, ``tune``, ``storm`` and ``metastability`` under ``rtalab sim``."""
    add_command(sub, "capacity", cmd_capacity, _capacity_arguments)
    add_command(sub, "tune", cmd_tune, _tune_arguments)
    add_command(sub, "storm", cmd_storm, _storm_arguments)
    add_command(sub, "metastability", cmd_metastability, _metastability_arguments)
    add_command(sub, "fleet-size", cmd_fleet_size, _fleet_size_arguments)
