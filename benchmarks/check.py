"""``rtalab check --bench``: checker throughput on synthetic ledger rows (target >= 1M rows/s).

Writes a clean synthetic ledger of about ``--rows`` rows (attempts + events +
turns + witness, :mod:`rtalab.loadtests.check.synth`) to a temporary run folder, then
times ``check_run`` (read + all rules, no files written) ``--repeat`` times and
reports the best: rows per second end to end, and the read / rules split (the
events ledger is parsed in the background while the first rules run, so "read"
covers the other ledgers and "rules" includes waiting for the events).  It
also prints the process CPU time of that run (all threads): on a machine shared
with other work the wall time is inflated by waiting for a core, the CPU time
much less so, and ``rows / cpu`` is the rate one fully available core would reach.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from rtalab.loadtests.check.ledger import read_ledgers
from rtalab.loadtests.check.run import evaluate, load_policy
from rtalab.loadtests.check.synth import clean_ledger, rows_for, write_ledger

TARGET_ROWS_PER_S = 1_000_000


def count_lines(folder: Path) -> int:
    """Non-empty lines of every ``*.jsonl`` in ``folder`` (the rows a checker must read)."""
    n = 0
    for p in sorted(folder.glob("*.jsonl")):
        with p.open("rb") as f:
            n += sum(1 for line in f if line.strip())
    return n


def run_bench(rows: int = 1_000_000, repeat: int = 3, seed: int = 1) -> dict[str, Any]:
    """Time the checker on ~``rows`` synthetic rows; the measurements as a dict."""
    with tempfile.TemporaryDirectory(prefix="rtalab-check-bench-") as tmp:
        run = write_ledger(Path(tmp), clean_ledger(rows_for(rows), seed=seed))
        lines = count_lines(run / "ledger")
        policy, _ = load_policy(run)
        best: tuple[float, float, float, float] | None = None
        ok = True
        read_rows = 0
        for _ in range(repeat):
            c0, t0 = time.process_time(), time.perf_counter()
            led = read_ledgers(run)
            t1 = time.perf_counter()
            verdict = evaluate(led, policy)
            t2, c2 = time.perf_counter(), time.process_time()
            ok = ok and verdict.ok
            read_rows = led.rows
            if best is None or t2 - t0 < best[0]:
                best = (t2 - t0, t1 - t0, t2 - t1, c2 - c0)
    assert best is not None
    total, read_s, rules_s, cpu_s = best
    return {"rows": read_rows, "lines": lines, "seconds": total, "read_s": read_s,
            "rules_s": rules_s, "cpu_s": cpu_s, "rows_per_cpu_s": read_rows / cpu_s,
            "rows_per_s": read_rows / total,
            "rules_rows_per_s": read_rows / rules_s, "verdict_ok": ok, "repeat": repeat}


def format_bench(r: dict[str, Any]) -> str:
    """The printed report."""
    verdict = "PASS (clean ledger)" if r["verdict_ok"] else "FAIL (unexpected on a clean ledger)"
    target = "meets" if r["rows_per_s"] >= TARGET_ROWS_PER_S else "below"
    return (f"checker bench: {r['rows']:,} ledger rows ({r['lines']:,} lines), best of "
            f"{r['repeat']}\n"
            f"  end to end  {r['seconds']:.3f} s  {r['rows_per_s']:,.0f} rows/s  ({target} "
            f"target {TARGET_ROWS_PER_S:,} rows/s)\n"
            f"  read        {r['read_s']:.3f} s  (events ledger: parsed alongside the rules)\n"
            f"  rules       {r['rules_s']:.3f} s  {r['rules_rows_per_s']:,.0f} rows/s\n"
            f"  cpu         {r['cpu_s']:.3f} s (all threads; {r['rows_per_cpu_s']:,.0f} rows per "
            f"CPU-second)\n"
            f"  verdict     {verdict}\n")
