"""``rtalab bench fleet``: a simulated hour of 1 M calls in bounded memory.

The ``baseline`` preset scaled to ``--calls`` calls in one simulated hour (arrival rate,
Reasoner workers and queue limit multiplied together, so utilisation is the preset's),
with ``[run] records = "none"``: every metric computed, no record row kept.  Each size of
``--fractions`` (shares of the hour: the same rate, a shorter run) runs in its own child
process, which reports its wall time, its CPU time and its own peak RSS; the table prints
them against the number of calls, with CPU time per 1k calls (flat = linear in calls; CPU
time because a shared machine's wall time says more about the neighbours) and peak RSS.
Then one size again with ``records = "all"`` for the RSS that keeping every row costs.
Then (``--skip-executors`` leaves it out) a fleet's replications as independent parts on
two executors side by side: 4 replications of ``baseline`` on 4 replicas (power of two
choices, ``records = "none"``) on 2 local processes and on a Dask LocalCluster of 2
workers; the summaries must be identical and Dask's speed (processes time ÷ Dask time,
each executor started before the clock) is the figure.
Targets (issue 27): the full hour in <= 180 s wall and <= 1.5 GiB peak RSS; Dask >= 0.85x
processes.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from rtalab.sim.shared.argtypes import add_seed, flag, opt, positive_int

WALL_TARGET_S = 180.0
RSS_TARGET_GIB = 1.5
DASK_TARGET = 0.85
HOUR_S = 3600.0


def fleet_scenario(calls_per_hour: int, fraction: float, records: str) -> Any:
    """baseline at ``calls_per_hour``, for ``fraction`` of an hour, keeping ``records``."""
    from rtalab.sim.scenario import load_scenario

    base = load_scenario("baseline")
    rate = calls_per_hour / HOUR_S
    scale = rate / base.workload.calls_per_s
    return base.with_overrides({
        "workload.calls_per_s": rate,
        "reasoner.workers": max(1, round(base.reasoner.workers * scale)),
        "reasoner.queue_limit": max(1, round(base.reasoner.queue_limit * scale)),
        "run.duration_s": HOUR_S * fraction,
        "run.warmup_s": min(base.run.warmup_s, HOUR_S * fraction / 2),
        "run.drain_s": 60.0,
        "run.replications": 1,
        "run.records": records,
    })


def _child(calls_per_hour: int, fraction: float, records: str, seed: int) -> dict[str, Any]:
    from rtalab.sim.runner import run_once
    from rtalab.sim.shared.summary import summarize

    scenario = fleet_scenario(calls_per_hour, fraction, records)
    t0, c0 = time.perf_counter(), time.process_time()
    out = run_once(scenario, seed)
    summary = summarize([out], scenario.run.warmup_s)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = summary["metrics"]
    use = resource.getrusage(resource.RUSAGE_SELF)
    peak = use.ru_maxrss * 1024
    return {"calls": int(out.counters["calls"]), "turns": int(out.counters["turns"]),
            "wall_s": wall, "cpu_s": cpu, "peak_rss": peak,
            "p99_s": m["completion_s.p99"]["mean"], "success": m["success_rate"]["mean"]}


def fleet_parts_scenario(duration_s: float) -> Any:
    """The fleet whose replications the executor comparison runs."""
    from rtalab.sim.scenario import load_scenario

    base = load_scenario("baseline")
    return base.with_overrides({
        "fleet.replicas": 4, "fleet.balancer": "power_of_two", "fleet.state": "shared",
        "workload.calls_per_s": 4 * base.workload.calls_per_s, "run.duration_s": duration_s,
        "run.records": "none"})


def time_parts(duration_s: float, replications: int, seed: int, *,
               processes: int | None = None, dask: str | None = None) -> tuple[float, str]:
    """(seconds, summary JSON) of the fleet's replications on one executor, started (and a
    Dask cluster up) before the clock starts."""
    from rtalab.sim.stream import replication_plan, run_streaming
    from rtalab.sim.sweep import make_executor

    sc = fleet_parts_scenario(duration_s)
    plan = replication_plan(seed, replications)
    with make_executor(processes=processes, dask=dask) as ex:
        t0 = time.perf_counter()
        summary = run_streaming(sc, plan, None, executor=ex)  # type: ignore[arg-type]  # a concurrent.futures.Executor or Dask's, as sweeps pass it
        took = time.perf_counter() - t0
    return took, json.dumps(summary, sort_keys=True)


def measure(calls_per_hour: int, fraction: float, records: str, seed: int) -> dict[str, Any]:
    """One size in a child process: its report (wall time, own peak RSS)."""
    cmd = [sys.executable, "-m", "rtalab.benchmarks.fleet", "--child", str(calls_per_hour),
           str(fraction), records, str(seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"fleet run failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _fractions(text: str) -> list[float]:
    out = [float(x) for x in text.split(",") if x.strip()]
    if not out or any(not 0 < f <= 1 for f in out):
        raise argparse.ArgumentTypeError("fractions of an hour in (0, 1], comma-separated")
    return sorted(out)


def run_bench(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    """Print the scaling table and the headline figure of the full hour."""
    out(f"fleet bench: baseline at {args.calls:,} calls/hour, records = \"none\"")
    out(f"{'share of hour':>13s} {'calls':>10s} {'turns':>11s} {'wall s':>8s} {'CPU s':>8s} "
        f"{'CPU s/1k calls':>14s} {'peak RSS MiB':>12s} {'p99 s':>7s}")
    rows = []
    for f in args.fractions:
        r = measure(args.calls, f, "none", args.seed)
        rows.append(r)
        out(f"{f:13.3f} {r['calls']:10,d} {r['turns']:11,d} {r['wall_s']:8.1f} "
            f"{r['cpu_s']:8.1f} {1000 * r['cpu_s'] / max(1, r['calls']):14.3f} "
            f"{r['peak_rss'] / 2**20:12.0f} "
            f"{r['p99_s'] or float('nan'):7.3f}")
    if not args.skip_all:
        f = args.fractions[0]
        r = measure(args.calls, f, "all", args.seed)
        out(f"records = \"all\" at share {f:.3f}: {r['calls']:,} calls, wall {r['wall_s']:.1f} s, "
            f"peak RSS {r['peak_rss'] / 2**20:.0f} MiB (vs "
            f"{rows[0]['peak_rss'] / 2**20:.0f} MiB without records)")
    small, big = rows[0], rows[-1]
    growth = big["peak_rss"] / small["peak_rss"]
    per_call = [r["cpu_s"] / max(1, r["calls"]) for r in rows]
    out(f"scaling: calls x{big['calls'] / max(1, small['calls']):.1f} -> CPU "
        f"x{big['cpu_s'] / small['cpu_s']:.2f}, wall x{big['wall_s'] / small['wall_s']:.2f}, "
        f"peak RSS x{growth:.2f}; CPU per call min {min(per_call) * 1e6:.0f} us, "
        f"max {max(per_call) * 1e6:.0f} us")
    if not args.skip_executors:
        _executors(args, out)
    full = rows[-1]
    out(f"fleet hour: {full['calls']:,} calls ({full['turns']:,} turns) CPU "
        f"{full['cpu_s']:.1f} s, wall {full['wall_s']:.1f} s (target <= {WALL_TARGET_S:.0f} s) "
        f"peak RSS "
        f"{full['peak_rss'] / 2**20:.0f} MiB (target <= {RSS_TARGET_GIB} GiB)")
    return 0


def _executors(args: argparse.Namespace, out: Callable[[str], None]) -> None:
    """The fleet's replications on 2 processes and on a Dask LocalCluster(2), side by side
    (the same work twice each, alternating; the best of each)."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        out("fleet parts: Dask not installed (pip install 'rtalab[sweep]'): skipped")
        return
    times: dict[str, list[float]] = {"processes": [], "dask": []}
    summaries = set()
    for _ in range(2):
        for name, kw in (("processes", {"processes": 2}), ("dask", {"dask": "local:2"})):
            took, summary = time_parts(args.parts_duration, 4, args.seed, **kw)  # type: ignore[arg-type]  # one keyword per executor
            times[name].append(took)
            summaries.add(summary)
    tp, td = min(times["processes"]), min(times["dask"])
    same = "identical" if len(summaries) == 1 else "DIFFERENT"
    out(f"fleet parts: 4 replications of 4 replicas ({args.parts_duration:g} s each): "
        f"2 processes {tp:.2f} s, Dask LocalCluster(2) {td:.2f} s, summaries {same}; "
        f"Dask / processes {tp / td:.2f} x (target >= {DASK_TARGET:.2f} x)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    opt(p, "--calls N", "calls per simulated hour", positive_int, 1_000_000)
    opt(p, "--fractions LIST", "shares of the hour to run, comma-separated (the last is "
        "the headline figure)", _fractions, [0.125, 0.25, 0.5, 1.0])
    add_seed(p, default=1)
    flag(p, "--skip-all", "skip the records = \"all\" comparison run")
    flag(p, "--skip-executors", "skip the processes vs Dask comparison of a fleet's parts")
    opt(p, "--parts-duration S", "simulated seconds of each replication in that comparison",
        float, 1800.0)


def _child_main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtalab.benchmarks.fleet --child CALLS FRACTION RECORDS SEED``."""
    a = list(sys.argv[1:] if argv is None else argv)
    if len(a) != 5 or a[0] != "--child":
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(_child(int(a[1]), float(a[2]), a[3], int(a[4]))))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
