"""Prediction against measurement: the compared metrics, their CIs, a verdict per metric.

Both sides are computed by :func:`turn_metrics` from a ``turns`` table (``sim/shared/schema.py``
columns; one replication): turns starting after the warm-up, TTFC and completion
percentiles of completed turns (:func:`rtalab.sim.shared.summary.percentile`, the one percentile),
success rate, attempts per turn, goodput (turns completed in [warm-up, duration) per
second).  The simulator's replications are runs of the same length and load as the
measured run, so their spread is the spread of one run: the verdict per metric is whether
the measured value lies **inside the 90 % one-run prediction interval**
(:func:`rtalab.sim.shared.agreement.run_interval`; order statistics from 19 replications, Student's
t on the metric's scale below), right about 90 % of the time when the prediction is right.
The 95 % Student-t CI of the replications' mean (:func:`rtalab.sim.shared.summary.mean_ci`) is shown
beside it, and the measurement's 95 % percentile bootstrap over *calls* (a call's turns
share a caller and a fate, so calls are the independent units), :data:`BOOTSTRAP_ROUNDS`
resamples.

The accuracy targets (:data:`TOLERANCES`: p50 ±20 %, p95 ±30 %, p99 ±35 % of the predicted
mean) are a second, stated criterion, judged only on runs of at least
:data:`ACCURACY_MIN_RUN_S` seconds: on a shorter run one run's percentile scatters by more
than the target even when the prediction is exact, so the row says "not judged".  A
prediction is *void* when the load generator saturated its CPU.
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rtalab.sim.shared import schema as S
from rtalab.sim.shared.agreement import (
    ACCURACY_MIN_RUN_S,
    INSIDE,
    LEVEL,
    OUTSIDE,
    TOLERANCES,
    accuracy,
    run_interval,
)
from rtalab.sim.shared.fmt import fmt_ci
from rtalab.sim.shared.summary import domain, mean_ci, percentile

PERCENTILES = (50, 95, 99)
METRICS = (*[f"ttfc_s.p{q}" for q in PERCENTILES], *[f"completion_s.p{q}" for q in PERCENTILES],
           "success_rate", "attempts_per_turn", "goodput_turns_per_s")
BOOTSTRAP_ROUNDS = 300
CLIENT_CPU_VOID = 0.90  # a Locust process above 90 % of a core: its timings are its own


def turn_metrics(turns: pd.DataFrame, warmup_s: float, duration_s: float) -> dict[str, float]:
    """The compared metrics of one replication's turns (NaN where undefined)."""
    start = turns[S.START_S].to_numpy(dtype=float)
    keep = start >= warmup_s
    outcome = turns[S.OUTCOME].astype(object).to_numpy()
    done = keep & (outcome == "completed")
    m: dict[str, float] = {}
    for q in PERCENTILES:
        for col, name in ((S.TTFC_S, "ttfc_s"), (S.COMPLETION_S, "completion_s")):
            v = percentile(turns[col].to_numpy(dtype=float)[done], q)
            m[f"{name}.p{q}"] = math.nan if v is None else float(v)
    n = int(keep.sum())
    m["success_rate"] = done.sum() / n if n else math.nan
    m["attempts_per_turn"] = float(turns[S.ATTEMPTS].to_numpy()[keep].mean()) if n else math.nan
    end = turns[S.END_S].to_numpy(dtype=float)
    window = duration_s - warmup_s
    in_window = (outcome == "completed") & (end >= warmup_s) & (end < duration_s)
    m["goodput_turns_per_s"] = in_window.sum() / window if window > 0 else math.nan
    return m


def window_metrics(turns: pd.DataFrame, start_s: float, end_s: float) -> dict[str, float]:
    """:func:`turn_metrics` of the turns that started in ``[start_s, end_s)`` (goodput: the
    completions in that window): one window of a long run measured like a run of that
    length after its warm-up, so consecutive windows of one load run are compared with
    replications of one window each (tests/twin/test_coverage.py)."""
    return turn_metrics(turns[turns[S.START_S].to_numpy(dtype=float) < end_s], start_s, end_s)


def bootstrap(turns: pd.DataFrame, warmup_s: float, duration_s: float, seed: int = 0,
              rounds: int = BOOTSTRAP_ROUNDS, quantiles: tuple[float, float] = (0.025, 0.975)
              ) -> dict[str, tuple[float, float]]:
    """Percentile-bootstrap CIs over calls of every compared metric (95 %: ``quantiles``)."""
    rng = np.random.default_rng(seed)
    calls = turns[S.CALL_ID].astype(str).to_numpy()
    ids, inverse = np.unique(calls, return_inverse=True)
    rows = [np.flatnonzero(inverse == i) for i in range(len(ids))]
    draws: dict[str, list[float]] = {k: [] for k in METRICS}
    for _ in range(rounds):
        pick = rng.integers(len(ids), size=len(ids))
        idx = np.concatenate([rows[i] for i in pick]) if len(pick) else np.empty(0, int)
        m = turn_metrics(turns.iloc[idx], warmup_s, duration_s)
        for k in METRICS:
            draws[k].append(m[k])
    out = {}
    for k, v in draws.items():
        a = np.asarray(v, dtype=float)
        a = a[np.isfinite(a)]
        out[k] = tuple(np.quantile(a, list(quantiles)).tolist()) if len(a) else (math.nan,
                                                                               math.nan)
    return out


@dataclass
class Row:
    """One compared metric."""

    metric: str
    predicted: float  # the replications' mean
    predicted_ci: tuple[float, float]  # 95 % CI of that mean
    interval: tuple[float, float]  # 90 % one-run prediction interval
    interval_method: str
    measured: float
    measured_ci: tuple[float, float]
    tolerance: str  # the accuracy target ("±20 %") or "–" for a rate
    error: float  # (measured - predicted) / predicted
    verdict: str  # inside | outside | void | n/a (the prediction interval)
    accuracy: str  # within | beyond | not judged (run < 300 s) | –


def accuracy_note(run_s: float) -> str | None:
    """The line saying the accuracy targets were not judged (None when they were)."""
    if run_s >= ACCURACY_MIN_RUN_S:
        return None
    return (f"accuracy targets (p50 ±20 %, p99 ±35 %) not judged: the run is {run_s:g} s, "
            f"they apply to runs >= {ACCURACY_MIN_RUN_S:g} s (one shorter run's percentiles "
            "scatter by more than the target even when the prediction is exact); the verdict "
            f"is the {LEVEL:.0%} one-run prediction interval")


def compare(predicted_reps: list[dict[str, float]], measured: dict[str, float],
            measured_ci: dict[str, tuple[float, float]], void: bool = False,
            run_s: float = math.inf, turns: int | None = None) -> list[Row]:
    """Rows of prediction (replications of the measured run's length and load) against
    measurement (one run with CIs): inside/outside the 90 % one-run prediction interval;
    the accuracy targets judged when ``run_s`` >= :data:`ACCURACY_MIN_RUN_S`.  ``turns``
    (the measured run's judged turns) gives the success rate's resolution."""
    rows = []
    for k in METRICS:
        values = [r[k] for r in predicted_reps]
        ci = mean_ci(values)
        mean, lo, hi = ci["mean"], ci["ci_low"], ci["ci_high"]
        p = math.nan if mean is None else float(mean)
        plo = p if lo is None else float(lo)
        phi = p if hi is None else float(hi)
        step = 1.0 / turns if k == "success_rate" and turns else 0.0
        iv = run_interval(values, LEVEL, metric=k, resolution=step, bounds=domain(k))
        ilo, ihi = (iv.low, iv.high) if iv is not None else (math.nan, math.nan)
        m = measured[k]
        mlo, mhi = measured_ci[k]
        err = (m - p) / p if p and math.isfinite(p) and math.isfinite(m) else math.nan
        tol = TOLERANCES.get(k.rsplit(".", 1)[-1])
        if not (math.isfinite(p) and math.isfinite(m)) or iv is None:
            verdict = "n/a"
        elif void:
            verdict = "void"
        else:
            verdict = INSIDE if iv.contains(m) else OUTSIDE
        rows.append(Row(k, p, (plo, phi), (ilo, ihi),
                        iv.method if iv is not None else "–", m, (mlo, mhi),
                        f"±{tol:.0%}" if tol is not None else "–", err, verdict,
                        accuracy(k, err, run_s)))
    return rows


def _fmt(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.3f}"


def _pair(a: float, b: tuple[float, float]) -> str:
    return f"{_fmt(a)} [{_fmt(b[0])}, {_fmt(b[1])}]"


HEADINGS = ("metric", "predicted mean", "90 % one-run interval", "measured [95 % CI]",
            "error", "target", "accuracy", "verdict")


def table_lines(rows: list[Row]) -> list[str]:
    """A fixed-width table for the terminal: the verdict is the prediction interval's."""
    out = [f"{HEADINGS[0]:<22} {HEADINGS[1]:>14} {HEADINGS[2]:<22} {HEADINGS[3]:<26} "
           f"{HEADINGS[4]:>7} {HEADINGS[5]:<6} {HEADINGS[6]:<26} {HEADINGS[7]}"]
    for r in rows:
        iv = f"[{_fmt(r.interval[0])}, {_fmt(r.interval[1])}]"
        err = "–" if not math.isfinite(r.error) else f"{r.error:+.0%}"
        out.append(f"{r.metric:<22} {_fmt(r.predicted):>14} {iv:<22} "
                   f"{_pair(r.measured, r.measured_ci):<26} {err:>7} {r.tolerance:<6} "
                   f"{r.accuracy:<26} {r.verdict}")
    return out


def rows_json(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows as plain data (NaN as None)."""
    def f(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return [{"metric": r.metric, "predicted": f(r.predicted),
             "predicted_ci": [f(r.predicted_ci[0]), f(r.predicted_ci[1])],
             "interval": [f(r.interval[0]), f(r.interval[1])], "interval_level": LEVEL,
             "interval_method": r.interval_method,
             "measured": f(r.measured), "measured_ci": [f(r.measured_ci[0]), f(r.measured_ci[1])],
             "error": f(r.error), "tolerance": r.tolerance, "accuracy": r.accuracy,
             "verdict": r.verdict} for r in rows]


def cdf_png(predicted: list[np.ndarray], measured: np.ndarray, title: str) -> str:
    """A ``data:`` PNG: completion-time CDFs, predicted replications pooled vs measured."""
    # lazy: +339 ms (matplotlib) off importing validate
    import matplotlib

    matplotlib.use("Agg")
    # lazy: +1.30 s (matplotlib) off importing validate
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    pooled = np.sort(np.concatenate(predicted)) if predicted else np.empty(0)
    for x, label, style in ((pooled, "predicted (simulator)", "-"),
                            (np.sort(measured), "measured (load run)", "--")):
        if len(x):
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), style, label=label)
    ax.set_xlabel("turn completion (s)")
    ax.set_ylabel("share of completed turns")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def html_section(cases: list[dict[str, Any]], header: dict[str, Any]) -> str:
    """A self-contained ``<section class="prediction">`` (tables, CDF figures, notes).

    ``cases``: ``{"name", "rows": [Row], "png": data URI, "client_cpu": float, "void": bool,
    "notes": [str]}``; ``header``: calibration facts (key -> text).  Plain classes, no
    external CSS: a report template may restyle it.
    """
    e = html.escape
    parts = ['<section class="prediction">', "<h2>Prediction against measurement</h2>",
             '<dl class="prediction-facts">']
    for k, v in header.items():
        parts.append(f"<dt>{e(str(k))}</dt><dd>{e(str(v))}</dd>")
    parts.append("</dl>")
    for c in cases:
        parts.append(f'<h3>{e(c["name"])}</h3>')
        cpu = c.get("client_cpu")
        cpu_text = "–" if cpu is None or not math.isfinite(cpu) else f"{cpu:.0%} of a core"
        void = " — prediction VOID (client saturated)" if c.get("void") else ""
        parts.append('<p class="client-cpu">load generator CPU (busiest Locust process, '
                     f"busiest 5 s): {e(cpu_text)}{void}</p>")
        parts.append('<table class="prediction-table"><thead><tr>'
                     + "".join(f"<th>{e(h)}</th>" for h in (HEADINGS[0], "predicted mean [95 % CI]",
                                                            *HEADINGS[2:]))
                     + "</tr></thead><tbody>")
        for r in c["rows"]:
            err = "–" if not math.isfinite(r.error) else f"{r.error:+.1%}"
            cells = (r.metric, _pair(r.predicted, r.predicted_ci),
                     f"[{_fmt(r.interval[0])}, {_fmt(r.interval[1])}]",
                     _pair(r.measured, r.measured_ci), err, r.tolerance, r.accuracy, r.verdict)
            parts.append(f'<tr class="verdict-{e(r.verdict)}">'
                         + "".join(f"<td>{e(x)}</td>" for x in cells) + "</tr>")
        parts.append("</tbody></table>")
        if c.get("png"):
            parts.append(f'<img class="prediction-cdf" alt="completion CDF" src="{c["png"]}">')
        for n in c.get("notes", []):
            parts.append(f'<p class="note">{e(n)}</p>')
    parts.append("</section>")
    return "\n".join(parts)


# ---------------------------------------------------------------- one-run intervals, 80 columns

SHORT_LABELS = {"ttfc_s.p50": "TTFC p50", "ttfc_s.p95": "TTFC p95", "ttfc_s.p99": "TTFC p99",
                "completion_s.p50": "completion p50", "completion_s.p95": "completion p95",
                "completion_s.p99": "completion p99", "success_rate": "success rate",
                "attempts_per_turn": "attempts per turn",
                "goodput_turns_per_s": "goodput (turns/s)"}


@dataclass
class OneRunRow:
    """One metric as the short table and ``make demo`` show it: the replications' median
    (inside its interval), the 90 % one-run prediction interval and the verdict of
    :func:`compare`, the measured run with its 95 % CI."""

    metric: str
    centre: float
    low: float
    high: float
    method: str
    measured: float
    measured_ci: tuple[float, float]
    level: float
    verdict: str  # inside | outside | void | n/a (compare's)


def one_run_rows(rows: list[Row], predicted_reps: list[dict[str, float]]) -> list[OneRunRow]:
    """:func:`compare`'s rows with the replications' median as the prediction (clipped into
    the interval: an interval always holds its estimate)."""
    out = []
    for r in rows:
        values = [float(v) for rep in predicted_reps
                  if (v := rep.get(r.metric)) is not None and math.isfinite(v)]
        lo, hi = r.interval
        centre = float(np.median(values)) if values else math.nan
        if math.isfinite(centre) and math.isfinite(lo) and math.isfinite(hi):
            centre = min(max(centre, lo), hi)
        out.append(OneRunRow(r.metric, centre, lo, hi, r.interval_method, r.measured,
                             r.measured_ci, LEVEL, r.verdict))
    return out


def one_run_json(rows: list[OneRunRow]) -> list[dict[str, Any]]:
    """:func:`one_run_rows` as plain data (NaN as None), for ``prediction.json``."""
    def f(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return [{"metric": r.metric, "centre": f(r.centre), "low": f(r.low), "high": f(r.high),
             "level": r.level, "method": r.method, "measured": f(r.measured),
             "measured_ci": [f(r.measured_ci[0]), f(r.measured_ci[1])],
             "verdict": r.verdict} for r in rows]


def one_run_from_json(rows: list[dict[str, Any]]) -> list[OneRunRow]:
    """The inverse of :func:`one_run_json` (None as NaN)."""
    def f(x: Any) -> float:
        return math.nan if x is None else float(x)

    return [OneRunRow(r["metric"], f(r["centre"]), f(r["low"]), f(r["high"]), r["method"],
                      f(r["measured"]), (f(r["measured_ci"][0]), f(r["measured_ci"][1])),
                      float(r["level"]), r["verdict"]) for r in rows]


def fmt_interval(centre: float, low: float, high: float, metric: str) -> str:
    """``centre [low, high]`` with the metric's unit once (``–`` when undefined)."""
    def v(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return fmt_ci(v(centre), v(low), v(high), metric)


def short_table_lines(rows: list[OneRunRow]) -> list[str]:
    """The comparison in at most 80 columns: metric, predicted (the replications' median and
    the one-run interval), measured (its 95 % CI), inside / outside."""
    pct = f"{rows[0].level:.0%}" if rows else "90%"
    out = [f"{'metric':<18} {'predicted [' + pct + ' one run]':<25} "
           f"{'measured [95% CI]':<25} verdict"]
    for r in rows:
        out.append(f"{SHORT_LABELS.get(r.metric, r.metric):<18} "
                   f"{fmt_interval(r.centre, r.low, r.high, r.metric):<25} "
                   f"{fmt_interval(r.measured, *r.measured_ci, r.metric):<25} {r.verdict}")
    return out
