"""``rtalab predict`` at small size: load A -> calibrate -> simulate B -> load B -> compare
(issue 17, point 3).  The accuracy itself is measured at full size (README, `make demo`);
here the round trip must produce a complete, consistent comparison."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rtalab.loadtests.loadrun.predict import CpuWatch, _outage

SMALL = """
name = "calsmall"
[workload]
calls_per_s = 2.0
turns_per_call = 3
think_time_s = { dist = "exp", mean = 0.3 }
side_effect_share = 0.3
handoff_share = 0.0
[live.timeouts]
turn_response_s = 2.0
[network.uplink]
latency_s = 0.0
[network.downlink]
latency_s = 0.0
[reasoner]
workers = 2
reasoning_time_s = { dist = "weibull", shape = 1.5, scale = 0.12 }
chunks = 3
chunk_interval_s = 0.03
tool_latency_s = 0.03
[run]
duration_s = 10
warmup_s = 2
drain_s = 8
seed = 5
"""


def test_predict_round_trip_writes_a_complete_comparison(tmp_path: Path) -> None:
    sc = tmp_path / "deployment.toml"
    sc.write_text(SMALL)
    out = tmp_path / "results"
    p = subprocess.run(
        [sys.executable, "-m", "rtalab.sim.cli", "predict", str(sc), "--calibrate-rate", "2",
         "--predict-rate", "4", "--duration", "8", "--warmup", "2", "--drain", "8",
         "--calibrate-duration", "6", "--table", "short",
         "--outage", "0", "--workers", "1", "--replications", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    (folder,) = out.glob("*-predict-calsmall-*")
    # a progress line per step; A ran for its own --calibrate-duration
    for step in ("1/5", "2/5", "3/5", "5/5"):
        assert step in p.stdout
    assert "1/5 load run at A = 2 calls/s for 6 s" in p.stdout
    # --table short: the comparison against the one-run interval, at 80 columns
    lines = p.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("metric "))
    table = lines[head:head + 10]
    assert "90% one run" in table[0] and table[-1].startswith("goodput"), table
    assert max(map(len, table)) <= 80, table
    res = json.loads((folder / "prediction.json").read_text())
    assert res["rate_b"] == 4.0
    (case,) = res["cases"]
    rows = {r["metric"]: r for r in case["rows"]}
    assert set(rows) == {"ttfc_s.p50", "ttfc_s.p95", "ttfc_s.p99", "completion_s.p50",
                         "completion_s.p95", "completion_s.p99", "success_rate",
                         "attempts_per_turn", "goodput_turns_per_s"}
    for r in rows.values():
        assert r["verdict"] in ("inside", "outside", "void"), r
        ilo, ihi = r["interval"]  # the 90 % one-run interval holds the predicted mean
        assert ilo <= r["predicted"] + 1e-9 <= ihi + 2e-9, r
        lo, hi = r["measured_ci"]
        assert lo <= r["measured"] + 1e-9 and r["measured"] <= hi + 1e-9, r
        plo, phi = r["predicted_ci"]
        assert plo <= r["predicted"] + 1e-9 <= phi + 2e-9, r
    # the two worlds measure the same thing: completion > ttfc, both near the truth's
    # reasoning (~0.11 s) + chunks (2 x 0.03 s); a unit or clock bug is off by 10x
    # (the prediction's upper bound is looser: 2 replications of a scenario calibrated on
    # ~40 turns are noisy near saturation; 1.5 s still catches a 10x unit bug of ~0.17 s)
    for side, high in (("predicted", 1.5), ("measured", 0.6)):
        assert rows["ttfc_s.p50"][side] < rows["completion_s.p50"][side]
        assert 0.08 < rows["completion_s.p50"][side] < high, rows["completion_s.p50"]
    assert rows["success_rate"]["measured"] > 0.9
    # goodput ~ offered: 4 calls/s x 3 turns (arrivals stop at 8 s, measured in [2, 8))
    assert 6 < rows["goodput_turns_per_s"]["measured"] < 14
    cpu = case["client_cpu_share"]
    assert cpu is not None and 0.0 < cpu < 1.5
    html = (folder / "prediction.html").read_text()
    assert '<section class="prediction">' in html and "data:image/png;base64," in html
    assert (folder / "calibrated.toml").exists() and (folder / "calibrated.qq.png").exists()
    # the one-run rows (the demo's paragraph reads them): every interval holds its centre,
    # each replication's figures are kept; the demo's report renders from this folder
    (one,) = [c["one_run"] for c in res["cases"]]
    assert [r["metric"] for r in one] == list(rows) and len(case["replications"]) == 2
    for r in one:
        assert r["verdict"] in ("inside", "outside", "n/a"), r
        if r["low"] is not None:
            assert r["low"] <= r["centre"] <= r["high"], r
    # the load runs inside the folder skip their own bootstrap (the comparison makes its own)
    for run in (folder / "runs").iterdir():
        summary = json.loads((run / "summary.json").read_text())
        assert summary["uncertainty"].startswith("none"), summary["uncertainty"]
        assert all("se" not in m for m in summary["metrics"].values() if isinstance(m, dict))
    from rtalab.loadtests.loadrun import demo_report

    report = demo_report.render(folder)
    assert 'data-role="answer"' in report and "90 % one-run prediction interval" in report
    assert report.count("<details class=\"folded\">") == 2  # the load runs A and B, folded
    # strict JSON: an undefined figure is null, never NaN
    json.loads((folder / "prediction.json").read_text(), parse_constant=lambda c: 1 / 0)
    assert res["utilisation_a"] is None or math.isfinite(res["utilisation_a"])


def test_outage_sits_in_the_middle_of_the_measured_window() -> None:
    class A:
        warmup, duration, outage = 10.0, 60.0, 10.0

    assert _outage(A) == {"network.outages": [{"start_s": 30.0, "duration_s": 10.0,
                                               "direction": "both"}]}


def test_cpu_share_is_the_busiest_window_not_the_lifetime_mean() -> None:
    w = CpuWatch()
    # sampled every 0.5 s: 20 s at 0.2 of a core, then 10 s at 0.95, then 20 s idle
    t, cpu, samples = 0.0, 0.0, []
    for rate, seconds in ((0.2, 20), (0.95, 10), (0.0, 20)):
        for _ in range(int(seconds / 0.5)):
            t += 0.5
            cpu += rate * 0.5
            samples.append((t, cpu))
    w.seen = {1: samples, 2: [(s, c / 4) for s, c in samples]}
    assert w.busiest_share() == pytest.approx(0.95)
    assert CpuWatch().busiest_share() != CpuWatch().busiest_share()  # nothing seen: NaN
