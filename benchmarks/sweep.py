"""``rtalab sim sweep-bench``: the sweep engine's figures.

(a) speed-up of one sweep from 1 to 2 local processes (target >= 1.8x on 2 cores);
(b) the same sweep on a Dask LocalCluster of 2 workers vs 2 local processes (>= 0.85x);
(c) peak RSS of the coordinator process during a 200-point sweep (< 500 MB);
(d) peak RSS of ``rtalab sim run`` with 60 replications vs 3 (within 20 %).

Wall times include starting the pool or cluster, as a user sees them.  (c) and (d)
run in child processes that report their own ``ru_maxrss`` (workers not included in
(c): it measures what the coordinator holds).  Every ratio is printed with its two
operands so the arithmetic can be checked by eye.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtalab.benchmarks import util as benchutil
from rtalab.sim.shared.argtypes import positive_int

MB = 1_000_000


@dataclass(frozen=True)
class Target:
    """A measured figure and its target: ``value >= target`` (``at_least``) or ``<=``."""

    name: str
    value: float
    target: float
    at_least: bool

    @property
    def passed(self) -> bool:
        """Whether the figure meets its target."""
        return self.value >= self.target if self.at_least else self.value <= self.target

    def verdict(self) -> str:
        """``(target >= 1.8): PASS`` or ``WARN``."""
        op = ">=" if self.at_least else "<="
        return f"(target {op} {self.target:g}): {'PASS' if self.passed else 'WARN'}"


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` of two positive measurements."""
    if not (numerator > 0 and denominator > 0):
        raise ValueError(f"ratio of non-positive measurements {numerator} / {denominator}")
    return numerator / denominator


def speedup(serial_s: float, parallel_s: float) -> Target:
    """(a): wall time with 1 process ÷ wall time with 2 (higher is better)."""
    return Target("speed-up 1 -> 2 processes", ratio(serial_s, parallel_s), 1.8, True)


def dask_relative(processes_s: float, dask_s: float) -> Target:
    """(b): Dask's speed relative to local processes = processes time ÷ Dask time."""
    return Target("Dask LocalCluster(2) vs 2 processes", ratio(processes_s, dask_s), 0.85, True)


def coordinator_rss(peak_bytes: float) -> Target:
    """(c): the coordinator's peak RSS in MB (lower is better)."""
    return Target("coordinator peak RSS (MB)", peak_bytes / MB, 500.0, False)


def replication_growth(rss_many: float, rss_few: float) -> Target:
    """(d): peak RSS of the many-replication run ÷ that of the few-replication run."""
    return Target("RSS many / few replications", ratio(rss_many, rss_few), 1.2, False)


# --------------------------------------------------------------------------- measurements


def bench_points(n: int) -> list[dict[str, Any]]:
    """``n`` points of similar cost: the baseline with 8 .. 8+n-1 workers."""
    return [{"reasoner.workers": 8 + i} for i in range(n)]


def _scenario(duration_s: float) -> Any:
    from rtalab.sim.scenario import load_scenario

    return load_scenario("baseline", {"run.duration_s": duration_s,
                                      "run.warmup_s": min(30.0, duration_s / 4)})


def time_sweep(points: int, duration_s: float, *, processes: int | None = None,
               dask: str | None = None) -> tuple[float, float]:
    """(start-up s, sweep s) of a sweep, records written, no plots: start-up is opening the
    executor (a Dask cluster's start), the sweep is everything after."""
    from rtalab.sim.sweep import make_executor, run_points

    sc = _scenario(duration_s)
    with tempfile.TemporaryDirectory(prefix="rtalab-sweepbench-") as tmp:
        t0 = time.perf_counter()
        with make_executor(processes=processes, dask=dask) as ex:
            t1 = time.perf_counter()
            run_points(sc, bench_points(points), replications=1, root_seed=1, executor=ex,
                       out_dir=Path(tmp) / "sweep", progress=False, plots=False)
            t2 = time.perf_counter()
        return t1 - t0, t2 - t1


def _maxrss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


def _child(args: Sequence[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rtalab.benchmarks.sweep", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"benchmark child failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _coordinator_child(points: int, duration_s: float) -> dict[str, Any]:
    start, t = time_sweep(points, duration_s, processes=2)
    return {"points": points, "wall_s": start + t, "maxrss": _maxrss_bytes()}


def _run_child(replications: int, duration_s: float) -> dict[str, Any]:
    from rtalab.sim import cli

    with tempfile.TemporaryDirectory(prefix="rtalab-sweepbench-") as tmp:
        t0 = time.perf_counter()
        sc = _scenario(duration_s)
        rc = cli.main(["sim", "run", "baseline", "--set", f"run.duration_s={duration_s}",
                       f"run.warmup_s={sc.run.warmup_s}", "--replications", str(replications),
                       "--quiet", "--out", tmp])
        if rc != 0:
            raise RuntimeError(f"rtalab sim run exited {rc}")
        return {"replications": replications, "wall_s": time.perf_counter() - t0,
                "maxrss": _maxrss_bytes()}


# --------------------------------------------------------------------------- report


def run_bench(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    """Measure and print (a)-(d); 0 unless a measurement itself failed."""
    from rtalab.sim.shared.results import package_versions

    v = package_versions()
    out("rtalab sim sweep-bench")
    out(benchutil.host_line({"Python": v["python"], "numpy": v["numpy"]}))
    benchutil.warn_if_busy(out)
    targets = []
    n, d = args.points, args.duration
    time_sweep(2, min(d, 20.0), processes=2)  # start the fork server (once per process)
    t1s, t2s = [], []
    for _ in range(args.repeats):  # alternate, so slow drifts of the machine hit both
        t1s.append(time_sweep(n, d, processes=1)[1])
        t2s.append(time_sweep(n, d, processes=2)[1])
    t1, t2 = statistics.median(t1s), statistics.median(t2s)
    a = speedup(t1, t2)
    out(f"(a) sweep of {n} points ({d:g} simulated s each), median of {args.repeats}: "
        f"1 process {t1:.3f} s, 2 processes {t2:.3f} s: speed-up {t1:.3f} / {t2:.3f} = "
        f"{a.value:.2f}x {a.verdict()}")
    targets.append(a)
    if not args.skip_dask:
        starts, tds = zip(*(time_sweep(n, d, dask="local:2") for _ in range(args.repeats)),
                          strict=True)
        td = statistics.median(tds)
        b = dask_relative(t2, td)
        out(f"(b) same sweep on Dask LocalCluster(2 workers) {td:.2f} s (+ {min(starts):.1f} s "
            f"cluster start) vs 2 processes {t2:.2f} s: relative speed {t2:.2f} / {td:.2f} = "
            f"{b.value:.2f}x {b.verdict()}")
        targets.append(b)
    c_rep = _child(["--coordinator-child", str(args.rss_points),
                    "--duration", str(args.rss_duration)])
    c = coordinator_rss(c_rep["maxrss"])
    out(f"(c) coordinator of a {c_rep['points']}-point sweep ({c_rep['wall_s']:.1f} s on 2 "
        f"processes): peak RSS {c.value:.0f} MB {c.verdict()}")
    targets.append(c)
    many = _child(["--run-child", str(args.many), "--duration", str(args.run_duration)])
    few = _child(["--run-child", str(args.few), "--duration", str(args.run_duration)])
    g = replication_growth(many["maxrss"], few["maxrss"])
    out(f"(d) rtalab sim run baseline ({args.run_duration:g} s): {args.many} replications peak "
        f"RSS {many['maxrss'] / MB:.0f} MB ({many['wall_s']:.1f} s), {args.few} replications "
        f"{few['maxrss'] / MB:.0f} MB ({few['wall_s']:.1f} s): ratio "
        f"{many['maxrss'] / MB:.0f} / {few['maxrss'] / MB:.0f} = {g.value:.2f} {g.verdict()}")
    targets.append(g)
    failed = [t.name for t in targets if not t.passed]
    out("all targets met" if not failed else f"targets missed: {', '.join(failed)} "
        "(timing figures are only meaningful on an otherwise idle machine)")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``rtalab sim sweep-bench`` (defaults: the README figures)."""
    p.add_argument("--points", type=positive_int, default=16, help="points of sweeps (a), (b)")
    p.add_argument("--duration", type=float, default=1200.0,
                   help="simulated seconds per point in (a), (b) (default 1200, so that "
                        "starting the pool does not dominate)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="timed sweeps per executor in (a), (b); the median is used (default 3)")
    p.add_argument("--skip-dask", action="store_true", help="skip (b)")
    p.add_argument("--rss-points", type=positive_int, default=200, help="points of sweep (c)")
    p.add_argument("--rss-duration", type=float, default=20.0,
                   help="simulated seconds per point in (c) (default 20)")
    p.add_argument("--many", type=positive_int, default=60, help="replications, big run of (d)")
    p.add_argument("--few", type=positive_int, default=3, help="replications, small run of (d)")
    p.add_argument("--run-duration", type=float, default=300.0,
                   help="simulated seconds per replication in (d) (default 300, the baseline)")


def _child_main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rtalab.benchmarks.sweep")
    p.add_argument("--coordinator-child", type=int)
    p.add_argument("--run-child", type=int)
    p.add_argument("--duration", type=float, required=True)
    a = p.parse_args(argv)
    if a.coordinator_child:
        print(json.dumps(_coordinator_child(a.coordinator_child, a.duration)))
    else:
        print(json.dumps(_run_child(a.run_child, a.duration)))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
