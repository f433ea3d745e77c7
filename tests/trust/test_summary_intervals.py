"""Every summary the project writes: each interval contains its estimate, or the figure
says it has none ("–" with the reason); a load run never prints [x, x].

:func:`violations` walks any JSON-like summary and knows the project's interval shapes:
``{"mean", "ci_low", "ci_high"}`` (summary.json, compare rows), ``{"X", "X_ci"}`` with
``X_ci_note`` when absent (calibration fits), ``{"diff", "diff_ci_low", "diff_ci_high"}``
(agreement, compare, tune), ``{"per_execution", "ci": [lo, hi]}`` (error rates)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loadtests.loadrun.tables import load_summary
from sim.calibrate.estimate import calibrate
from sim.calibrate.output import write
from sim.calibrate.synth import Truth, synth_observations
from sim.calibrate.validate import bootstrap as validate_bootstrap
from sim.calibrate.validate import compare, turn_metrics
from sim.runner import run_once
from sim.scenario import load_scenario
from sim.shared.agreement import agreement_rows
from sim.shared.summary import domain, mean_ci, summarize
from tests.trust.loadlike import WARMUP_S, loadlike


def _inside(lo: Any, x: Any, hi: Any) -> bool:
    lo, x, hi = float(lo), float(x), float(hi)
    if not (math.isfinite(x)):
        return True  # an infinite estimate: its interval reaches infinity
    eps = 1e-9 * max(1.0, abs(x))
    return lo - eps <= x <= hi + eps


def violations(obj: Any, path: str = "", strict_width: bool = False) -> list[str]:
    """Every interval in ``obj`` that misses its estimate (or, with ``strict_width``, has
    zero width without a note), or a missing interval without a reason where one is due."""
    out: list[str] = []
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            out += violations(v, f"{path}[{i}]", strict_width)
        return out
    if not isinstance(obj, dict):
        return out
    for est, lo_k, hi_k in (("mean", "ci_low", "ci_high"), ("diff", "diff_ci_low",
                                                              "diff_ci_high")):
        if est in obj and lo_k in obj:
            lo, hi, x = obj.get(lo_k), obj.get(hi_k), obj.get(est)
            if x is not None and lo is not None and hi is not None:
                if not _inside(lo, x, hi):
                    out.append(f"{path}: {x} not in [{lo}, {hi}]")
                if strict_width and lo == hi and not obj.get("ci_note"):
                    out.append(f"{path}: zero-width [{lo}, {hi}] without a note")
            elif x is not None and strict_width and not obj.get("ci_note"):
                out.append(f"{path}: no interval and no reason")
    for k, v in obj.items():
        if k.endswith("_ci") and k[:-3] in obj:
            x = obj[k[:-3]]
            if v is None:
                if not obj.get(f"{k}_note"):
                    out.append(f"{path}.{k}: none and no reason")
            elif x is not None and not _inside(v[0], x, v[1]):
                out.append(f"{path}.{k}: {x} not in {v}")
    if "per_execution" in obj and "ci" in obj and not _inside(obj["ci"][0], obj["per_execution"],
                                                              obj["ci"][1]):
        out.append(f"{path}: {obj['per_execution']} not in {obj['ci']}")
    for k, v in obj.items():
        out += violations(v, f"{path}.{k}", strict_width)
    return out


def test_the_walker_finds_each_kind_of_bad_interval() -> None:
    assert violations({"m": {"mean": 0.0, "ci_low": 61.4, "ci_high": 136.5}}) == [
        ".m: 0.0 not in [61.4, 136.5]"]
    assert violations({"mean": 2.0, "ci_low": 2.0, "ci_high": 2.0}, strict_width=True) == [
        ": zero-width [2.0, 2.0] without a note"]
    assert violations({"p99": 3.0, "p99_ci": None}) == [".p99_ci: none and no reason"]
    assert violations({"p99": 3.0, "p99_ci": None, "p99_ci_note": "too few"}) == []
    assert violations({"diff": -1.0, "diff_ci_low": 0.1, "diff_ci_high": 2.0}) != []
    assert violations({"per_execution": 0.5, "ci": [0.1, 0.4]}) != []


def test_a_simulation_summary() -> None:
    sc = load_scenario("lossy_network", ["run.duration_s=40", "run.warmup_s=5"])
    s = summarize([run_once(sc, 1, r) for r in range(3)], 5.0)
    assert violations(s) == []


def test_a_load_run_summary_never_prints_x_x() -> None:
    s = load_summary(loadlike(), WARMUP_S)
    assert violations(json.loads(json.dumps(s)), strict_width=True) == []


def test_calibration_json(tmp_path) -> None:
    obs = synth_observations(Truth(n=3000, rate_per_s=20.0), seed=2)
    cal = calibrate(obs, seed=2)
    paths = write(cal, tmp_path / "cal.toml", plots=False)
    report = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert report["fits"], "the synthetic run has fits"
    assert violations(report) == []
    assert report["figures"].get("errors"), "the synthetic run has error rates"


def test_agreement_and_validation_rows() -> None:
    rng = np.random.default_rng(3)
    sim = {"metrics": {f"m{k}": {"values": list(rng.normal(k + 1, 0.2, 6))} for k in range(10)}}
    load = {"kind": "load", "metrics": {f"m{k}": {"mean": float(rng.normal(k + 1, 0.2)),
                                                  "se": 0.05} for k in range(10)}}
    assert violations([asdict(r) for r in agreement_rows(sim, load)]) == []
    turns = loadlike().turns
    measured = turn_metrics(turns, WARMUP_S, 60.0)
    ci = validate_bootstrap(turns, WARMUP_S, 60.0, seed=1, rounds=60)
    for row in compare([measured, measured], measured, ci):
        if math.isfinite(row.measured):
            assert _inside(row.measured_ci[0], row.measured, row.measured_ci[1]), row


@given(st.lists(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), min_size=1,
                max_size=30), st.sampled_from(["success_rate", "ttfc_s.p99", "turns"]))
def test_mean_ci_always_holds_its_mean(values: list[float], name: str) -> None:
    lo_b, hi_b = domain(name)
    vals = [min(v, hi_b) for v in values]
    m = mean_ci(vals, domain(name))
    assert violations(m) == []
    if len(vals) >= 2:
        assert m["ci_low"] is not None and lo_b <= m["ci_low"] <= m["ci_high"] <= hi_b


def test_compare_table_rows() -> None:
    from pathlib import Path

    from sim.shared.compare import RunFolder, compare_table

    rng = np.random.default_rng(4)
    folders = [RunFolder(Path(f"r{j}"), f"r{j}", {"metrics": {
        f"m{k}": mean_ci(list(rng.normal(k + 1 + j, 0.3, 6))) for k in range(6)}})
        for j in range(2)]
    rows = compare_table(folders).to_dict(orient="records")
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
             for r in rows]
    assert violations(clean) == []
    assert any(r["diff"] is not None for r in clean)
