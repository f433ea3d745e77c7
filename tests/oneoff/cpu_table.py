"""The suite's CPU, file by file: read what ``RTALAB_TEST_CPU=<dir>`` wrote (tests/conftest.py).

    mkdir /tmp/cpu && RTALAB_TEST_CPU=/tmp/cpu make test
    .venv/bin/python tests/oneoff/cpu_table.py /tmp/cpu [--top 40]

Per file: wall seconds, CPU of the pytest worker, CPU of the processes it started and waited
for (load runs, servers, notebook kernels), and CPU / wall -- a file well under 1 is waiting
(on a load run's clock, a server), which more xdist workers overlap; near or over 1, it is
CPU, which only less work removes.  The suite's budget is CPU on 2 cores.

``--workers 2 4 6`` adds a schedule model: the files in tests/durations.json's order (longest
first, as tests/conftest.py hands them out), each needing its wall seconds of a quiet run
(durations.json) of which its measured CPU share computes; the running files share the cores
(none runs faster than alone).  It predicts the suite's wall time per number of xdist workers
(on 2026-12-04's figures it gave 18.5 min for -n 2 against 17.1 measured).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--workers", type=int, nargs="*", default=[], help="model these -n values")
    ap.add_argument("--cores", type=float, default=2.0)
    ap.add_argument("--inflation", type=float, default=1.0,
                    help="divide the measured CPU by this (CPU seconds measured on a busy "
                         "host run long: 1.17 for 23.8 vs 20.4 CPU-min)")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for p in sorted(args.dir.glob("*.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        print(f"cpu_table: no rows under {args.dir}", file=sys.stderr)
        return 2
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in rows:
        f = files[r["test"].split("::", 1)[0]]
        f[0] += r["wall"]
        f[1] += r["self"]
        f[2] += r["children"]
        f[3] += 1
    wall = sum(f[0] for f in files.values())
    cpu = sum(f[1] + f[2] for f in files.values())
    print(f"{len(rows)} tests in {len(files)} files: {wall / 60:.1f} min of test wall time, "
          f"{cpu / 60:.1f} CPU-min ({cpu / 120:.1f} min on 2 cores at best)")
    print(f"{'wall s':>8} {'self s':>7} {'child s':>8} {'cpu/wall':>8} {'tests':>5}  file")
    for name, (w, s, c, n) in sorted(files.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[
            :args.top]:
        print(f"{w:8.1f} {s:7.1f} {c:8.1f} {(s + c) / max(w, 1e-9):8.2f} {int(n):5d}  {name}")
    for k in args.workers:
        minutes = schedule({f: v[1] + v[2] for f, v in files.items()}, k, args.cores,
                           args.inflation)
        print(f"model: -n {k} on {args.cores:g} cores: {minutes:.1f} min")
    return 0


def schedule(cpu: dict[str, float], workers: int, cores: float, inflation: float,
             dt: float = 0.05) -> float:
    """Minutes of the suite's wall time on ``workers`` xdist workers (the module doc)."""
    wall = json.loads(DURATIONS.read_text(encoding="utf-8"))
    jobs = []
    for f, w in sorted(wall.items(), key=lambda kv: -kv[1]):
        c = cpu.get(f, 0.0) / inflation
        w = max(w, c, 0.1)
        jobs.append((w, c / w))
    active: list[list[float]] = []
    t = 0.0
    while jobs or active:
        while len(active) < workers and jobs:
            w, share = jobs.pop(0)
            active.append([w, share])
        demand = sum(a[1] for a in active)
        rate = min(1.0, cores / demand) if demand > 0 else 1.0
        for a in active:
            a[0] -= rate * dt
        active = [a for a in active if a[0] > 0]
        t += dt
    return t / 60


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
