"""``rtalab load probe``: a time-bounded step-load that finds the knee (the deployment's capacity).

The offered load is stepped up (``--start-rate`` turns/s, times ``--factor`` each step) with
one short ``rtalab load run`` per step (:func:`rtalab.loadtests.loadrun.orchestrate.run_load`, with
the embedded Reasoner started once for the whole probe, or against ``--target``).  Each
call is one turn (``workload.turns_per_call = 1``), so the offered turn rate is the call
rate from the step's first second.  Per step, over its window (after ``--step-warmup``):

* offered  = requests sent per second (retries included);
* completed = requests the server answered (completed, input-required, or a FAILED state
  other than ``rate-limited``, a rejection that used no worker) per second, counted when
  the worker was freed (the send time plus the server's intake, queue wait and service,
  when it reports them; else the first chunk);
* the mean service time (the server's ``server_service_s``, when it reports it), TTFC p99
  and the success share.

The probe stops at the second step running that is **saturated** (completed <
``SATURATED`` × offered: the throughput stopped following the load; and, after the first
step, TTFC p50 above ``QUEUED`` × the first step's: a queue built up, not a few seconds of
Poisson noise; twice, because just past the knee a queue still empties now and then and one
more step shows the plateau), at a step whose throughput grew less than ``FLAT_GROWTH``
over the previous step's, whose TTFC p99 exceeds ``--max-p99-s`` or whose success share
falls below ``--min-success``, or when the next step would not fit in ``--max-seconds``.
The folder ``results/<UTC>-probe-<scenario>-s<seed>/`` holds
``probe.json`` (the steps, the knee, why it stopped), ``probe.png`` (throughput and TTFC
p50/p99 against the offered load), ``probe.txt`` and ``steps/`` (the load runs).
``rtalab calibrate PROBE_DIR`` reads it (``rtalab.sim.calibrate.observations.from_run_dir``):
capacity = saturation throughput × mean service (Little's law).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rtalab.loadtests.common.procs import ProcessError
from rtalab.loadtests.common.tls import (
    INSECURE_WARNING,
    ClientTls,
    add_client_tls,
    client_tls_from_args,
)
from rtalab.loadtests.loadrun.orchestrate import (
    TOKEN,
    TOKENS,
    RunError,
    RunOptions,
    reachable,
    run_load,
    start_stack,
)
from rtalab.sim.config import ConfigError
from rtalab.sim.fastmodel.params import from_scenario
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared.argtypes import (
    TARGET,
    WITNESS,
    WORKERS,
    add_quiet,
    add_results_root,
    add_scenario,
    checked,
    non_negative,
    opt,
    usage_error,
)
from rtalab.sim.shared.argtypes import TOKEN as TOKEN_OPTION  # orchestrate's TOKEN is the token
from rtalab.sim.shared.results import RunLifecycle, write_json, write_scenario
from rtalab.sim.vocab import AttemptOutcome as A

SATURATED = 0.9  # a step is saturated when it completes less than this share of the offer
QUEUED = 1.5  # ... and its TTFC p50 is above this times the first step's (a queue built)
FLAT_GROWTH = 0.05  # ... or when its throughput grew less than this over the previous step
ANSWERED = (A.COMPLETED, A.INPUT_REQUIRED, A.FAILED)  # the server answered (worker used)
STEP_OVERHEAD_S = 6.0  # a step's cost beyond its load (Locust start, tables), first guess


class ProbeError(Exception):
    """The probe cannot run (one line for the user)."""


START_SHARE = 0.5  # the first step offers this share of the scenario's model capacity


def first_step_rate(sc: Any, given: float | None) -> tuple[float, str]:
    """(first step's turns/s, where it comes from): ``--start-rate``, else half the scenario's
    model capacity (``reasoner.workers`` / mean service: reasoning + the side-effect share of
    the tool + the base latency, :func:`rtalab.sim.fastmodel.params.from_scenario`; a calibrated
    scenario's, when probing with one), so the knee is a few 1.5x steps away whatever the
    turns per call (the scenario's calls/s is a turn rate only at one turn per call)."""
    if given:
        return given, "--start-rate"

    svc = from_scenario(sc).service_s
    workers = sc.reasoner.workers
    if svc > 0 and workers > 0:
        return START_SHARE * workers / svc, (
            f"{START_SHARE:.0%} of the scenario's capacity: {workers} workers / "
            f"{svc:.3g} s mean service; --start-rate to choose")
    return float(sc.workload.calls_per_s), "the scenario's calls/s; --start-rate to choose"


@dataclass
class ProbeOptions:
    """The flags of ``rtalab load probe``."""

    scenario: Any
    target: str | None = None
    tokens: tuple[str, ...] = ()
    witness_url: str | None = None
    workers: int | None = None
    start_rate: float | None = None  # turns/s; None: the scenario's turn rate
    factor: float = 1.5
    step_s: float = 8.0
    step_warmup_s: float = 2.0
    drain_s: float = 3.0
    max_seconds: float = 120.0
    max_p99_s: float | None = None
    min_success: float = 0.5
    results: Path = Path("results")
    quiet: bool = False
    argv: list[str] = field(default_factory=list)
    tls: ClientTls = field(default_factory=ClientTls)  # how a --target is verified


def step_figures(run_dir: Path, warmup_s: float, duration_s: float) -> dict[str, Any]:
    """Offered and completed requests/s, mean service, TTFC p50/p99 and success share of one
    step's load run, over [warmup, duration] seconds after its start."""
    # lazy: +582 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.calibrate.observations import from_run_dir

    a = from_run_dir(run_dir).attempts
    clock = run_dir / "ledger" / "clock.json"
    t0 = float(json.loads(clock.read_text(encoding="utf-8"))["t0"]) if clock.exists() \
        else float(np.nanmin(a["send_s"]))
    send = a["send_s"].to_numpy() - t0
    # when the worker was freed: the server's own timings on the send time, else the first
    # chunk (just after it), else the end of the attempt
    freed = send + (a["server_intake_s"].fillna(0.0) + a["server_queue_wait_s"]
                    + a["server_service_s"]).to_numpy()
    for fallback in ("first_chunk_s", "end_s"):
        freed = np.where(np.isfinite(freed), freed, a[fallback].to_numpy() - t0)
    window = duration_s - warmup_s
    sent = (send >= warmup_s) & (send < duration_s)
    outcome = a["outcome"].astype(str).to_numpy()
    rejected = a["error_code"].astype(str).to_numpy() == "rate-limited"  # no worker used
    answered = np.isin(outcome, ANSWERED) & ~rejected & (freed >= warmup_s) & (
        freed < duration_s)
    svc = a["server_service_s"].to_numpy()[answered]
    svc = svc[np.isfinite(svc)]
    ttfc = (a["first_chunk_s"].to_numpy() - a["send_s"].to_numpy())[sent]
    ttfc = ttfc[np.isfinite(ttfc)]
    done = outcome[sent]
    return {"offered_turns_per_s": float(sent.sum() / window),
            "completed_turns_per_s": float(answered.sum() / window),
            "mean_service_s": float(svc.mean()) if len(svc) else math.nan,
            "ttfc_p50_s": float(np.percentile(ttfc, 50)) if len(ttfc) else math.nan,
            "ttfc_p99_s": float(np.percentile(ttfc, 99)) if len(ttfc) else math.nan,
            "success": float(np.mean(done == "completed")) if len(done) else math.nan,
            "requests": int(sent.sum())}


def saturated(s: dict[str, Any], first: dict[str, Any]) -> bool:
    """The step completed less than ``SATURATED`` of its offer and (after the first step) its
    TTFC p50 grew above ``QUEUED`` times the first step's: a queue built up, so the shortfall
    is not the noise of a few seconds of Poisson arrivals."""
    short = s["completed_turns_per_s"] < SATURATED * s["offered_turns_per_s"]
    return short and (s is first or not s["ttfc_p50_s"] <= QUEUED * first["ttfc_p50_s"])


def stop_reason(steps: list[dict[str, Any]], opts: ProbeOptions) -> str | None:
    """Why the probe stops after the last of ``steps`` (None: go on)."""
    s = steps[-1]
    # saturated twice running: just past the knee a queue still empties now and then, so the
    # first saturated step's throughput can fall short of the capacity; one more step shows
    # the plateau (or that the throughput stopped growing)
    if saturated(s, steps[0]) and (len(steps) == 1 or saturated(steps[-2], steps[0])):
        return (f"saturated: {s['completed_turns_per_s']:.3g} of "
                f"{s['offered_turns_per_s']:.3g} turns/s completed")
    if len(steps) > 1 and s["completed_turns_per_s"] < (1 + FLAT_GROWTH) * steps[-2][
            "completed_turns_per_s"]:
        return "throughput stopped growing"
    if opts.max_p99_s is not None and s["ttfc_p99_s"] > opts.max_p99_s:
        return f"TTFC p99 {s['ttfc_p99_s']:.3g} s > --max-p99-s {opts.max_p99_s:g}"
    if s["success"] < opts.min_success:
        return f"success {s['success']:.3g} < --min-success {opts.min_success:g}"
    return None


def knee(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The knee: the step with the most turns in service (completed rate × its mean service,
    Little's law; the highest completed rate without server timings) — past the knee a
    busier server may serve slower and complete fewer turns per second —, whether any step
    was saturated, and the capacity it gives."""
    best = max(steps, key=lambda s: s["completed_turns_per_s"] * (
        s["mean_service_s"] if math.isfinite(s["mean_service_s"]) else 1.0))
    svc = best["mean_service_s"]
    return {"throughput_turns_per_s": best["completed_turns_per_s"],
            "saturated": any(saturated(s, steps[0]) for s in steps),
            "mean_service_s": svc,
            "concurrent_turns": best["completed_turns_per_s"] * svc if math.isfinite(svc)
            else math.nan}


def _say(opts: ProbeOptions, t0: float, text: str) -> None:
    if not opts.quiet:
        print(f"probe [{time.monotonic() - t0:6.1f} s] {text}  (load avg "
              f"{os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)


def run_probe(opts: ProbeOptions) -> tuple[Path, dict[str, Any]]:
    """Carry out the probe; its folder and ``probe.json``'s content."""
    t0 = time.monotonic()
    if opts.step_s + opts.drain_s > opts.max_seconds:
        raise ProbeError(f"--max-seconds {opts.max_seconds:g} leaves no time for one step of "
                         f"{opts.step_s:g} s + {opts.drain_s:g} s drain")
    sc = opts.scenario.with_overrides({"workload.turns_per_call": 1})
    folder = RunLifecycle.new(opts.results, kind="probe", scenario_name=sc.name, seed=sc.run.seed)
    write_scenario(folder.path, sc)
    with folder.guard(signals=True):  # SIGTERM/SIGHUP stop the servers as Ctrl-C does
        steps, reason = _steps(opts, sc, folder.path, t0)
    if not steps:
        raise ProbeError(f"--max-seconds {opts.max_seconds:g}: no step fitted (starting the "
                         "servers took the time)")
    k = knee(steps)
    out = {"steps": [{key: s[key] for key in ("offered_turns_per_s", "completed_turns_per_s",
                                                "mean_service_s")
                      if not (isinstance(s[key], float) and math.isnan(s[key]))}
                     for s in steps],
           "detail": steps, "knee": k, "stopped": reason, "target": opts.target or "embedded",
           "elapsed_s": time.monotonic() - t0,
           "settings": {"factor": opts.factor, "step_s": opts.step_s,
                        "step_warmup_s": opts.step_warmup_s, "max_seconds": opts.max_seconds,
                        "max_p99_s": opts.max_p99_s, "min_success": opts.min_success}}
    write_json(folder.path / "probe.json", out)
    (folder.path / "probe.txt").write_text("\n".join(summary_lines(out)) + "\n",
                                           encoding="utf-8")
    _plot(folder.path / "probe.png", steps, k)
    for line in summary_lines(out):
        _say(opts, t0, line)
    return folder.path, out


def _steps(opts: ProbeOptions, sc: Any, folder: Path, t0: float
           ) -> tuple[list[dict[str, Any]], str | None]:
    """The probe's steps (each a load run under ``folder/steps/``) against the embedded
    servers (started once, stopped at the end) or the --target; (their figures, why the
    probe stopped)."""

    rate, why = first_step_rate(sc, opts.start_rate)
    _say(opts, t0, f"first step: {rate:.3g} turns/s ({why})")
    st = None
    witness: str | None  # None: --target without a witness
    try:
        if opts.target is None:
            _say(opts, t0, "starting witness and Reasoner (once for every step) ...")
            st, target, witness = start_stack(
                RunOptions.of(sc, workers=opts.workers, chaos=False), folder,
                folder / "scenario.toml")
            tokens: tuple[str, ...] = (TOKEN, *[t for t in TOKENS if t != TOKEN])
        else:
            target, witness, tokens = opts.target, opts.witness_url, opts.tokens
        return _step_loop(opts, sc, folder, t0, rate,
                          RunOptions.of(sc, target=target, token=tokens[0] if tokens else None,
                                        tokens=tokens, witness_url=witness,
                                        duration_s=opts.step_s, drain_s=opts.drain_s,
                                        chaos=False, results=folder / "steps", quiet=True,
                                        plots=False, argv=opts.argv, tls=opts.tls))
    finally:
        if st is not None:
            st.stop()


def _step_loop(opts: ProbeOptions, sc: Any, folder: Path, t0: float, rate: float,
               base: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Steps of rising rate (``base`` the load run's options) until a stop rule holds or the
    next step would end after ``--max-seconds``."""

    steps: list[dict[str, Any]] = []
    reason = None
    step_cost = opts.step_s + opts.drain_s + STEP_OVERHEAD_S
    while True:
        if time.monotonic() - t0 + step_cost > opts.max_seconds:
            reason = reason or (f"time bound: the next step would end after "
                                f"--max-seconds {opts.max_seconds:g}")
            break
        t_step = time.monotonic()
        step_sc = sc.with_overrides({"workload.calls_per_s": rate,
                                     "run.warmup_s": opts.step_warmup_s})
        run_dir, _ = run_load(replace(base, scenario=step_sc))
        s = step_figures(run_dir, opts.step_warmup_s, opts.step_s)
        s.update(rate_calls_per_s=rate, run=str(run_dir.relative_to(folder)))
        steps.append(s)
        step_cost = max(step_cost, time.monotonic() - t_step)
        _say(opts, t0, f"step {len(steps)}: offered {s['offered_turns_per_s']:6.2f} "
                       f"turns/s -> completed {s['completed_turns_per_s']:6.2f}, "
                       f"mean service {s['mean_service_s']:.3f} s, TTFC p50 "
                       f"{s['ttfc_p50_s']:.3f} / p99 {s['ttfc_p99_s']:.3f} s, "
                       f"success {s['success']:.3f}")
        reason = stop_reason(steps, opts)
        if reason:
            break
        rate *= opts.factor
    return steps, reason


def summary_lines(out: dict[str, Any]) -> list[str]:
    """What the probe found, for the terminal and ``probe.txt``."""
    k = out["knee"]
    lines = [f"stopped: {out['stopped']}"]
    if k["saturated"] and math.isfinite(k["concurrent_turns"]):
        lines.append(f"knee: {k['throughput_turns_per_s']:.3g} turns/s at saturation x mean "
                     f"service {k['mean_service_s']:.3g} s = {k['concurrent_turns']:.2f} "
                     "concurrent turns (Little's law)")
    elif k["saturated"]:
        lines.append(f"knee: {k['throughput_turns_per_s']:.3g} turns/s at saturation (no "
                     "server timings: calibration multiplies by its own mean service)")
    else:
        lines.append(f"no step saturated (highest throughput {k['throughput_turns_per_s']:.3g}"
                     " turns/s): capacity NOT identified; raise --max-seconds or --start-rate")
    return lines


def _plot(path: Path, steps: list[dict[str, Any]], k: dict[str, Any]) -> None:
    # lazy: +242 ms (matplotlib) off rtalab's start-up
    import matplotlib

    matplotlib.use("Agg")
    # lazy: +812 ms (matplotlib) off rtalab's start-up
    import matplotlib.pyplot as plt

    off = [s["offered_turns_per_s"] for s in steps]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(off, [s["completed_turns_per_s"] for s in steps], "o-", label="completed")
    ax1.plot(off, off, ":", color="grey", label="offered")
    if k["saturated"]:
        ax1.axhline(k["throughput_turns_per_s"], color="red", lw=0.8, label="knee")
    ax1.set_xlabel("offered turns/s")
    ax1.set_ylabel("turns/s")
    ax1.set_title("throughput")
    ax1.legend()
    ax2.plot(off, [s["ttfc_p50_s"] for s in steps], "o-", label="TTFC p50")
    ax2.plot(off, [s["ttfc_p99_s"] for s in steps], "s-", label="TTFC p99")
    ax2.set_xlabel("offered turns/s")
    ax2.set_ylabel("seconds")
    ax2.set_title("latency")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab load probe``."""
    add_scenario(p)
    TARGET.add(p)
    TOKEN_OPTION.add(p)
    WITNESS.add(p)
    WORKERS.add(p, shown=1)
    opt(p, "--start-rate TURNS_PER_S", "first step's offered turns/s (default: half the "
                                       "scenario's capacity, workers / mean service)", _positive)
    opt(p, "--factor", "each step offers this times the previous one", _above_one, 1.5)
    opt(p, "--step-seconds S", "seconds of arrivals per step", _positive, 8.0)
    opt(p, "--step-warmup S", "seconds of each step left out of its figures", non_negative, 2.0)
    opt(p, "--step-drain S", "at most this long for a step's open calls to end", non_negative,
        3.0)
    opt(p, "--max-seconds S", "the whole probe's time bound", _positive, 120.0)
    opt(p, "--max-p99-s S", "stop when a step's TTFC p99 exceeds S seconds", _positive)
    opt(p, "--min-success SHARE", "stop when a step's success share falls below this",
        non_negative, 0.5)
    add_results_root(p)
    add_quiet(p, "no progress lines")
    add_client_tls(p, "connecting to --target and --witness")


def _positive(text: str) -> float:
    return checked(text, float, "expected a number, got {text!r}",
                   lambda x: math.isfinite(x) and x > 0, "expected a number > 0, got {text!r}")


def _above_one(text: str) -> float:
    return checked(text, _positive, "expected a number, got {text!r}", lambda x: x > 1.0,
                   "expected a number > 1, got {text!r}")


def cmd_probe(args: argparse.Namespace) -> int:
    """step the load up until throughput stops growing

    A time-bounded step-load (one short load run per step) that finds the knee: the saturation
    throughput and, with the mean service, the capacity; writes probe.json for rtalab calibrate
    (docs/load.md).
    """
    if args.step_warmup >= args.step_seconds:
        return usage_error("rtalab: --step-warmup must be < --step-seconds")
    if args.target and args.workers:
        return usage_error("rtalab: --workers needs the embedded Reasoner (no --target)")
    try:
        sc = load_scenario(args.scenario, list(args.set))
    except ConfigError as e:
        return usage_error(f"rtalab: scenario error: {str(e).splitlines()[0]}")
    opts = ProbeOptions(
        scenario=sc, target=args.target, tokens=tuple(args.token), witness_url=args.witness,
        workers=args.workers, start_rate=args.start_rate, factor=args.factor,
        step_s=args.step_seconds, step_warmup_s=args.step_warmup, drain_s=args.step_drain,
        max_seconds=args.max_seconds, max_p99_s=args.max_p99_s,
        min_success=args.min_success, results=Path(args.out), quiet=args.quiet,
        argv=["rtalab", *getattr(args, "rtalab_argv", [])], tls=client_tls_from_args(args))

    problem = reachable(opts)
    if problem:
        return usage_error(f"rtalab: {problem}")
    if opts.tls.insecure:
        print(f"rtalab load probe: WARNING: {INSECURE_WARNING}", file=sys.stderr)
    try:
        folder, _ = run_probe(opts)
    except (ProbeError, RunError, ProcessError) as e:
        return usage_error(f"rtalab: load probe: {str(e).splitlines()[0]}")
    print(folder)
    return 0
