"""Prediction against measurement: the compared metrics, their CIs, a verdict per metric.

Both sides are computed by :func:`turn_metrics` from a ``turns`` table (``sim/shared/schema.py``
columns; one replication): turns starting after the warm-up, TTFC and completion
percentiles of completed turns (:func:`sim.shared.summary.percentile`, the one percentile),
success rate, attempts per turn, goodput (turns completed in [warm-up, duration) per
second).  The prediction's CI is the 95 % Student-t interval over the simulator's
replications (:func:`sim.shared.summary.mean_ci`); the measurement's is a 95 % percentile
bootstrap over *calls* (a call's turns share a caller and a fate, so calls are the
independent units), :data:`BOOTSTRAP_ROUNDS` resamples.

Verdict per metric (:data:`TOLERANCES`): a percentile *agrees* when the measured value is
within the stated relative error of the prediction (p50 20 %, p95 30 %, p99 35 %, the
issue's targets for p50/p99); a rate (success, attempts per turn, goodput) agrees when the
two CIs overlap.  A prediction is *void* when the load generator saturated its CPU.
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

from sim.shared import schema as S
from sim.shared.summary import mean_ci, percentile

PERCENTILES = (50, 95, 99)
METRICS = (*[f"ttfc_s.p{q}" for q in PERCENTILES], *[f"completion_s.p{q}" for q in PERCENTILES],
           "success_rate", "attempts_per_turn", "goodput_turns_per_s")
TOLERANCES = {"p50": 0.20, "p95": 0.30, "p99": 0.35}
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


def bootstrap(turns: pd.DataFrame, warmup_s: float, duration_s: float, seed: int = 0,
              rounds: int = BOOTSTRAP_ROUNDS) -> dict[str, tuple[float, float]]:
    """95 % percentile-bootstrap CIs over calls of every compared metric."""
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
        out[k] = tuple(np.quantile(a, [0.025, 0.975]).tolist()) if len(a) else (math.nan,
                                                                               math.nan)
    return out


@dataclass
class Row:
    """One compared metric."""

    metric: str
    predicted: float
    predicted_ci: tuple[float, float]
    measured: float
    measured_ci: tuple[float, float]
    tolerance: str
    error: float  # (measured - predicted) / predicted
    verdict: str  # agrees | differs | void | n/a


def _tolerance(metric: str) -> float | None:
    return TOLERANCES.get(metric.rsplit(".", 1)[-1])


def compare(predicted_reps: list[dict[str, float]], measured: dict[str, float],
            measured_ci: dict[str, tuple[float, float]], void: bool = False) -> list[Row]:
    """Rows of prediction (replications) against measurement (one run with CIs)."""
    rows = []
    for k in METRICS:
        ci = mean_ci([r[k] for r in predicted_reps])
        mean, lo, hi = ci["mean"], ci["ci_low"], ci["ci_high"]
        p = math.nan if mean is None else float(mean)
        plo = p if lo is None else float(lo)
        phi = p if hi is None else float(hi)
        m = measured[k]
        mlo, mhi = measured_ci[k]
        err = (m - p) / p if p and math.isfinite(p) and math.isfinite(m) else math.nan
        tol = _tolerance(k)
        if not (math.isfinite(p) and math.isfinite(m)):
            verdict = "n/a"
        elif void:
            verdict = "void"
        elif tol is not None:
            verdict = "agrees" if abs(err) <= tol else "differs"
        else:
            verdict = "agrees" if (mlo <= phi + 1e-12 and plo <= mhi + 1e-12) else "differs"
        rows.append(Row(k, p, (plo, phi), m, (mlo, mhi),
                        f"±{tol:.0%}" if tol is not None else "CIs overlap", err, verdict))
    return rows


def _fmt(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.3f}"


def table_lines(rows: list[Row]) -> list[str]:
    """A fixed-width table for the terminal."""
    out = [f"{'metric':<22} {'predicted [95 % CI]':<26} {'measured [95 % CI]':<26} "
           f"{'error':>7} {'tolerance':<12} verdict"]
    for r in rows:
        pred = f"{_fmt(r.predicted)} [{_fmt(r.predicted_ci[0])}, {_fmt(r.predicted_ci[1])}]"
        meas = f"{_fmt(r.measured)} [{_fmt(r.measured_ci[0])}, {_fmt(r.measured_ci[1])}]"
        err = "–" if not math.isfinite(r.error) else f"{r.error:+.0%}"
        out.append(f"{r.metric:<22} {pred:<26} {meas:<26} {err:>7} {r.tolerance:<12} "
                   f"{r.verdict}")
    return out


def rows_json(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows as plain data (NaN as None)."""
    def f(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return [{"metric": r.metric, "predicted": f(r.predicted),
             "predicted_ci": [f(r.predicted_ci[0]), f(r.predicted_ci[1])],
             "measured": f(r.measured), "measured_ci": [f(r.measured_ci[0]), f(r.measured_ci[1])],
             "error": f(r.error), "tolerance": r.tolerance, "verdict": r.verdict} for r in rows]


def cdf_png(predicted: list[np.ndarray], measured: np.ndarray, title: str) -> str:
    """A ``data:`` PNG: completion-time CDFs, predicted replications pooled vs measured."""
    import matplotlib

    matplotlib.use("Agg")
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
        parts.append('<table class="prediction-table"><thead><tr><th>metric</th>'
                     "<th>predicted [95 % CI]</th><th>measured [95 % CI]</th><th>error</th>"
                     "<th>tolerance</th><th>verdict</th></tr></thead><tbody>")
        for r in c["rows"]:
            err = "–" if not math.isfinite(r.error) else f"{r.error:+.1%}"
            parts.append(
                f'<tr class="verdict-{e(r.verdict)}"><td>{e(r.metric)}</td>'
                f"<td>{_fmt(r.predicted)} [{_fmt(r.predicted_ci[0])}, {_fmt(r.predicted_ci[1])}]"
                f"</td><td>{_fmt(r.measured)} [{_fmt(r.measured_ci[0])}, "
                f"{_fmt(r.measured_ci[1])}]</td><td>{err}</td><td>{e(r.tolerance)}</td>"
                f"<td>{e(r.verdict)}</td></tr>")
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
ONE_RUN_LEVEL = 0.90


@dataclass
class OneRunRow:
    """One metric: the ``level`` one-run prediction interval of the replications
    (:func:`sim.shared.agreement.run_interval`) and the measured run with its 95 % CI."""

    metric: str
    centre: float  # the replications' median (order statistics) or back-transformed mean
    low: float
    high: float
    method: str
    measured: float
    measured_ci: tuple[float, float]
    level: float = ONE_RUN_LEVEL

    @property
    def verdict(self) -> str:
        """``inside`` / ``outside`` the interval, ``n/a`` when either side is undefined."""
        if not (math.isfinite(self.measured) and math.isfinite(self.low)):
            return "n/a"
        return "inside" if self.low <= self.measured <= self.high else "outside"


def one_run_rows(predicted_reps: list[dict[str, float]], measured: dict[str, float],
                 measured_ci: dict[str, tuple[float, float]], turns: int = 0,
                 level: float = ONE_RUN_LEVEL) -> list[OneRunRow]:
    """Every compared metric: where ONE run of the replications' length and load falls
    (``level``), against the measured run.  ``turns``: the measured run's turns after the
    warm-up (the success rate moves in steps of one turn: the interval's resolution)."""
    from sim.shared.agreement import run_interval
    from sim.shared.summary import domain

    rows = []
    for k in METRICS:
        res = 1.0 / turns if k == "success_rate" and turns > 0 else 0.0
        iv = run_interval([r.get(k) for r in predicted_reps], level, metric=k,
                          resolution=res, bounds=domain(k))
        lo, hi, centre, method = ((iv.low, iv.high, iv.centre, iv.method) if iv is not None
                                  else (math.nan, math.nan, math.nan, "fewer than 2 values"))
        rows.append(OneRunRow(k, centre, lo, hi, method, float(measured.get(k, math.nan)),
                              tuple(measured_ci.get(k, (math.nan, math.nan))), level))
    return rows


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
                      float(r["level"])) for r in rows]


def fmt_interval(centre: float, low: float, high: float, metric: str) -> str:
    """``centre [low, high]`` with the metric's unit once (``–`` when undefined)."""
    from sim.shared.fmt import fmt_ci

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
