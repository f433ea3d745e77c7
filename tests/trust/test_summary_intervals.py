"""Every summary the project writes: each interval contains its estimate, or the figure
says it has none ("–" with the reason); a load run never prints [x, x].

:func:`violations` walks any JSON-like summary and knows the project's interval shapes:
``{"mean", "ci_low", "ci_high"}`` (summary.json, compare rows), ``{"X", "X_ci"}`` with
``X_ci_note`` when absent (calibration fits), ``{"diff", "diff_ci_low", "diff_ci_high"}``
(agreement, compare), ``{"per_execution", "ci": [lo, hi]}`` (error rates), ``{"centre",
"low", "high"}`` (prediction.json's one-run rows), and flat rows of tables with dotted
columns ``X`` / ``X.ci_low`` / ``X.ci_high`` and ``X.change`` / ``X.diff_ci_low`` /
``X.diff_ci_high`` (sweep answers: tune's confirmation, capacity)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rtalab.loadtests.loadrun.tables import load_summary
from rtalab.sim.calibrate.estimate import calibrate
from rtalab.sim.calibrate.output import write
from rtalab.sim.calibrate.synth import Truth, synth_observations
from rtalab.sim.calibrate.validate import bootstrap as validate_bootstrap
from rtalab.sim.calibrate.validate import compare, turn_metrics
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared.agreement import agreement_rows
from rtalab.sim.shared.summary import domain, mean_ci, summarize
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
            elif x is not None and None not in (v[0], v[1]) and not _inside(v[0], x, v[1]):
                out.append(f"{path}.{k}: {x} not in {v}")
    if all(k in obj for k in ("centre", "low", "high")) and None not in (
            obj["centre"], obj["low"], obj["high"]) and not _inside(obj["low"], obj["centre"],
                                                                  obj["high"]):
        out.append(f"{path}: {obj['centre']} not in [{obj['low']}, {obj['high']}]")
    out += _flat_violations(obj, path)
    if "per_execution" in obj and "ci" in obj and not _inside(obj["ci"][0], obj["per_execution"],
                                                              obj["ci"][1]):
        out.append(f"{path}: {obj['per_execution']} not in {obj['ci']}")
    for k, v in obj.items():
        out += violations(v, f"{path}.{k}", strict_width)
    return out


def _flat_violations(row: dict[str, Any], path: str) -> list[str]:
    """A table row's dotted columns: ``X`` in [``X.ci_low``, ``X.ci_high``] and ``X.change``
    in [``X.diff_ci_low``, ``X.diff_ci_high``] (None or NaN: no interval, nothing to hold)."""
    out = []
    for k in row:
        if not isinstance(k, str):
            continue
        for suffix, est_k, hi_suffix in ((".ci_low", "", ".ci_high"),
                                          (".diff_ci_low", ".change", ".diff_ci_high")):
            if not k.endswith(suffix):
                continue
            base = k[: -len(suffix)]
            x, lo, hi = row.get(base + est_k), row[k], row.get(base + hi_suffix)
            if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (x, lo, hi)):
                continue
            if not _inside(lo, x, hi):
                out.append(f"{path}.{base}{est_k}: {x} not in [{lo}, {hi}]")
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
    assert violations({"centre": 5.0, "low": 1.0, "high": 4.0}) == [": 5.0 not in [1.0, 4.0]"]
    assert violations([{"a.b": 3.0, "a.b.ci_low": 1.0, "a.b.ci_high": 2.0}]) == [
        "[0].a.b: 3.0 not in [1.0, 2.0]"]
    assert violations({"m.change": -1.0, "m.diff_ci_low": 0.0, "m.diff_ci_high": 1.0}) == [
        ".m.change: -1.0 not in [0.0, 1.0]"]
    assert violations({"m": 1.0, "m.ci_low": None, "m.ci_high": None}) == []


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

    from rtalab.sim.shared.compare import RunFolder, compare_table

    rng = np.random.default_rng(4)
    folders = [RunFolder(Path(f"r{j}"), f"r{j}", {"metrics": {
        f"m{k}": mean_ci(list(rng.normal(k + 1 + j, 0.3, 6))) for k in range(6)}})
        for j in range(2)]
    rows = compare_table(folders).to_dict(orient="records")
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
             for r in rows]
    assert violations(clean) == []
    assert any(r["diff"] is not None for r in clean)


def _records(df: Any) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")]


def test_a_sweep_table() -> None:
    """sweep.csv's rows (one per point x metric): each mean inside its CI."""
    from rtalab.sim.sweep import run_points, tidy_table

    sc = load_scenario("lossy_network", ["run.duration_s=30", "run.warmup_s=5"])
    points = [{"reasoner.workers": 2}, {"reasoner.workers": 6}]
    summaries = run_points(sc, points, replications=3, root_seed=5, progress=False,
                           plots=False)
    rows = _records(tidy_table(points, summaries))
    assert violations(rows) == [] and violations(summaries) == []
    assert sum(r["ci_low"] is not None for r in rows) > 20, "the table has intervals"


def test_tune_confirmation_rows(tmp_path) -> None:
    """tune's confirmation table (a sweep answer): each candidate's metric inside its CI
    and its paired change against the current settings inside the change's interval."""
    from rtalab.sim.answers.slo import parse_slo
    from rtalab.sim.answers.tune import _confirm, objective, parse_space

    sc = load_scenario("lossy_network", ["run.duration_s=30", "run.warmup_s=5"])
    space = parse_space({"live.backoff.base_s": {"choices": [0.05, 0.5]}})
    df = _confirm(sc, tmp_path, space, [{"live.backoff.base_s": 0.05},
                                        {"live.backoff.base_s": 0.5}], ["c0", "c1"],
                  [objective("completion_s.p95")], [parse_slo("success_rate>=0.5")],
                  replications=3, seed=4, executor=None)
    rows = _records(df)
    assert violations(rows) == []
    assert any(r.get("completion_s.p95.diff_ci_low") is not None for r in rows)


def test_a_prediction_json() -> None:
    """prediction.json's rows (predict): the predicted mean inside its CI, the measured
    figure inside its bootstrap interval, each one-run centre inside its interval."""
    from rtalab.sim.calibrate.validate import one_run_json, one_run_rows, rows_json

    predicted = [turn_metrics(loadlike(seed=s).turns, WARMUP_S, 60.0) for s in (4, 5, 6, 7)]
    turns = loadlike().turns
    measured = turn_metrics(turns, WARMUP_S, 60.0)
    ci = validate_bootstrap(turns, WARMUP_S, 60.0, seed=1, rounds=60)
    rows = compare(predicted, measured, ci)
    doc = {"rows": rows_json(rows), "one_run": one_run_json(one_run_rows(rows, predicted))}
    assert violations(doc) == []
    assert any(r["centre"] is not None for r in doc["one_run"])
    assert any(r["predicted_ci"][0] is not None for r in doc["rows"])
