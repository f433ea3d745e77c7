"""``rtalab calibrate RUN_DIR [RUN_DIR...] --out calibrated.toml`` (registered by sim/cli.py)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from rtalab.sim.shared.argtypes import (
    NO_PLOTS,
    UsageError,
    add_command,
    add_quiet,
    non_negative,
    opt,
)
from rtalab.sim.shared.tls import INSECURE_WARNING, add_client_tls, client_tls_from_args

SOURCES = ("prometheus", "otlp")


def telemetry_source(text: str) -> tuple[str, str]:
    """``prometheus:URL_OR_FILE`` or ``otlp:FILE`` -> (kind, target)."""
    kind, sep, target = text.partition(":")
    if not sep or kind not in SOURCES or not target or (
            kind == "otlp" and target.startswith(("http://", "https://"))):
        raise argparse.ArgumentTypeError(
            f"expected prometheus:URL_OR_FILE or otlp:FILE, got {text!r}")
    return kind, target


def add_telemetry_options(p: argparse.ArgumentParser) -> None:
    """--from, --window, --every, --map, --save (calibrate and predict: the same options)."""
    opt(p, "--from SOURCE", "calibrate from telemetry: prometheus:URL_OR_FILE (a /metrics URL "
        "scraped over --window, or a file of text exposition) or otlp:FILE (OTLP/JSON metrics "
        "lines, as OpenTelemetry's file exporter writes them)", telemetry_source,
        dest="source")
    opt(p, "--window S", "prometheus URL: seconds to scrape over", non_negative, 60.0)
    opt(p, "--every S", "prometheus URL: seconds between scrapes", non_negative, 5.0)
    opt(p, "--map FILE.toml", "metric names of a server with its own ([metrics] role = name; "
        "docs/calibration.md)", dest="mapping")
    opt(p, "--save FILE", "prometheus URL: write the scrapes (timestamped exposition) here")

    add_client_tls(p, "scraping a prometheus:https:// URL")


def telemetry_observations(args: argparse.Namespace, say: Any = None) -> Any:
    """The observations of ``--from`` (raises ObservationError, one line)."""
    # lazy: +736 ms (pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.calibrate.observations import ObservationError
    from rtalab.sim.calibrate.telemetry import from_otlp, from_prometheus

    kind, target = args.source
    if kind == "otlp":
        return from_otlp(target, args.mapping)
    if target.startswith(("http://", "https://")) and not args.every > 0:
        raise ObservationError("--every must be > 0")

    tls = client_tls_from_args(args)  # TlsError: one line, exit 2
    if tls.insecure and target.startswith("https://"):
        print(f"rtalab: WARNING: {INSECURE_WARNING}", file=sys.stderr)
    return from_prometheus(target, args.window, args.every, args.mapping, tls=tls,
                           save=args.save, say=say)


def observed_base(obs: Any, base: Any) -> Any:
    """The client's scenario with the observed call rate (telemetry's turns/s over the
    scenario's turns per call), when the observations have one."""
    if base is None or not math.isfinite(obs.turns_per_s) or obs.turns_per_s <= 0:
        return base
    return base.with_overrides({"workload.calls_per_s": round(
        obs.turns_per_s / float(base.workload.turns_per_call.mean), 6)})


def _arguments(p: argparse.ArgumentParser) -> None:
    opt(p, "runs RUN_DIR", "load-run folders", Path, nargs="*")
    add_telemetry_options(p)
    opt(p, "--out FILE.toml", "the calibrated scenario (next to it: .calibration.json, .qq.png)",
        Path, required=True)
    opt(p, "--base SCENARIO", "client settings ([workload], [live], [run], [load]) from this "
                              "scenario (default: the first run's scenario.toml)")
    NO_PLOTS.add(p)  # the QQ plots
    add_quiet(p, "print only the output path")


def add_parser(subparsers: Any) -> None:
    """Register ``rtalab calibrate``."""
    add_command(subparsers, "calibrate", cmd_calibrate, _arguments)


OFFERED = "offered utilisation (model: calls/s x turns/call x mean service / workers)"
MEASURED = "measured busy share (served attempts x mean service / run length / workers)"


def utilisation_lines(f: dict[str, Any]) -> list[str]:
    """The two utilisations a calibration knows, each named: the model's offered one (what
    --predict-utilisation scales) and the run's measured busy share (random with the run)."""
    out = []
    for key, label in (("offered_utilisation", OFFERED), ("utilisation", MEASURED)):
        u = f.get(key)
        if u is not None and math.isfinite(u):
            out.append(f"  {label}: {u:.2f}")
    return out


def describe(cal: Any) -> list[str]:
    """Key figures of a calibration, one line each (for the terminal)."""
    # lazy: +3.60 s (scipy, pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.calibrate.estimate import CLIPPED

    lines = [f"method: {cal.method}"]
    for v in cal.values:
        val = v.value
        if isinstance(val, dict) and "dist" in val:
            shown = ", ".join(f"{k}={x:.4g}" if isinstance(x, float) else f"{k}={x}"
                              for k, x in val.items() if k not in ("values", "le", "counts"))
        else:
            shown = str(val)
        lines.append(f"  {v.key} = {shown}")
        if CLIPPED in v.quality:  # a statistical artefact, said where it is read
            lines.append(f"    NOTE {v.quality[v.quality.index(CLIPPED):]}")
    f = cal.figures
    if f.get("turns_per_s") is not None and math.isfinite(f["turns_per_s"]):
        r, t = f["turns_per_s"], f.get("duration_s") or math.nan
        # lazy: +300 ms (pandas, pyarrow) off rtalab's start-up
        from rtalab.sim.shared.stats import poisson_rate_ci

        lo, hi = poisson_rate_ci(round(r * t), t) if t > 0 else (math.nan, math.nan)
        lines.append(f"  observed turn rate: {r:.3g} turns/s [{lo:.3g}, {hi:.3g}] "
                     f"(95 %, Poisson exact, over {t:.0f} s; calls/s = that / the base "
                     "scenario's turns per call)")
    lines += utilisation_lines(f)
    if cal.unidentified:
        lines.append("  not identified (defaults): " + ", ".join(k for k, _ in cal.unidentified))
    return lines


def cmd_calibrate(args: argparse.Namespace) -> int:
    """fit a scenario to load runs or telemetry of a real deployment

    Fit the deployment's scenario keys ([reasoner], [network]) to one or more load-run folders
    or to the deployment's telemetry (--from prometheus:URL_OR_FILE or otlp:FILE):
    distributions by maximum likelihood (lognormal, gamma, Weibull, empirical; AIC, KS distance),
    network / queueing / service apart, capacity, error rates. Writes a commented TOML, a JSON of
    every figure and QQ plots (docs/calibration.md).
    """
    # lazy: +4.54 s (scipy, pandas, pyarrow) off rtalab's start-up
    from rtalab.sim.calibrate import ObservationError, calibrate, combine, from_run_dir, write
    from rtalab.sim.scenario import load_scenario

    if bool(args.runs) == bool(args.source):
        raise UsageError("calibrate: give load-run folders or --from SOURCE (one of the two)")
    for r in args.runs:
        if not r.is_dir():
            raise UsageError(f"calibrate: {r} is not a folder")
    say = None if args.quiet else print
    try:
        obs = (combine([from_run_dir(r) for r in args.runs]) if args.runs
               else telemetry_observations(args, say))
    except ObservationError as e:
        raise UsageError(f"calibrate: {e}") from None
    base_ref = args.base or (args.runs[0] / "scenario.toml" if args.runs else None)
    base = load_scenario(base_ref) if base_ref is not None and (
        args.base or Path(base_ref).exists()) else None
    base = observed_base(obs, base)
    cal = calibrate(obs, base)
    try:
        paths = write(cal, args.out, plots=not args.no_plots)
        load_scenario(paths["toml"])  # what we wrote must load (a bug otherwise)
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e.strerror or e}") from None
    if not args.quiet:
        for line in describe(cal):
            print(line)
    print(paths["toml"])
    return 0
