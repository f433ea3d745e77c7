"""``rtalab sim bench``: simulator speed relative to bare SimPy, and its peak memory.

pyperf style: every figure is printed with the host it was measured on, each
measurement is repeated, and a spread above 10 % prints a warning with the
remedy.  Four figures:

(a) simulated turns/s on the ``baseline`` preset (arrival rate kept, duration
    stretched to ``--turns`` turns, one replication);
(b) customers/s of a bare SimPy M/M/c loop (Poisson arrivals, ``simpy.Resource``
    with c servers, ``with res.request() as req: yield req; yield
    env.timeout(service)``) in the same process;
(c) the cost of one simulated turn ÷ the cost of one bare customer (target ≤ 2×);
(d) with ``--memory``: peak RSS of a child process doing what ``rtalab sim run``
    does (simulate, summarise, write the folder with plots) for ``--memory-turns``
    turns (baseline with arrival rate and Reasoner capacity scaled ×10 and the
    duration stretched, one replication), against the 1.5 GB target.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rtalab.benchmarks import util as benchutil
from rtalab.benchmarks.util import Measurement, warn_if_busy, warn_unstable
from rtalab.sim.shared.argtypes import add_seed, flag, opt, positive_int

RATIO_TARGET = 2.0  # a simulated turn at most 2x a bare SimPy customer
RSS_TARGET_BYTES = int(1.5 * 1024**3)  # 1M turns under 1.5 GB
UNSTABLE_REMEDY = ("Close other programs, use more --repeats or a larger size, "
                   "or pin the CPU (taskset -c 1 ...; python -m pyperf system tune).")
MMC_SERVERS = 8
MMC_RHO = 0.8
MEMORY_SCALE = 10  # ×calls_per_s and ×workers for the memory run: same utilisation, shorter span


# --------------------------------------------------------------------------- workloads


def mmc_run(customers: int, servers: int = MMC_SERVERS, rho: float = MMC_RHO,
            seed: int = 1) -> float:
    """Simulate ``customers`` M/M/c customers in bare SimPy; return the wall time in seconds."""
    import simpy

    env = simpy.Environment()
    res = simpy.Resource(env, capacity=servers)
    rnd = random.Random(seed)
    service_rate = 1.0
    arrival_rate = rho * servers * service_rate

    def customer(env: simpy.Environment, res: simpy.Resource) -> Any:
        with res.request() as req:
            yield req
            yield env.timeout(rnd.expovariate(service_rate))

    def source(env: simpy.Environment) -> Any:
        for _ in range(customers):
            yield env.timeout(rnd.expovariate(arrival_rate))
            env.process(customer(env, res))

    env.process(source(env))
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0


def bench_scenario(turns: int, scale: int = 1) -> Any:
    """The ``baseline`` preset stretched to about ``turns`` turns, one replication.

    ``scale`` multiplies the arrival rate and the Reasoner's workers and queue
    limit together, so utilisation stays that of the preset.
    """
    from rtalab.sim.scenario import load_scenario

    base = load_scenario("baseline")
    calls_per_s = base.workload.calls_per_s * scale
    turns_per_call = max(1.0, math.ceil(base.workload.turns_per_call.mean))
    warmup_s = min(base.run.warmup_s, 10.0)
    duration_s = max(warmup_s + 1.0, turns / (calls_per_s * turns_per_call))
    return base.with_overrides({
        "workload.calls_per_s": calls_per_s,
        "reasoner.workers": base.reasoner.workers * scale,
        "reasoner.queue_limit": base.reasoner.queue_limit * scale,
        "run.duration_s": duration_s,
        "run.warmup_s": warmup_s,
        "run.replications": 1,
    })


def sim_run(scenario: Any, seed: int) -> tuple[int, float]:
    """Run one replication; return (turns simulated, wall seconds)."""
    from rtalab.sim.runner import run_once

    t0 = time.perf_counter()
    out = run_once(scenario, seed)
    wall = time.perf_counter() - t0
    return len(out.turns), wall


def measure_speed(turns: int, customers: int, repeats: int,
                  seed: int) -> tuple[Measurement, Measurement]:
    """Simulated turns/s and bare M/M/c customers/s, timed alternately (after small warm-ups).

    Alternating the two keeps slow drifts of the machine's speed out of their ratio.
    """
    sim_run(bench_scenario(max(200, turns // 20)), seed)  # warm caches and imports
    mmc_run(max(1000, customers // 20), seed=seed)
    scenario = bench_scenario(turns)
    sim_rates, mmc_rates, n_turns = [], [], 0
    for _ in range(repeats):
        n_turns, wall = sim_run(scenario, seed)
        sim_rates.append(n_turns / wall)
        mmc_rates.append(customers / mmc_run(customers, seed=seed))
    sim = Measurement("baseline simulation", "turns", tuple(sim_rates), n_turns)
    name = f"bare SimPy M/M/{MMC_SERVERS} (rho={MMC_RHO:g})"
    return sim, Measurement(name, "customers", tuple(mmc_rates), customers)


# --------------------------------------------------------------------------- memory


def _child_memory_run(turns: int, seed: int) -> dict[str, Any]:
    """In the child: what ``rtalab sim run`` does (simulate, summarise, write the folder with
    plots) for ``turns`` turns, in a temporary folder; report counts and timings."""
    import tempfile

    from rtalab.sim.runner import run_once
    from rtalab.sim.shared import results
    from rtalab.sim.shared.summary import summarize

    scenario = bench_scenario(turns, scale=MEMORY_SCALE)
    t0 = time.perf_counter()
    out = run_once(scenario, seed)
    sim_s = time.perf_counter() - t0
    summary = summarize([out], scenario.run.warmup_s)
    with tempfile.TemporaryDirectory(prefix="rtalab-bench-") as tmp:
        folder = results.RunLifecycle.new(tmp, "bench", scenario_name=scenario.name, seed=seed)
        meta = results.collect_meta(kind="bench", scenario=scenario, seed=seed, replications=1)
        folder.start(scenario, meta)
        results.write_run(folder.path, scenario, [out], summary, meta)
    return {"turns": len(out.turns), "attempts": len(out.attempts), "sim_s": sim_s,
            "wall_s": time.perf_counter() - t0, "duration_s": scenario.run.duration_s}


def _maxrss_bytes(ru_maxrss: int) -> int:
    """``ru_maxrss`` in bytes (kilobytes on Linux, bytes on macOS)."""
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024


def measure_memory(turns: int, seed: int) -> tuple[dict[str, Any], int]:
    """Simulate ``turns`` turns in a child process; return its report and its peak RSS in bytes."""
    cmd = [sys.executable, "-m", "rtalab.benchmarks.sim", "--memory-child", str(turns),
           "--seed", str(seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"memory run failed (exit {proc.returncode}): {tail}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    peak = _maxrss_bytes(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return report, peak


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class CostRatio:
    """Figure (c): the cost of one simulated turn ÷ the cost of one bare M/M/c customer."""

    per_turn_us: float
    per_customer_us: float
    target: float

    @property
    def ratio(self) -> float:
        """Microseconds per turn ÷ microseconds per customer (> 1: a turn costs more)."""
        return self.per_turn_us / self.per_customer_us

    @property
    def verdict(self) -> str:
        """``PASS`` at or under the target, else ``WARN``."""
        return "PASS" if self.ratio <= self.target else "WARN"

    def line(self) -> str:
        """The report line."""
        return (f"cost ratio: {self.per_turn_us:,.1f} us per turn / {self.per_customer_us:,.1f} us "
                f"per customer = {self.ratio:.2f}x (target <= {self.target:g}x): {self.verdict}")


def cost_ratio(sim: Measurement, mmc: Measurement, target: float = RATIO_TARGET) -> CostRatio:
    """Cost per simulated turn (1 / turns per s) over cost per bare customer (1 / customers
    per s), from the mean rates of the two measurements."""
    if sim.mean <= 0.0 or mmc.mean <= 0.0:
        raise ValueError("rates must be positive")
    return CostRatio(1e6 / sim.mean, 1e6 / mmc.mean, target)


def host_line() -> str:
    """One line naming the machine and software the figures were measured on."""
    from rtalab.sim.shared.results import package_versions

    v = package_versions()
    return benchutil.host_line({"Python": v["python"], "simpy": v["simpy"],
                                "numpy": v["numpy"]})


def run_bench(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    """Run the benchmark described by ``args``; print the report; 0 unless the run itself failed."""
    out("rtalab sim bench")
    out(host_line())
    warn_if_busy(out)

    if not args.skip_speed:
        sim, mmc = measure_speed(args.turns, args.customers, args.repeats, args.seed)
        out(sim.line())
        out(mmc.line())
        for m in (sim, mmc):
            warn_unstable(m, out, UNSTABLE_REMEDY)
        cost = cost_ratio(sim, mmc)
        out(cost.line())
        if cost.verdict == "WARN":
            out("  remedy: profile a run (python -m cProfile -s tottime -m rtalab.sim.cli sim run "
                "baseline --set run.duration_s=3000 run.replications=1 --no-plots --quiet) "
                "and remove per-chunk events, polling timers and per-event DataFrame/dict "
                "work from the model's hot path.")

    if args.memory:
        report, peak = measure_memory(args.memory_turns, args.seed)
        verdict = "PASS" if peak <= RSS_TARGET_BYTES else "WARN"
        out(f"memory: {report['turns']:,} turns ({report['attempts']:,} attempts, "
            f"{report['duration_s']:,.0f} simulated s at {MEMORY_SCALE}x baseline load), "
            f"simulated in {report['sim_s']:.1f} s, summarised and written with plots in "
            f"{report['wall_s']:.1f} s; peak RSS {peak / 1024**2:,.0f} MiB "
            f"(target <= {RSS_TARGET_BYTES / 1024**3:g} GiB): {verdict}")
        if verdict == "WARN":
            out("  remedy: keep records as columnar arrays (not per-record objects), drop "
                "finished dedup entries, and build DataFrames once at the end of a run.")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab bench sim``."""
    opt(p, "--turns N", "simulated turns per timed run", positive_int, 100_000)
    opt(p, "--customers N", "bare M/M/c customers per timed run", positive_int, 300_000)
    opt(p, "--repeats K", "timed runs of each benchmark", positive_int, 3)
    add_seed(p, default=1)
    flag(p, "--memory", "also simulate --memory-turns turns in a child and report peak RSS")
    opt(p, "--memory-turns N", "turns of the memory run", positive_int, 1_000_000)
    flag(p, "--skip-speed", "skip (a)-(c), e.g. with --memory for the memory figure alone")


def _child_main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtalab.benchmarks.sim --memory-child N``: the memory run's child process."""
    p = argparse.ArgumentParser(prog="python -m rtalab.benchmarks.sim")
    p.add_argument("--memory-child", type=int, required=True, metavar="TURNS")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    print(json.dumps(_child_memory_run(a.memory_child, a.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
