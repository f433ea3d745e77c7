"""One self-contained HTML report of run folders and sweep folders (Jinja2 template).

For a run: its facts (``meta.json``), the verdict lines of a ``verdict.json`` if present,
the key figures with 95 % CIs, every PNG of the folder, all metrics and the resolved
scenario TOML.  For a sweep: its grid and points, one plot per metric against the
grid, and the base scenario.  With two or more runs, a comparison section (see
:mod:`sim.compare`).  Every figure is embedded as a ``data:image/png;base64`` URI and
the page loads nothing from the network, so it opens offline and can be mailed.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim.compare import RunFolder, RunFolderError, compare_table, is_sweep, load_run
from sim.summary import metric_rows, unit

TEMPLATE = "report.html.j2"


def _b64_file(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool | str):
        return str(v)
    return f"{float(v):.4g}"


def _verdict(path: Path) -> dict[str, Any] | None:
    f = path / "verdict.json"
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except ValueError as e:
        raise RunFolderError(f"{f}: not valid JSON: {e}") from None
    ok = bool(data.get("ok"))
    return {"ok": ok, "headline": data.get("verdict") or ("PASS" if ok else "FAIL"),
            "failed": list(data.get("failed") or []), "rules": list(data.get("rules") or []),
            "indeterminate": dict(data.get("indeterminate") or {}),
            "warnings": list(data.get("warnings") or []), "coverage": data.get("coverage")}


def _run_section(run: RunFolder) -> dict[str, Any]:
    from sim.cli import summary_rows as key_rows

    m = run.meta
    facts = [("folder", str(run.path)), ("kind", m.get("kind", "?")),
             ("status", m.get("status", "?")), ("scenario", m.get("scenario", "?")),
             ("seed", m.get("seed")), ("replications", run.summary.get("replications")),
             ("warm-up removed (s)", run.summary.get("warmup_s")),
             ("started", m.get("started_at")), ("wall time (s)", m.get("wall_time_s")),
             ("git", (m.get("git") or {}).get("sha")), ("command", m.get("command"))]
    point = m.get("sweep_point")
    if isinstance(point, dict):
        facts.insert(1, ("sweep point", json.dumps(point.get("overrides"))))
    figures = [{"caption": p.name, "data": _b64_file(p)} for p in sorted(run.path.glob("*.png"))]
    rows = [{k: _fmt(v) if k != "metric" and k != "unit" else v for k, v in r.items()}
            for r in metric_rows(run.summary)]
    return {"kind": "run", "label": run.label, "facts": [(k, v) for k, v in facts
                                                         if v is not None],
            "verdict": _verdict(run.path), "key_rows": key_rows(run.summary),
            "figures": figures, "metric_rows": rows, "toml": run.scenario_toml,
            "points": None, "grid_keys": []}


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def sweep_figures(table: Any, grid_keys: Sequence[str]) -> list[dict[str, str]]:
    """One PNG per metric of a sweep's tidy table: the mean (95 % CI bars) against the first
    grid key that varies, one line per combination of the other keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    varying = [k for k in grid_keys if table[k].nunique(dropna=False) > 1]
    xkey = varying[0] if varying else "point"
    others = [k for k in varying[1:]]
    import pandas as pd

    col = table[xkey]
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    xs = sorted(col.dropna().unique(), key=lambda v: v if numeric else str(v))
    pos = {v: (float(v) if numeric else i) for i, v in enumerate(xs)}
    cmap = plt.get_cmap("tab10")
    figures = []
    for metric, rows in table.groupby("metric", sort=False):
        if rows["mean"].isna().all():
            continue
        fig, ax = plt.subplots(figsize=(5.2, 3.4), constrained_layout=True)
        groups = rows.groupby(others, sort=True, dropna=False) if others else [((), rows)]
        for j, (gkey, g) in enumerate(groups):
            g = g.sort_values(xkey, key=lambda s: s.map(pos))
            x = g[xkey].map(pos).to_numpy(dtype=float)
            y = g["mean"].to_numpy(dtype=float)
            lo = np.nan_to_num(y - g["ci_low"].to_numpy(dtype=float), nan=0.0)
            hi = np.nan_to_num(g["ci_high"].to_numpy(dtype=float) - y, nan=0.0)
            gk = gkey if isinstance(gkey, tuple) else (gkey,)
            name = ", ".join(f"{k}={v}" for k, v in zip(others, gk, strict=False)) or None
            ax.errorbar(x, y, yerr=[np.clip(lo, 0, None), np.clip(hi, 0, None)], marker="o",
                        ms=3, capsize=3, lw=1.2, color=cmap(j % 10), label=name)
        if not numeric:
            ax.set_xticks(list(pos.values()), [str(v) for v in xs], rotation=20, fontsize=8)
        ax.set_xlabel(xkey)
        u = unit(str(metric))
        ax.set_ylabel(f"{metric}" + (f" ({u})" if u else ""), fontsize=8)
        ax.set_title(str(metric), fontsize=9)
        ax.grid(True, alpha=0.3)
        if others and len(ax.get_legend_handles_labels()[0]) <= 8:
            ax.legend(fontsize=7)
        figures.append({"caption": f"{metric} vs {xkey} (mean, 95 % CI)", "data": _png(fig)})
    return figures


def _sweep_section(path: Path) -> dict[str, Any]:
    import pandas as pd

    from sim.sweep import SWEEP_JSON, SWEEP_PARQUET, TABLE_COLUMNS

    spec = json.loads((path / SWEEP_JSON).read_text(encoding="utf-8"))
    if not (path / SWEEP_PARQUET).is_file():
        raise RunFolderError(f"{path}: the sweep has not finished (no {SWEEP_PARQUET}); "
                             "rerun it into the same folder")
    table = pd.read_parquet(path / SWEEP_PARQUET)
    grid_keys = [c for c in table.columns if c not in TABLE_COLUMNS]
    meta = json.loads((path / "meta.json").read_text("utf-8")) if (path / "meta.json").is_file() \
        else {}
    points = []
    for p in spec.get("points", []):
        pmeta = path / p["dir"] / "meta.json"
        status = json.loads(pmeta.read_text("utf-8")).get("status") if pmeta.is_file() else "—"
        points.append({"point": p["point"], "status": status,
                       "cells": [_fmt(p["overrides"].get(k)) if not isinstance(
                           p["overrides"].get(k), dict) else json.dumps(p["overrides"][k])
                                  for k in grid_keys]})
    facts = [("folder", str(path)), ("points", len(points)),
             ("replications per point", spec.get("replications")),
             ("root seed", spec.get("root_seed")), ("grid keys", ", ".join(grid_keys) or "—"),
             ("command", meta.get("command")), ("tidy table", f"{path}/sweep.csv")]
    toml = (path / "scenario.toml").read_text("utf-8") if (path / "scenario.toml").is_file() \
        else ""
    return {"kind": "sweep", "label": path.name, "facts": [(k, v) for k, v in facts
                                                           if v is not None],
            "verdict": None, "key_rows": [], "figures": sweep_figures(table, grid_keys),
            "metric_rows": [], "toml": toml, "points": points, "grid_keys": grid_keys}


def _comparison(runs: Sequence[RunFolder]) -> dict[str, Any]:
    from sim.compare import plot_compare

    table = compare_table(runs)
    headers = []
    for k, r in enumerate(runs):
        headers.append(f"[{k}] {r.label}")
        if k:
            headers.append(f"[{k}]−[0]")
    rows = []
    for name, g in table.groupby("metric", sort=False):
        if g["mean"].isna().all():
            continue
        row = [str(name)]
        for _, r in g.iterrows():
            row.append(f"{_fmt(r['mean'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]")
            if r["run"]:
                mark = " ≠" if r["differs"] is True else ""
                row.append(f"{_fmt(r['diff'])} [{_fmt(r['diff_ci_low'])}, "
                           f"{_fmt(r['diff_ci_high'])}]{mark}")
        rows.append(row)
    with tempfile.TemporaryDirectory(prefix="rtalab-report-") as tmp:
        png = plot_compare(runs, Path(tmp) / "compare.png")
        figure = _b64_file(png)
    return {"headers": headers, "rows": rows, "figure": figure}


def render_report(paths: Sequence[str | Path]) -> str:
    """The HTML text of a report on ``paths`` (run folders and/or sweep folders)."""
    import jinja2

    from sim.results import package_versions

    if not paths:
        raise RunFolderError("report needs at least one folder")
    sections, runs = [], []
    for p in map(Path, paths):
        if is_sweep(p):
            sections.append(_sweep_section(p))
        else:
            run = load_run(p)
            runs.append(run)
            sections.append(_run_section(run))
    env = jinja2.Environment(loader=jinja2.PackageLoader("sim", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    title = "rtalab report: " + ", ".join(s["label"] for s in sections)
    return env.get_template(TEMPLATE).render(
        title=title, sections=sections,
        comparison=_comparison(runs) if len(runs) >= 2 else None,
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        version=package_versions().get("rtalab"))
