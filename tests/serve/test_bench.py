"""``rtalab serve bench`` with tiny sizes: real servers, one row per store, no errors.

Not a timed test: it checks the command's output shape and that every turn
completed, never the figures themselves.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtalab.benchmarks.serve import (
    Calls,
    TurnChecker,
    TurnError,
    default_turns_per_context,
    parse_stores,
)
from rtalab.benchmarks.serve_report import (
    Sample,
    StoreSummary,
    comparison_lines,
    paired_ratios,
    ratios,
)
from rtalab.loadtests.dedup import open_store

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^(none|sqlite|redis)\s+(\S+)\s+(\S+)%\s+(.*?)\s{2,}(\S+)\s+(\S+)\s+(\S+)\s+"
                 r"(\S+)\s+(\S+)\s+(\d+)$")


def _number(text: str) -> float:
    """A figure of the table (thousands separators allowed)."""
    return float(text.replace(",", ""))


@pytest.mark.skipif(shutil.which("redis-server") is None and not Path(
    "/usr/bin/redis-server").exists(), reason="redis-server is not installed")
def test_bench_prints_a_row_per_store_without_errors(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, "-m", "rtalab.sim.cli", "serve", "bench", "--turns", "60", "--rounds", "1",
         "--warmup", "20", "--concurrency", "10", "--probe-turns", "10",
         "--json", str(out_json)],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "rtalab serve bench"
    assert lines[1].startswith("host: ") and "a2a-sdk" in lines[1]
    (setup,) = [x for x in lines if x.startswith("setup: ")]
    assert f"; {default_turns_per_context()} turns per contextId (a call;" in setup
    rows = {m.group(1): m for line in lines if (m := ROW.match(line))}
    assert set(rows) == {"none", "sqlite", "redis"}, r.stdout
    for store, m in rows.items():
        turns_s, cpu_ms = _number(m.group(2)), _number(m.group(5))
        latencies = [_number(m.group(i)) for i in (6, 7, 8, 9)]
        assert turns_s > 0 and cpu_ms > 0, (store, m.group(0))
        assert all(x > 0 and math.isfinite(x) for x in latencies), (store, m.group(0))
        assert m.group(10) == "0", (store, m.group(0))  # errors
    (sqlite_line,) = [x for x in lines if x.startswith("sqlite vs none: ")]
    assert "throughput ratio" in sqlite_line and "CPU-per-turn ratio" in sqlite_line
    assert sqlite_line.endswith(("PASS)", "WARN)"))
    assert any(x.startswith("redis vs none: ") for x in lines)
    assert any(x.startswith("p99 added latency vs none at concurrency 10") for x in lines)
    assert any(x.startswith("p99 added latency vs none at concurrency 1 ") for x in lines)
    assert "ERROR" not in r.stdout
    data = json.loads(out_json.read_text())
    assert set(data["summary"]) == {"none", "sqlite", "redis"}
    assert all(s["errors"] == 0 and s["turns_per_s_median"] > 0
               for s in data["summary"].values())
    assert len(data["samples"]) == 3 and all(len(s["latencies_ms"]) == 60
                                             for s in data["samples"])
    assert data["settings"]["turns_per_context"] == default_turns_per_context()


def test_turns_per_context_default_is_the_baseline_calls() -> None:
    from rtalab.sim.scenario import load_scenario

    per_call = load_scenario("baseline").workload.turns_per_call.mean
    assert default_turns_per_context() == max(1, math.ceil(per_call)) == 4


def test_calls_group_a_connections_turns_by_context() -> None:
    calls = Calls(3)
    turns = [0, 2, 5, 6, 9, 11, 12]  # the turn numbers one connection drew
    assert [calls.context_of(i) for i in turns] == [0, 0, 0, 6, 6, 6, 12]
    one = Calls(1)
    assert [one.context_of(i) for i in turns] == turns
    with pytest.raises(ValueError):
        Calls(0)


def test_checker_accepts_a_complete_turn_split_anywhere() -> None:
    events = [{"task": {"status": {"state": "TASK_STATE_SUBMITTED"}}},
              {"statusUpdate": {"status": {"state": "TASK_STATE_WORKING"}}},
              *({"artifactUpdate": {"artifact": {}}} for _ in range(3)),
              {"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}}]
    body = b"".join(b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": e}).encode()
                    + b"\r\n\r\n" for e in events)
    for cut in (1, 7, len(body) // 2, len(body) - 3):
        checker = TurnChecker(3)
        checker.feed(body[:cut])
        checker.feed(body[cut:])
        checker.feed(b"\n")
        assert checker.check() > 0


@pytest.mark.parametrize(("final", "chunks", "needle"), [
    ("TASK_STATE_FAILED", 3, "failed"),
    ("TASK_STATE_COMPLETED", 2, "missing events"),
    (None, 3, "no terminal state"),
])
def test_checker_counts_incomplete_or_failed_turns(final: str | None, chunks: int,
                                                   needle: str) -> None:
    checker = TurnChecker(3)
    events: list[dict[str, object]] = [{"task": {"status": {"state": "TASK_STATE_SUBMITTED"}}}]
    events += [{"artifactUpdate": {}} for _ in range(chunks)]
    if final:
        events.append({"statusUpdate": {"status": {"state": final}}})
    for e in events:
        checker.feed(b"data: " + json.dumps({"result": e}).encode() + b"\n")
    with pytest.raises(TurnError, match=needle):
        checker.check()


def test_checker_rejects_jsonrpc_errors() -> None:
    with pytest.raises(TurnError, match="jsonrpc -32602"):
        TurnChecker(3).feed(b'data: {"jsonrpc":"2.0","id":1,"error":{"code":-32602}}\n')


def test_stores_flag() -> None:
    assert parse_stores("sqlite, none,sqlite") == ("sqlite", "none")
    with pytest.raises(Exception, match="subset"):
        parse_stores("none,postgres")


def test_sqlite_wal_stays_bounded_under_sustained_writes(tmp_path: Path) -> None:
    """Found by the benchmark: checkpoints racing the inline writes never let the WAL restart
    (it grew ~170 MB over these 10,000 commits); now each checkpoint lets it start over."""
    path = tmp_path / "d.sqlite"
    outcome = {"v": 2, "events": ["x" * 400] * 6}  # about a Reasoner turn's stored outcome

    async def run() -> int:
        async with open_store(f"sqlite:///{path}", 300.0) as store:
            keys = iter(range(5_000))

            async def worker() -> None:
                for i in keys:
                    await store.claim("ctx", f"g{i}", "o", time.time())
                    await store.complete("ctx", f"g{i}", outcome, time.time(), owner="o")

            await asyncio.gather(*(worker() for _ in range(20)))
            return Path(f"{path}-wal").stat().st_size

    wal_bytes = asyncio.run(run())
    assert 0 < wal_bytes < 32 * 1024**2, f"WAL grew to {wal_bytes / 1024**2:.0f} MiB"


def _summary(store: str, rates: list[float], cpu_ms: list[float], turns: int = 100
             ) -> StoreSummary:
    """A StoreSummary whose rounds ran at ``rates`` turns/s with ``cpu_ms`` CPU per turn."""
    return StoreSummary(store, [Sample(store, i, turns, wall_s=turns / r,
                                       server_cpu_s=c * turns / 1e3, helper_cpu_s=None,
                                       client_cpu_s=0.0, latencies_s=[0.01] * turns)
                                for i, (r, c) in enumerate(zip(rates, cpu_ms, strict=True))])


def test_bench_ratio_arithmetic() -> None:
    """Ratios are store ÷ none for throughput and none ÷ store for CPU per turn (both < 1 when
    the store costs more), per round then median; an inverted ratio fails here."""
    none = _summary("none", [100.0, 200.0, 100.0], [4.0, 4.0, 4.0])
    sqlite = _summary("sqlite", [80.0, 190.0, 95.0], [5.0, 4.0, 8.0])
    tp, cpu = paired_ratios(none, sqlite)
    assert tp == pytest.approx([0.80, 0.95, 0.95])
    assert cpu == pytest.approx([0.80, 1.00, 0.50])
    r = ratios(none, sqlite)
    assert r["throughput_ratio"] == pytest.approx(0.95)
    assert r["cpu_per_turn_ratio"] == pytest.approx(0.80)
    lines, figures = comparison_lines(none, [sqlite], concurrency=50)
    assert figures["sqlite"]["throughput_verdict"] == "PASS"  # 0.95 >= 0.9
    assert figures["sqlite"]["cpu_per_turn_verdict"] == "WARN"  # 0.80 < 0.9
    assert lines[0].startswith("sqlite vs none: throughput ratio 0.95x [rounds 0.80..0.95]")
    slower = _summary("sqlite", [50.0, 100.0, 50.0], [4.0, 4.0, 4.0])
    assert ratios(none, slower)["throughput_ratio"] == pytest.approx(0.5)  # half as fast
