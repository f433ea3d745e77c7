"""One self-contained HTML report of any folder rtalab writes, the answer first.

``rtalab report PATH...`` reads every kind of results folder (:func:`folder_kind`):
a simulated run, a load run, a sweep, and the answers ``capacity``, ``tune`` and
``storm``.  Each section opens with its answer (the verdict and its rules for a load
run, the key figures for a run, the metrics that differ significantly between the
points of a sweep, the capacity table and sentence, the recommendation and its
evidence, recovered/metastable per strategy), then a few figures chosen for that
question, then the full tables; a sweep's plot of every metric sits in a collapsed
appendix (inline SVG, cheap to draw).  Every figure is embedded
(``data:image/png;base64`` or inline SVG) and the page loads nothing from the network,
so it opens offline and can be mailed.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import html
import io
import json
import math
import re
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from sim.shared.compare import RunFolder, RunFolderError, compare_table, load_run, read_parquet
from sim.shared.fmt import fmt_ci, fmt_value, metric_label, plain
from sim.shared.fmt import summary_rows as key_rows
from sim.shared.summary import metric_rows, unit

TEMPLATE = "report.html.j2"
KINDS = ("run", "load", "sweep", "capacity", "tune", "storm")
FIG_DPI = 100
MAX_SWEEP_FIGURES = 6  # differing metrics drawn in the sweep's main figure
HEADLINE_METRICS = ("success_rate", "completion_s.p99", "ttfc_s.p99", "attempts_per_turn",
                    "load_amplification", "goodput_turns_per_s")
ANSWER_ROWS = 10  # rows of a sweep's answer table (the rest in a full table below)
TEST_TEXT = ("Welch's ANOVA over the replications of each point, false discovery rate 5 % "
             "over all metrics")
KEY_SWEEP_METRICS = ("success_rate", "completion_s.p99", "load_amplification",
                     "goodput_turns_per_s")


# --------------------------------------------------------------------------- folder kinds


def folder_kind(path: str | Path) -> str:
    """Which rtalab folder ``path`` is: one of :data:`KINDS`; raises RunFolderError if none."""
    p = Path(path)
    if not p.is_dir():
        raise RunFolderError(f"{p}: no such folder")
    if (p / "storm.csv").is_file():
        return "storm"
    if (p / "capacity.csv").is_file():
        return "capacity"
    if (p / "candidates.csv").is_file() or (p / "trials.csv").is_file():
        return "tune"
    if (p / "sweep.json").is_file():
        return "sweep"
    if (p / "summary.json").is_file():
        meta = _json(p / "meta.json") if (p / "meta.json").is_file() else {}
        return "load" if meta.get("kind") == "load" else "run"
    raise RunFolderError(f"{p}: not an rtalab results folder (no summary.json, sweep.json, "
                         "capacity.csv, candidates.csv or storm.csv; an unfinished run?)")


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RunFolderError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise RunFolderError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: not a JSON object")
    return data


def _csv(path: Path) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise RunFolderError(f"{path}: cannot read: {e}") from None


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as e:
        raise RunFolderError(f"{path}: cannot read: {e}") from None


# --------------------------------------------------------------------------- pieces


def _b64_file(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _figure(path: Path, caption: str) -> dict[str, str]:
    return {"caption": caption, "data": _b64_file(path), "svg": ""}


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    # fast zlib level: a report's PNGs are a little larger, rendered about twice as fast
    fig.savefig(buf, format="png", dpi=FIG_DPI, pil_kwargs={"compress_level": 1})
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


_NUMBER_TEXT = re.compile(r"^(–|[−\-+<>]?\s?\d[\d.,]*\s?(%|ms|s|pp|B|KiB|MiB|×)?"
                          r"(\s\[.*\](\s?(%|ms|s|pp))?)?( ≠)?)$")


def _is_number_text(c: str) -> bool:
    """True for a cell that is a number (with unit and CI), left for right-alignment."""
    return bool(_NUMBER_TEXT.match(c.strip()))


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
           note: str = "") -> dict[str, Any]:
    """A table for the template: cells as text; ``left`` marks the text (non-number) columns,
    which are left-aligned and may wrap (a column of mostly "–" is judged by its other
    cells: a long list of ids among dashes must wrap, not widen the table)."""
    cells = [[c if isinstance(c, str) else fmt_value(c) for c in r] for r in rows]

    def text_column(i: int) -> bool:
        col = [r[i] for r in cells if i < len(r) and r[i].strip() != "–"]
        return sum(not _is_number_text(c) for c in col) * 2 > len(col)

    left = [i == 0 or text_column(i) for i in range(len(headers))]
    ident = [[bool(_IDENT.match(c)) for c in r] for r in cells]
    return {"title": title, "headers": list(headers), "rows": cells, "note": note, "left": left,
            "ident": ident}


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
          note: str = "") -> dict[str, Any]:
    """A table for :func:`render_report`'s ``lead`` (cells as text, numbers right-aligned)."""
    return _table(title, headers, rows, note)


def png_data(fig: Any) -> str:
    """A matplotlib figure as the base64 PNG a ``lead`` figure takes (the figure is closed)."""
    return _png(fig)


# a name such as a rule's (``continuation-answered-twice``): kept on one line, never broken at
# its hyphens
_IDENT = re.compile(r"^[a-z][a-z0-9]*([-_.][a-z0-9]+)+$")


def _section(kind: str, label: str, path: Path, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kind": kind, "label": label, "path": str(path), "facts": [],
        "answer": {"status": "info", "headline": "", "lines": [], "table": None, "chips": []},
        "figures": [], "notes": [], "tables": [], "appendix": [], "toml": ""}
    answer = {**base["answer"], **kw.pop("answer", {})}
    base.update(kw, answer=answer)
    return base


def _facts(pairs: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    return [(k, str(v)) for k, v in pairs if v is not None and v != ""]


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------- run and load


def _verdict(path: Path) -> dict[str, Any] | None:
    f = path / "verdict.json"
    if not f.is_file():
        return None
    data = _json(f)
    rules = []
    for r in data.get("rules") or []:
        if not isinstance(r, dict):
            continue
        examples = [str(e) for e in (r.get("examples") or [])][:3]
        rules.append({"name": str(r.get("name", "?")), "kind": str(r.get("kind", "")),
                      "section": str(r.get("section", "")), "status": str(r.get("status", "?")),
                      "count": r.get("count"), "detail": str(r.get("detail", "")),
                      "examples": ", ".join(examples)})
    ok = bool(data.get("ok"))
    coverage = data.get("coverage")
    return {"ok": ok, "headline": str(data.get("verdict") or ("PASS" if ok else "FAIL")),
            "failed": [str(f) for f in data.get("failed") or []], "rules": rules,
            "indeterminate": dict(data.get("indeterminate") or {}),
            "warnings": [str(w) for w in data.get("warnings") or []],
            "coverage": coverage if isinstance(coverage, list) and coverage else None}


def _run_figures(run: RunFolder) -> tuple[list[dict[str, str]], list[str]]:
    from sim.shared.plots import LATENCY_CDF_PNG, TIMESERIES_PNG

    clock = "real (wall-clock) time" if run.meta.get("kind") == "load" else "simulated time"
    captions = {TIMESERIES_PNG: f"Time series over {clock}: the warm-up shaded grey, outages "
                                "red, capacity drops orange; crashes and barge-in spikes as "
                                "vertical lines.",
                LATENCY_CDF_PNG: "Latency CDFs of completed turns after the warm-up "
                                 "(log scale, with p50/p95/p99)."}
    figures, notes = [], []
    for name in (TIMESERIES_PNG, LATENCY_CDF_PNG):
        if (run.path / name).is_file():
            figures.append(_figure(run.path / name, captions[name]))
    others = sorted(p for p in run.path.glob("*.png") if p.name not in captions)
    figures += [_figure(p, p.name) for p in others]
    if not figures:
        notes.append("No figures in this folder (the run was made with --no-plots).")
    return figures, notes


def _metric_table(summary: dict[str, Any]) -> dict[str, Any]:
    rows = [[metric_label(r["metric"]), fmt_value(r["mean"], r["metric"]),
             fmt_ci(None, r["ci_low"], r["ci_high"], r["metric"]).removeprefix("– ")
             if r["ci_low"] is not None else "–", str(r["n"]), r["metric"]]
            for r in metric_rows(summary) if r["mean"] is not None]
    return _table("All metrics (mean and 95 % CI over replications)",
                  ["metric", "mean", "95 % CI", "n", "key"], rows)


def _run_section(run: RunFolder, kind: str) -> dict[str, Any]:
    m = run.meta
    status = m.get("status", "?")
    facts = _facts([("folder", run.path), ("status", status), ("scenario", m.get("scenario")),
                    ("seed", m.get("seed")), ("replications", run.summary.get("replications")),
                    ("warm-up removed", f"{run.summary.get('warmup_s', 0):g} s"),
                    ("started", m.get("started_at")),
                    ("wall time", f"{m['wall_time_s']:.1f} s" if isinstance(
                        m.get("wall_time_s"), int | float) else None),
                    ("git", (m.get("git") or {}).get("sha")), ("command", m.get("command"))])
    point = m.get("sweep_point")
    if isinstance(point, dict):
        facts.insert(1, ("sweep point", json.dumps(point.get("overrides"))))
    figures, notes = _run_figures(run)
    verdict = _verdict(run.path)
    rows = key_rows(run.summary)
    answer: dict[str, Any] = {"status": "info", "headline": "", "lines": [], "table": None}
    met = run.summary.get("metrics", {})

    def mean(k: str) -> Any:
        return (met.get(k) or {}).get("mean")

    summary_line = (f"{fmt_value(mean('turns'), 'turns')} turns after the warm-up: "
                    f"{fmt_value(mean('success_rate'), 'success_rate')} completed, "
                    f"turn completion p99 "
                    f"{fmt_value(mean('completion_s.p99'), 'completion_s.p99')}, "
                    f"{fmt_value(mean('attempts_per_turn'))} attempts per turn.")
    if kind == "load" or verdict is not None:
        if verdict is None:
            answer.update(status="info", headline="No verdict in this folder (rtalab check "
                                                   "was not run on it).")
        else:
            failed = [r for r in verdict["rules"] if r["status"] == "fail"]
            answer.update(
                status="pass" if verdict["ok"] else "fail",
                headline=(f"{verdict['headline']}: every rule holds" if verdict["ok"] else
                          f"{verdict['headline']}: {len(failed)} rule(s) broken: "
                          + ", ".join(r["name"] for r in failed) if failed else
                          f"{verdict['headline']}: not a pass (the run did not finish; "
                          "rules judged on what was gathered)"),
                chips=[{"name": r["name"], "status": r["status"],
                        "count": r["count"] if r["status"] == "fail" else None}
                       for r in verdict["rules"]],
                table=_table("Broken rules", ["rule", "kind", "count", "example ids",
                                              "detail"],
                             [[r["name"], r["kind"], fmt_value(r["count"]),
                               r["examples"] or "–", r["detail"]] for r in failed])
                if failed else None)
        answer["lines"] = [summary_line]
        if verdict is not None:
            answer["lines"] += [f"warning: {w}" for w in verdict["warnings"]]
        if status != "complete":
            answer["lines"].append(f"The run's status is {status!r}: figures may be partial.")
    else:
        answer.update(headline=summary_line, lines=[] if status == "complete" else
                      [f"The run's status is {status!r}: figures may be partial."])
    if kind == "load":
        notes.append("Locust's TURN time runs from the start of a turn to its end, including "
                     "the caller's handoff wait (input-required → the caller's answer); "
                     "rtalab's turn completion excludes that wait, so Locust's TURN "
                     "percentiles are higher for runs with handoffs.")
    tables = []
    if verdict is not None:
        tables.append(_table("Every rule and SLO gate", ["rule", "kind", "status", "count",
                                                         "example ids", "detail", "source"],
                             [[r["name"], r["kind"], r["status"], fmt_value(r["count"]),
                               r["examples"] or "–", r["detail"], r["section"]]
                              for r in verdict["rules"]]))
    if verdict is not None and verdict["indeterminate"]:
        tables.append(_table("Indeterminate executions (reported, never a violation)",
                             ["class", "count", "detail"],
                             [[k, fmt_value(v.get("count")), str(v.get("detail", ""))]
                              for k, v in verdict["indeterminate"].items()
                              if isinstance(v, dict)]))
    if verdict is not None and verdict["coverage"]:
        cols = list(verdict["coverage"][0])
        tables.append(_table("Coverage", cols, [[fmt_value(r.get(c)) if not isinstance(
            r.get(c), str) else r.get(c) for c in cols] for r in verdict["coverage"]
            if isinstance(r, dict)]))
    if answer["table"] is None and kind != "load":
        answer["table"] = _table("", ["", "mean", "95 % CI"], [
            [metric_label(k), fmt_value(mean(k), k),
             fmt_ci(None, met[k].get("ci_low"), met[k].get("ci_high"), k).removeprefix("– ")]
            for k in HEADLINE_METRICS if mean(k) is not None])
    fleet = fleet_load(run.summary)
    if fleet:
        tables.append(_fleet_table(fleet))
        figures.append(fleet_figure(fleet))
    tables.append(_table("Key figures (mean, 95 % CI over replications)",
                         ["metric", "mean", "95 % CI"], rows))
    tables.append(_metric_table(run.summary))
    return _section(kind, run.label, run.path, facts=facts, answer=answer, figures=figures,
                    notes=notes, tables=tables, toml=run.scenario_toml)


# --------------------------------------------------------------------------- a fleet

FLEET_UTIL = "fleet.replica_utilisation.r"
FLEET_SHARE = "fleet.replica_requests_share.r"
FLEET_IMBALANCE = ("fleet.utilisation_imbalance", "fleet.requests_imbalance")


def fleet_load(summary: dict[str, Any]) -> dict[str, Any] | None:
    """A fleet run's load per replica from its ``summary.json`` (None for one pool):
    ``replicas`` [(index, utilisation {mean, ci_low, ci_high}, requests share {...})] in
    replica order and ``imbalance`` {metric: {mean, ci_low, ci_high}}."""
    met = summary.get("metrics") or {}
    index = sorted(int(k[len(FLEET_UTIL):]) for k in met
                   if k.startswith(FLEET_UTIL) and k[len(FLEET_UTIL):].isdigit())
    if not index:
        return None

    def stats(name: str) -> dict[str, Any]:
        m = met.get(name) or {}
        return {k: _num(m.get(k)) for k in ("mean", "ci_low", "ci_high")}

    return {"replicas": [(r, stats(f"{FLEET_UTIL}{r}"), stats(f"{FLEET_SHARE}{r}"))
                         for r in index],
            "imbalance": {k: stats(k) for k in FLEET_IMBALANCE if k in met}}


def _fmt_stats(st: dict[str, Any], name: str) -> tuple[str, str]:
    ci = (fmt_ci(None, st["ci_low"], st["ci_high"], name).removeprefix("– ")
          if st["ci_low"] is not None and st["ci_high"] is not None else "–")
    return fmt_value(st["mean"], name), ci


def _fleet_table(fleet: dict[str, Any]) -> dict[str, Any]:
    n = len(fleet["replicas"])
    rows = []
    for r, util, share in fleet["replicas"]:
        u, uci = _fmt_stats(util, f"{FLEET_UTIL}{r}")
        s, sci = _fmt_stats(share, f"{FLEET_SHARE}{r}")
        rows.append([f"replica {r}", u, uci, s, sci])
    for name, label in zip(FLEET_IMBALANCE, ("utilisation", "requests"), strict=True):
        if name in fleet["imbalance"]:
            v, ci = _fmt_stats(fleet["imbalance"][name], name)
            rows.append([f"imbalance of {label} (max / mean)",
                         *((v, ci, "", "") if label == "utilisation" else ("", "", v, ci))])
    return _table(f"Fleet: load per replica ({n} replicas; mean, 95 % CI over replications)",
                  ["", "utilisation", "95 % CI", "requests share", "95 % CI"], rows,
                  note=f"an even split is {fmt_value(1 / n, FLEET_SHARE)} of the "
                       "requests per replica; imbalance = the largest replica's value ÷ the "
                       "mean over replicas (1 = even)")


def fleet_figure(fleet: dict[str, Any]) -> dict[str, str]:
    """Bars of each replica's utilisation with its 95 % CI (readable at 1280 px)."""
    import matplotlib.pyplot as plt

    reps = fleet["replicas"]
    fig, ax = plt.subplots(figsize=(min(12.0, max(7.0, 3.0 + 0.5 * len(reps))), 3.4))
    x = [r for r, _, _ in reps]
    y = [100 * (u["mean"] or 0.0) for _, u, _ in reps]
    lo = [max(0.0, yy - 100 * u["ci_low"]) if u["ci_low"] is not None else 0.0
          for yy, (_, u, _) in zip(y, reps, strict=True)]
    hi = [max(0.0, 100 * u["ci_high"] - yy) if u["ci_high"] is not None else 0.0
          for yy, (_, u, _) in zip(y, reps, strict=True)]
    ax.bar(x, y, yerr=[lo, hi], capsize=4, color="tab:blue", alpha=0.8,
           error_kw={"ecolor": "0.2"})
    mean = sum(y) / len(y)
    ax.axhline(mean, color="tab:red", lw=1, ls="--", label=f"fleet mean {mean:.1f} %")
    ax.set_xticks(x, [f"r{r}" for r in x], fontsize=10)
    ax.set_xlabel("replica", fontsize=10)
    ax.set_ylabel("worker utilisation (%)", fontsize=10)
    ax.set_ylim(0, max(100.0, max(y[i] + hi[i] for i in range(len(y))) * 1.05))
    ax.tick_params(labelsize=10)
    ax.legend(fontsize=10, loc="best")
    imb = (fleet["imbalance"].get("fleet.utilisation_imbalance") or {}).get("mean")
    ax.set_title("Utilisation per replica, 95 % CI over replications"
                 + (f"; imbalance (max / mean) {imb:.3f}" if imb is not None else ""),
                 fontsize=11)
    fig.tight_layout()
    return {"caption": "Worker utilisation of each replica of the fleet over the measurement "
                       "window (bars: mean over replications; whiskers: 95 % CI; dashed: the "
                       "fleet's mean).", "data": _png(fig), "svg": ""}


# --------------------------------------------------------------------------- sweep


def _points_values(path: Path, spec: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                               list[dict[str, Any]]]:
    """Each point's meta (status) and summary metrics (replication values) from its folder."""
    metas, metrics = [], []
    for p in spec.get("points") or []:
        d = path / str(p.get("dir", ""))
        meta = _json(d / "meta.json") if (d / "meta.json").is_file() else {}
        summary = _json(d / "summary.json") if (d / "summary.json").is_file() else {}
        metas.append(meta)
        metrics.append(summary.get("metrics") or {})
    return metas, metrics


def sweep_differences(table: Any, point_metrics: Sequence[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """Metrics whose mean differs between the points of a sweep: Welch's one-way ANOVA on the
    replication values of every point, Benjamini–Hochberg over all metrics (false discovery
    rate 5 %: a sweep is a screen of many metrics; Holm would hide large effects at two or
    three replications).  Rows sorted by p-value: metric, p, lowest and highest point."""
    import numpy as np

    from sim.shared.stats import benjamini_hochberg, welch_anova

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
    import numpy as np

    names = table["metric"].to_numpy()
    order: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        order.setdefault(str(n), []).append(i)
    return {k: np.asarray(v) for k, v in order.items()}


def _xaxis(table: Any, grid_keys: Sequence[str]
           ) -> tuple[str, list[str], list[Any], dict[Any, float], bool]:
    import pandas as pd

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
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
                        "over replications)", "data": _png(fig), "svg": ""}]


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
    import numpy as np

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


def _sweep_section(path: Path, kind: str = "sweep") -> dict[str, Any]:
    from sim.sweep import SWEEP_JSON, SWEEP_PARQUET, TABLE_COLUMNS

    spec = _json(path / SWEEP_JSON)
    if not (path / SWEEP_PARQUET).is_file():
        raise RunFolderError(f"{path}: the sweep has not finished (no {SWEEP_PARQUET}); "
                             "rerun it into the same folder")
    table = read_parquet(path / SWEEP_PARQUET)
    missing = [c for c in TABLE_COLUMNS if c not in table.columns]
    if missing:
        raise RunFolderError(f"{path / SWEEP_PARQUET}: not a sweep table (no column "
                             f"{missing[0]!r})")
    grid_keys = [c for c in table.columns if c not in TABLE_COLUMNS]
    meta = _json(path / "meta.json") if (path / "meta.json").is_file() else {}
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
        answer["table"] = _table(
            "Metrics that differ between points" + (
                f" (the first {ANSWER_ROWS}; all {len(diffs)} below)"
                if len(diffs) > ANSWER_ROWS else ""), headers, diff_rows[:ANSWER_ROWS])
        if len(diffs) > ANSWER_ROWS:
            extra_tables.append(_table(f"All {len(diffs)} metrics that differ between points",
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
    points = _table("Points (means; every metric with its CI in sweep.csv)",
                    ["point", *grid_keys, *(metric_label(m) for m in key_cols), "status"],
                    rows)
    facts = _facts([("folder", path), ("points", len(rows)), ("replications per point", reps),
                    ("root seed", spec.get("root_seed")),
                    ("grid keys", ", ".join(grid_keys) or "—"), ("command", meta.get("command")),
                    ("tidy table", path / "sweep.csv")])
    return _section(kind, path.name, path, facts=facts, answer=answer, figures=figures,
                    notes=notes, tables=[points, *extra_tables],
                    appendix=_sweep_appendix(table, grid_keys),
                    toml=_text(path / "scenario.toml"))


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
        return _table(title, ["(empty)"], [])
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
                cells.append(fmt_ci(_num(r[c]), _num(r[low]), _num(r.get(high)), metric))
            else:
                v = r.get(c, "")
                cells.append(fmt_value(_num(v), metric) if _num(v) is not None else (v or "–"))
        out.append(cells)
    headers = [_column_label(c)[0] for c in cols] + (["holds"] if flags else [])
    return _table(title, headers, out)


def _capacity_section(path: Path) -> dict[str, Any]:
    rows = _csv(path / "capacity.csv")
    answer_txt = _text(path / "answer.txt").strip().splitlines()
    table = _csv_table("Capacity: required knob value per load level", rows)
    answer = {"status": "info", "headline": answer_txt[0] if answer_txt else
              "(no answer.txt: the search did not finish)", "lines": answer_txt[1:],
              "table": table}
    figures = ([_figure(path / "capacity.png", "Required knob value per load level, with the "
                        "probes that held and failed")] if (path / "capacity.png").is_file()
               else [])
    tables = []
    if (path / "probes.json").is_file():
        try:
            probes = json.loads((path / "probes.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RunFolderError(f"{path / 'probes.json'}: not valid JSON: {e}") from None
        tables.append(_table("Every probe of the search", ["load", "value", "holds",
                                                          "failing SLOs"],
                             [[fmt_value(p.get("load")), fmt_value(p.get("value")),
                               "yes" if p.get("holds") else "no",
                               ", ".join(p.get("failing") or []) or "–"] for p in probes
                              if isinstance(p, dict)]))
    return _section("capacity", path.name, path, facts=_facts([("folder", path)]),
                    answer=answer, figures=figures, tables=tables,
                    toml=_first_toml(path, "probes"))


def _first_toml(path: Path, sub: str) -> str:
    found = sorted((path / sub).glob("*/scenario.toml")) if (path / sub).is_dir() else []
    return _text(found[0]) if found else _text(path / "scenario.toml")


def _tune_section(path: Path) -> dict[str, Any]:
    answer_txt = _text(path / "answer.txt").strip().splitlines()
    cands = _csv(path / "candidates.csv") if (path / "candidates.csv").is_file() else []
    trials = _csv(path / "trials.csv") if (path / "trials.csv").is_file() else []
    rec = [c for c in cands if c.get("recommended", "").lower() == "true"]
    evidence = _csv_table("Evidence: candidates and today's settings re-run on fresh seeds "
                          "(change = candidate − current)", cands,
                          drop=lambda c: c.endswith("_pct"))
    answer = {"status": "pass" if rec else "info",
              "headline": answer_txt[0] if answer_txt else "(no answer.txt)",
              "lines": answer_txt[1:], "table": evidence}
    # two objectives: the Pareto front; one: the convergence of the best feasible trial
    figures = [_figure(path / name, caption) for name, caption in (
        ("pareto.png", "Trials of the search: objectives, Pareto front and constraints"),
        ("convergence.png", "Trials of the search: the objective, the best feasible trial so "
                            "far, and today's settings and the candidates re-run on fresh "
                            "seeds"),
    ) if (path / name).is_file()]
    tables = [_csv_table(f"All {len(trials)} trials of the study", trials)] if trials else []
    return _section("tune", path.name, path, facts=_facts([("folder", path), (
        "study", path / "study.db" if (path / "study.db").is_file() else None)]),
                    answer=answer, figures=figures, tables=tables,
                    toml=_first_toml(path, "confirm"))


def _storm_section(path: Path) -> dict[str, Any]:
    rows = _csv(path / "storm.csv")
    rec = [r["strategy"] for r in rows if r.get("verdict") == "recovered"]
    stuck = [r["strategy"] for r in rows if r.get("verdict") == "metastable"]
    other = [r["strategy"] for r in rows if r.get("verdict") not in ("recovered", "metastable")]
    headline = (f"{len(rec)} of {len(rows)} strategies recovered after the trigger; "
                f"{len(stuck)} stayed metastable.")
    verdicts = _table("Verdict per strategy", ["strategy", "verdict", "recovery time",
                                               "goodput dip", "what it is"],
                      [[r["strategy"], r.get("verdict", "?"),
                        fmt_value(_num(r.get("recover_s")), "recover_s"),
                        fmt_value(_num(r.get("goodput_dip")), "goodput_dip_share"),
                        r.get("description", "")] for r in rows])
    lines = [f"recovered: {', '.join(rec) or 'none'}",
             f"metastable: {', '.join(stuck) or 'none'}"]
    if other:
        lines.append(f"other: {', '.join(other)}")
    answer = {"status": "info", "headline": headline, "lines": lines, "table": verdicts}
    figures = ([_figure(path / "storm.png", "Goodput and offered load through the trigger, one "
                        "panel per strategy")] if (path / "storm.png").is_file() else [])
    full = _csv_table("Every measure per strategy (mean [95 % CI])", rows,
                      drop=lambda c: c in ("run", "description"))
    return _section("storm", path.name, path, facts=_facts([("folder", path),
                                                            ("strategies", len(rows))]),
                    answer=answer, figures=figures, tables=[full],
                    toml=_text(path / "scenario.toml"))


# --------------------------------------------------------------------------- comparison


def _comparison(runs: Sequence[RunFolder]) -> dict[str, Any]:
    """The runs compared with the first: a sentence, the metrics that differ (a short table
    that reads at 1280 px), every metric folded, and the overlaid figure.  Columns are named
    ``[k]`` after the legend, so a long folder name never widens a column."""
    from sim.shared.compare import plot_compare

    table = compare_table(runs)
    headers = ["metric"]
    for k in range(len(runs)):
        headers.append(f"[{k}]")
        if k:
            headers.append(f"[{k}] − [0]")
    rows, differ = [], []
    for name, g in table.groupby("metric", sort=False):
        if g["mean"].isna().all():
            continue
        row = [metric_label(str(name))]
        marked = False
        for _, r in g.iterrows():
            row.append(fmt_ci(_num(r["mean"]), _num(r["ci_low"]), _num(r["ci_high"]),
                              str(name)))
            if r["run"]:
                mark = " ≠" if r["differs"] is True else ""
                marked |= bool(mark)
                row.append(fmt_ci(_num(r["diff"]), _num(r["diff_ci_low"]),
                                  _num(r["diff_ci_high"]), str(name)) + mark)
        rows.append(row)
        if marked:
            differ.append(row)
    with tempfile.TemporaryDirectory(prefix="rtalab-report-") as tmp:
        png = plot_compare(runs, Path(tmp) / "compare.png")
        figure = _b64_file(png)
    legend = "; ".join(f"[{k}] = {r.label}" for k, r in enumerate(runs))
    summary = (f"{len(runs)} runs ({legend}), {len(rows)} metrics: "
               + (f"{len(differ)} differ from [0] significantly (Welch 95 % CI, Holm over all "
                  "metrics), shown first." if differ else
                  "none differs from [0] significantly (Welch 95 % CI, Holm over all metrics)."))
    title = ("Each run vs the first (Welch 95 % CI; ≠ significant after Holm over all "
             "metrics)")
    return {"table": _table(title, headers, rows),
            "differ": _table("Metrics that differ", headers, differ) if differ else None,
            "summary": summary, "figure": figure}


# --------------------------------------------------------------------------- entry point


def _kinds_title(sections: Sequence[dict[str, Any]]) -> str:
    """``run baseline`` for one folder; ``a run, 2 load runs`` for several (their names are
    in the legend, not in the title)."""
    if len(sections) == 1:
        return f"{sections[0]['kind']} {sections[0]['label']}"
    counts: dict[str, int] = {}
    for s in sections:
        counts[s["kind"]] = counts.get(s["kind"], 0) + 1
    return ", ".join(f"{n} {k} folders" if n > 1 else f"a {k} folder" for k, n in counts.items())


def section(path: Path) -> tuple[dict[str, Any], RunFolder | None]:
    """The report section of one folder (and its RunFolder when it is a run)."""
    kind = folder_kind(path)
    if kind in ("run", "load"):
        run = load_run(path)
        return _run_section(run, kind), run
    build = {"sweep": _sweep_section, "capacity": _capacity_section, "tune": _tune_section,
             "storm": _storm_section}[kind]
    return build(path), None


def render_report(paths: Sequence[str | Path], progress: bool = False,
                  lead: dict[str, Any] | None = None, title: str | None = None,
                  fold: bool = False, comparison: bool = True) -> str:
    """The HTML text of a report on ``paths`` (any folder kinds rtalab writes).

    With ``progress``, a line on stderr once rendering has taken a second, and the time
    taken at the end.  ``lead`` puts an answer of the whole report first (keys ``status``,
    ``headline``, ``lines``, ``figure`` ({caption, data}: a base64 PNG), ``tables``,
    ``html``); ``title`` replaces the generated title; ``fold`` folds every folder's
    section under a one-line summary (its headline); ``comparison=False`` leaves out the
    comparison of the runs with the first (runs at different loads, compared otherwise)."""
    import sys

    if not paths:
        raise RunFolderError("report needs at least one folder")
    t0 = time.perf_counter()
    timer = threading.Timer(1.0, lambda: print(
        f"rtalab report: rendering {len(paths)} folder(s) ...", file=sys.stderr, flush=True))
    timer.daemon = True
    if progress:
        timer.start()
    try:
        return _render(paths, t0, progress, lead, title, fold, comparison)
    finally:
        timer.cancel()


def _render(paths: Sequence[str | Path], t0: float, progress: bool,
            lead: dict[str, Any] | None, title: str | None, fold: bool,
            comparison: bool = True) -> str:
    import sys

    import jinja2

    from sim.shared.results import package_versions

    sections, runs = [], []
    for p in map(Path, paths):
        try:
            s, run = section(p)
        except (KeyError, TypeError, AttributeError, IndexError) as e:
            raise RunFolderError(f"{p}: unexpected content ({type(e).__name__}: {e}); "
                                 "was it written by this version of rtalab?") from None
        sections.append(s)
        if run is not None:
            runs.append(run)
    env = jinja2.Environment(loader=jinja2.PackageLoader("sim.shared", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    if title is None:
        title = f"rtalab report: {_kinds_title(sections)}"
    if lead is not None:
        lead = {"status": "info", "headline": "", "lines": [], "figure": None, "tables": [],
                "html": "", **lead}
    text = env.get_template(TEMPLATE).render(
        title=title, sections=sections, lead=lead, fold=fold,
        comparison=_comparison(runs) if comparison and len(runs) >= 2 else None,
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        version=package_versions().get("rtalab"))
    if progress and time.perf_counter() - t0 > 1.0:
        print(f"rtalab report: rendered in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
              flush=True)
    return text
