"""The answer of ``make demo`` (:mod:`rtalab.loadtests.loadrun.demo`), on screen and as one HTML
report.

Everything is read from an ``rtalab predict`` folder (``prediction.json``, the simulations
``sim-*/`` and the load runs ``runs/``):

* :func:`paragraph` — one paragraph: what was predicted for ONE measured run at B (the
  replications' median and 90 % one-run prediction interval of the headline metrics,
  :func:`rtalab.sim.shared.agreement.run_interval` through ``prediction.json``'s ``one_run`` rows),
  what was measured (the value and its 95 % bootstrap CI over calls), and whether the
  prediction held (the measured value inside the interval), per case (B; B with an outage);
* :func:`ecdf_figure` — the figure that shows it: turn-completion ECDFs per case, the
  measured run's curve against the band where one simulated run's curve falls (pointwise,
  the same order statistics as the interval);
* :func:`render` — the report: the paragraph and the figure first (above the fold at
  1280 × 900), one short table per case (every compared metric against its interval), then
  folded: the full comparison (accuracy targets, CIs of the mean), and each load run.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from rtalab.sim.calibrate.validate import SHORT_LABELS, OneRunRow, fmt_interval, one_run_from_json
from rtalab.sim.report.pieces import png_data, text_table
from rtalab.sim.report.render import render_report
from rtalab.sim.shared.fmt import fmt_value
from rtalab.sim.shared.summary import unit

# the metrics the paragraph speaks of: the first case (B) and the others (B + outage)
HEADLINE_B = ("completion_s.p50", "completion_s.p99", "success_rate")
HEADLINE_OTHER = ("completion_s.p99", "success_rate")
WORDS = {"completion_s.p50": "turn completion p50", "completion_s.p99": "p99",
         "success_rate": "success rate"}


def load(folder: Path) -> dict[str, Any]:
    """``prediction.json`` of a predict folder, each case's ``one_run`` as :class:`OneRunRow`."""
    try:
        res = json.loads((Path(folder) / "prediction.json").read_text(encoding="utf-8"))
        for case in res["cases"]:
            case["one_run_rows"] = one_run_from_json(case["one_run"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{folder}: not a complete rtalab predict folder "
                         f"({type(e).__name__}: {e})") from None
    return cast("dict[str, Any]", res)


def _rows(case: dict[str, Any], metrics: tuple[str, ...]) -> list[OneRunRow]:
    by = {r.metric: r for r in case["one_run_rows"]}
    return [by[m] for m in metrics if m in by]


def headline_metrics(i: int) -> tuple[str, ...]:
    """The metrics the paragraph judges for case ``i`` (0: B)."""
    return HEADLINE_B if i == 0 else HEADLINE_OTHER


def held(res: dict[str, Any]) -> list[bool]:
    """Per case: every headline metric inside its one-run interval."""
    return [all(r.verdict == "inside" for r in _rows(c, headline_metrics(i)))
            for i, c in enumerate(res["cases"])]


def _num(x: float, metric: str, ms: bool | None = None) -> str:
    """One figure of the paragraph: seconds with 2 decimals (ms below 1 s), shares in %."""
    if not math.isfinite(x):
        return "–"
    u = unit(metric)
    if u == "s":
        return f"{x * 1000:.0f}" if (x < 1 if ms is None else ms) else f"{x:.2f}"
    if u in ("share", "probability"):
        return f"{x * 100:.1f}"
    return fmt_value(x, metric)


def _unit(metric: str, ms: bool) -> str:
    u = unit(metric)
    return {"s": " ms" if ms else " s", "share": " %", "probability": " %"}.get(u, "")


def _value(x: float, metric: str) -> str:
    """``961 ms``, ``1.14 s``, ``99.4 %``."""
    ms = math.isfinite(x) and x < 1
    return _num(x, metric, ms) + _unit(metric, ms)


def _span(lo: float, hi: float, metric: str) -> str:
    """``1.00–1.36 s``, ``931–990 ms``, ``98.8–100.0 %`` (one unit, at the end)."""
    ms = math.isfinite(hi) and hi < 1
    return f"{_num(lo, metric, ms)}–{_num(hi, metric, ms)}{_unit(metric, ms)}"


def _what(case: dict[str, Any]) -> str:
    """``a 10-s outage`` of case ``B + 10-s outage``."""
    rest = str(case["name"]).removeprefix("B").strip().removeprefix("+").strip()
    return f"a {rest}" if rest else str(case["name"])


def _case_sentence(i: int, case: dict[str, Any], window_s: float) -> str:
    rows = _rows(case, headline_metrics(i))
    pred = ", ".join(f"{WORDS[r.metric]} {_value(r.centre, r.metric)} "
                     + (f"(90 % one-run prediction interval {_span(r.low, r.high, r.metric)})"
                        if j == 0 else f"({_span(r.low, r.high, r.metric)})")
                     for j, r in enumerate(rows))
    meas = ", ".join(f"{_value(r.measured, r.metric)} "
                     + (f"(95 % CI {_span(*r.measured_ci, r.metric)})" if j == 0
                        else f"({_span(*r.measured_ci, r.metric)})")
                     for j, r in enumerate(rows))
    out = [WORDS[r.metric] for r in rows if r.verdict == "outside"]
    other = [WORDS[r.metric] for r in rows if r.verdict not in ("inside", "outside")]
    if any(r.verdict == "void" for r in rows):
        verdict = "void: the load generator saturated its CPU, so its timings are its own"
    elif out:
        verdict = f"{' and '.join(out)} outside: the prediction did not hold there"
    elif other:
        verdict = f"{' and '.join(other)} undefined in a run: not judged"
    else:
        verdict = "all inside their intervals: the prediction held"
    where = (f"For one {window_s:g}-s measured window at B" if i == 0
             else f"With {_what(case)}")
    return f"{where} it predicted {pred}; the load run measured {meas}: {verdict}."


def paragraph(res: dict[str, Any]) -> str:
    """The demo's answer in one paragraph (plain text)."""
    cap = res["capacity"]
    rate_a, rate_b = float(res["rate_a"]), float(res["rate_b"])
    util_a = res.get("utilisation_a")
    util_b = (float(util_a) * rate_b / rate_a if util_a is not None and math.isfinite(
        float(util_a)) else math.nan)
    dur_a = res.get("calibrate_duration_s") or res["duration_s"]
    window = float(res["duration_s"]) - float(res["warmup_s"])
    capacity = (f"capacity identified: {cap['workers']} concurrent turns" if cap["identified"]
                else f"capacity NOT identified, the default {cap['workers']} workers assumed")
    util = (f", {util_b * 100:.0f} % utilisation of the calibrated model"
            if math.isfinite(util_b) else "")
    parts = [f"Calibrated on a {float(dur_a):g}-s load run at A = {rate_a:.3g} calls/s "
             f"({capacity}), the simulator ({res['replications']} replications per case) "
             f"predicted B = {rate_b:.3g} calls/s{util}."]
    parts += [_case_sentence(i, c, window) for i, c in enumerate(res["cases"])]
    counts = [f"{sum(r.verdict == 'inside' for r in c['one_run_rows'])} of "
              f"{len(c['one_run_rows'])} inside " + ("at B" if i == 0 else f"with {_what(c)}")
              for i, c in enumerate(res["cases"])]
    parts.append(f"Over every compared metric: {', '.join(counts)} (each interval is a 90 % "
                 "one: about 1 in 10 falls outside by chance when the model is right).")
    return " ".join(parts)


def headline(res: dict[str, Any]) -> tuple[str, str]:
    """(status, headline) of the report's lead: pass when every case held, info when B held
    and another case did not, fail when B did not."""
    ok = held(res)
    bits = []
    for i, (c, h) in enumerate(zip(res["cases"], ok, strict=True)):
        rows = _rows(c, headline_metrics(i))
        k = sum(r.verdict == "inside" for r in rows)
        if i == 0:
            bits.append(f"at B the prediction {'held' if h else 'did not hold'} "
                        f"({k} of {len(rows)} inside their 90 % intervals)")
        else:
            bits.append(f"with {_what(c)} it {'held' if h else 'did not hold'} "
                        f"({k} of {len(rows)})")
    status = "pass" if all(ok) else ("info" if ok and ok[0] else "fail")
    text = "; ".join(bits)
    return status, text[:1].upper() + text[1:]


def _resolve(folder: Path, p: str) -> Path:
    """A path recorded in ``prediction.json``, or the same name inside ``folder`` (moved)."""
    path = Path(p)
    for cand in (path, folder / path.name, folder / "runs" / path.name):
        if cand.exists():
            return cand
    raise ValueError(f"{folder}: {p} not found")


def completion_times(folder: Path, case: dict[str, Any], warmup_s: float
                     ) -> tuple[list[np.ndarray], np.ndarray]:
    """(per simulated replication, measured): completion times of the completed turns that
    started after the warm-up (the turns the compared percentiles are taken over)."""
    def done(t: pd.DataFrame) -> np.ndarray:
        keep = (t["outcome"].astype(str) == "completed") & (t["start_s"] >= warmup_s)
        return t.loc[keep, "completion_s"].to_numpy(dtype=float)

    sim = pd.read_parquet(_resolve(folder, case["simulation"]) / "turns.parquet")
    reps = [done(g) for _, g in sim.groupby("replication", sort=True)]
    return reps, done(pd.read_parquet(_resolve(folder, case["load_run"]) / "turns.parquet"))


def band(reps: list[np.ndarray], grid: np.ndarray, level: float = 0.90
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(low, median, high) of the replications' ECDFs at ``grid``: order statistics
    ``j..n+1-j`` (where one more run's curve falls, pointwise, with probability >= level), the
    replications' range when there are too few of them (said in the returned label)."""
    curves = np.sort(np.array([np.searchsorted(np.sort(r), grid, side="right") / max(len(r), 1)
                               for r in reps]), axis=0)
    n = len(reps)
    j = math.floor((n + 1) * (1.0 - level) / 2.0 + 1e-9)
    label = (f"one simulated run, pointwise {level:.0%} ({n} replications)" if j >= 1
             else f"range of {n} simulated replications")
    j = max(j, 1)
    return curves[j - 1], np.median(curves, axis=0), curves[n - j], label


def ecdf_figure(panels: list[tuple[str, list[np.ndarray], np.ndarray]]) -> str:
    """A base64 PNG: per panel (title, replications, measured) the measured turn-completion
    ECDF against the simulated band and median, log time axis."""
    # lazy: +131 ms (matplotlib) off importing demo_report
    import matplotlib

    matplotlib.use("Agg")
    # lazy: +646 ms (matplotlib) off importing demo_report
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.1), squeeze=False)
    for ax, (title, reps, measured) in zip(axes[0], panels, strict=True):
        pooled = np.concatenate([*reps, measured]) if reps else measured
        pooled = pooled[pooled > 0]
        if len(pooled) == 0:
            ax.set_title(f"{title}: no completed turns", fontsize=10)
            continue
        grid = np.geomspace(pooled.min(), pooled.max(), 300)
        lo, mid, hi, label = band(reps, grid)
        ax.fill_between(grid, lo, hi, color="tab:blue", alpha=0.25, step="post",
                        label=f"predicted: {label}")
        ax.step(grid, mid, where="post", color="tab:blue", lw=1.2, label="predicted: median")
        m = np.sort(measured)
        ax.step(m, np.arange(1, len(m) + 1) / len(m), where="post", color="black", lw=1.6,
                ls="--", label=f"measured: the load run ({len(m)} turns)")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("turn completion (s, log scale)")
        ax.set_ylabel("share of completed turns")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7.5, loc="lower right")
    fig.tight_layout()
    return png_data(fig)


def case_table(case: dict[str, Any]) -> dict[str, Any]:
    """Every compared metric of a case against its one-run interval (a report table)."""
    rows = [[SHORT_LABELS.get(r.metric, r.metric), fmt_interval(r.centre, r.low, r.high,
                                                                r.metric),
             fmt_interval(r.measured, r.measured_ci[0], r.measured_ci[1], r.metric), r.verdict]
            for r in case["one_run_rows"]]
    return text_table(f"{case['name']} at {float(case['rate_calls_per_s']):.3g} calls/s: every "
                      "metric against the 90 % interval of one run",
                      ["metric", "predicted [90 % one run]", "measured [95 % CI]", "verdict"], rows)


def title(res: dict[str, Any]) -> str:
    """The report's title (the question, not folder names)."""
    return (f"rtalab demo: calibrated at {float(res['rate_a']):.3g} calls/s, predicted and "
            f"measured at {float(res['rate_b']):.3g} calls/s")


def render(folder: Path) -> str:
    """The HTML report of the predict ``folder`` (see the module docstring)."""
    folder = Path(folder)
    res = load(folder)
    warmup = float(res["warmup_s"])
    panels = []
    for c in res["cases"]:
        reps, measured = completion_times(folder, c, warmup)
        panels.append((f"{c['name']}: {float(c['rate_calls_per_s']):.3g} calls/s", reps,
                       measured))
    status, head = headline(res)
    section = folder / "prediction.section.html"
    full = section.read_text(encoding="utf-8") if section.exists() else ""
    extra = ("<details class='folded'><summary>The full comparison: accuracy targets, CIs of "
             "the mean, calibration facts</summary>\n" + full + "\n</details>") if full else ""
    lead = {"status": status, "headline": head, "lines": [paragraph(res)],
            "figure": {"caption": "Turn completion, predicted (the band where one simulated "
                                  "run's curve falls) against measured (dashed).",
                       "data": ecdf_figure(panels)},
            "tables": [case_table(c) for c in res["cases"]], "html": extra}
    runs = sorted(p for p in (folder / "runs").iterdir() if p.is_dir())
    return render_report(runs, lead=lead, title=title(res), fold=True, comparison=False)


def screen(res: dict[str, Any], width: int = 80) -> list[str]:
    """The paragraph wrapped for the terminal."""
    return textwrap.wrap(paragraph(res), width=width)
