"""The suite's CPU, file by file: read what ``RTALAB_TEST_CPU=<dir>`` wrote (tests/conftest.py).

    mkdir /tmp/cpu && RTALAB_TEST_CPU=/tmp/cpu make test
    .venv/bin/python tests/oneoff/cpu_table.py /tmp/cpu [--top 40]

Per file: wall seconds, CPU of the pytest worker, CPU of the processes it started and waited
for (load runs, servers, notebook kernels), and CPU / wall -- a file well under 1 is waiting
(on a load run's clock, a server), which more xdist workers overlap; near or over 1, it is
CPU, which only less work removes.  The suite's budget is CPU on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--top", type=int, default=40)
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
