"""A report's sections of a simulated run and of a load run (with a fleet's load per replica),
and the comparison of several runs with the first.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rtalab.sim.report.pieces import (
    as_float,
    b64_file,
    fact_rows,
    file_figure,
    new_section,
    png_data,
    read_json,
    text_table,
)
from rtalab.sim.shared.compare import RunFolder, compare_table, plot_compare
from rtalab.sim.shared.fmt import fmt_ci, fmt_value, metric_label
from rtalab.sim.shared.fmt import summary_rows as key_rows
from rtalab.sim.shared.schema import LATENCY_CDF_PNG, TIMESERIES_PNG
from rtalab.sim.shared.summary import metric_rows

HEADLINE_METRICS = ("success_rate", "completion_s.p99", "ttfc_s.p99", "attempts_per_turn",
                    "load_amplification", "goodput_turns_per_s")

# --------------------------------------------------------------------------- run and load


def _verdict(path: Path) -> dict[str, Any] | None:
    f = path / "verdict.json"
    if not f.is_file():
        return None
    data = read_json(f)
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
    clock = "real (wall-clock) time" if run.meta.get("kind") == "load" else "simulated time"
    captions = {TIMESERIES_PNG: f"Time series over {clock}: the warm-up shaded grey, outages "
                                "red, capacity drops orange; crashes and barge-in spikes as "
                                "vertical lines.",
                LATENCY_CDF_PNG: "Latency CDFs of completed turns after the warm-up "
                                 "(log scale, with p50/p95/p99)."}
    figures, notes = [], []
    for name in (TIMESERIES_PNG, LATENCY_CDF_PNG):
        if (run.path / name).is_file():
            figures.append(file_figure(run.path / name, captions[name]))
    others = sorted(p for p in run.path.glob("*.png") if p.name not in captions)
    figures += [file_figure(p, p.name) for p in others]
    if not figures:
        notes.append("No figures in this folder (the run was made with --no-plots).")
    return figures, notes


def _metric_table(summary: dict[str, Any]) -> dict[str, Any]:
    rows = [[metric_label(r["metric"]), fmt_value(r["mean"], r["metric"]),
             fmt_ci(None, r["ci_low"], r["ci_high"], r["metric"]).removeprefix("– ")
             if r["ci_low"] is not None else "–", str(r["n"]), r["metric"]]
            for r in metric_rows(summary) if r["mean"] is not None]
    return text_table("All metrics (mean and 95 % CI over replications)",
                      ["metric", "mean", "95 % CI", "n", "key"], rows)


def _facts(run: RunFolder) -> list[tuple[str, Any]]:
    """The folder's facts: where, what, when, which code and command."""
    m = run.meta
    facts = fact_rows([("folder", run.path), ("status", m.get("status", "?")),
                       ("scenario", m.get("scenario")),
                       ("seed", m.get("seed")), ("replications", run.summary.get("replications")),
                       ("warm-up removed", f"{run.summary.get('warmup_s', 0):g} s"),
                       ("started", m.get("started_at")),
                       ("wall time", f"{m['wall_time_s']:.1f} s" if isinstance(
                           m.get("wall_time_s"), int | float) else None),
                       ("git", (m.get("git") or {}).get("sha")), ("command", m.get("command"))])
    point = m.get("sweep_point")
    if isinstance(point, dict):
        facts.insert(1, ("sweep point", json.dumps(point.get("overrides"))))
    return facts


def _verdict_answer(verdict: dict[str, Any]) -> dict[str, Any]:
    """The answer's status, headline, rule chips and broken-rules table of a verdict."""
    failed = [r for r in verdict["rules"] if r["status"] == "fail"]
    return dict(
        status="pass" if verdict["ok"] else "fail",
        headline=(f"{verdict['headline']}: every rule holds" if verdict["ok"] else
                  f"{verdict['headline']}: {len(failed)} rule(s) broken: "
                  + ", ".join(r["name"] for r in failed) if failed else
                  f"{verdict['headline']}: not a pass (the run did not finish; "
                  "rules judged on what was gathered)"),
        chips=[{"name": r["name"], "status": r["status"],
                "count": r["count"] if r["status"] == "fail" else None}
               for r in verdict["rules"]],
        table=text_table("Broken rules", ["rule", "kind", "count", "example ids", "detail"],
                         [[r["name"], r["kind"], fmt_value(r["count"]),
                           r["examples"] or "–", r["detail"]] for r in failed])
        if failed else None)


def _answer(run: RunFolder, kind: str, verdict: dict[str, Any] | None) -> dict[str, Any]:
    """The section's answer: the verdict (load runs, checked folders) or the summary line."""
    status = run.meta.get("status", "?")
    met = run.summary.get("metrics", {})

    def mean(k: str) -> Any:
        return (met.get(k) or {}).get("mean")

    answer: dict[str, Any] = {"status": "info", "headline": "", "lines": [], "table": None}
    summary_line = (f"{fmt_value(mean('turns'), 'turns')} turns after the warm-up: "
                    f"{fmt_value(mean('success_rate'), 'success_rate')} completed, "
                    f"turn completion p99 "
                    f"{fmt_value(mean('completion_s.p99'), 'completion_s.p99')}, "
                    f"{fmt_value(mean('attempts_per_turn'))} attempts per turn.")
    partial = [] if status == "complete" else [
        f"The run's status is {status!r}: figures may be partial."]
    if kind == "load" or verdict is not None:
        if verdict is None:
            answer.update(status="info", headline="No verdict in this folder (rtalab check "
                                                   "was not run on it).")
        else:
            answer.update(_verdict_answer(verdict))
        answer["lines"] = [summary_line]
        if verdict is not None:
            answer["lines"] += [f"warning: {w}" for w in verdict["warnings"]]
        answer["lines"] += partial
    else:
        answer.update(headline=summary_line, lines=partial)
    if answer["table"] is None and kind != "load":
        answer["table"] = text_table("", ["", "mean", "95 % CI"], [
            [metric_label(k), fmt_value(mean(k), k),
             fmt_ci(None, met[k].get("ci_low"), met[k].get("ci_high"), k).removeprefix("– ")]
            for k in HEADLINE_METRICS if mean(k) is not None])
    return answer


def _verdict_tables(verdict: dict[str, Any] | None) -> list[Any]:
    """Every rule and gate, the indeterminate executions and the coverage of a verdict."""
    if verdict is None:
        return []
    tables = [text_table("Every rule and SLO gate", ["rule", "kind", "status", "count",
                                                     "example ids", "detail", "source"],
                         [[r["name"], r["kind"], r["status"], fmt_value(r["count"]),
                           r["examples"] or "–", r["detail"], r["section"]]
                          for r in verdict["rules"]])]
    if verdict["indeterminate"]:
        tables.append(text_table("Indeterminate executions (reported, never a violation)",
                                 ["class", "count", "detail"],
                                 [[k, fmt_value(v.get("count")), str(v.get("detail", ""))]
                                  for k, v in verdict["indeterminate"].items()
                                  if isinstance(v, dict)]))
    if verdict["coverage"]:
        cols = list(verdict["coverage"][0])
        tables.append(text_table("Coverage", cols, [[fmt_value(r.get(c)) if not isinstance(
            r.get(c), str) else r.get(c) for c in cols] for r in verdict["coverage"]
            if isinstance(r, dict)]))
    return tables


def run_section(run: RunFolder, kind: str) -> dict[str, Any]:
    """The report's section of one run folder (simulated or load run)."""
    figures, notes = _run_figures(run)
    verdict = _verdict(run.path)
    answer = _answer(run, kind, verdict)
    if kind == "load":
        notes.append("Locust's TURN time runs from the start of a turn to its end, including "
                     "the caller's handoff wait (input-required → the caller's answer); "
                     "rtalab's turn completion excludes that wait, so Locust's TURN "
                     "percentiles are higher for runs with handoffs.")
    tables = _verdict_tables(verdict)
    fleet = fleet_load(run.summary)
    if fleet:
        tables.append(_fleet_table(fleet))
        figures.append(fleet_figure(fleet))
    tables.append(text_table("Key figures (mean, 95 % CI over replications)",
                             ["metric", "mean", "95 % CI"], key_rows(run.summary)))
    tables.append(_metric_table(run.summary))
    return new_section(kind, run.label, run.path, facts=_facts(run), answer=answer,
                       figures=figures, notes=notes, tables=tables, toml=run.scenario_toml)


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
        return {k: as_float(m.get(k)) for k in ("mean", "ci_low", "ci_high")}

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
    return text_table(f"Fleet: load per replica ({n} replicas; mean, 95 % CI over replications)",
                      ["", "utilisation", "95 % CI", "requests share", "95 % CI"], rows,
                      note=f"an even split is {fmt_value(1 / n, FLEET_SHARE)} of the "
                           "requests per replica; imbalance = the largest replica's value ÷ the "
                           "mean over replicas (1 = even)")


def fleet_figure(fleet: dict[str, Any]) -> dict[str, str]:
    """Bars of each replica's utilisation with its 95 % CI (readable at 1280 px)."""
    # lazy: +796 ms (matplotlib) off importing runs
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
                       "fleet's mean).", "data": png_data(fig), "svg": ""}


# --------------------------------------------------------------------------- comparison


def runs_comparison(runs: Sequence[RunFolder]) -> dict[str, Any]:
    """The runs compared with the first: a sentence, the metrics that differ (a short table
    that reads at 1280 px), every metric folded, and the overlaid figure.  Columns are named
    ``[k]`` after the legend, so a long folder name never widens a column."""
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
            row.append(fmt_ci(as_float(r["mean"]), as_float(r["ci_low"]), as_float(r["ci_high"]),
                              str(name)))
            if r["run"]:
                mark = " ≠" if r["differs"] is True else ""
                marked |= bool(mark)
                row.append(fmt_ci(as_float(r["diff"]), as_float(r["diff_ci_low"]),
                                  as_float(r["diff_ci_high"]), str(name)) + mark)
        rows.append(row)
        if marked:
            differ.append(row)
    with tempfile.TemporaryDirectory(prefix="rtalab-report-") as tmp:
        png = plot_compare(runs, Path(tmp) / "compare.png")
        figure = b64_file(png)
    legend = "; ".join(f"[{k}] = {r.label}" for k, r in enumerate(runs))
    summary = (f"{len(runs)} runs ({legend}), {len(rows)} metrics: "
               + (f"{len(differ)} differ from [0] significantly (Welch 95 % CI, Holm over all "
                  "metrics), shown first." if differ else
                  "none differs from [0] significantly (Welch 95 % CI, Holm over all metrics)."))
    title = ("Each run vs the first (Welch 95 % CI; ≠ significant after Holm over all "
             "metrics)")
    return {"table": text_table(title, headers, rows),
            "differ": text_table("Metrics that differ", headers, differ) if differ else None,
            "summary": summary, "figure": figure}


