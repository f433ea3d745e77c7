"""``rtalab predict``: calibrate at load A, predict load B (and B with an outage), measure B.

Steps (a progress line each, with the elapsed time and the machine's load average):

1. a load run of SCENARIO at ``--calibrate-rate`` calls/s (or ``--calibration-run DIR``);
2. ``rtalab.sim.calibrate`` on it -> ``calibrated.toml`` (the deployment's keys; the client's
   settings from SCENARIO); when A does not identify the capacity (no turn waited for a
   worker), ``--probe auto`` (the default) runs the step-load probe
   (:mod:`rtalab.loadtests.loadrun.probe`, bounded by ``--probe-seconds``) on the deployment and
   calibrates on A and the probe; either way the capacity's origin, or that the default
   was kept, is said on screen and in the report;
3. per case (B; B with a ``--outage``-second outage in the middle of the measured
   window): the simulator on the calibrated scenario at rate B (``--replications``,
   each with its own parameters drawn from the calibration's stated intervals --
   :mod:`rtalab.sim.calibrate.uncertainty`; ``--no-parameter-uncertainty``: all at the point
   estimates), then the real load run of SCENARIO at rate B, the busiest Locust process's CPU share
   sampled meanwhile;
4. :mod:`rtalab.sim.calibrate.validate` compares them: per metric, is the measured value inside
   the 90 % one-run prediction interval of the replications (which are as long as the
   measured run, at its load); the accuracy targets (±20 % p50, ±35 % p99) are judged as a
   second criterion on runs of >= 300 s and said "not judged" on shorter ones.  The folder
   gets ``prediction.json``, ``prediction.txt`` and ``prediction.html`` (a self-contained
   report section).

Every run uses the same chaos setting (the proxy is needed for an outage, so it is on
when one is asked for), so A and B see the same path.  The folder:
``results/<UTC>-predict-<scenario>-s<seed>/`` with ``runs/`` (the load runs) and
``sim-*/`` (the simulations).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from rtalab.loadtests.common.procs import ProcessError
from rtalab.loadtests.loadrun.cli import binding_set
from rtalab.loadtests.loadrun.orchestrate import RunError, RunOptions, run_load
from rtalab.loadtests.loadrun.probe import ProbeError, ProbeOptions, run_probe
from rtalab.sim.calibrate.cli import (
    add_telemetry_options,
    describe,
    observed_base,
    telemetry_observations,
)
from rtalab.sim.calibrate.observations import ObservationError
from rtalab.sim.calibrate.output import jsonable
from rtalab.sim.calibrate.uncertainty import parameter_draws, spreads
from rtalab.sim.calibrate.validate import (
    CLIENT_CPU_VOID,
    METRICS,
    accuracy_note,
    bootstrap,
    cdf_png,
    compare,
    html_section,
    one_run_json,
    one_run_rows,
    rows_json,
    short_table_lines,
    table_lines,
    turn_metrics,
)
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import results
from rtalab.sim.shared.argtypes import (
    DRAIN,
    DURATION,
    WORKERS,
    add_command,
    add_quiet,
    add_scenario,
    add_seed,
    checked,
    non_negative,
    opt,
    positive_int,
    usage_error,
)
from rtalab.sim.shared.recovery import predict_recovery, turns_recovery_s
from rtalab.sim.shared.results import RunLifecycle
from rtalab.sim.stream import replication_plan, run_streaming

OUTAGE_DIRECTION = "both"
FALLBACK_FACTOR = 2.0  # B = 2 x A when the utilisation at A is unknown


class CpuWatch:
    """Samples the CPU time of this process's Locust descendants (psutil) every 0.5 s."""

    def __init__(self) -> None:
        self._psutil = psutil
        self.seen: dict[int, list[tuple[float, float]]] = {}  # pid -> [(time, cpu seconds)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CpuWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        me = self._psutil.Process()
        while not self._stop.wait(0.5):
            try:
                kids = me.children(recursive=True)
            except self._psutil.Error:
                continue
            for p in kids:
                try:
                    if "locust" not in " ".join(p.cmdline()):
                        continue
                    t = p.cpu_times()
                    self.seen.setdefault(p.pid, []).append((time.monotonic(),
                                                            t.user + t.system))
                except self._psutil.Error:
                    continue

    def busiest_share(self, window_s: float = 5.0) -> float:
        """The busiest Locust process's CPU share over its busiest ``window_s`` seconds
        (1.0 = one full core): a client saturated for a few seconds queues its own work."""
        best = math.nan
        for samples in self.seen.values():
            j = 0
            for i, (t1, c1) in enumerate(samples):
                while j < i and t1 - samples[j][0] > window_s:
                    j += 1
                if j < i and t1 - samples[j][0] >= window_s / 2:
                    share = (c1 - samples[j][1]) / (t1 - samples[j][0])
                    best = share if not best >= share else best
        return best


def measured_at_b(turns: pd.DataFrame, args: argparse.Namespace
                  ) -> tuple[dict[str, float], dict[str, tuple[float, float]], int]:
    """The load run's figures at B: its metrics, their bootstrap CIs over calls (drawn from
    ``--seed``) and the number of turns judged (those started after the warm-up)."""
    return (turn_metrics(turns, args.warmup, args.duration),
            bootstrap(turns, args.warmup, args.duration, seed=args.seed),
            int((turns["start_s"] >= args.warmup).sum()))


def client_void(cpu_share: float, limit: float | None = None) -> bool:
    """Whether a prediction is void: the busiest Locust process used more than ``limit``
    (default :data:`rtalab.sim.calibrate.validate.CLIENT_CPU_VOID`) of one core, so its timings
    are its own queueing; an unknown share (no sample, a calibration run given) is not."""
    lim = CLIENT_CPU_VOID if limit is None else limit
    return math.isfinite(cpu_share) and cpu_share > lim


def offered_utilisation_at(rate: float, rate_a: float, offered_util_a: float) -> float:
    """The model's offered utilisation at ``rate`` calls/s: linear in the rate, from A's."""
    return offered_util_a * rate / rate_a if rate_a > 0 else math.nan


def _num(x: float) -> str:
    """A figure for the report ("–" when undefined, e.g. no capacity identified)."""
    return f"{x:.2f}" if x == x and math.isfinite(x) else "– (capacity not identified)"


def rate_b_for(predict_rate: float | None, predict_utilisation: float, rate_a: float,
               offered_util_a: float) -> tuple[float, str | None]:
    """(B in calls/s, a note or None): ``--predict-rate``, else the rate at which the model's
    offered utilisation (calibrated: linear in the rate) is ``--predict-utilisation``, else
    :data:`FALLBACK_FACTOR` x A when the capacity, hence the utilisation, is unknown."""
    if predict_rate:
        return predict_rate, None
    if offered_util_a and math.isfinite(offered_util_a):
        return rate_a * predict_utilisation / offered_util_a, None
    return FALLBACK_FACTOR * rate_a, (f"capacity not identified (no turn waited): B = "
                                      f"{FALLBACK_FACTOR:g} x A instead of --predict-utilisation")


def peak_spec(text: str) -> tuple[str, float]:
    """``--peak``: ``1.5x`` (a factor of the observed / calibration rate) or ``RATE`` (calls/s)."""
    factor = text.strip().lower().endswith("x")
    value = checked(text.strip()[:-1] if factor else text, float, "not a number: {text!r}",
                    lambda v: math.isfinite(v) and v > 0, "must be a number > 0, got {text}")
    return ("factor" if factor else "rate", value)


def peak_rate(args: argparse.Namespace, base: Any, cal: Any) -> tuple[float, str]:
    """(B, a note): the ``--peak`` rate, a factor of A's call rate (the observed one with
    ``--from``) or calls/s."""
    kind, value = args.peak
    if kind == "rate":
        return value, f"B = the peak: {value:g} calls/s (--peak)"
    if args.source and not math.isfinite(cal.figures.get("turns_per_s", math.nan)):
        raise ObservationError("the telemetry has no rate (a single scrape): give --peak as "
                               "calls/s, or scrape a window")
    a = float(base.workload.calls_per_s)
    seen = "observed" if args.source else "calibration"
    return value * a, f"B = the peak: {value:g} x the {seen} {a:.3g} calls/s (--peak)"


def _say(quiet: bool, t0: float, text: str) -> None:
    if not quiet:
        load = os.getloadavg()[0]
        print(f"[{time.monotonic() - t0:6.1f} s] {text}  (load avg {load:.1f})", flush=True)


def _load_run(sc: Any, args: argparse.Namespace, out: Path, chaos: bool) -> tuple[Path, float]:
    """The load run of ``sc`` (its own ``run.duration_s``); its folder and the busiest Locust
    process's CPU share.  No bootstrap in its summary: the comparison makes its own."""
    opts = RunOptions.of(sc, binding=args.binding, duration_s=sc.run.duration_s,
                         drain_s=args.drain, chaos=chaos, workers=args.workers, results=out,
                         argv=["rtalab", "predict"], quiet=True, plots=False, uncertainty=False)
    with CpuWatch() as watch:
        run_dir, _ = run_load(opts)
    return run_dir, watch.busiest_share()


def _probe(sc: Any, args: argparse.Namespace, folder: Path) -> Path:
    """``rtalab load probe`` of the deployment (the embedded Reasoner of SCENARIO), from A's
    turn rate up by 1.5 x per step, bounded by ``--probe-seconds``; its folder."""
    turns = float(sc.workload.turns_per_call.mean)
    probe_dir, _ = run_probe(ProbeOptions(
        scenario=sc.with_overrides({"run.seed": args.seed}), workers=args.workers,
        start_rate=args.calibrate_rate * max(1.0, float(turns)), factor=1.5,
        max_seconds=args.probe_seconds, results=folder / "probe", quiet=args.quiet))
    return probe_dir


def capacity_statement(cal: Any, default: int, probe: str,
                       probe_dir: Path | None) -> dict[str, Any]:
    """Whether the calibration identified the capacity (``reasoner.workers``), from what, and
    if not, that the default was kept and how the probe would give it (screen and report)."""
    found = next((v for v in cal.values if v.key == "reasoner.workers"), None)
    if found is not None:
        return {"identified": True, "workers": found.value, "source": found.source,
                "probe": str(probe_dir) if probe_dir else None,
                "text": f"capacity identified: {found.value} concurrent turns ({found.source})"}
    why = dict(cal.unidentified).get("reasoner.workers", "")
    hint = ("the probe ran but no step saturated: raise --probe-seconds" if probe_dir else
            "--probe always (or auto) runs the step-load probe that finds it; or `rtalab load "
            "probe SCENARIO` then `rtalab calibrate RUN_A PROBE_DIR`")
    return {"identified": False, "workers": default, "source": "default", "why": why,
            "probe": str(probe_dir) if probe_dir else None,
            "text": f"capacity NOT identified ({why}): reasoner.workers kept at the "
                    f"simulator's default {default}, which the prediction at B assumes; {hint}"}


def _window(sc: Any, args: argparse.Namespace, rate: float, duration: float | None = None
            ) -> Any:
    return sc.with_overrides({"workload.calls_per_s": rate,
                              "run.duration_s": duration or args.duration,
                              "run.warmup_s": args.warmup, "run.drain_s": args.drain,
                              "run.seed": args.seed})


def _outage(args: argparse.Namespace) -> dict[str, Any]:
    mid = args.warmup + (args.duration - args.warmup) / 2
    return {"network.outages": [{"start_s": max(0.0, mid - args.outage / 2),
                                 "duration_s": args.outage, "direction": OUTAGE_DIRECTION}]}


def _recovery(extra: dict[str, Any], sim_turns: list[pd.DataFrame], turns_b: pd.DataFrame,
              args: argparse.Namespace) -> Any:
    """``recovery_s`` after the case's outage: each simulated replication's against the
    measured run's (rtalab.sim.shared.recovery.predict_recovery)."""
    if len(sim_turns) < 2:
        return None
    o = extra["network.outages"][0]
    trigger = (float(o["start_s"]), float(o["start_s"] + o["duration_s"]))
    pred = [turns_recovery_s(t, trigger, args.warmup, args.duration)[1] for t in sim_turns]
    meas = turns_recovery_s(turns_b, trigger, args.warmup, args.duration)[1]
    return predict_recovery(pred, meas)


def _simulate(sc: Any, reps: int, run_dir: Path, draws: list[dict[str, Any]] | None = None
              ) -> list[pd.DataFrame]:
    """Replications of ``sc`` into ``run_dir`` (replication ``i`` with ``draws[i]``'s
    parameters); the turns of each."""
    run_dir.mkdir(parents=True)
    each = [sc.with_overrides(d) if d else sc for d in draws] if draws else None
    summary = run_streaming(sc, replication_plan(sc.run.seed, reps), run_dir, plots=False,
                            scenarios=each)
    results.write_summary(run_dir, summary)
    turns = pd.read_parquet(run_dir / "turns.parquet")
    return [g for _, g in turns.groupby("replication", sort=True)]


def _from_telemetry(args: argparse.Namespace, sc: Any, say: Any) -> tuple[str, float, Any, Any]:
    """Steps 1-2 from the deployment's telemetry (``--from``): no load run A; the observed
    call rate (turns/s over SCENARIO's turns per call) is A."""
    # lazy: +4.01 s (scipy) off rtalab's start-up
    from rtalab.sim.calibrate import calibrate

    kind, target = args.source
    say(f"1/5 telemetry: {kind}:{target} ...")
    obs = telemetry_observations(args)
    base = observed_base(obs, sc)
    say("2/5 calibrating from telemetry ...")
    return f"{kind}:{target}", math.nan, base, calibrate(obs, base)


def _from_load_run(args: argparse.Namespace, sc: Any, folder: Path, chaos: bool,
                   say: Any) -> tuple[Path, float, Any, Any, Path | None]:
    """Steps 1-2 from load run A (run here, or ``--calibration-run``), with the probe when
    A does not identify the capacity."""
    # lazy: +3.48 s (scipy) off rtalab's start-up
    from rtalab.sim.calibrate import calibrate, combine, from_run_dir

    if args.calibration_run:
        run_a, cpu_a = Path(args.calibration_run), math.nan
        say(f"1/5 calibration run given: {run_a}")
    else:
        dur_a = args.calibrate_duration or args.duration
        say(f"1/5 load run at A = {args.calibrate_rate:g} calls/s for {dur_a:g} s ...")
        run_a, cpu_a = _load_run(_window(sc, args, args.calibrate_rate, dur_a), args,
                                 folder / "runs", chaos)
    say("2/5 calibrating ...")
    base = load_scenario(run_a / "scenario.toml") if (run_a / "scenario.toml").exists() else sc
    cal = calibrate(from_run_dir(run_a), base)
    probe_dir = None
    if args.probe == "always" or (args.probe == "auto"
                                  and "reasoner.workers" in dict(cal.unidentified)):
        say(f"2/5 capacity {'not identified from A' if args.probe == 'auto' else 'asked for'}"
            f": step-load probe of the deployment (rtalab load probe, <= "
            f"{args.probe_seconds:g} s) ...")
        probe_dir = _probe(sc, args, folder)
        obs_a = from_run_dir(run_a)
        cal = calibrate(combine([from_run_dir(run_a), from_run_dir(probe_dir)]), base)
        workers = [v.value for v in cal.values if v.key == "reasoner.workers"]
        if workers:  # the utilisation at A, not over A and the probe's steps together
            cal.figures["utilisation"] = (len(obs_a.attempts) / obs_a.duration_s
                                          * cal.figures["mean_service_s"] / workers[0])
    return run_a, cpu_a, base, cal, probe_dir


class _Prediction:
    """One ``rtalab predict``: the calibration (steps 1-2, :meth:`calibrate`), each case at
    B (steps 3-4, :meth:`case`) and the files (step 5, :meth:`write`)."""

    def __init__(self, args: argparse.Namespace, sc: Any, folder: Path, t0: float) -> None:
        self.args, self.sc, self.folder, self.t0 = args, sc, folder, t0
        self.chaos = args.outage > 0 if args.chaos is None else args.chaos
        self.draws: list[dict[str, Any]] | None = None
        self.uncertain: list[str] = []
        self.report_cases: list[dict[str, Any]] = []
        self.out_cases: list[dict[str, Any]] = []

    def say(self, text: str) -> None:
        """A progress line (unless --quiet)."""
        _say(self.args.quiet, self.t0, text)

    def calibrate(self) -> None:
        """Steps 1-2: run A (or telemetry), the calibrated scenario, the capacity, B."""
        # lazy: +2.80 s (scipy) off rtalab's start-up
        from rtalab.sim.calibrate import write

        args, say = self.args, self.say
        self.probe_dir = None
        self.run_a: str | Path
        if args.source:
            self.run_a, self.cpu_a, self.base, self.cal = _from_telemetry(args, self.sc, say)
        else:
            self.run_a, self.cpu_a, self.base, self.cal, self.probe_dir = _from_load_run(
                args, self.sc, self.folder, self.chaos, say)
        cal, base = self.cal, self.base
        self.paths = write(cal, self.folder / "calibrated.toml")
        self.calibrated = load_scenario(self.paths["toml"])
        # B is derived from the model's offered utilisation at A (calls/s x turns/call x the
        # calibrated mean service / workers), not from A's measured busy share, which moves
        # with A's random arrivals: the same calibration and options give the same B
        self.util_a = cal.figures.get("offered_utilisation", math.nan)
        self.busy_a = cal.figures.get("utilisation", math.nan)
        for line in describe(cal):
            say("    " + line.strip())
        self.capacity = capacity_statement(cal, self.calibrated.reasoner.workers, args.probe,
                                           self.probe_dir)
        say(("    " if self.capacity["identified"] else "    WARNING: ")
            + self.capacity["text"])
        self.rate_b, note = rate_b_for(args.predict_rate, args.predict_utilisation,
                                       base.workload.calls_per_s, self.util_a)
        if args.peak:
            self.rate_b, note = peak_rate(args, base, cal)
        if note:
            say("    " + note)
        say(f"    B = {self.rate_b:.3g} calls/s (offered utilisation (model) at A: "
            f"{self.util_a:.2f}, at B: {self.utilisation_b:.2f}; A's measured busy share: "
            f"{self.busy_a:.2f})")
        if args.parameter_uncertainty:

            self.uncertain = [s.text() for s in spreads(cal)]
            self.draws = parameter_draws(cal, args.replications, args.seed)
            say("    parameter uncertainty: each replication draws " + (
                "; ".join(self.uncertain) if self.uncertain else "nothing (no stated interval)"))

    @property
    def utilisation_b(self) -> float:
        """The model's offered utilisation at B."""
        return offered_utilisation_at(self.rate_b, self.base.workload.calls_per_s, self.util_a)

    def cases(self) -> list[tuple[str, dict[str, Any]]]:
        """B, and B with an outage (``--outage``): (name, scenario overrides)."""
        args = self.args
        return [("B", {})] + (
            [(f"B + {args.outage:g}-s outage", _outage(args))] if args.outage > 0 else [])

    def case(self, i: int, name: str, extra: dict[str, Any]) -> None:
        """Steps 3-4 of one case: the simulated replications, the load run at B (unless
        --no-measure) and their comparison."""

        args, say = self.args, self.say
        tag = "b" if not extra else "b-outage"
        pred_sc = _window(self.calibrated, args, self.rate_b).with_overrides(extra)
        say(f"{3 + i}/5 {name}: simulating {args.replications} replications ...")
        sim_turns = _simulate(pred_sc, args.replications, self.folder / f"sim-{tag}",
                              self.draws)
        predicted = [turn_metrics(t, args.warmup, args.duration) for t in sim_turns]
        if args.measure:
            say(f"{3 + i}/5 {name}: load run at {self.rate_b:.3g} calls/s for "
                f"{args.duration:g} s ...")
            real_sc = _window(self.sc, args, self.rate_b).with_overrides(extra)
            run_b, cpu = _load_run(real_sc, args, self.folder / "runs", self.chaos)
            turns_b = pd.read_parquet(run_b / "turns.parquet")
            measured, ci, judged = measured_at_b(turns_b, args)
        else:  # --no-measure: the prediction alone (a deployment that cannot be load-tested)
            run_b, cpu, turns_b = None, math.nan, sim_turns[0].iloc[0:0]
            measured = dict.fromkeys(METRICS, math.nan)
            ci = dict.fromkeys(METRICS, (math.nan, math.nan))
            judged = 0
        void = client_void(cpu)
        rows = compare(predicted, measured, ci, void=void, run_s=args.duration, turns=judged)
        self._record_case(name, tag, rows, predicted, sim_turns, turns_b, run_b, cpu, void)
        rec = _recovery(extra, sim_turns, turns_b, args) if extra and args.measure else None
        if rec is not None:  # the outage case: predicted and measured recovery after it
            self.out_cases[-1]["recovery"] = jsonable(rec.__dict__)
            self.report_cases[-1]["notes"].append(rec.sentence())
            say("    " + rec.sentence())
        say(f"    load generator CPU (busiest Locust process, busiest 5 s): {cpu:.0%} of a core"
            + (" — VOID" if void else ""))

    def _record_case(self, name: str, tag: str, rows: Any, predicted: list[dict[str, Any]],
                     sim_turns: list[pd.DataFrame], turns_b: pd.DataFrame, run_b: Path | None,
                     cpu: float, void: bool) -> None:
        """One case's report and JSON entries, and its table on the terminal."""

        args, warmup = self.args, self.args.warmup
        one_run = one_run_rows(rows, predicted)
        comp = turns_b[(turns_b["outcome"].astype(str) == "completed")
                       & (turns_b["start_s"] >= warmup)]["completion_s"].to_numpy()
        sim_comp = [t[(t["outcome"].astype(str) == "completed") & (t["start_s"] >= warmup)]
                    ["completion_s"].to_numpy() for t in sim_turns]
        png = cdf_png(sim_comp, comp, f"{name}: {self.rate_b:.3g} calls/s") if len(comp) else ""
        sim_dir = self.folder / f"sim-{tag}"
        notes = [f"load run: {run_b}", f"simulation: {sim_dir}"]
        self.report_cases.append({"name": name, "rows": rows, "png": png, "client_cpu": cpu,
                                  "void": void, "notes": notes})
        self.out_cases.append({"name": name, "rate_calls_per_s": self.rate_b,
                               "load_run": str(run_b), "simulation": str(sim_dir),
                               "client_cpu_share": cpu, "void": void, "rows": rows_json(rows),
                               "one_run": one_run_json(one_run), "replications": predicted})
        if args.table == "short":  # as it is: 80 columns, no time stamp or load average
            if not args.quiet:
                print("\n".join(short_table_lines(one_run)), flush=True)
        else:
            for line in table_lines(rows):
                self.say("    " + line)
        if (note := accuracy_note(args.duration)) is not None:
            notes.append(note)
            if args.table == "full":
                self.say("    " + note)

    def header(self) -> dict[str, str]:
        """The report's header rows: calibration, capacity, A and B, the machine."""
        args, cal, base, cpu_a = self.args, self.cal, self.base, self.cpu_a
        return {"calibrated on": str(self.run_a), "method": cal.method,
                "A (calls/s)": f"{base.workload.calls_per_s:g}",
                "capacity (reasoner.workers)": self.capacity["text"],
                "offered utilisation (model) at A": _num(self.util_a),
                "measured busy share at A": _num(self.busy_a),
                "B (calls/s)": f"{self.rate_b:.3g}",
                "offered utilisation (model) at B": _num(self.utilisation_b),
                "load generator CPU at A": f"{cpu_a:.0%}" if math.isfinite(cpu_a) else "–",
                "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
                           "(shared: timings are noisy)",
                "not identified (defaults)": ", ".join(k for k, _ in cal.unidentified),
                "parameter uncertainty (per replication)": "; ".join(self.uncertain)
                if self.uncertain else ("none stated" if args.parameter_uncertainty
                                        else "off: point estimates")}

    def write(self) -> None:
        """Step 5: prediction.html (+ .section.html), prediction.json and prediction.txt."""

        args, folder = self.args, self.folder
        section = html_section(self.report_cases, self.header())
        (folder / "prediction.html").write_text(
            "<!doctype html><meta charset='utf-8'><title>rtalab prediction</title>\n" + section,
            encoding="utf-8")
        (folder / "prediction.section.html").write_text(section, encoding="utf-8")
        (folder / "prediction.json").write_text(json.dumps(jsonable(
            {"calibration_run": str(self.run_a), "calibrated": str(self.paths["toml"]),
             "rate_a": float(self.base.workload.calls_per_s), "rate_b": self.rate_b,
             "utilisation_a": self.util_a, "offered_utilisation_a": self.util_a,
             "measured_busy_share_a": self.busy_a, "capacity": self.capacity,
             "warmup_s": args.warmup, "duration_s": args.duration,
             "calibrate_duration_s": None if args.calibration_run else (
                 args.calibrate_duration or args.duration), "replications": args.replications,
             "parameter_uncertainty": {"on": bool(args.parameter_uncertainty),
                                       "spreads": self.uncertain, "draws": self.draws or []},
             "cases": self.out_cases, "elapsed_s": time.monotonic() - self.t0}),
            indent=2) + "\n",
            encoding="utf-8")
        text = []
        for c in self.report_cases:
            text += [c["name"], *table_lines(c["rows"]), *c["notes"], ""]
        (folder / "prediction.txt").write_text("\n".join(text), encoding="utf-8")


def run_predict(args: argparse.Namespace) -> int:
    """Carry out the steps of the module docstring; 0 when the comparison was written."""

    t0 = time.monotonic()
    sc = load_scenario(args.scenario, list(args.set))
    folder = RunLifecycle.new(Path(args.out), "predict", scenario_name=sc.name, seed=args.seed)
    p = _Prediction(args, sc, folder.path, t0)
    with folder.guard():
        p.calibrate()
        for i, (name, extra) in enumerate(p.cases()):
            p.case(i, name, extra)
        p.write()
    verdicts = [r.verdict for c in p.report_cases for r in c["rows"]]
    p.say(f"5/5 done: {verdicts.count('inside')} inside, {verdicts.count('outside')} outside the "
          f"90 % one-run prediction interval, {verdicts.count('void')} void -> "
          f"{folder.path / 'prediction.html'}")
    print(folder.path)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab predict``."""
    add_scenario(p)  # the deployment
    opt(p, "--calibrate-rate CALLS_PER_S", "load A, calls/s", float, 1.0)
    opt(p, "--calibrate-duration S", "seconds of arrivals at A (default: --duration)",
        non_negative)
    opt(p, "--calibration-run RUN_DIR", "calibrate on this load run instead of running A")
    g = p.add_mutually_exclusive_group()
    opt(g, "--predict-rate CALLS_PER_S", "load B, calls/s", float)
    opt(g, "--predict-utilisation U", "load B at offered utilisation (model) U: calls/s x "
        "turns/call x calibrated mean service / workers", float, 0.9)
    opt(g, "--peak 1.5x|RATE", "load B = the peak to predict: a factor of A's call rate (with "
        "--from: the observed one) or calls/s", peak_spec)
    add_telemetry_options(p)
    opt(p, "--measure", "load-test B on SCENARIO's embedded deployment and compare (default "
        "on; --no-measure: the prediction alone)", action=argparse.BooleanOptionalAction,
        default=True)
    opt(p, "--outage S", "also predict B with an S-second outage mid-window (0 = not; "
                         "{default})", non_negative, 10.0)
    DURATION.add(p, default=60.0)
    opt(p, "--warmup S", "warm-up excluded from every metric", non_negative, 10.0)
    DRAIN.add(p, default=20.0)
    WORKERS.add(p, default=2)
    opt(p, "--binding NAMES", "the Live users' binding(s) in every load run (as for "
                               "'rtalab load run')", binding_set, "sse")
    opt(p, "--chaos", "chaos proxy in front of every run (default: on iff --outage > 0)",
        action=argparse.BooleanOptionalAction)
    opt(p, "--probe", "step-load probe of the deployment for its capacity: auto (when run A "
                      "does not identify it), always, or never",
        choices=("auto", "always", "never"), default="auto")
    opt(p, "--probe-seconds S", "the probe's time bound", non_negative, 90.0)
    opt(p, "--replications", "simulator replications per case", positive_int, 10)
    opt(p, "--parameter-uncertainty", "each replication draws the calibrated means and error "
        "rates from their stated intervals, so the prediction interval holds what the "
        "calibration does not know (default on; --no-parameter-uncertainty: the point "
        "estimates only, the run's randomness alone)", action=argparse.BooleanOptionalAction,
        default=True)
    opt(p, "--table", "the comparison on screen: full (accuracy targets, CIs of the mean) or "
                      "short (the 90 %% one-run interval, 80 columns)",
        choices=("full", "short"), default="full")
    add_seed(p, default=1)
    opt(p, "--out DIR", "results root", default="results")
    add_quiet(p, "no progress lines")


def register(subparsers: Any) -> None:
    """Add ``rtalab predict`` to the root parser."""
    add_command(subparsers, "predict", cmd_predict, add_arguments)


def cmd_predict(args: argparse.Namespace) -> int:
    """calibrate at load A, predict load B, measure B, compare

    Load-test SCENARIO's embedded deployment at rate A, calibrate a scenario on it, simulate rate B
    (and B with an outage), load-test B, and compare prediction with measurement
    (docs/calibration.md).
    """
    if args.warmup >= args.duration:
        return usage_error("rtalab: --warmup must be < --duration")
    if args.source and args.calibration_run:
        return usage_error("rtalab: --from and --calibration-run: give one of the two")
    if args.calibration_run and not (Path(args.calibration_run) / "ledger").is_dir():
        return usage_error(f"rtalab: --calibration-run {args.calibration_run}: not a load-run "
                           "folder")
    try:
        return run_predict(args)
    except (RunError, ProcessError, ProbeError) as e:
        return usage_error(f"rtalab: load run failed: {str(e).splitlines()[0]}")
    except ObservationError as e:
        return usage_error(f"rtalab: calibrate: {e}")
