"""``rtalab load bench``: arithmetic of the table, and a tiny real run of every client."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rtalab.benchmarks.load import ratio_table


def test_ratio_table_arithmetic():
    results = {
        "bare-sse": [{"turns": 1000, "seconds": 2.0, "cpu_s": 1.0},
                     {"turns": 900, "seconds": 1.0, "cpu_s": 0.9},
                     {"turns": 1200, "seconds": 2.0, "cpu_s": 1.2}],
        "live-sse": [{"turns": 700, "seconds": 2.0, "cpu_s": 1.4}],
    }
    (row,) = ratio_table(results)  # no WebSocket results: one row
    assert row["binding"] == "sse"
    assert row["bare_turns_per_s"] == 600.0  # median of 500, 900, 600
    assert row["live_turns_per_s"] == 350.0
    assert row["ratio"] == pytest.approx(350.0 / 600.0)
    assert row["bare_cpu_ms_per_turn"] == pytest.approx(1.0)
    assert row["live_cpu_ms_per_turn"] == pytest.approx(2.0)
    assert row["cpu_ratio"] == pytest.approx(0.5)


def test_bench_runs_every_client_against_the_canned_stream():
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "bench", "--seconds", "0.5",
                        "--rounds", "1", "--users", "2", "--no-pin"],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines()
            if line.split() and line.split()[0] in ("sse", "rest", "ws")}
    assert set(rows) == {"sse", "rest", "ws"}
    for cells in rows.values():
        bare, live = float(cells[1]), float(cells[2])
        assert bare > 0 and live > 0  # every client completed turns
        assert float(cells[5]) == pytest.approx(live / bare, abs=0.02)
