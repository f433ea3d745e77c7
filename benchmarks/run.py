"""``rtalab bench all`` (``make bench``): every benchmark, one table.

Each benchmark keeps its own command (and its detailed report on stderr here); this runner
runs them one after another, reads each one's headline figure from its output and writes
one row per figure: benchmark, figure, spread, target, PASS/WARN, and the command that
reproduces it.  The verdict is computed here, from the figure and the stated target, the
same way for every benchmark.  Output: ``<results>/<UTC time>-bench/bench.md`` and
``bench.csv``, and with ``--docs FILE`` the table between the ``bench-table`` markers of
that file (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
NUM = r"([\d,]+(?:\.\d+)?)"


@dataclass(frozen=True)
class Row:
    """One figure of one benchmark against its target (``op`` is ``>=`` or ``<=``)."""

    bench: str
    figure: str
    value: float
    unit: str
    op: str
    target: float
    spread: str
    command: str

    @property
    def verdict(self) -> str:
        """PASS when the figure meets the target, else WARN (a figure, not a failure)."""
        ok = self.value >= self.target if self.op == ">=" else self.value <= self.target
        return "PASS" if ok else "WARN"


Parse = Callable[[str, str], list[Row]]


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _spread(lo: float, hi: float, mid: float) -> str:
    """(max - min) / median, the spread every row reports."""
    return f"{(hi - lo) / mid:.0%}" if mid else "–"


def parse_sim(out: str, cmd: str) -> list[Row]:
    """``rtalab bench sim``: the cost ratio of a simulated turn to a bare SimPy customer."""
    m = re.search(rf"= {NUM}x \(target <= {NUM}x\)", out)
    if not m:
        return []
    spreads = [(_num(lo), _num(hi)) for lo, hi in
               re.findall(rf"min {NUM}, max {NUM}\)", out)]
    worst = max((hi - lo) / ((hi + lo) / 2) for lo, hi in spreads) if spreads else 0.0
    return [Row("simulator speed", "cost per turn / cost per bare M/M/c customer",
                _num(m.group(1)), "x", "<=", _num(m.group(2)), f"{worst:.0%}", cmd)]


def parse_sim_memory(out: str, cmd: str) -> list[Row]:
    """``rtalab bench sim --memory``: peak RSS of the memory run."""
    m = re.search(rf"memory: {NUM} turns .* peak RSS {NUM} MiB \(target <= {NUM} GiB\)", out)
    if not m:
        return []
    return [Row("simulator memory", f"peak RSS of {m.group(1)} simulated turns",
                _num(m.group(2)), "MiB", "<=", _num(m.group(3)) * 1024, "–", cmd)]


def parse_sweep(out: str, cmd: str) -> list[Row]:
    """``rtalab bench sweep``: (a)-(d), each ``= V (target OP T)``."""
    rows = []
    for tag, name, unit in (("a", "sweep speed-up, 1 -> 2 processes", "x"),
                            ("b", "Dask LocalCluster(2) / 2 processes", "x"),
                            ("c", "sweep coordinator peak RSS", "MB"),
                            ("d", "run peak RSS, many / few replications", "x")):
        line = next((ln for ln in out.splitlines() if ln.startswith(f"({tag})")), None)
        m = line and re.search(rf"(?:= |RSS ){NUM}x? (?:MB )?\(target (<=|>=) {NUM}\)", line)
        if m:
            rows.append(Row("sweep engine", name, _num(m.group(1)), unit, m.group(2),
                            _num(m.group(3)), "–", cmd))
    return rows


def parse_serve(out: str, cmd: str) -> list[Row]:
    """``rtalab serve bench``: SQLite dedup store vs none, throughput and CPU per turn."""
    rows = []
    for label in ("throughput ratio", "CPU-per-turn ratio"):
        m = re.search(rf"sqlite vs none: .*?{label} {NUM}x(?: \[rounds {NUM}\.\.{NUM}\])? "
                      rf"\(target >= {NUM}x", out)
        if m:
            v = _num(m.group(1))
            spread = _spread(_num(m.group(2)), _num(m.group(3)), v) if m.group(2) else "–"
            rows.append(Row("Reasoner dedup store", f"SQLite / none, {label}", v, "x", ">=",
                            _num(m.group(4)), spread, cmd))
    return rows


def parse_check(out: str, cmd: str) -> list[Row]:
    """``rtalab check --bench``: checker rows per second, end to end."""
    m = re.search(rf"end to end\s+{NUM} s\s+{NUM} rows/s.*target {NUM} rows/s", out)
    n = re.search(rf"checker bench: {NUM} ledger rows", out)
    if not m:
        return []
    return [Row("delivery checker", f"rows/s on {n.group(1) if n else '?'} ledger rows",
                _num(m.group(2)), "rows/s", ">=", _num(m.group(3)), "–", cmd)]


def parse_calibrate(out: str, cmd: str) -> list[Row]:
    """``rtalab bench calibrate``: best wall time (CPU time on a busy machine)."""
    m = re.search(rf"calibrate: {NUM} ledger rows .* wall {NUM} s best, {NUM} s worst .*"
                  rf"target <= {NUM} s", out)
    if not m:
        return []
    best, worst = _num(m.group(2)), _num(m.group(3))
    return [Row("calibration", f"seconds for {m.group(1)} ledger rows", best, "s", "<=",
                _num(m.group(4)), _spread(best, worst, best), cmd)]


def parse_load(out: str, cmd: str) -> list[Row]:
    """``rtalab load bench``: Live users' turns/s relative to bare Locust users."""
    t = re.search(rf"\(target >= {NUM}\)", out)
    if not t:
        return []
    rows = []
    for binding, _turns_ratio, cpu in re.findall(
            r"^(sse|rest|grpc|ws)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s*$",
            out, re.M):
        rows.append(Row("Live users (Locust)", f"{binding}: live / bare CPU per turn",
                        float(cpu), "x", ">=", _num(t.group(1)), "–", cmd))
    return rows


def parse_grpc(out: str, cmd: str) -> list[Row]:
    """``rtalab bench grpc``: the Reasoner's gRPC turns/s relative to its JSON-RPC figure."""
    m = re.search(rf"grpc / jsonrpc turns/s: {NUM}x \[rounds {NUM}\.\.{NUM}\] "
                  rf"\(target >= {NUM}x", out)
    if not m:
        return []
    v = _num(m.group(1))
    return [Row("Reasoner gRPC", "gRPC / JSON-RPC turns/s", v, "x", ">=", _num(m.group(4)),
                _spread(_num(m.group(2)), _num(m.group(3)), v), cmd)]


def parse_answers(out: str, cmd: str) -> list[Row]:
    """``rtalab sim capacity``: points evaluated as a share of a full sweep of the knob."""
    m = re.search(r"search: (\d+) points evaluated vs (\d+) for a full sweep", out)
    if not m:
        return []
    share = 100 * int(m.group(1)) / int(m.group(2))
    return [Row("capacity search", "points evaluated / full sweep", round(share, 1), "%",
                "<=", 40.0, "–", cmd)]


def parse_metastability(out: str, cmd: str) -> list[Row]:
    """``rtalab bench metastability``: guided map wall time, model s/cell, simulated share."""
    rows = []
    for pat, name, unit, target in (
            (rf"wall {NUM} s \(target <= 300 s\)", "seconds for a guided 10x10 map", "s", 300.0),
            (rf"fast model {NUM} s a cell", "fast model seconds a cell", "s", 1.0),
            (rf"simulated cells {NUM} %", "cells given full replications", "%", 30.0)):
        m = re.search(pat, out)
        if m:
            rows.append(Row("metastability map", name, _num(m.group(1)), unit, "<=", target,
                            "", cmd))
    return rows


def parse_report(out: str, cmd: str) -> list[Row]:
    """``rtalab bench report``: HTML report of a 50-point sweep."""
    m = re.search(rf"median {NUM} s wall \(range {NUM}-{NUM}\).*target <= {NUM} s", out)
    if not m:
        return []
    v = _num(m.group(1))
    return [Row("HTML report", "seconds for a 50-point sweep", v, "s", "<=", _num(m.group(4)),
                _spread(_num(m.group(2)), _num(m.group(3)), v), cmd)]


def parse_fleet(out: str, cmd: str) -> list[Row]:
    """``rtalab bench fleet``: wall time and peak RSS of the simulated hour."""
    m = re.search(rf"fleet hour: {NUM} calls .* wall {NUM} s \(target <= {NUM} s\) peak RSS "
                  rf"{NUM} MiB \(target <= {NUM} GiB\)", out)
    if not m:
        return []
    calls = m.group(1)
    rows = [Row("fleet scale", f"wall s, an hour of {calls} calls (no records)",
                _num(m.group(2)), "s", "<=", _num(m.group(3)), "–", cmd),
            Row("fleet scale", f"peak RSS, an hour of {calls} calls (no records)",
                _num(m.group(4)), "MiB", "<=", _num(m.group(5)) * 1024, "–", cmd)]
    d = re.search(rf"summaries (identical|DIFFERENT); Dask / processes {NUM} x "
                  rf"\(target >= {NUM} x\)", out)
    if d:
        # different summaries are a failure whatever the speed: the figure is then 0
        rows.append(Row("fleet scale", "a fleet's parts: Dask LocalCluster(2) / 2 processes",
                        _num(d.group(2)) if d.group(1) == "identical" else 0.0, "x", ">=",
                        _num(d.group(3)), "–", cmd))
    return rows


@dataclass(frozen=True)
class Bench:
    """A benchmark: its command (full and ``--quick`` sizes) and the parser of its output."""

    name: str
    argv: tuple[str, ...]
    full: tuple[str, ...]  # the stated sizes (added to argv)
    quick: tuple[str, ...] | None  # tiny sizes; None: not run with --quick
    parse: Parse
    out: str | None = None  # the option naming its output folder (put in the bench folder)


RTALAB = (sys.executable, "-m", "rtalab.sim.cli")
BENCHES: tuple[Bench, ...] = (
    Bench("sim", ("bench", "sim"), (),
          ("--turns", "3000", "--customers", "9000", "--repeats", "2"), parse_sim),
    Bench("sim-memory", ("bench", "sim", "--memory", "--skip-speed"), (),
          ("--memory-turns", "20000"), parse_sim_memory),
    Bench("sweep", ("bench", "sweep"), (),
          ("--points", "2", "--duration", "20", "--repeats", "1", "--rss-points", "6",
           "--rss-duration", "10", "--many", "4", "--few", "2", "--run-duration", "20",
           "--skip-dask"), parse_sweep),
    Bench("serve", ("serve", "bench"), (), ("--turns", "60", "--rounds", "1"), parse_serve),
    Bench("grpc", ("bench", "grpc"), (), ("--turns", "60", "--rounds", "1"), parse_grpc),
    Bench("check", ("check", "--bench"), (), ("--rows", "20000", "--repeat", "2"), parse_check),
    Bench("calibrate", ("bench", "calibrate"), ("--rows", "1000000"),
          ("--rows", "20000", "--repeat", "2"), parse_calibrate),
    Bench("load", ("load", "bench"), ("--seconds", "5", "--rounds", "3", "--users", "50"),
          ("--seconds", "0.5", "--rounds", "1", "--users", "5"), parse_load),
    Bench("answers", ("sim", "capacity", "baseline", "--load", "workload.calls_per_s=1,2,4,8",
                      "--knob", "reasoner.workers", "--range", "1:64",
                      "--slo", "turn_completion_p99_s<=4", "--slo", "success_rate>=0.99"),
          (), ("--set", "run.duration_s=60", "--replications", "2"), parse_answers,
          out="--out"),
    Bench("metastability", ("bench", "metastability"), (),
          ("--cells", "3", "--replications", "2", "--skip-full"), parse_metastability),
    Bench("report", ("bench", "report"), (), None, parse_report),
    Bench("fleet", ("bench", "fleet"), (),
          ("--calls", "20000", "--fractions", "0.05,0.1", "--skip-all", "--parts-duration",
           "60"), parse_fleet),
)
NAMES = tuple(b.name for b in BENCHES)


def command_text(b: Bench, quick: bool) -> str:
    """The command a reader runs to reproduce the row."""
    return " ".join(("rtalab", *b.argv,
                     *((b.quick or ()) if quick else b.full)))


def run_one(b: Bench, quick: bool, out_dir: Path) -> tuple[list[Row], str]:
    """Run one benchmark (its report goes to stderr); its rows and the error, if any."""
    argv = [*RTALAB, *b.argv,
            *((b.quick or ()) if quick else b.full),
            *((b.out, str(out_dir / b.name)) if b.out else ())]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    sys.stderr.write(proc.stdout + proc.stderr)
    rows = b.parse(proc.stdout + proc.stderr, command_text(b, quick))
    if proc.returncode != 0 or not rows:
        tail = (proc.stderr.strip().splitlines() or ["no figure in its output"])[-1]
        return rows, f"{b.name}: exit {proc.returncode}: {tail}"
    return rows, ""


def fmt_number(v: float) -> str:
    """``1,000,000`` / ``221,553`` / ``2.13``: thousands separated, 2 decimals below 100."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def markdown(rows: Sequence[Row], host: str, date: str) -> str:
    """The one table: a header line naming date and host, then one row per figure."""
    lines = [f"Measured {date} on `{host}`.", "",
             "| benchmark | figure | value | spread | target | verdict | command |",
             "|---|---|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.bench} | {r.figure} | {fmt_number(r.value)} {r.unit} | {r.spread} | "
                     f"{r.op} {fmt_number(r.target)} {r.unit} | {r.verdict} | `{r.command}` |")
    return "\n".join(lines) + "\n"


def csv_text(rows: Sequence[Row], host: str, date: str) -> str:
    """The same table as CSV (one column per field, host and date on every row)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["date", "host", "bench", "figure", "value", "unit", "spread", "op", "target",
                "verdict", "command"])
    for r in rows:
        w.writerow([date, host, r.bench, r.figure, f"{r.value:g}", r.unit, r.spread, r.op,
                    f"{r.target:g}", r.verdict, r.command])
    return buf.getvalue()


def splice(doc: str, table: str) -> str:
    """``doc`` with the text between the bench-table markers replaced by ``table``."""
    a, b = doc.find(START), doc.find(END)
    if a < 0 or b < a:
        raise ValueError(f"the markers {START} ... {END} are missing")
    return doc[:a + len(START)] + "\n" + table + doc[b:]


def run_bench(args: argparse.Namespace) -> int:
    """Run the selected benchmarks; write the table; 0 unless a benchmark failed to run."""
    from rtalab.benchmarks.util import host_line
    from rtalab.sim.shared.results import RunLifecycle, package_versions

    names = args.only or list(NAMES)
    v = package_versions()
    host = host_line({"Python": v["python"], "simpy": v["simpy"], "numpy": v["numpy"]})
    host = host.removeprefix("host: ")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    rows: list[Row] = []
    errors: list[str] = []
    out = RunLifecycle.new(args.out, "bench", scenario_name="all", seed=0).path
    for b in BENCHES:
        if b.name in names and not (args.quick and b.quick is None):
            print(f"bench {b.name} ...", file=sys.stderr, flush=True)
            got, err = run_one(b, args.quick, out)
            rows += got
            errors += [err] if err else []
    table = markdown(rows, host, date)
    (out / "bench.md").write_text(table, encoding="utf-8")
    (out / "bench.csv").write_text(csv_text(rows, host, date), encoding="utf-8")
    if args.docs is not None:
        args.docs.write_text(splice(args.docs.read_text(encoding="utf-8"), table),
                             encoding="utf-8")
    print(table)
    print(f"table: {out / 'bench.md'} (and bench.csv)")
    for e in errors:
        print(f"rtalab bench all: {e}", file=sys.stderr)
    return 1 if errors else 0


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown benchmark {', '.join(bad) or text!r}; "
                                         f"choose from {', '.join(NAMES)}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab bench all``."""
    from rtalab.sim.shared.argtypes import add_results_root

    p.add_argument("--only", type=_names, metavar="NAME,...",
                   help=f"run only these ({', '.join(NAMES)}; default all)")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (seconds, not minutes): checks the plumbing, not the figures")
    p.add_argument("--docs", type=Path, metavar="FILE.md",
                   help="also replace the table between the bench-table markers of FILE.md")
    add_results_root(p)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtalab.benchmarks.run`` (same as ``rtalab bench all``)."""
    p = argparse.ArgumentParser(prog="python -m rtalab.benchmarks.run")
    add_arguments(p)
    return run_bench(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
