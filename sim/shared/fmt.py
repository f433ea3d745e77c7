"""Numbers and metric names for people: one formatter shared by terminal tables and reports.

``metric_label("completion_s.p99")`` is ``"turn completion p99 (s)"`` rather than the
raw key; :func:`fmt_value` shows shares in percent, seconds as ms below one second,
bytes in KiB/MiB, counts with thousands separators, and never uses scientific notation
for everyday magnitudes (below 0.0001 it prints ``< 0.0001``).
"""

from __future__ import annotations

import math
from typing import Any

from rtalab.sim.shared.summary import unit

# exact metric keys whose label is not just the key with its unit
_LABELS: dict[str, str] = {
    "turns": "turns after warm-up", "calls": "calls after warm-up",
    "success_rate": "completed turns (success rate)", "failed_share": "failed turns",
    "abandoned_share": "abandoned turns (handoff timeout)",
    "cancelled_share": "cancelled turns (barge-in)",
    "unfinished_share": "turns unfinished at end of run",
    "degraded_call_share": "degraded calls (no extension echo)",
    "attempts_per_turn": "attempts per turn", "retries_per_turn": "retries per turn",
    "load_amplification": "load amplification (executions per offered turn)",
    "goodput_turns_per_s": "goodput", "offered_turns_per_s": "offered load",
    "worker_utilisation": "worker utilisation", "queue.p_wait": "P(queue wait > 0)",
    "queue.wait_s.p50": "queue wait p50", "queue.wait_s.p99": "queue wait p99",
    "queue.mean_wait_s": "queue wait, mean", "queue.mean_length": "queue length, mean",
    "dedup.peak_bytes": "dedup store peak", "dedup.mean_bytes": "dedup store mean",
    "dedup.peak_entries": "dedup store peak entries",
    "concurrent_calls.mean": "concurrent calls, mean",
    "concurrent_calls.peak": "concurrent calls, peak",
    "spurious_timeouts_per_1k_turns": "spurious timeouts",
    "spurious_timeout_share": "spurious timeouts (share of timeouts)",
    "escalation.removed_turn_share": "planned turns removed by escalation",
    "hazard.duplicate_request_executions_per_1k_turns": "duplicate requestGuid runs",
    "hazard.reexecuted_turns_per_1k_turns": "re-executed turns",
    "hazard.duplicated_sessions_per_1k_turns": "duplicated sessions",
    "hazard.ghost_successes_per_1k_turns": "ghost successes",
    "queue.shed_per_1k_turns": "shed by queue deadline",
    "mean_turns_in_progress": "turns in progress, mean",
    "server_rejections_per_turn": "server rejections per turn",
    "side_effect_executions_per_side_effect_turn": "side-effect executions per side-effect turn",
    "not_served_share": "turns not served (failed, abandoned, unfinished)",
}
# the latency percentiles of the served turns, and caller-perceived (docs/answers.md: every
# offered turn, not served = infinite)
_LABELS.update({f"{caller}{key}.p{q}": f"{what} p{q}{perceived}"
                for caller, perceived in (("", ""), ("caller_", ", caller-perceived"))
                for key, what in (("ttfc_s", "time to first chunk"),
                                  ("completion_s", "turn completion"))
                for q in (50, 95, 99)})
# key prefixes whose rest is a code or reason: (prefix, label before the rest)
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("failed_by_reason.", "failed: "), ("failure_rate.", "attempts failing with "),
    ("attempt_outcome.", "attempts ended "), ("call_end.", "calls ended: "),
    ("cancel.", "CancelTask "), ("queue.", "queue "),
)
# how a unit is written after a label (None: no unit in the label)
_UNIT_TEXT: dict[str, str | None] = {
    "share": "%", "probability": "%", "s": "s", "1/s": "per s", "bytes": None,
    "per 1k turns": "per 1k turns", "ratio": "×", "per turn": None, "turns": None,
    "calls": None, "entries": None, "requests": None, "": None,
}


def metric_label(name: str, with_unit: bool = True) -> str:
    """A readable label of metric ``name`` with its unit, e.g. ``turn completion p99 (s)``."""
    text = _LABELS.get(name)
    if text is None:
        for prefix, lead in _PREFIXES:
            if name.startswith(prefix):
                rest = name[len(prefix):].removesuffix("_share")
                for suffix in ("_per_1k_turns", "_per_s", "_s"):
                    rest = rest.removesuffix(suffix)
                text = lead + rest.replace("_", " ")
                break
        else:
            text = name.replace("_", " ")
    u = _UNIT_TEXT.get(unit(name), unit(name))
    return f"{text} ({u})" if with_unit and u else text


def plain(v: float, digits: int = 4) -> str:
    """A number in about ``digits`` significant digits without scientific notation."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else "–"
    a = abs(v)
    if a < 1e-4:
        return "< 0.0001" if v > 0 else "> −0.0001"
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    text = f"{v:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text.replace("-", "−") if text not in ("-0", "0") else "0"


def fmt_value(v: Any, name: str = "", *, unit_text: bool = True) -> str:
    """One value of metric ``name`` for people ("–" when undefined)."""
    if v is None or isinstance(v, str):
        return "–" if v is None else v
    if isinstance(v, bool):
        return "yes" if v else "no"
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(x):
        return "–"
    u = unit(name) if name else ""
    if u in ("share", "probability"):
        pct = x * 100
        text = plain(pct, 3) if abs(pct) < 99.95 or pct >= 100 else f"{pct:.2f}"
        return f"{text} %" if unit_text else text
    if u == "s":
        if unit_text and 0 < abs(x) < 1:
            return f"{plain(x * 1000, 3)} ms"
        return f"{plain(x, 3)} s" if unit_text else plain(x, 3)
    if u == "bytes":
        if x >= 2**20:
            return f"{x / 2**20:.2f} MiB"
        return f"{x / 1024:.1f} KiB" if x >= 1024 else f"{x:.0f} B"
    if u in ("turns", "calls", "entries") and x == int(x):
        return f"{x:,.0f}".replace("-", "−")
    return plain(x)


def fmt_ci(mean: Any, lo: Any, hi: Any, name: str = "") -> str:
    """``mean [lo, hi]`` with units once, at the end (``–`` parts when undefined)."""
    if lo is None and hi is None:
        return fmt_value(mean, name)
    u = unit(name)
    if u == "s" and all(isinstance(x, int | float) and 0 <= abs(x) < 1
                        for x in (mean, lo, hi) if x is not None):
        parts = [plain(float(x) * 1000, 3) if x is not None else "–" for x in (mean, lo, hi)]
        return f"{parts[0]} [{parts[1]}, {parts[2]}] ms"
    parts = [fmt_value(x, name, unit_text=False) for x in (mean, lo, hi)]
    tail = {"share": " %", "probability": " %", "s": " s"}.get(u, "")
    if u == "bytes":
        return f"{fmt_value(mean, name)} [{fmt_value(lo, name)}, {fmt_value(hi, name)}]"
    return f"{parts[0]} [{parts[1]}, {parts[2]}]{tail}"


def fmt_diff(d: Any, lo: Any, hi: Any, name: str = "") -> str:
    """A difference ``d [lo, hi]`` with a sign; shares in percentage points (pp)."""
    def one(x: Any) -> str:
        if x is None or (isinstance(x, float) and not math.isfinite(x)):
            return "–"
        x = float(x)
        u = unit(name)
        if u in ("share", "probability"):
            text = plain(x * 100, 3)
        elif u == "s" and all(v is None or abs(float(v)) < 1 for v in (d, lo, hi)):
            text = plain(x * 1000, 3)
        else:
            text = fmt_value(x, name, unit_text=False) if u != "bytes" else fmt_value(x, name)
        return "+" + text if x > 0 and not text.startswith(("<", ">")) else text

    u = unit(name)
    tail = {"share": " pp", "probability": " pp"}.get(u, "")
    if u == "s":
        tail = " ms" if all(v is None or abs(float(v)) < 1 for v in (d, lo, hi)) else " s"
    if all(v is None or (isinstance(v, float) and math.isnan(v))
           for v in (lo, hi)):
        return one(d) + tail
    return f"{one(d)} [{one(lo)}, {one(hi)}]{tail}"


# --------------------------------------------------------------------------- key metrics

# (metric key or prefix, label, format); "%" = share shown in percent, "s" = seconds,
# "B" = bytes, "x" = ratio, "n" = count, "/1k" = per 1,000 turns, "/s" = per second
KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    # every counted turn is in exactly one of the five outcome rows (they add up to 100 %)
    ("turns", "turns after warm-up", "n"),
    ("success_rate", "completed (success rate)", "%"),
    ("failed_share", "failed", "%"),
    ("failed_by_reason.", "  failed: ", "%"),
    ("failure_rate.", "  failed with ", "%"),
    ("abandoned_share", "abandoned (handoff timeout)", "%"),
    ("cancelled_share", "cancelled (barge-in)", "%"),
    ("unfinished_share", "unfinished at end of run", "%"),
    # every counted call ends in exactly one way
    ("calls", "calls after warm-up", "n"),
    ("call_end.", "  calls ended: ", "%"),
    ("escalation.removed_turn_share", "  planned turns removed by escalation", "%"),
    ("degraded_call_share", "  degraded (no extension echo)", "%"),
    ("concurrent_calls.mean", "  concurrent calls, mean", "x"),
    ("concurrent_calls.peak", "  concurrent calls, peak", "n"),
    ("ttfc_s.p50", "time to first playable chunk p50", "s"),
    ("ttfc_s.p95", "time to first playable chunk p95", "s"),
    ("ttfc_s.p99", "time to first playable chunk p99", "s"),
    ("completion_s.p50", "turn completion p50", "s"),
    ("completion_s.p95", "turn completion p95", "s"),
    ("completion_s.p99", "turn completion p99", "s"),
    ("attempts_per_turn", "attempts per turn", "x"),
    ("attempt_outcome.", "  attempts ended ", "%"),
    ("spurious_timeouts_per_1k_turns", "spurious timeouts /1k turns", "/1k"),
    ("load_amplification", "load amplification (exec./offered turn)", "x"),
    ("goodput_turns_per_s", "goodput (turns/s)", "/s"),
    ("worker_utilisation", "worker utilisation", "%"),
    ("queue.wait_s.p50", "queue wait p50", "s"),
    ("queue.wait_s.p99", "queue wait p99", "s"),
    ("queue.shed_per_1k_turns", "shed by queue deadline /1k turns", "/1k"),
    ("cancel.", "CancelTask ", "/1k"),
    ("hazard.duplicate_request_executions_per_1k_turns",
     "MUST violation: dup. requestGuid runs /1k", "/1k"),
    ("hazard.reexecuted_turns_per_1k_turns", "re-executed turns /1k turns", "/1k"),
    ("hazard.duplicated_sessions_per_1k_turns", "duplicated sessions /1k turns", "/1k"),
    ("hazard.ghost_successes_per_1k_turns", "ghost successes /1k turns", "/1k"),
    ("dedup.peak_bytes", "dedup store peak", "B"),
    # a fleet ([fleet], rtalab.sim.model.fleet): hazards by cause, load per replica, imbalance
    ("fleet.dup_request_guid_", "  dup. requestGuid runs /1k, ", "/1k"),
    ("fleet.reexecuted_turn_", "  re-executed turns /1k, ", "/1k"),
    ("fleet.requests_lost_to_down_replica_per_1k_turns", "requests lost to a down replica /1k",
     "/1k"),
    ("fleet.replica_utilisation.", "  utilisation of replica ", "%"),
    ("fleet.replica_requests_share.", "  requests to replica ", "%"),
    ("fleet.utilisation_imbalance", "fleet utilisation imbalance (max/mean)", "x"),
    ("fleet.requests_imbalance", "fleet requests imbalance (max/mean)", "x"),
)


def fmt_kind(value: Any, kind: str) -> str:
    """Format one number for the summary table."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    v = float(value)
    if kind == "%":
        return f"{round(v * 100, 2) + 0.0:.2f} %"  # + 0.0 turns -0.0 into 0.0
    if kind == "s":
        return f"{v * 1000:.0f} ms" if abs(v) < 1 else f"{v:.2f} s"
    if kind == "B":
        return f"{v / 2**20:.2f} MiB" if v >= 2**20 else f"{v / 1024:.1f} KiB"
    if kind == "n":
        return f"{v:,.0f}"
    if kind in ("/1k", "/s"):
        return f"{round(v, 2) + 0.0:.2f}"
    return f"{v:.3f}"


def summary_rows(summary: dict[str, Any], intervals: bool = False) -> list[tuple[str, ...]]:
    """(label, mean, 95 % CI) rows of the key metrics present in a ``summary.json``; with
    ``intervals``, a fourth cell: the metric's 90 % one-run interval (``one_run_interval``,
    "–" where it has none)."""
    metrics: dict[str, Any] = summary.get("metrics", {})
    one_run: dict[str, Any] = summary.get("one_run_interval") or {}
    rows = []
    for key, label, kind in KEY_METRICS:
        names = ([k for k in sorted(metrics) if k.startswith(key)] if key.endswith(".")
                 else [key] if key in metrics else [])
        for name in names:
            m = metrics[name]
            if not isinstance(m, dict):
                continue
            if key.endswith(".") and not m.get("mean"):
                continue  # only the failure codes that occurred
            lo, hi = m.get("ci_low"), m.get("ci_high")
            ci = (f"[{fmt_kind(lo, kind)}, {fmt_kind(hi, kind)}]"
                  if lo is not None and hi is not None else "–")
            text = (f"{label}{name[len(key):].removesuffix('_share')}" if key.endswith(".")
                    else label)
            row: tuple[str, ...] = (text, fmt_kind(m.get("mean"), kind), ci)
            if intervals:
                iv = one_run.get(name)
                row += (f"[{fmt_kind(iv['low'], kind)}, {fmt_kind(iv['high'], kind)}]"
                        if iv else "–",)
            rows.append(row)
    return rows
