"""``recovery_s`` measured in a real load run: the embedded Reasoner's capacity drops to 0
workers on the scenario's schedule (``POST /test/capacity``, ledger/capacity.jsonl), the
summary reports the seconds until goodput is back, and ``--slo 'recovery_s<=30'`` gates it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path


def test_capacity_drop_in_a_load_run_and_its_recovery_gate(tmp_path: Path) -> None:
    out = tmp_path / "results"
    args = ["baseline", "--duration", "24", "--drain", "8", "--set", "run.warmup_s=2",
            "--set", "workload.calls_per_s=3", "--set", "workload.handoff_share=0",
            "--set", "reasoner.errors={}",
            "--set", "reasoner.capacity_drops=[{start_s=8,duration_s=4,workers=0}]",
            "--slo", "recovery_s<=30", "--no-plots", "--quiet", "--out", str(out)]
    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "load", "run", *args],
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    run = sorted(out.glob("*-load-*"))[-1]
    rows = [json.loads(line) for line in
            (run / "ledger" / "capacity.jsonl").read_text().splitlines()]
    assert [(r["at_s"], r["workers"], r["status"]) for r in rows] == [(8, 0, 200),
                                                                      (12, 8, 200)]
    # the drop was enacted on the load's clock, not later than a second after its time
    assert all(r["at_s"] <= r["start_s"] < r["at_s"] + 1.0 for r in rows)
    rec = json.loads((run / "summary.json").read_text())["metrics"]["recovery_s"]
    assert rec["values"][0] is not None and math.isfinite(rec["values"][0])
    assert 0.0 <= rec["values"][0] <= 30.0
    # goodput really stopped during the drop: once the turns in service when it began
    # are done (2 s), hardly any completes (~12 would at the offered 6 turns/s)
    turns = [json.loads(line) for line in (run / "ledger" / "turns.jsonl").read_text()
             .splitlines()]
    t0 = json.loads((run / "ledger" / "clock.json").read_text())["t0"]
    inside = [t for t in turns if t.get("outcome") == "completed" and t.get("end_s")
              and rows[0]["start_s"] + 2.0 < t["end_s"] - t0 < rows[1]["start_s"]]
    assert len(inside) <= 2, len(inside)
