"""The one place metrics are computed: values per replication, then mean and 95 % CI over them.

``summarize(outputs, warmup_s)`` returns the content of ``summary.json``::

    {"schema_version": 1, "replications": R, "warmup_s": ..., "seeds": [...],
     "metrics": {name: {"mean": m, "ci_low": lo, "ci_high": hi, "values": [v_1, ..., v_R]}}}

CIs are Student-t intervals over the replications' values (``null`` with one
replication, or when fewer than two values are defined); an undefined value
(e.g. a percentile with no completed turn) is ``null`` and left out of the
mean.  Which turns and seconds count (warm-up removal) and what each metric
means is in ``docs/metrics.md``.  Inputs are the DataFrames of
:class:`rtalab.sim.runner.RunOutput` (or a load run's equivalent with the same columns).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final, cast

import numpy as np
import pandas as pd

from rtalab.sim.shared import schema as S
from rtalab.sim.shared.recovery import run_recovery_s
from rtalab.sim.vocab import AttemptOutcome as A
from rtalab.sim.vocab import CallEndReason, TurnOutcome

# Student t 0.975 quantiles for 1..30 degrees of freedom (beyond: Cornish-Fisher, error < 1e-7)
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
         2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.13145, 2.119905, 2.109816,
         2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899, 2.059539,
         2.055529, 2.051831, 2.048407, 2.04523, 2.042272)
_Z975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


_UNIT_INTERVAL = ("success_rate", "worker_utilisation", "queue.p_wait")
_UNIT_PREFIXES = ("failure_rate.", "failed_by_reason.", "attempt_outcome.", "call_end.")


def domain(name: str) -> tuple[float, float]:
    """The range a metric can take: [0, 1] for shares and probabilities, else [0, inf)."""
    if (name in _UNIT_INTERVAL or name.endswith("_share") or name.startswith(_UNIT_PREFIXES)):
        return 0.0, 1.0
    return 0.0, math.inf


def mean_ci(values: Sequence[float | None],
            bounds: tuple[float, float] = (-math.inf, math.inf)) -> dict[str, Any]:
    """Mean and 95 % Student-t CI of the defined (non-null, finite) values, the CI clipped
    to ``bounds`` (the metric's possible range: the true value lies inside it)."""
    clean = [None if v is None or not math.isfinite(v) else float(v) for v in values]
    x = np.array([v for v in clean if v is not None], dtype=float)
    out: dict[str, Any] = {"mean": None, "ci_low": None, "ci_high": None, "values": clean}
    if len(x) == 0:
        return out
    m = float(x.mean())
    out["mean"] = m
    if len(x) >= 2:
        half = t_quantile_975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
        out["ci_low"], out["ci_high"] = max(m - half, bounds[0]), min(m + half, bounds[1])
    return out


def mean_ci_inf(values: Sequence[float | None],
                bounds: tuple[float, float] = (0.0, math.inf)) -> dict[str, Any]:
    """:func:`mean_ci` for a caller-perceived percentile, whose ``None`` replication value
    means "infinite": with any, the mean and the CI are ``None`` too (infinite), never the
    mean of the finite ones."""
    out = mean_ci(values, bounds)
    if any(v is None or not math.isfinite(v) for v in values):
        out["mean"] = out["ci_low"] = out["ci_high"] = None
    return out


def summarize(outputs: Sequence[S.RunRecords], warmup_s: float) -> dict[str, Any]:
    """Metrics of each replication and their mean/95 % CI (JSON-serialisable)."""
    if not outputs:
        raise ValueError("summarize needs at least one run output")
    per_rep = [metrics_of(o, warmup_s) for o in outputs]
    return summarize_metrics(per_rep, warmup_s, [int(o.seed) for o in outputs],
                             [int(o.replication) for o in outputs])


def metrics_of(out: S.RunRecords, warmup_s: float) -> dict[str, float | None]:
    """A replication's metrics: folded in while it ran (``rtalab.sim.runner.RunOutput.metrics``,
    ``[run] records`` other than "all") or computed from its tables."""
    pre = getattr(out, "metrics", None)
    return dict(pre) if pre is not None else replication_metrics(out, warmup_s)


def summarize_metrics(per_rep: Sequence[dict[str, float | None]], warmup_s: float,
                      seeds: Sequence[int], replication_ids: Sequence[int]) -> dict[str, Any]:
    """``summary.json`` from each replication's :func:`replication_metrics` (in replication
    order), so a run can drop a replication's records as soon as its metrics are known."""
    if not per_rep:
        raise ValueError("summarize needs at least one replication")
    names: list[str] = []
    for m in per_rep:
        names.extend(k for k in m if k not in names)
    metrics = {k: (mean_ci_inf if k.startswith(INF_PREFIXES) else mean_ci)(
        [m.get(k) for m in per_rep], domain(k)) for k in names}
    return {
        "schema_version": S.SCHEMA_VERSION,
        "replications": len(per_rep),
        "warmup_s": float(warmup_s),
        "seeds": sorted({int(s) for s in seeds}),
        "replication_ids": [int(r) for r in replication_ids],
        "metrics": metrics,
    }


def metric(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """One metric's ``{"mean", "ci_low", "ci_high", "values"}`` from a summary."""
    return cast("dict[str, Any]", summary["metrics"][name])


# --------------------------------------------------------------------------- one replication


def _ratio(a: float, b: float) -> float | None:
    return float(a) / float(b) if b else None


PERCENTILE_METHOD: Final = "inverted_cdf"


def percentile(x: np.ndarray, q: float) -> float | None:
    """THE percentile of every figure (table, summary.json, plots): the smallest value ``v``
    of the finite values of ``x`` with ``F(v) >= q / 100`` (the inverse of the empirical CDF,
    numpy's ``inverted_cdf``: always an observed value, no interpolation).  None if empty."""
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q, method=PERCENTILE_METHOD)) if len(x) else None


def percentiles(x: np.ndarray, qs: Sequence[float]) -> list[float | None]:
    """:func:`percentile` of ``x`` at each of ``qs``, in one numpy call (the same values:
    numpy computes each quantile's order statistic alike; a load run's bootstrap asks for
    four arrays' three percentiles a resample, and a call costs ~20 us however many)."""
    x = x[np.isfinite(x)]
    if not len(x):
        return [None] * len(qs)
    return [float(v) for v in np.percentile(x, list(qs), method=PERCENTILE_METHOD)]


def percentile_served(x: np.ndarray, q: float) -> float | None:
    """:func:`percentile` of caller-perceived values: ``+inf`` (not served) is a value like
    any other, so the p-th percentile is infinite when more than ``100 - q`` % of the turns
    were not served.  Summaries are plain JSON, so an infinite percentile is ``None``, as
    is the percentile of no turn at all (``not_served_share`` tells them apart)."""
    x = x[~np.isnan(x)]
    if not len(x):
        return None
    v = float(np.percentile(x, q, method=PERCENTILE_METHOD))
    return v if v < math.inf else None


def percentiles_served(x: np.ndarray, qs: Sequence[float]) -> list[float | None]:
    """:func:`percentile_served` of ``x`` at each of ``qs``, in one numpy call (as
    :func:`percentiles`)."""
    x = x[~np.isnan(x)]
    if not len(x):
        return [None] * len(qs)
    vs = np.percentile(x, list(qs), method=PERCENTILE_METHOD)
    return [float(v) if v < math.inf else None for v in vs]


#: caller-perceived percentiles: a replication's ``None`` means "infinite" (not served)
INF_PREFIXES = (S.M_CALLER_TTFC_PREFIX, S.M_CALLER_COMPLETION_PREFIX, S.M_RECOVERY_S)


def _is(col: pd.Series, *values: str) -> np.ndarray:
    """Boolean mask: ``col`` equals one of ``values`` (fast on categoricals, works on strings).

    On a categorical it compares the codes array itself (``col.array.codes``): a load run's
    bootstrap calls this ~40 times a resample, and ``col.cat.codes`` builds a Series each
    time (~30 us) where the array costs nothing."""
    arr = col.array
    if isinstance(arr, pd.Categorical):
        cats, codes = arr.categories, arr.codes
        mask = np.zeros(len(codes), dtype=bool)
        for v in values:
            if v in cats:
                mask |= codes == cats.get_loc(v)
        return mask
    return np.isin(col.to_numpy(dtype=object), values)


def _col(df: pd.DataFrame, name: str, mask: np.ndarray) -> np.ndarray:
    picked: np.ndarray = df[name].to_numpy()[mask]
    return picked


def replication_metrics(out: S.RunRecords, warmup_s: float) -> dict[str, float | None]:
    """Every metric of one replication (None where undefined)."""
    m: dict[str, float | None] = {}
    t_all = out.turns
    keep = t_all[S.START_S].to_numpy() >= warmup_s
    n = int(keep.sum())
    outcome = t_all[S.OUTCOME]
    completed = _is(outcome, "completed")[keep]
    failed = _is(outcome, "failed")[keep]
    m[S.M_TURNS] = float(n)
    calls_keep = out.calls[S.ARRIVAL_S].to_numpy() >= warmup_s
    m[S.M_CALLS] = float(calls_keep.sum())
    degraded = (out.calls[S.DEGRADED].to_numpy(dtype=bool) if S.DEGRADED in out.calls
                else np.zeros(len(out.calls), dtype=bool))
    m[S.M_DEGRADED_CALL_SHARE] = _ratio(degraded[calls_keep].sum(), calls_keep.sum())
    _outcome_metrics(m, t_all, keep, completed, failed)
    _latency_metrics(m, t_all, keep, completed)
    m.update(call_metrics(out.calls, calls_keep))
    ids = _col(t_all, S.INTERACTION_ID, keep)  # the counted turns
    _work_metrics(m, out, ids, n)
    _hazard_metrics(m, out, ids, keep, calls_keep, degraded, failed)
    m.update(timeseries_metrics(out.timeseries, warmup_s, out.duration_s))
    m.update(counter_metrics(out.counters))
    c = out.counters
    m.update(recovery_metrics(out.timeseries, c, warmup_s, out.duration_s))
    m.update(queue_metrics(out.executions, warmup_s, out.duration_s,
                           float(c.get("end_s", out.duration_s))))
    return m


def _outcome_metrics(m: dict[str, float | None], t_all: pd.DataFrame, keep: np.ndarray,
                     completed: np.ndarray, failed: np.ndarray) -> None:
    """Turn outcome shares, failures by refusal and by error code (into ``m``)."""
    n = int(keep.sum())
    outcome = t_all[S.OUTCOME]
    m[S.M_SUCCESS_RATE] = _ratio(completed.sum(), n)
    m[S.M_FAILED_SHARE] = _ratio(failed.sum(), n)
    m[S.M_ABANDONED_SHARE] = _ratio(_is(outcome, TurnOutcome.ABANDONED)[keep].sum(), n)
    m[S.M_UNFINISHED_SHARE] = _ratio(_is(outcome, TurnOutcome.UNFINISHED)[keep].sum(), n)
    m[S.M_CANCELLED_SHARE] = _ratio(_is(outcome, "cancelled")[keep].sum(), n)
    reasons = t_all[S.END_REASON]
    for reason in S.DECISIONS[1:]:  # the refusals
        m[S.M_FAILED_BY_REASON_PREFIX + reason] = _ratio(
            (_is(reasons, reason)[keep] & failed).sum(), n)
    codes = t_all[S.ERROR_CODE]
    for code in S.ERROR_CODES:
        m[S.M_FAILURE_RATE_PREFIX + code] = _ratio((_is(codes, code)[keep] & failed).sum(), n)
    m[S.M_FAILURE_RATE_PREFIX + "none"] = _ratio((codes.isna().to_numpy()[keep] & failed).sum(), n)


def _latency_metrics(m: dict[str, float | None], t_all: pd.DataFrame, keep: np.ndarray,
                     completed: np.ndarray) -> None:
    """Latency percentiles of the completed turns and as the caller perceived them, attempts
    and retries per turn (into ``m``)."""
    n = int(keep.sum())
    outcome = t_all[S.OUTCOME]
    ttfc_all = _col(t_all, S.TTFC_S, keep)
    comp_all = _col(t_all, S.COMPLETION_S, keep)
    ttfc = ttfc_all[completed]
    comp = comp_all[completed]
    qs = S.PERCENTILES
    for q, t, c in zip(qs, percentiles(ttfc, qs), percentiles(comp, qs), strict=True):
        m[f"{S.M_TTFC_PREFIX}p{q}"] = t
        m[f"{S.M_COMPLETION_PREFIX}p{q}"] = c
    # caller-perceived: every offered turn (a barge-in withdrew a cancelled one); a failed,
    # abandoned or unfinished turn was not served (+inf), as was a completed turn that never
    # played a chunk (TTFC only)
    offered = ~_is(outcome, "cancelled")[keep]
    not_served = offered & ~completed
    m[S.M_NOT_SERVED_SHARE] = _ratio(not_served.sum(), offered.sum())
    c_ttfc = np.where(completed, ttfc_all, math.inf)[offered]
    c_ttfc[np.isnan(c_ttfc)] = math.inf
    c_comp = np.where(completed, comp_all, math.inf)[offered]
    for q, t, c in zip(qs, percentiles_served(c_ttfc, qs), percentiles_served(c_comp, qs),
                       strict=True):
        m[f"{S.M_CALLER_TTFC_PREFIX}p{q}"] = t
        m[f"{S.M_CALLER_COMPLETION_PREFIX}p{q}"] = c
    m[S.M_ATTEMPTS_PER_TURN] = float(_col(t_all, S.ATTEMPTS, keep).mean()) if n else None
    m[S.M_RETRIES_PER_TURN] = float(_col(t_all, S.RETRIES, keep).mean()) if n else None


def _work_metrics(m: dict[str, float | None], out: S.RunRecords, ids: np.ndarray,
                  n: int) -> None:
    """The counted turns' attempt outcomes and the server work attributable to them."""
    at = out.attempts
    at_keep = np.isin(at[S.INTERACTION_ID].to_numpy(), ids)
    n_att = int(at_keep.sum())
    a_out = at[S.OUTCOME]
    for o in S.ATTEMPT_OUTCOMES:
        m[S.M_ATTEMPT_OUTCOME_PREFIX + o] = _ratio((_is(a_out, o) & at_keep).sum(), n_att)
    ex = out.executions
    ex_keep = np.isin(ex[S.INTERACTION_ID].to_numpy(), ids)
    disp = ex[S.DISPOSITION]
    executions = int((_is(disp, "executed") & ex_keep).sum())
    rejections = int((_is(disp, "rate-limited", "queue-full", "session-not-found",
                          "queue-timeout") & ex_keep).sum())
    m[S.M_LOAD_AMPLIFICATION] = _ratio(executions, n)
    m[S.M_REJECTIONS_PER_TURN] = _ratio(rejections, n)
    m[S.M_SHED_PER_1K] = _ratio(1000.0 * (_is(disp, "queue-timeout") & ex_keep).sum(), n)
    for d in S.CANCEL_DISPOSITIONS:
        m[S.M_CANCEL_PREFIX + d[len("cancel-"):].replace("-", "_") + "_per_1k_turns"] = _ratio(
            1000.0 * (_is(disp, d) & ex_keep).sum(), n)
    spurious, timed_out = spurious_timeouts(at, ex, at_keep, ex_keep)
    m[S.M_SPURIOUS_TIMEOUTS_PER_1K] = _ratio(1000.0 * spurious, n)
    m[S.M_SPURIOUS_TIMEOUT_SHARE] = _ratio(spurious, timed_out)


def _hazard_metrics(m: dict[str, float | None], out: S.RunRecords, ids: np.ndarray,
                    keep: np.ndarray, calls_keep: np.ndarray, degraded: np.ndarray,
                    failed: np.ndarray) -> None:
    """The hazards, from the witness ledger and the server's session count (into ``m``)."""
    n = int(keep.sum())
    t_all = out.turns
    se = out.side_effects
    se_keep = np.isin(se[S.INTERACTION_ID].to_numpy(), ids)
    guids = _col(se, S.REQUEST_GUID, se_keep)
    turn_ids = _col(se, S.INTERACTION_ID, se_keep)
    # the requestGuid MUST binds only requests that carried one: not those of degraded calls
    if degraded.any():
        profile = ~np.isin(_col(se, S.CALL_ID, se_keep), out.calls[S.CALL_ID].to_numpy()[degraded])
        _, per_guid = np.unique(guids[profile], return_counts=True)
    else:
        _, per_guid = np.unique(guids, return_counts=True)
    extra = int((per_guid[per_guid > 1] - 1).sum())
    reexecuted = _turns_with_several(turn_ids, guids)
    dup_sessions = int((_col(out.calls, S.SESSIONS_OPENED, calls_keep) > 1).sum())
    m[S.M_DUP_GUID_PER_1K] = _ratio(1000.0 * extra, n)
    m[S.M_REEXEC_TURN_PER_1K] = _ratio(1000.0 * reexecuted, n)
    m[S.M_DUP_SESSION_PER_1K] = _ratio(1000.0 * dup_sessions, n)
    # ghost success: the side effect ran, the caller was told the turn failed
    ghost = failed & (_col(t_all, S.SIDE_EFFECT_EXECUTIONS, keep) > 0)
    m[S.M_GHOST_PER_1K] = _ratio(1000.0 * ghost.sum(), n)
    se_turns = int(_col(t_all, S.SIDE_EFFECT, keep).sum())
    m[S.M_SIDE_EFFECTS_PER_SE_TURN] = _ratio(len(guids), se_turns)


def _turns_with_several(turns: np.ndarray, guids: np.ndarray) -> int:
    """How many distinct ``turns`` come with more than one distinct requestGuid (rows
    paired by position): the distinct (turn, guid) pairs counted per turn, on integer codes
    (a frame's drop_duplicates cost ~0.5 ms a resample of a load run's bootstrap)."""
    if not len(turns):
        return 0
    t_code, _ = pd.factorize(turns, use_na_sentinel=False)
    g_code, g_uniques = pd.factorize(guids, use_na_sentinel=False)
    pairs = np.unique(t_code.astype(np.int64) * max(1, len(g_uniques)) + g_code)
    _, per_turn = np.unique(pairs // max(1, len(g_uniques)), return_counts=True)
    return int((per_turn > 1).sum())


def recovery_metrics(ts: pd.DataFrame, counters: dict[str, Any], warmup_s: float,
                     duration_s: float) -> dict[str, float | None]:
    """``recovery_s`` of a run with a trigger (``counters["trigger_s"]``) when it is
    defined (:func:`rtalab.sim.shared.recovery.run_recovery_s`); nothing otherwise."""
    trig = counters.get("trigger_s")
    if trig is None or not len(ts):
        return {}

    defined, rec = run_recovery_s(ts, (float(trig[0]), float(trig[1])), warmup_s, duration_s)
    return {S.M_RECOVERY_S: rec} if defined else {}


def timeseries_metrics(ts: pd.DataFrame, warmup_s: float,
                       duration_s: float) -> dict[str, float | None]:
    """The metrics of the time series over the measurement window [warm-up, duration)."""
    m: dict[str, float | None] = {}
    t_s = ts[S.T_S].to_numpy()
    inside = (t_s >= warmup_s) & (t_s < duration_s)
    if inside.any():
        def w(name: str) -> _Window:
            return _Window(ts[name], inside)

        m[S.M_DEDUP_MEAN_BYTES] = float(w(S.DEDUP_BYTES).mean())
        m[S.M_OFFERED_TURNS_PER_S] = float(w(S.OFFERED_TURNS_PER_S).mean())
        m[S.M_GOODPUT] = float(w(S.COMPLETED_TURNS_PER_S).mean())
        m[S.M_MEAN_IN_PROGRESS] = float(w(S.TURNS_IN_PROGRESS).mean())
        if S.CALLS_IN_PROGRESS in ts:
            calls = w(S.CALLS_IN_PROGRESS)
            m[S.M_CONCURRENT_CALLS_MEAN] = float(calls.mean())
            m[S.M_CONCURRENT_CALLS_PEAK] = float(calls.max())
        m[S.M_UTILISATION] = _ratio(w(S.BUSY_WORKERS).sum(), w(S.WORKER_CAPACITY).sum())
    return m


class _Window:
    """A column's rows in the window, reduced as pandas' NaN-skipping ``Series.mean``,
    ``sum`` and ``max`` reduce them, without building a Series: a load run's bootstrap calls
    this seven times a resample, and the Series cost ~0.15 ms each (a sixth of the
    bootstrap's metrics).  On a numpy int or float column the same numbers as pandas'
    (``nanops``: the NaNs filled with 0, or -inf for the maximum, then numpy's own
    reduction; the mean's count of the values that are not NaN; NaN where none is), held to
    pandas by tests/test_summary_fast_paths.py; any other column goes through pandas."""

    def __init__(self, col: pd.Series, inside: np.ndarray):
        numeric = isinstance(col.dtype, np.dtype) and col.dtype.kind in "if"
        self.series = None if numeric else pd.Series(col.array[inside])
        self.values = col.to_numpy()[inside]
        self.nan = np.isnan(self.values) if numeric and col.dtype.kind == "f" else None

    def _filled(self, fill: float) -> np.ndarray:
        return self.values if self.nan is None else np.where(self.nan, fill, self.values)

    def mean(self) -> Any:
        if self.series is not None:
            return self.series.mean()
        n = len(self.values) - (0 if self.nan is None else int(self.nan.sum()))
        dtype = np.float64 if self.nan is None else self.values.dtype
        return self._filled(0.0).sum(dtype=dtype) / n if n > 0 else math.nan

    def sum(self) -> Any:
        if self.series is not None:
            return self.series.sum()
        return self._filled(0.0).sum(dtype=np.int64 if self.nan is None else self.values.dtype)

    def max(self) -> Any:
        if self.series is not None:
            return self.series.max()
        if self.nan is not None and self.nan.all():
            return math.nan
        return self._filled(-math.inf).max()


def counter_metrics(c: dict[str, Any]) -> dict[str, float | None]:
    """The metrics read from the run's counters (the dedup store's peak)."""
    m: dict[str, float | None] = {}
    if "dedup_peak_entries" in c:
        m[S.M_DEDUP_PEAK_ENTRIES] = float(c["dedup_peak_entries"])
        m[S.M_DEDUP_PEAK_BYTES] = float(c["dedup_peak_bytes"])
    # a fleet's hazards by cause and per-replica load (rtalab.sim.model.fleet), in its counters
    for k, v in c.items():
        if k.startswith("fleet.") and k != "fleet.replicas":
            m[k] = None if v is None else float(v)
    return m


def call_metrics(calls: pd.DataFrame, keep: np.ndarray) -> dict[str, float | None]:
    """How the counted calls ended (shares of calls, adding up to 1) and the offered load
    that escalation removed: turns planned but never started by escalated calls ÷ turns
    planned by all counted calls."""
    n = int(keep.sum())
    reason = calls[S.END_REASON]
    m: dict[str, float | None] = {}
    for r in S.CALL_END_REASONS:
        m[S.M_CALL_END_PREFIX + r + "_share"] = _ratio((_is(reason, r) & keep).sum(), n)
    planned = _col(calls, S.TURNS_PLANNED, keep)
    started = _col(calls, S.TURNS_STARTED, keep)
    escalated = _is(reason, CallEndReason.ESCALATED)[keep]
    m[S.M_ESCALATED_TURNS_REMOVED] = _ratio((planned - started)[escalated].sum(), planned.sum())
    return m


def spurious_timeouts(attempts: pd.DataFrame, executions: pd.DataFrame,
                      attempts_kept: np.ndarray | None = None,
                      executions_kept: np.ndarray | None = None) -> tuple[int, int]:
    """(spurious, all) timed-out attempts: ended by a Live-layer timer (``timeout`` /
    ``total-timeout``) although the Reasoner did finish their work successfully — an
    ``executed`` row of the attempt's requestGuid with status completed / input-required,
    or, for an attempt that joined another execution, a successful execution of the same
    (task, phase).  The answer would have come, later than the timer allowed.

    ``attempts_kept`` / ``executions_kept``: boolean masks of the rows that count (the
    same answer as passing ``attempts[attempts_kept]``, without copying every column of
    both tables: a load run's bootstrap calls this once a resample)."""
    timed = _is(attempts[S.OUTCOME], A.TIMEOUT, A.TOTAL_TIMEOUT)
    if attempts_kept is not None:
        timed &= attempts_kept
    n = int(timed.sum())
    if n == 0:
        return 0, 0
    disp = executions[S.DISPOSITION]
    kept = (np.ones(len(executions), dtype=bool) if executions_kept is None
            else executions_kept)
    ok = _is(disp, "executed") & _is(executions[S.STATUS], A.COMPLETED, A.INPUT_REQUIRED) & kept
    guids = executions[S.REQUEST_GUID].to_numpy()
    ok_guids = guids[ok]
    phase = executions[S.PHASE].astype(str).to_numpy()
    tasks = executions[S.TASK_ID].to_numpy()
    ok_tasks = set(zip(tasks[ok].tolist(), phase[ok].tolist(), strict=True))
    joined_guids = guids[_is(disp, "joined") & kept]
    guid = attempts[S.REQUEST_GUID].to_numpy()[timed]
    by_guid = np.isin(guid, ok_guids)
    joined = np.isin(guid, joined_guids) & ~by_guid
    by_task = np.zeros(len(guid), dtype=bool)
    if joined.any():
        keys = zip(attempts[S.TASK_ID].to_numpy()[timed][joined].tolist(),
                   attempts[S.PHASE].astype(str).to_numpy()[timed][joined].tolist(), strict=True)
        by_task[joined] = [k in ok_tasks for k in keys]
    return int((by_guid | by_task).sum()), n


def queue_metrics(executions: pd.DataFrame, start_s: float, end_s: float,
                  run_end_s: float) -> dict[str, float | None]:
    """Reasoner queue (waiting for a worker) over the window [start_s, end_s).

    λ = admitted requests arriving in the window per second; W = their mean wait
    (a request never served waits until ``run_end_s``); P(wait) = share with a
    wait > 0; L = time-average number waiting in the window; throughput =
    executions starting in the window per second.
    """
    span = end_s - start_s
    admitted = _is(executions[S.DISPOSITION], "executed", "unserved")
    arr = _col(executions, S.ARRIVAL_S, admitted)
    start = _col(executions, S.SERVICE_START_S, admitted)
    start = np.where(np.isnan(start), run_end_s, start)
    inside = (arr >= start_s) & (arr < end_s)
    wait = start[inside] - arr[inside]
    lam = inside.sum() / span if span > 0 else None
    mean_wait = float(wait.mean()) if len(wait) else None
    overlap = np.clip(np.minimum(start, end_s) - np.maximum(arr, start_s), 0.0, None)
    length = float(overlap.sum() / span) if span > 0 else None
    served = (start >= start_s) & (start < end_s) & (start < run_end_s)
    ran = _is(executions[S.DISPOSITION], "executed")
    r_arr = _col(executions, S.ARRIVAL_S, ran)
    r_wait = (_col(executions, S.SERVICE_START_S, ran) - r_arr)[(r_arr >= start_s)
                                                                & (r_arr < end_s)]
    return {
        S.M_QUEUE_WAIT_PREFIX + "p50": percentile(r_wait, 50),
        S.M_QUEUE_WAIT_PREFIX + "p99": percentile(r_wait, 99),
        S.M_QUEUE_ARRIVAL_RATE: lam,
        S.M_QUEUE_THROUGHPUT: float(served.sum() / span) if span > 0 else None,
        S.M_QUEUE_MEAN_WAIT: mean_wait,
        S.M_QUEUE_P_WAIT: float((wait > 0).mean()) if len(wait) else None,
        S.M_QUEUE_MEAN_LENGTH: length,
        S.M_QUEUE_LITTLE_LAMBDA_W: (lam * mean_wait if lam is not None and mean_wait is not None
                                    else None),
    }


# --------------------------------------------------------------------------- units

# (name suffix or prefix, unit) checked in order; the first match wins (see docs/metrics.md)
_UNIT_RULES: tuple[tuple[str, str], ...] = (
    ("suffix:_per_1k_turns", "per 1k turns"), ("suffix:_per_s", "1/s"),
    ("suffix:_bytes", "bytes"), ("suffix:_s", "s"), ("suffix:_share", "share"),
    ("prefix:ttfc_s.", "s"), ("prefix:completion_s.", "s"), ("prefix:queue.wait_s.", "s"),
    ("prefix:caller_ttfc_s.", "s"), ("prefix:caller_completion_s.", "s"),
    ("prefix:failure_rate.", "share"), ("prefix:failed_by_reason.", "share"),
    ("prefix:attempt_outcome.", "share"), ("prefix:call_end.", "share"),
    ("prefix:concurrent_calls.", "calls"),
    ("prefix:fleet.replica_utilisation.", "share"),
    ("prefix:fleet.replica_requests_share.", "share"),
    ("suffix:_per_turn", "per turn"), ("suffix:_per_side_effect_turn", "per turn"),
)
_UNITS: dict[str, str] = {
    "turns": "turns", "calls": "calls", "success_rate": "share", "worker_utilisation": "share",
    "queue.p_wait": "probability", "load_amplification": "ratio",
    "dedup.peak_entries": "entries", "queue.mean_length": "requests",
    "queue.little_lambda_w": "requests", "mean_turns_in_progress": "turns",
    "fleet.utilisation_imbalance": "ratio", "fleet.requests_imbalance": "ratio",
}


def unit(name: str) -> str:
    """The unit of metric ``name`` (``summary.csv``, compare, reports): from its name's suffix
    (``_s`` seconds, ``_per_s``, ``_bytes``, ``_share`` ...), else the table above, else ""."""
    if name in _UNITS:
        return _UNITS[name]
    for rule, u in _UNIT_RULES:
        kind, text = rule.split(":", 1)
        if (name.endswith(text) if kind == "suffix" else name.startswith(text)):
            return u
    return ""


SUMMARY_CSV_COLUMNS = ("metric", "mean", "ci_low", "ci_high", "n", "unit")


def metric_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per metric of ``summary.json``: metric, mean, ci_low, ci_high, n (defined
    replication values) and unit — the content of ``summary.csv``."""
    rows = []
    for name, m in summary.get("metrics", {}).items():
        values = m.get("values") or []
        rows.append({"metric": name, "mean": m.get("mean"), "ci_low": m.get("ci_low"),
                     "ci_high": m.get("ci_high"),
                     "n": sum(v is not None for v in values), "unit": unit(name)})
    return rows
