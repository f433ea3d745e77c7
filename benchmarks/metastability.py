"""``rtalab bench metastability``: the map's speed, guided by the fast model vs a full grid.

A ``--loads`` × ``--sizes`` map (default 10 × 10) of one strategy on a preset, on 2 local
processes: wall time of the guided map (target <= 300 s), the fast model's seconds per cell
(<= 1 s), the share of cells given full replications (<= 30 %), then the same cells all
simulated (unless ``--skip-full``): its wall time, the ratio, and in how many load rows the
guided threshold lies inside the full grid's 95 % interval.  One line each, with operands.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from rtalab.sim.shared.argtypes import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    p.add_argument("--scenario", default="retry_storm", help="preset mapped (default %(default)s)")
    p.add_argument("--strategy", default="no_backoff", help="strategy mapped (default %(default)s)")
    p.add_argument("--cells", type=positive_int, default=10, metavar="N",
                   help="N loads x N trigger sizes (default %(default)s)")
    p.add_argument("--replications", type=positive_int, default=3, metavar="R",
                   help="replications of a simulated cell (default 3)")
    p.add_argument("--processes", type=positive_int, default=2, metavar="P",
                   help="local processes (default %(default)s)")
    p.add_argument("--skip-full", action="store_true", help="do not run the full grid")


def _map(args: argparse.Namespace, adaptive: bool, out: Path) -> tuple[float, object]:
    from rtalab.sim.answers.metastability import MapSpec, run_map
    from rtalab.sim.answers.storm import Detector
    from rtalab.sim.scenario import load_scenario
    from rtalab.sim.sweep import make_executor

    n = args.cells
    loads = tuple(float(round(v, 3)) for v in np.linspace(0.4, 1.3, n))
    sizes = tuple(float(round(v, 3)) for v in np.geomspace(0.1, 2.0, n))
    spec = MapSpec(loads, sizes, "length", args.replications, Detector(hold_s=40.0),
                   adaptive=adaptive)
    t0 = time.perf_counter()
    with make_executor(args.processes) as ex:
        res = run_map(load_scenario(args.scenario), out, spec, strategies=[args.strategy],
                      executor=ex, hitting=False)
    return time.perf_counter() - t0, res


def run_bench(args: argparse.Namespace) -> int:
    """Run the guided map, then (unless skipped) the full grid, and print the figures."""
    with tempfile.TemporaryDirectory(prefix="rtalab-bench-meta-") as tmp:
        wall, res = _map(args, True, Path(tmp) / "guided")
        m = res.maps[args.strategy]
        cells = len(m.cells)
        per_cell = m.model_seconds / cells
        print(f"metastability: guided {args.cells}x{args.cells} map of {args.strategy} on "
              f"{args.scenario}, {args.replications} replications a simulated cell, "
              f"{args.processes} processes: wall {wall:.1f} s (target <= 300 s)")
        print(f"metastability: fast model {per_cell:.3f} s a cell ({m.model_seconds:.1f} s / "
              f"{cells} cells; target <= 1 s)")
        print(f"metastability: simulated cells {100 * m.full_share:.1f} % "
              f"({round(m.full_share * cells)} of {cells}; {m.sim_runs} replications; "
              f"target <= 30 %)")
        if args.skip_full:
            return 0
        full_wall, full = _map(args, False, Path(tmp) / "full")
        f = full.maps[args.strategy]
        g, t = m.thresholds.set_index("load"), f.thresholds.set_index("load")
        inside = sum(1 for load in t.index
                     if t.loc[load, "threshold.ci_low"] <= g.loc[load, "threshold"]
                     <= t.loc[load, "threshold.ci_high"]
                     or (math.isinf(g.loc[load, "threshold"])
                         and math.isinf(t.loc[load, "threshold"])))
        print(f"metastability: full grid wall {full_wall:.1f} s ({f.sim_runs} replications); "
              f"guided / full = {wall:.1f} / {full_wall:.1f} = {wall / full_wall:.2f}x")
        print(f"metastability: guided threshold inside the full grid's 95 % interval in "
              f"{inside} of {len(t)} load rows")
    return 0
