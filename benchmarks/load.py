"""``rtalab load bench``: turns/s of the Live users against bare clients, same canned stream.

A canned server (:mod:`rtalab.loadtests.loadrun.canned`) runs on one CPU; each client
variant (:mod:`rtalab.benchmarks.load_client`) runs in its own process pinned
to another CPU (one core), with ``--users`` users for ``--seconds`` after a
1-s warm-up.  Rounds alternate the variants (bare, live, bare, live, ...) so
machine noise hits both; the table shows the median turns/s per variant,
client CPU per turn, the turns/s ratio Live / bare and the CPU ratio (bare
CPU per turn / Live CPU per turn: what one saturated core would give; target
>= 0.7 for every binding: JSON-RPC/SSE, HTTP+JSON, WebSocket).  Timing on a shared
machine is noisy: re-measure on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any, cast

from rtalab.loadtests.common.procs import LOCALHOST, free_port, port_open, start_process
from rtalab.sim.shared.argtypes import non_negative, positive_int

TARGET_RATIO = 0.7
PAIRS = (("sse", "bare-sse", "live-sse"), ("rest", "bare-rest", "live-rest"),
         ("ws", "bare-ws", "live-ws"), ("grpc", "bare-grpc", "live-grpc"))
SETS = {"both": ("sse", "ws"), "all": tuple(b for b, _, _ in PAIRS)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab load bench``."""
    p.add_argument("--seconds", type=non_negative, default=5.0, help="measuring window")
    p.add_argument("--users", type=positive_int, default=20, help="concurrent users")
    p.add_argument("--rounds", type=positive_int, default=3, help="alternating rounds")
    p.add_argument("--binding", choices=(*(b for b, _, _ in PAIRS), *SETS), default="all",
                   help="which Live users to measure: one binding, both (sse and ws) or all "
                        "(sse, rest, ws and grpc; default all)")
    p.add_argument("--no-pin", action="store_true", help="do not pin server and client CPUs")


def measure(variant: str, url: str, seconds: float, users: int, cpu: int | None
            ) -> dict[str, Any]:
    """One client process run; its JSON line."""
    env = dict(os.environ)
    if cpu is not None:
        env["RTALAB_BENCH_CPU"] = str(cpu)
    out = subprocess.run([sys.executable, "-m", "rtalab.benchmarks.load_client", variant, url,
                          str(seconds), str(users)], capture_output=True, text=True, env=env,
                         timeout=seconds + 60)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{variant}: client failed: {out.stderr.strip()[-500:]}")
    return cast("dict[str, Any]", json.loads(lines[-1]))


def ratio_table(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per binding: median turns/s of bare and live, CPU ms per turn, and live/bare."""
    rows = []
    for binding, bare, live in PAIRS:
        if bare not in results or live not in results:
            continue
        rate = {v: statistics.median(r["turns"] / r["seconds"] for r in results[v])
                for v in (bare, live)}
        cpu = {v: statistics.median(1000.0 * r["cpu_s"] / max(1, r["turns"])
                                    for r in results[v]) for v in (bare, live)}
        rows.append({"binding": binding, "bare_turns_per_s": rate[bare],
                     "live_turns_per_s": rate[live], "bare_cpu_ms_per_turn": cpu[bare],
                     "live_cpu_ms_per_turn": cpu[live],
                     "ratio": rate[live] / rate[bare] if rate[bare] else float("nan"),
                     "cpu_ratio": cpu[bare] / cpu[live] if cpu[live] else float("nan")})
    return rows


def run_bench(args: argparse.Namespace) -> int:
    """Start the canned server, run the rounds, print the table."""
    pin = not args.no_pin and hasattr(os, "sched_getaffinity") and len(
        os.sched_getaffinity(0)) >= 2
    cpus = sorted(os.sched_getaffinity(0)) if pin else []
    http_port, ws_port, grpc_port = free_port(), free_port(), free_port()
    cmd = [sys.executable, "-m", "rtalab.loadtests.loadrun.canned", str(http_port), str(ws_port),
           str(grpc_port)]
    if pin:
        cmd = ["taskset", "-c", str(cpus[1]), *cmd]
    server = start_process(cmd, ready_check=lambda: port_open(LOCALHOST, http_port) and
                           port_open(LOCALHOST, ws_port) and port_open(LOCALHOST, grpc_port),
                           name="canned", port=http_port)
    urls = {"sse": f"http://{LOCALHOST}:{http_port}", "rest": f"http://{LOCALHOST}:{http_port}",
            "ws": f"http://{LOCALHOST}:{ws_port}", "grpc": f"{LOCALHOST}:{grpc_port}"}
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for rnd in range(args.rounds):
            for binding, bare, live in PAIRS:
                if binding not in SETS.get(args.binding, (args.binding,)):
                    continue
                order = (bare, live) if rnd % 2 == 0 else (live, bare)
                for v in order:
                    r = measure(v, urls[binding], args.seconds, args.users,
                                cpus[0] if pin else None)
                    results.setdefault(v, []).append(r)
                    print(f"round {rnd + 1}/{args.rounds} {v:9s} "
                          f"{r['turns'] / r['seconds']:8.0f} turns/s", file=sys.stderr)
    finally:
        server.stop()
    rows = ratio_table(results)
    print(f"{'binding':8s} {'bare t/s':>10s} {'live t/s':>10s} {'bare ms/t':>10s} "
          f"{'live ms/t':>10s} {'live/bare':>10s} {'cpu ratio':>10s}  (target >= {TARGET_RATIO})")
    for r in rows:
        print(f"{r['binding']:8s} {r['bare_turns_per_s']:10.0f} {r['live_turns_per_s']:10.0f} "
              f"{r['bare_cpu_ms_per_turn']:10.3f} {r['live_cpu_ms_per_turn']:10.3f} "
              f"{r['ratio']:10.2f} {r['cpu_ratio']:10.2f}")
    print("live/bare = turns/s ratio (valid when the client core is saturated); cpu ratio = "
          "bare CPU per turn / live CPU per turn (the one-core capacity ratio)")
    return 0
