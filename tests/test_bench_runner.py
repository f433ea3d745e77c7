"""``rtalab bench all``: each headline figure read right, one verdict rule, one table."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtalab.benchmarks import run as R

REPO = Path(__file__).resolve().parents[1]

# real output lines of each benchmark (shortened where the parser does not look), each followed
# by the rows its parser must read from them: (figure, value, op, target, spread, verdict)
SIM_OUT = """rtalab sim bench
baseline simulation: 60,319 turns/s ± 2.8% (2 runs of 2,064 turns; min 59,145, max 61,493)
bare SimPy M/M/8 (rho=0.8): 138,399 customers/s ± 1.9% (2 runs of 6,000 customers; min 136,554, max 140,244)
cost ratio: 16.6 us per turn / 7.2 us per customer = 2.29x (target <= 2x): WARN
"""
SIM_READ = [("cost per turn / cost per bare M/M/c customer", 2.29, "<=", 2.0, "4%", "WARN")]
MEMORY_OUT = ("memory: 1,008,000 turns (1,050,000 attempts, 540,000 simulated s at 4x baseline "
              "load), simulated in 50.1 s, summarised and written with plots in 61.0 s; peak RSS "
              "612 MiB (target <= 1.5 GiB): PASS\n")
MEMORY_READ = [("peak RSS of 1,008,000 simulated turns", 612.0, "<=", 1536.0, "–", "PASS")]
SWEEP_OUT = """(a) sweep of 16 points (1200 simulated s each), median of 3: 1 process 40.100 s, 2 processes 21.000 s: speed-up 40.100 / 21.000 = 1.91x (target >= 1.8): PASS
(c) coordinator of a 200-point sweep (30.2 s on 2 processes): peak RSS 183 MB (target <= 500): PASS
(d) rtalab sim run baseline (300 s): 60 replications peak RSS 240 MB (50.0 s), 3 replications 200 MB (4.0 s): ratio 240 / 200 = 1.20 (target <= 1.2): PASS
"""
SWEEP_READ = [("sweep speed-up, 1 -> 2 processes", 1.91, ">=", 1.8, "–", "PASS"),
              ("sweep coordinator peak RSS", 183.0, "<=", 500.0, "–", "PASS"),
              ("run peak RSS, many / few replications", 1.2, "<=", 1.2, "–", "PASS")]
SERVE_OUT = ("sqlite vs none: throughput ratio 0.93x [rounds 0.90..0.96] (target >= 0.8x: PASS), "
             "CPU-per-turn ratio 0.85x [rounds 0.80..0.88] (target >= 0.8x: PASS)\n"
             "redis vs none: throughput ratio 0.70x [rounds 0.69..0.71]\n")
SERVE_READ = [("SQLite / none, throughput ratio", 0.93, ">=", 0.8, "6%", "PASS"),
              ("SQLite / none, CPU-per-turn ratio", 0.85, ">=", 0.8, "9%", "PASS")]
CHECK_OUT = """checker bench: 1,001,485 ledger rows (1,001,485 lines), best of 3
  end to end  0.812 s  1,233,356 rows/s  (meets target 1,000,000 rows/s)
"""
CHECK_READ = [("rows/s on 1,001,485 ledger rows", 1233356.0, ">=", 1e6, "–", "PASS")]
CALIBRATE_OUT = ("calibrate: 1,000,000 ledger rows (350 MB JSONL): wall 6.40 s best, 8.00 s worst "
                 "of 3; CPU (all threads) 6.1-7.5 s (target <= 10 s; load average 1.0 on 2 "
                 "CPUs: on a shared machine read the CPU time); recovered workers = 8 (truth 8)\n")
CALIBRATE_READ = [("seconds for 1,000,000 ledger rows", 6.4, "<=", 10.0, "25%", "PASS")]
LOAD_OUT = """binding    bare t/s   live t/s  bare ms/t  live ms/t  live/bare  cpu ratio  (target >= 0.7)
sse            2000       1500      0.500      0.650       0.75       0.77
ws             2600       1700      0.380      0.610       0.65       0.62
"""
LOAD_READ = [("sse: live / bare CPU per turn", 0.77, ">=", 0.7, "–", "PASS"),
             ("ws: live / bare CPU per turn", 0.62, ">=", 0.7, "–", "WARN")]
ANSWERS_OUT = "search: 19 points evaluated vs 256 for a full sweep of reasoner.workers\n"
ANSWERS_READ = [("points evaluated / full sweep", 7.4, "<=", 40.0, "–", "PASS")]
REPORT_OUT = ("rtalab report, 50-point sweep: median 3.10 s wall (range 2.90-3.60), 2.80 s CPU; "
              "target <= 5 s\n")
REPORT_READ = [("seconds for a 50-point sweep", 3.1, "<=", 5.0, "23%", "PASS")]
FLEET_OUT = ("fleet parts: 4 replications of 4 replicas (1800 s each): 2 processes 7.10 s, "
             "Dask LocalCluster(2) 7.90 s, summaries identical; Dask / processes 0.90 x "
             "(target >= 0.85 x)\n"
             "fleet hour: 1,000,172 calls (4,000,688 turns) CPU 146.6 s, wall 150.2 s (target "
             "<= 180 s) peak RSS 520 MiB (target <= 1.5 GiB)\n")
FLEET_READ = [("wall s, an hour of 1,000,172 calls (no records)", 150.2, "<=", 180.0, "–", "PASS"),
              ("peak RSS, an hour of 1,000,172 calls (no records)", 520.0, "<=", 1536.0, "–",
               "PASS"),
              ("a fleet's parts: Dask LocalCluster(2) / 2 processes", 0.9, ">=", 0.85, "–",
               "PASS")]

PARSERS = {  # name -> (parser, its benchmark's output, the rows it must read)
    "sim": (R.parse_sim, SIM_OUT, SIM_READ),
    "memory": (R.parse_sim_memory, MEMORY_OUT, MEMORY_READ),
    "sweep": (R.parse_sweep, SWEEP_OUT, SWEEP_READ),
    "serve": (R.parse_serve, SERVE_OUT, SERVE_READ),
    "check": (R.parse_check, CHECK_OUT, CHECK_READ),
    "calibrate": (R.parse_calibrate, CALIBRATE_OUT, CALIBRATE_READ),
    "load": (R.parse_load, LOAD_OUT, LOAD_READ),
    "answers": (R.parse_answers, ANSWERS_OUT, ANSWERS_READ),
    "report": (R.parse_report, REPORT_OUT, REPORT_READ),
    "fleet": (R.parse_fleet, FLEET_OUT, FLEET_READ),
}


def test_a_fleet_whose_parts_disagree_across_executors_fails_whatever_its_speed() -> None:
    out = FLEET_OUT.replace("summaries identical", "summaries DIFFERENT")
    [dask] = [r for r in R.parse_fleet(out, "c") if "Dask" in r.figure]
    assert (dask.value, dask.verdict) == (0.0, "WARN")


def _facts(rows: list[R.Row]) -> list[tuple[str, float, str, float, str, str]]:
    return [(r.figure, r.value, r.op, r.target, r.spread, r.verdict) for r in rows]


@pytest.mark.parametrize("name", PARSERS)
def test_each_parser_reads_its_benchmarks_headline_figure(name: str) -> None:
    parse, out, read = PARSERS[name]
    assert _facts(parse(out, "c")) == read


@pytest.mark.parametrize("name", PARSERS)
def test_a_missing_figure_gives_no_row_not_a_made_up_one(name: str) -> None:
    parse, _, _ = PARSERS[name]
    assert parse("Traceback (most recent call last):\n  boom\n", "c") == []


@pytest.mark.parametrize("op, value, target, verdict", [
    (">=", 0.8, 0.8, "PASS"), (">=", 0.79, 0.8, "WARN"),
    ("<=", 2.0, 2.0, "PASS"), ("<=", 2.01, 2.0, "WARN")])
def test_one_verdict_rule_for_every_row(op: str, value: float, target: float,
                                        verdict: str) -> None:
    assert R.Row("b", "f", value, "x", op, target, "–", "c").verdict == verdict


def test_table_splices_between_the_markers_only() -> None:
    doc = f"# Benchmarks\nintro\n{R.START}\nold table\n{R.END}\nafter\n"
    assert R.splice(doc, "NEW\n") == f"# Benchmarks\nintro\n{R.START}\nNEW\n{R.END}\nafter\n"
    with pytest.raises(ValueError):
        R.splice("# no markers\n", "NEW\n")


def test_docs_benchmarks_page_has_the_markers() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert text.count(R.START) == 1 and text.count(R.END) == 1


def test_bench_all_runs_and_writes_one_table(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n{R.START}\n{R.END}\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "bench", "all", "--quick",
                        "--only", "check,calibrate", "--results", str(tmp_path / "res"),
                        "--docs", str(doc)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    (folder,) = (tmp_path / "res").iterdir()
    rows = list(csv.DictReader((folder / "bench.csv").open(encoding="utf-8")))
    assert [(r["bench"], r["op"], r["target"]) for r in rows] == [
        ("delivery checker", ">=", "1e+06"), ("calibration", "<=", "10")]
    assert all(r["verdict"] == ("PASS" if (float(r["value"]) >= float(r["target"])
                                           if r["op"] == ">=" else
                                           float(r["value"]) <= float(r["target"])) else "WARN")
               for r in rows)
    table = (folder / "bench.md").read_text(encoding="utf-8")
    assert table.startswith("Measured ") and table.count("\n| ") == 3  # header + 2 rows
    assert table in doc.read_text(encoding="utf-8")


def test_bench_all_rejects_an_unknown_name_in_one_line() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "bench", "all", "--only", "nope"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                       check=False)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "unknown benchmark 'nope'" in p.stderr
