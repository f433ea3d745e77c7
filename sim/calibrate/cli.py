"""``rtalab calibrate RUN_DIR [RUN_DIR...] --out calibrated.toml`` (registered by sim/cli.py)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from sim.calibrate.estimate import CLIPPED


def _arguments(p: argparse.ArgumentParser) -> None:
    from sim.shared.argtypes import NO_PLOTS, add_quiet, opt

    opt(p, "runs RUN_DIR", "load-run folders", Path, nargs="+")
    opt(p, "--out FILE.toml", "the calibrated scenario (next to it: .calibration.json, .qq.png)",
        Path, required=True)
    opt(p, "--base SCENARIO", "client settings ([workload], [live], [run], [load]) from this "
                              "scenario (default: the first run's scenario.toml)")
    NO_PLOTS.add(p)  # the QQ plots
    add_quiet(p, "print only the output path")


def add_parser(subparsers: Any) -> None:
    """Register ``rtalab calibrate``."""
    from sim.shared.argtypes import add_command

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
    lines += utilisation_lines(f)
    if cal.unidentified:
        lines.append("  not identified (defaults): " + ", ".join(k for k, _ in cal.unidentified))
    return lines


def cmd_calibrate(args: argparse.Namespace) -> int:
    """fit a scenario to load runs of a real deployment

    Fit the deployment's scenario keys ([reasoner], [network]) to one or more load-run folders:
    distributions by maximum likelihood (lognormal, gamma, Weibull, empirical; AIC, KS distance),
    network / queueing / service apart, capacity, error rates. Writes a commented TOML, a JSON of
    every figure and QQ plots (docs/calibration.md).
    """
    from sim.calibrate import ObservationError, calibrate, combine, from_run_dir, write
    from sim.scenario import load_scenario
    from sim.shared.argtypes import UsageError

    for r in args.runs:
        if not r.is_dir():
            raise UsageError(f"calibrate: {r} is not a folder")
    try:
        obs = combine([from_run_dir(r) for r in args.runs])
    except ObservationError as e:
        raise UsageError(f"calibrate: {e}") from None
    base_ref = args.base or args.runs[0] / "scenario.toml"
    base = load_scenario(base_ref) if (args.base or Path(base_ref).exists()) else None
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
