"""A report's sections of a sweep (the metrics that differ between its points) and of the
answers ``capacity``, ``tune`` and ``storm``.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from rtalab.sim.report.pieces import (
    as_float,
    fact_rows,
    file_figure,
    new_section,
    png_data,
    read_csv,
    read_json,
    read_text,
    text_table,
)
from rtalab.sim.shared.compare import RunFolderError, read_parquet
from rtalab.sim.shared.fmt import fmt_ci, fmt_value, metric_label, plain
from rtalab.sim.shared.stats import benjamini_hochberg, welch_anova
from rtalab.sim.shared.summary import unit
from rtalab.sim.sweep import SWEEP_JSON, SWEEP_PARQUET, TABLE_COLUMNS

MAX_SWEEP_FIGURES = 6  # differing metrics drawn in the sweep's main figure
ANSWER_ROWS = 10  # rows of a sweep's answer table (the rest in a full table below)
TEST_TEXT = ("Welch's ANOVA over the replications of each point, false discovery rate 5 % "
             "over all metrics")
KEY_SWEEP_METRICS = ("success_rate", "completion_s.p99", "load_amplification",
                     "goodput_turns_per_s")


# --------------------------------------------------------------------------- sweep


def _points_values(path: Path, spec: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                               list[dict[str, Any]]]:
    """Each point's meta (status) and summary metrics (replication values) from its folder."""
    metas, metrics = [], []
    for p in spec.get("points") or []:
        d = path / str(p.get("dir", ""))
        meta = read_json(d / "meta.json") if (d / "meta.json").is_file() else {}
        summary = read_json(d / "summary.json") if (d / "summary.json").is_file() else {}
        metas.append(meta)
        metrics.append(summary.get("metrics") or {})
    return metas, metrics


def sweep_differences(table: Any, point_metrics: Sequence[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """Metrics whose mean differs between the points of a sweep: Welch's one-way ANOVA on the
    replication values of every point, Benjamini–Hochberg over all metrics (false discovery
    rate 5 %: a sweep is a screen of many metrics; Holm would hide large effects at two or
    three replications).  Rows sorted by p-value: metric, p, lowest and highest point."""
    points = table["point"].to_numpy()
    means = table["mean"].to_numpy(dtype=float)
    tested = []
    for metric, idx in _metric_index(table).items():
        groups = [(point_metrics[int(i)].get(metric) or {}).get("values") or []
                  if int(i) < len(point_metrics) else [] for i in points[idx]]
        p = welch_anova(groups)
        if p is not None and not math.isnan(p):
            tested.append((metric, p, idx))
    rejected = benjamini_hochberg([p for _, p, _ in tested])
    out = []
    for (metric, p, idx), r in zip(tested, rejected, strict=True):
        m = means[idx]
        if not r or not np.isfinite(m).any():
            continue
        lo, hi = idx[int(np.nanargmin(m))], idx[int(np.nanargmax(m))]
        out.append({"metric": metric, "p": p, "low": table.iloc[lo], "high": table.iloc[hi]})
    return sorted(out, key=lambda d: d["p"])


def _metric_index(table: Any) -> dict[str, Any]:
    """Row positions of each metric in the tidy table, in first-seen order (cheap: no
    per-group DataFrames)."""
    names = table["metric"].to_numpy()
    order: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        order.setdefault(str(n), []).append(i)
    return {k: np.asarray(v) for k, v in order.items()}


def _xaxis(table: Any, grid_keys: Sequence[str]
           ) -> tuple[str, list[str], list[Any], dict[Any, float], bool]:
    varying = [k for k in grid_keys if table[k].nunique(dropna=False) > 1]
    xkey = varying[0] if varying else "point"
    col = table[xkey]
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    xs = sorted(col.dropna().unique(), key=lambda v: v if numeric else str(v))
    pos = {v: (float(v) if numeric else i) for i, v in enumerate(xs)}
    return xkey, varying[1:], xs, pos, numeric


def sweep_figures(table: Any, grid_keys: Sequence[str], metrics: Sequence[str]
                  ) -> list[dict[str, str]]:
    """One PNG of small multiples: each of ``metrics`` (mean, 95 % CI bars) against the
    first grid key that varies, one line per combination of the other keys; text readable at
    1280 px, integer x ticks when the grid values are integers."""
    # lazy: +186 ms (matplotlib) off importing sweeps
    import matplotlib

    matplotlib.use("Agg")
    # lazy: +847 ms (matplotlib) off importing sweeps
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not metrics:
        return []
    xkey, others, xs, pos, numeric = _xaxis(table, grid_keys)
    integer_x = numeric and all(float(v).is_integer() for v in xs)
    ncols = 2 if len(metrics) > 1 else 1
    nrows = math.ceil(len(metrics) / ncols)
    # a fixed layout (no constrained layout: it draws the figure twice)
    height = 3.9 * nrows
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, height), squeeze=False)
    fig.subplots_adjust(left=0.08 if ncols == 2 else 0.12, right=0.98, bottom=0.55 / height,
                        top=1 - 0.35 / height, wspace=0.22, hspace=0.55 * 3.9 / 3.9)
    cmap = plt.get_cmap("tab10")
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        rows = table[table["metric"] == metric]
        groups = rows.groupby(others, sort=True, dropna=False) if others else [((), rows)]
        share = unit(metric) in ("share", "probability")
        scale = 100.0 if share else 1.0
        for j, (gkey, g) in enumerate(groups):
            g = g.sort_values(xkey, key=lambda s: s.map(pos))
            x = g[xkey].map(pos).to_numpy(dtype=float)
            y = g["mean"].to_numpy(dtype=float) * scale
            lo = np.nan_to_num(y - g["ci_low"].to_numpy(dtype=float) * scale, nan=0.0)
            hi = np.nan_to_num(g["ci_high"].to_numpy(dtype=float) * scale - y, nan=0.0)
            gk = gkey if isinstance(gkey, tuple) else (gkey,)
            name = ", ".join(f"{k}={v}" for k, v in zip(others, gk, strict=False)) or None
            ax.errorbar(x, y, yerr=[np.clip(lo, 0, None), np.clip(hi, 0, None)], marker="o",
                        ms=4, capsize=3, lw=1.5, color=cmap(j % 10), label=name)
        if not numeric:
            ax.set_xticks(list(pos.values()), [str(v) for v in xs], rotation=20)
        elif integer_x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if unit(metric) in ("turns", "calls", "entries"):
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xkey, fontsize=11)
        u = {"share": "%", "probability": "%"}.get(unit(metric), unit(metric))
        ax.set_ylabel(u or "value", fontsize=11)
        ax.set_title(metric_label(metric, with_unit=False), fontsize=12)
        ax.tick_params(labelsize=10)
        ax.grid(True, alpha=0.3)
        if others and len(ax.get_legend_handles_labels()[0]) <= 8:
            ax.legend(fontsize=9)
    return [{"caption": f"Metrics that differ between points, against {xkey} (mean and 95 % CI "
                        "over replications)", "data": png_data(fig), "svg": ""}]


def svg_sparkline(xs: Sequence[float], ys: Sequence[float | None], title: str,
                  xlabels: Sequence[str], width: int = 300, height: int = 150) -> str:
    """A small inline SVG line chart (no matplotlib: one per metric stays cheap)."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(y)]
    esc = html.escape
    parts = [f'<svg width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
             f'<text x="4" y="14" font-size="12" font-family="sans-serif">{esc(title)}</text>']
    if not pts:
        parts.append('<text x="4" y="70" font-size="12" fill="#777" '
                     'font-family="sans-serif">no data</text></svg>')
        return "".join(parts)
    left, right, top, bottom = 52, width - 8, 24, height - 30
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y1 == y0:
        y0, y1 = y0 - 1 if y0 == 0 else y0 * 0.9, y1 + 1 if y1 == 0 else y1 * 1.1
        y0, y1 = min(y0, y1), max(y0, y1)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (right - left)

    def sy(y: float) -> float:
        return bottom - (y - y0) / (y1 - y0) * (bottom - top)

    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#999"/>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>')
    for y in (y0, y1):
        parts.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" font-size="11" '
                     f'text-anchor="end" font-family="sans-serif">{esc(plain(y, 3))}</text>')
    for x, lab in ((x0, xlabels[0]), (x1, xlabels[-1])):
        parts.append(f'<text x="{sx(x):.1f}" y="{bottom + 14}" font-size="11" '
                     f'text-anchor="middle" font-family="sans-serif">{esc(lab)}</text>')
    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    parts.append(f'<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="#1f77b4"/>'
              for x, y in pts]
    parts.append("</svg>")
    return "".join(parts)


def _sweep_appendix(table: Any, grid_keys: Sequence[str]) -> list[dict[str, str]]:
    xkey, _, _, pos, _ = _xaxis(table, grid_keys)
    xcol = table[xkey].to_numpy()
    means = table["mean"].to_numpy(dtype=float)
    out = []
    for metric, idx in _metric_index(table).items():
        m = means[idx]
        if not np.isfinite(m).any():
            continue
        by_x: dict[Any, list[float]] = {}  # several points per x: the mean over the others
        for xv, v in zip(xcol[idx], m, strict=True):
            by_x.setdefault(xv, []).append(v)
        xs = sorted(by_x, key=lambda v: pos[v])
        ys = [float(np.nanmean(by_x[v])) if np.isfinite(by_x[v]).any() else None for v in xs]
        out.append({"caption": f"{metric} vs {xkey}", "data": "",
                    "svg": svg_sparkline([pos[v] for v in xs], ys, metric_label(metric),
                                         [str(v) for v in xs] or [""])})
    return out


def sweep_section(path: Path, kind: str = "sweep") -> dict[str, Any]:
    spec = read_json(path / SWEEP_JSON)
    if not (path / SWEEP_PARQUET).is_file():
        raise RunFolderError(f"{path}: the sweep has not finished (no {SWEEP_PARQUET}); "
                             "rerun it into the same folder")
    table = read_parquet(path / SWEEP_PARQUET)
    missing = [c for c in TABLE_COLUMNS if c not in table.columns]
    if missing:
        raise RunFolderError(f"{path / SWEEP_PARQUET}: not a sweep table (no column "
                             f"{missing[0]!r})")
    grid_keys = [c for c in table.columns if c not in TABLE_COLUMNS]
    meta = read_json(path / "meta.json") if (path / "meta.json").is_file() else {}
    metas, point_metrics = _points_values(path, spec)
    diffs = sweep_differences(table, point_metrics)
    reps = spec.get("replications")
    answer: dict[str, Any] = {"status": "info", "lines": [], "table": None}
    extra_tables: list[dict[str, Any]] = []
    if isinstance(reps, int) and reps < 2:
        answer["headline"] = ("One replication per point: no test of differences is possible; "
                              "rerun with --replications 2 or more.")
    elif not diffs:
        answer["headline"] = (f"No metric differs significantly between the "
                              f"{len(spec.get('points') or [])} points ({TEST_TEXT}).")
    else:
        answer["headline"] = (f"{len(diffs)} metric(s) differ significantly between the "
                              f"points ({TEST_TEXT}).")

        def where(row: Any) -> str:
            return ", ".join(f"{k}={row[k]}" for k in grid_keys) or f"point {row['point']}"

        diff_rows = [[metric_label(d["metric"]), f"{fmt_value(d['low']['mean'], d['metric'])} "
                      f"({where(d['low'])})", f"{fmt_value(d['high']['mean'], d['metric'])} "
                      f"({where(d['high'])})", "< 0.0001" if d["p"] < 1e-4 else plain(d["p"], 2)]
                     for d in sorted(diffs, key=lambda d: d["metric"] not in KEY_SWEEP_METRICS)]
        headers = ["metric", "lowest (where)", "highest (where)", "p-value"]
        answer["table"] = text_table(
            "Metrics that differ between points" + (
                f" (the first {ANSWER_ROWS}; all {len(diffs)} below)"
                if len(diffs) > ANSWER_ROWS else ""), headers, diff_rows[:ANSWER_ROWS])
        if len(diffs) > ANSWER_ROWS:
            extra_tables.append(text_table(f"All {len(diffs)} metrics that differ between points",
                                           headers, diff_rows))
    ranked = sorted(diffs, key=lambda d: d["metric"] not in KEY_SWEEP_METRICS)  # stable
    shown = [d["metric"] for d in ranked[:MAX_SWEEP_FIGURES]]
    notes = []
    if not shown:  # nothing significant: the key metrics, said so
        present = set(table["metric"])
        shown = [m for m in KEY_SWEEP_METRICS if m in present]
        notes.append("No metric differs significantly; the figure shows the key metrics "
                     "anyway. Every metric is drawn in the appendix.")
    if isinstance(reps, int) and reps < 3:
        notes.append(f"{reps} replication(s) per point: the test has little power; differences "
                     "may be missed. Use --replications 3 or more for a firmer answer.")
    figures = sweep_figures(table, grid_keys, shown)
    key_cols = KEY_SWEEP_METRICS
    by = {(int(cast("int", r.point)), r.metric): r for r in table.itertuples(index=False)
          if r.metric in key_cols}
    rows = []
    for i, p in enumerate(spec.get("points") or []):
        ov = p.get("overrides") or {}
        status = metas[i].get("status", "—") if i < len(metas) else "—"
        cells = [str(p.get("point", i))]
        cells += [json.dumps(ov.get(k)) if isinstance(ov.get(k), dict | list)
                  else fmt_value(ov.get(k)) for k in grid_keys]
        for m in key_cols:
            r = by.get((i, m))
            cells.append(fmt_value(r.mean, m) if r is not None else "–")
        rows.append([*cells, status])
    points = text_table("Points (means; every metric with its CI in sweep.csv)",
                        ["point", *grid_keys, *(metric_label(m) for m in key_cols), "status"],
                        rows)
    facts = fact_rows([("folder", path), ("points", len(rows)), ("replications per point", reps),
                    ("root seed", spec.get("root_seed")),
                    ("grid keys", ", ".join(grid_keys) or "—"), ("command", meta.get("command")),
                    ("tidy table", path / "sweep.csv")])
    return new_section(kind, path.name, path, facts=facts, answer=answer, figures=figures,
                    notes=notes, tables=[points, *extra_tables],
                    appendix=_sweep_appendix(table, grid_keys),
                    toml=read_text(path / "scenario.toml"))


# --------------------------------------------------------------------------- answers


# columns of the answers' CSV files: (label, the metric name whose unit formats the value)
ANSWER_COLUMNS: dict[str, tuple[str, str]] = {
    "peak_amplification": ("peak load amplification (×)", "load_amplification"),
    "peak_request_amplification": ("peak request amplification (×)", "load_amplification"),
    "goodput_dip": ("goodput dip (%)", "goodput_dip_share"),
    "recover_s": ("recovery time (s)", "recover_s"),
    "ghost_per_1k": ("ghost successes per 1k turns", "ghost_per_1k_turns"),
    "duplicate_side_effects_per_1k": ("duplicate side effects per 1k turns",
                                      "duplicate_per_1k_turns"),
    "utilisation": ("worker utilisation (%)", "worker_utilisation"),
    "load": ("load", ""), "required": ("required value", ""),
    "evaluations": ("probes", ""), "next_down": ("one step smaller", ""),
    "next_down_fails": ("fails there on", ""), "constraints_hold": ("constraints hold", ""),
}


def _column_label(c: str) -> tuple[str, str]:
    """(header, metric name for the unit) of an answers CSV column."""
    if c in ANSWER_COLUMNS:
        return ANSWER_COLUMNS[c]
    if c.startswith("param."):
        return c.removeprefix("param."), c.removeprefix("param.")
    if c.endswith(".change"):
        m = c.removesuffix(".change")
        return f"{metric_label(m)}: change", m
    if "." in c or c.endswith(("_s", "_rate", "_share")):
        return metric_label(c), c
    return c.replace("_", " "), ""


def _csv_table(title: str, rows: list[dict[str, str]], drop: Callable[[str], bool] = lambda c:
               False) -> dict[str, Any]:
    """A CSV's rows as a table, ``x``/``x.ci_low``/``x.ci_high`` folded into "m [lo, hi]", a
    change ``x.change`` with its ``x.diff_ci_low``/``x.diff_ci_high`` likewise; the p-values
    of the changes (``x.p``) stay in the CSV (the significance flags say what they decided),
    so the table reads at 1280 px."""
    if not rows:
        return text_table(title, ["(empty)"], [])
    changes = {c.removesuffix(".change") for c in rows[0] if c.endswith(".change")}
    cols = [c for c in rows[0] if not drop(c) and not c.endswith(
        (".ci_low", ".ci_high", ".diff_ci_low", ".diff_ci_high"))
        and not (c.endswith(".p") and c.removesuffix(".p") in changes)]
    flags = [c for c in cols if all(r.get(c) in ("True", "False") for r in rows)]
    if len(flags) > 1:  # yes/no columns read as one: the names of those that hold
        cols = [c for c in cols if c not in flags]
    else:
        flags = []
    out = []
    for r in rows:
        cells = []
        if flags:
            held = [_column_label(c)[0] for c in flags if r.get(c) == "True"]
            r = {**r, "_flags": ", ".join(held) or "–"}
        for c in ([*cols, "_flags"] if flags else cols):
            if c == "_flags":
                cells.append(r["_flags"])
                continue
            metric = _column_label(c)[1]
            low, high = ((f"{c}.ci_low", f"{c}.ci_high") if not c.endswith(".change") else
                         (f"{metric}.diff_ci_low", f"{metric}.diff_ci_high"))
            if r.get(low) not in (None, ""):
                cells.append(fmt_ci(as_float(r[c]), as_float(r[low]), as_float(r.get(high)),
                                    metric))
            else:
                v = r.get(c, "")
                cells.append(fmt_value(as_float(v), metric) if as_float(v) is not None
                             else (v or "–"))
        out.append(cells)
    headers = [_column_label(c)[0] for c in cols] + (["holds"] if flags else [])
    return text_table(title, headers, out)


def capacity_section(path: Path) -> dict[str, Any]:
    rows = read_csv(path / "capacity.csv")
    answer_txt = read_text(path / "answer.txt").strip().splitlines()
    table = _csv_table("Capacity: required knob value per load level", rows)
    answer = {"status": "info", "headline": answer_txt[0] if answer_txt else
              "(no answer.txt: the search did not finish)", "lines": answer_txt[1:],
              "table": table}
    figures = ([file_figure(path / "capacity.png", "Required knob value per load level, with the "
                        "probes that held and failed")] if (path / "capacity.png").is_file()
               else [])
    tables = []
    if (path / "probes.json").is_file():
        try:
            probes = json.loads((path / "probes.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RunFolderError(f"{path / 'probes.json'}: not valid JSON: {e}") from None
        tables.append(text_table("Every probe of the search", ["load", "value", "holds",
                                                              "failing SLOs"],
                                 [[fmt_value(p.get("load")), fmt_value(p.get("value")),
                                   "yes" if p.get("holds") else "no",
                                   ", ".join(p.get("failing") or []) or "–"] for p in probes
                                  if isinstance(p, dict)]))
    return new_section("capacity", path.name, path, facts=fact_rows([("folder", path)]),
                    answer=answer, figures=figures, tables=tables,
                    toml=_first_toml(path, "probes"))


def _first_toml(path: Path, sub: str) -> str:
    found = sorted((path / sub).glob("*/scenario.toml")) if (path / sub).is_dir() else []
    return read_text(found[0]) if found else read_text(path / "scenario.toml")


def tune_section(path: Path) -> dict[str, Any]:
    answer_txt = read_text(path / "answer.txt").strip().splitlines()
    cands = read_csv(path / "candidates.csv") if (path / "candidates.csv").is_file() else []
    trials = read_csv(path / "trials.csv") if (path / "trials.csv").is_file() else []
    rec = [c for c in cands if c.get("recommended", "").lower() == "true"]
    evidence = _csv_table("Evidence: candidates and today's settings re-run on fresh seeds "
                          "(change = candidate − current)", cands,
                          drop=lambda c: c.endswith("_pct"))
    answer = {"status": "pass" if rec else "info",
              "headline": answer_txt[0] if answer_txt else "(no answer.txt)",
              "lines": answer_txt[1:], "table": evidence}
    # two objectives: the Pareto front; one: the convergence of the best feasible trial
    figures = [file_figure(path / name, caption) for name, caption in (
        ("pareto.png", "Trials of the search: objectives, Pareto front and constraints"),
        ("convergence.png", "Trials of the search: the objective, the best feasible trial so "
                            "far, and today's settings and the candidates re-run on fresh "
                            "seeds"),
    ) if (path / name).is_file()]
    tables = [_csv_table(f"All {len(trials)} trials of the study", trials)] if trials else []
    return new_section("tune", path.name, path, facts=fact_rows([("folder", path), (
        "study", path / "study.db" if (path / "study.db").is_file() else None)]),
                    answer=answer, figures=figures, tables=tables,
                    toml=_first_toml(path, "confirm"))


def storm_section(path: Path) -> dict[str, Any]:
    rows = read_csv(path / "storm.csv")
    rec = [r["strategy"] for r in rows if r.get("verdict") == "recovered"]
    stuck = [r["strategy"] for r in rows if r.get("verdict") == "metastable"]
    other = [r["strategy"] for r in rows if r.get("verdict") not in ("recovered", "metastable")]
    headline = (f"{len(rec)} of {len(rows)} strategies recovered after the trigger; "
                f"{len(stuck)} stayed metastable.")
    verdicts = text_table("Verdict per strategy", ["strategy", "verdict", "recovery time",
                                                   "goodput dip", "what it is"],
                          [[r["strategy"], r.get("verdict", "?"),
                            fmt_value(as_float(r.get("recover_s")), "recover_s"),
                            fmt_value(as_float(r.get("goodput_dip")), "goodput_dip_share"),
                            r.get("description", "")] for r in rows])
    lines = [f"recovered: {', '.join(rec) or 'none'}",
             f"metastable: {', '.join(stuck) or 'none'}"]
    if other:
        lines.append(f"other: {', '.join(other)}")
    answer = {"status": "info", "headline": headline, "lines": lines, "table": verdicts}
    figures = ([file_figure(path / "storm.png", "Goodput and offered load through the trigger, one "
                        "panel per strategy")] if (path / "storm.png").is_file() else [])
    full = _csv_table("Every measure per strategy (mean [95 % CI])", rows,
                      drop=lambda c: c in ("run", "description"))
    return new_section("storm", path.name, path, facts=fact_rows([("folder", path),
                                                            ("strategies", len(rows))]),
                    answer=answer, figures=figures, tables=[full],
                    toml=read_text(path / "scenario.toml"))


