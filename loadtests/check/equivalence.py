"""``transport-equivalence``: every binding of a run gives the same verdict (A2A §5.1).

A run over several bindings (``--binding sse,rest,ws``, ``all``) alternates its calls
over them, so every binding gets a share of the same workload and faults.  A2A 1.0
requires every binding an agent offers to be functionally equivalent; this rule checks
it on the run's own ledgers, split by the attempts' and turns' ``binding`` column:

1. **delivery** — the delivery rules (:mod:`rtalab.loadtests.check.rules`, violations only) are
   evaluated on each binding's share of the ledgers.  When a rule's violations (``K`` in
   all) fall on the bindings unevenly, each binding ``b`` with ``k_b`` of them is tested
   against its share of the turns ``s_b``: the exact binomial tail
   ``P(X >= k_b | K, s_b)`` (the chance that a bug common to all bindings puts that many
   of its violations on ``b``).  A rule failing on every binding alike is the rule's own
   failure, not a difference between bindings.  Hazards are not compared: their rates
   depend on the transport by design (a WebSocket cut ends every request on the socket).
2. **success** — the share of judged turns that completed (cancelled and indeterminate
   turns not judged, as in ``availability``), each binding against the others pooled.
3. **latency** — time to first chunk and completion time of completed turns, compared as
   the ratio of geometric means (mean of ``log``), each binding against the others pooled.

Turns of one call share its binding and its faults, so the uncertainty of (2) and (3) is
the cluster-robust (calls as clusters) standard error of a ratio estimator.  Transports
legitimately differ a little (connection set-up, framing, how a cut ends a socket), so a
difference counts only when it is beyond a practical margin *and* beyond its uncertainty:
a minimum-effect test, one-sided at the margin (success: :data:`SUCCESS_MARGIN` in
absolute terms; latency: a ratio outside ``[1/LATENCY_MARGIN, LATENCY_MARGIN]``).  All
the comparisons of a run are one family: Holm's step-down at :data:`ALPHA`, so a correct
server fails this rule in at most ``ALPHA`` of runs (fewer: the margins are slack).  The
rule fails naming each binding that differs and how.

With one binding (or none with turns) the rule is not checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from rtalab.loadtests.check.ledger import Events, Ledgers
from rtalab.loadtests.check.verdict import FAIL, NOT_CHECKED, PASS, RuleResult
from rtalab.sim.shared.stats import holm

NAME = "transport-equivalence"
SECTION = "A2A §5.1 (every binding an agent offers is functionally equivalent)"
ALPHA = 0.01  # family-wise false-alarm rate of one run's comparisons (Holm)
SUCCESS_MARGIN = 0.05  # success rates closer than this never differ
LATENCY_MARGIN = 1.25  # latency ratios within [1/m, m] never differ
ORDER = ("sse", "rest", "grpc", "ws")  # how bindings are listed (others after, by name)
MIN_TURNS = 1  # a binding with fewer judged turns takes part in no comparison
MIN_CALLS = 5  # success and latency are compared only with at least this many calls a side


@dataclass(frozen=True)
class Comparison:
    """One test of the family: binding ``binding`` against the others on ``what``."""

    binding: str
    what: str  # "delivery:<rule>", "success", "ttfc", "completion"
    p_value: float
    text: str  # what differs, for the verdict


def bindings_of(led: Ledgers) -> list[str]:
    """The bindings the run's attempts used, in :data:`ORDER` (then by name)."""
    if "binding" not in led.attempts or not len(led.attempts):
        return []
    names = {str(b) for b in led.attempts["binding"].dropna().unique() if str(b)}
    return sorted(names, key=lambda b: (ORDER.index(b) if b in ORDER else len(ORDER), b))


def _guid_bindings(a: pd.DataFrame) -> pd.Series:
    """requestGuid -> binding of the attempt that sent it (first seen)."""
    g = a.dropna(subset=["request_guid"]).drop_duplicates("request_guid")
    return g.set_index("request_guid")["binding"]


def split(led: Ledgers, binding: str, witness_binding: np.ndarray | None) -> Ledgers:
    """Binding ``binding``'s share of the ledgers: its attempts and turns, the witness rows
    attributed to its turns (``witness_binding``: per witness row), its streams' events.
    Witness rows attributed to no turn belong to no binding (the ``unexpected`` rule of the
    whole run counts them)."""
    a = led.attempts
    sub_a = a[a["binding"].eq(binding).to_numpy()].reset_index(drop=True)
    turns = led.turns
    if turns is not None:
        if "binding" in turns and turns["binding"].notna().any():
            tb = turns["binding"]
        else:  # an older ledger: the call's binding from its attempts
            tb = turns["call_id"].map(a.drop_duplicates("call_id").set_index("call_id")[
                "binding"])
        turns = turns[tb.eq(binding).to_numpy()].reset_index(drop=True)
    witness = led.witness
    if witness is not None and witness_binding is not None:
        witness = witness[witness_binding == binding].reset_index(drop=True)
    events = led.events
    if events is not None and len(events):
        guid_b = _guid_bindings(a)
        names = pd.Series(events.names).astype(str).str.split("#").str[0]
        code_b = names.map(guid_b).to_numpy()
        stream = events.frame["stream"].to_numpy()
        keep = np.zeros(len(stream), dtype=bool)
        ok = stream >= 0
        keep[ok] = code_b[stream[ok]] == binding
        events = Events(frame=events.frame[keep].reset_index(drop=True), names=events.names)
    return replace(led, attempts=sub_a, turns=turns, witness=witness, chaos=None,
                   pending_events=events)


def _binomial_tail(k: int, n: int, share: float) -> float:
    """P(X >= k) for X ~ Binomial(n, share)."""
    if k <= 0:
        return 1.0
    # only a rule that fails on some of several bindings comes here:
    # lazy: +0.95 s (scipy.stats) off every load run's check
    from scipy import stats

    return float(stats.binom.sf(k - 1, n, min(1.0, max(0.0, share))))


def delivery_comparisons(per: dict[str, list[RuleResult]], turns: dict[str, int]
                         ) -> tuple[list[Comparison], list[str]]:
    """The binomial test of each violation rule whose violations fall on some bindings, and
    a line per rule that failed somewhere."""
    out: list[Comparison] = []
    lines: list[str] = []
    total = sum(turns.values())
    names = [r.name for r in next(iter(per.values()))] if per else []
    for i, name in enumerate(names):
        res = {b: rules[i] for b, rules in per.items()}
        if any(r.kind != "violation" for r in res.values()):
            continue
        failing = {b: r.count for b, r in res.items() if r.status == FAIL}
        if not failing:
            continue
        k_all = sum(failing.values())
        judged = [b for b, r in res.items() if r.status != NOT_CHECKED]
        lines.append(f"{name} fails on {', '.join(f'{b} ({k})' for b, k in failing.items())}"
                     + (f", passes on {', '.join(b for b in judged if b not in failing)}"
                        if len(failing) < len(judged) else " (every binding)"))
        if len(failing) == len(judged) or total <= 0:
            continue
        share_turns = sum(turns[b] for b in judged)
        for b, k in failing.items():
            share = turns[b] / share_turns if share_turns else 0.0
            out.append(Comparison(b, f"delivery:{name}", _binomial_tail(k, k_all, share),
                                  f"{name}: {k} of {k_all} violations on {b}, which had "
                                  f"{share:.0%} of the turns"))
    return out, lines


def _cluster_ratio(values: np.ndarray, weights: np.ndarray, calls: np.ndarray
                   ) -> tuple[float, float, int]:
    """Ratio estimator sum(values)/sum(weights) and its cluster-robust variance (calls as
    clusters); (nan, nan, 0) when empty."""
    if not len(values) or weights.sum() <= 0:
        return math.nan, math.nan, 0
    codes, uniq = pd.factorize(calls)
    m = len(uniq)
    v = np.bincount(codes, weights=values, minlength=m)
    w = np.bincount(codes, weights=weights, minlength=m)
    est = float(v.sum() / w.sum())
    if m < 2:
        return est, math.inf, m
    resid = v - est * w
    var = m / (m - 1) * float(np.sum(resid ** 2)) / float(w.sum()) ** 2
    return est, var, m


def _min_effect_p(diff: float, var: float, margin: float, clusters: int) -> float:
    """One-sided p of H0 |true difference| <= margin, given an estimate, its variance and the
    number of clusters of the smaller side (Student's t with clusters - 1 degrees of
    freedom: few calls give a wide interval, never a confident difference)."""
    if clusters < MIN_CALLS or not (math.isfinite(diff) and math.isfinite(var)):
        return 1.0
    if var <= 0:
        return 0.0 if abs(diff) > margin else 1.0
    # lazy: +0.35 s (scipy.special) off every load run's check; only a multi-binding run reaches it
    from scipy.special import stdtr

    x = (abs(diff) - margin) / math.sqrt(var)
    # Student's t upper tail: what scipy.stats.t.sf(x, df) computes (its _sf), without the
    # +0.95 s import of scipy.stats on every run over several bindings
    return float(stdtr(clusters - 1, -x))


def metric_comparisons(frame: pd.DataFrame, names: list[str]
                       ) -> tuple[list[Comparison], dict[str, dict[str, Any]]]:
    """Success, TTFC and completion of each binding against the others pooled; and the
    per-binding figures (``frame``: one row per judged turn with binding, call_id, ok,
    ttfc_s, completion_s)."""
    out: list[Comparison] = []
    figures: dict[str, dict[str, Any]] = {}
    for b in names:
        mine = frame["binding"].eq(b).to_numpy()
        fig: dict[str, Any] = {"judged_turns": int(mine.sum())}
        if mine.sum() < MIN_TURNS or (~mine).sum() < MIN_TURNS:
            figures[b] = fig
            continue
        ok = frame["ok"].to_numpy(dtype=float)
        one = np.ones(len(frame))
        calls = frame["call_id"].to_numpy()
        sb, vb, cb = _cluster_ratio(ok[mine], one[mine], calls[mine])
        so, vo, co = _cluster_ratio(ok[~mine], one[~mine], calls[~mine])
        fig["success"] = sb
        out.append(Comparison(b, "success", _min_effect_p(sb - so, vb + vo, SUCCESS_MARGIN,
                                                          min(cb, co)),
                              f"success {sb:.1%} on {b} vs {so:.1%} on the others"))
        for col, label in (("ttfc_s", "ttfc"), ("completion_s", "completion")):
            x = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
            good = frame["ok"].to_numpy(dtype=bool) & np.isfinite(x) & (x > 0)
            lx = np.log(np.where(good, x, 1.0))
            mb, vb2, cb = _cluster_ratio(lx[good & mine], one[good & mine],
                                         calls[good & mine])
            mo, vo2, co = _cluster_ratio(lx[good & ~mine], one[good & ~mine],
                                         calls[good & ~mine])
            if math.isfinite(mb):
                fig[f"{label}_geomean_s"] = math.exp(mb)
            if not (math.isfinite(mb) and math.isfinite(mo)):
                continue
            ratio = math.exp(mb - mo)
            out.append(Comparison(b, label, _min_effect_p(mb - mo, vb2 + vo2,
                                                          math.log(LATENCY_MARGIN),
                                                          min(cb, co)),
                                  f"{label} {math.exp(mb) * 1000:.0f} ms on {b} vs "
                                  f"{math.exp(mo) * 1000:.0f} ms on the others "
                                  f"(x{ratio:.2f}, geometric means)"))
        figures[b] = fig
    return out, figures


def judged_frame(led: Ledgers, indeterminate: np.ndarray, p_turns: pd.DataFrame,
                 tkey_binding: np.ndarray, tkey_call: np.ndarray,
                 latency: pd.DataFrame | None) -> pd.DataFrame:
    """One row per judged turn (not cancelled, not indeterminate): binding, call, ok and its
    latencies (``latency``: ttfc_s, completion_s by turn key, or None)."""
    out = p_turns["outcome"].to_numpy()
    judged = ~indeterminate & (out != "cancelled") & ~pd.isna(out)
    idx = np.flatnonzero(judged)
    frame = pd.DataFrame({"binding": tkey_binding[idx], "call_id": tkey_call[idx],
                          "ok": out[idx] == "completed"})
    for col in ("ttfc_s", "completion_s"):
        frame[col] = latency[col].reindex(idx).to_numpy() if latency is not None else np.nan
    return frame[frame["binding"].notna().to_numpy()].reset_index(drop=True)


def rule(led: Ledgers, names: list[str], per: dict[str, list[RuleResult]],
         turns: dict[str, int], frame: pd.DataFrame) -> tuple[RuleResult, dict[str, Any]]:
    """The rule from each binding's delivery rules (``per``), turn counts and judged turns;
    and the per-binding figures for the verdict's stats."""
    if len(names) < 2:
        return RuleResult(NAME, SECTION, "violation", NOT_CHECKED,
                          detail="one binding in this run (run --binding all, or a comma "
                                 "list, to compare bindings)"), {}
    tests, lines = delivery_comparisons(per, turns)
    more, figures = metric_comparisons(frame, names)
    tests += more
    for b in names:
        fig = figures.setdefault(b, {})
        for k in [k for k, v in fig.items() if isinstance(v, float) and not math.isfinite(v)]:
            del fig[k]  # verdict.json has no NaN
        fig["turns"] = turns.get(b, 0)
        fig["failed_rules"] = [r.name for r in per.get(b, []) if r.status == FAIL]
    rejected = holm([t.p_value for t in tests], ALPHA) if tests else []
    bad = [t for t, r in zip(tests, rejected, strict=True) if r]
    head = (f"{len(names)} bindings ({', '.join(f'{b} {turns.get(b, 0)} turns' for b in names)})"
            f"; {len(tests)} comparisons, Holm at {ALPHA:g}, margins: success "
            f"{SUCCESS_MARGIN:.0%}, latency x{LATENCY_MARGIN:g}")
    delivery = ("; delivery: " + "; ".join(lines)) if lines else \
        "; delivery: the same on every binding (no violation on any)"
    if not bad:
        return RuleResult(NAME, SECTION, "violation", PASS, 0, (), head + delivery
                          + "; success and latency agree within their uncertainty"), figures
    differs = sorted({t.binding for t in bad}, key=names.index)
    text = "; ".join(f"{t.text} (p={t.p_value:.2g})" for t in bad)
    return RuleResult(NAME, SECTION, "violation", FAIL, len(bad),
                      tuple(f"{t.binding}: {t.what}" for t in bad[:5]),
                      f"binding(s) {', '.join(differs)} differ: {text}; " + head + delivery
                      ), figures


PerBinding = Callable[[Ledgers], list[RuleResult]]


__all__ = ["ALPHA", "LATENCY_MARGIN", "NAME", "SUCCESS_MARGIN", "bindings_of", "judged_frame",
           "rule", "split"]
