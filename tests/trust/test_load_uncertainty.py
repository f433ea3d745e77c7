"""A load run's bootstrap over calls: every interval holds its estimate, a drawn call's
copies are separate calls (the ``0.0 [61.4, 136.5]`` duplicate-executions bug), figures
the bootstrap cannot speak for say so, and the spread is the right size."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from rtalab.loadtests.loadrun import uncertainty as U
from rtalab.loadtests.loadrun.tables import load_summary, timeseries
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import summarize
from tests.trust.coverage import bootstrap_se_ratio
from tests.trust.loadlike import WARMUP_S, loadlike


@cache
def _boot(resamples: int = 80) -> tuple[dict, dict]:
    rec = loadlike()
    est = summarize([rec], WARMUP_S)["metrics"]
    return est, U.bootstrap(rec, WARMUP_S, 3, timeseries, resamples=resamples)


def test_every_raw_bootstrap_interval_holds_its_estimate() -> None:
    est, boot = _boot()
    checked = 0
    for name, b in boot.items():
        if "ci_low" not in b:
            continue
        m = est[name]["mean"]
        assert b["ci_low"] <= m <= b["ci_high"], (name, m, b)
        checked += 1
    assert checked >= 15  # the run has figures with spread: they were checked


def test_a_call_drawn_twice_is_two_calls_not_duplicate_executions() -> None:
    est, boot = _boot()
    name = S.M_DUP_GUID_PER_1K
    assert est[name]["mean"] == 0.0
    # no duplicate in the run -> none in any resample (was 0.0 [76.4, 124.8])
    assert boot[name] == {"ci_note": U.NOTE_CONSTANT}
    assert boot[S.M_REEXEC_TURN_PER_1K] == {"ci_note": U.NOTE_CONSTANT}


def test_resample_gives_every_copy_its_own_ids() -> None:
    rec = loadlike()
    calls = rec.calls[S.CALL_ID].astype(str).to_numpy()
    draw = np.array([0, 0, 1, 1, 1])
    r = U.resample(rec, draw, calls, timeseries)
    assert r.calls[S.CALL_ID].nunique() == 5
    per_call = rec.turns[S.CALL_ID].astype(str).value_counts()
    n_turns = 2 * per_call[calls[0]] + 3 * per_call[calls[1]]
    assert len(r.turns) == n_turns and r.turns[S.INTERACTION_ID].nunique() == n_turns
    guids = rec.attempts[S.REQUEST_GUID][rec.attempts[S.CALL_ID].isin(calls[:2])]
    assert r.attempts[S.REQUEST_GUID].nunique() == len(r.attempts) or guids.nunique() < len(guids)
    # the time series is rebuilt from the resampled calls, not the run's
    assert r.timeseries[S.OFFERED_TURNS_PER_S].sum() == len(r.turns)


def test_load_summary_never_prints_a_zero_width_interval_for_an_unresampled_figure() -> None:
    rec = loadlike()
    s = load_summary(rec, WARMUP_S)
    seen_note = set()
    for name, m in s["metrics"].items():
        if m.get("mean") is None:
            continue
        lo, hi = m.get("ci_low"), m.get("ci_high")
        if lo is None:
            assert hi is None and m.get("ci_note"), name  # "–" with a reason
            seen_note.add(m["ci_note"])
        else:
            assert lo <= m["mean"] <= hi, name
            assert lo < hi, (name, lo, hi)
    assert s["metrics"][S.M_CALLS]["ci_note"] == U.NOTE_FIXED
    assert s["metrics"][S.M_CONCURRENT_CALLS_PEAK]["ci_note"] == U.NOTE_PEAK
    assert s["metrics"][S.M_OFFERED_TURNS_PER_S]["ci_low"] is not None  # resampled now
    assert U.NOTE_CONSTANT in seen_note


def test_add_uncertainty_widens_an_interval_that_misses_its_estimate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    summary = {"metrics": {"x": {"mean": 5.0, "ci_low": None, "ci_high": None}}}
    monkeypatch.setattr(U, "bootstrap", lambda *a, **k: {"x": {"se": 1.0, "ci_low": 6.0,
                                                               "ci_high": 8.0}})
    U.add_uncertainty(summary, None, 0.0, 0, timeseries)
    m = summary["metrics"]["x"]
    assert (m["ci_low"], m["ci_high"], m["ci_note"]) == (5.0, 8.0, U.NOTE_WIDENED)


def test_bootstrap_se_matches_the_cluster_se_over_calls() -> None:
    """The truth for a ratio over calls: the linearised (cluster-robust) standard error
    sqrt(sum (y_c - r m_c)^2) / sum m_c.  A bootstrap drawing too few or too many calls,
    or rows instead of calls, is off by far more than the 25 % allowed."""
    se, truth = bootstrap_se_ratio(boot=_boot()[1])
    assert truth > 0 and 0.75 < se / truth < 1.25, (se, truth)


def test_percentile_interval_is_at_95_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval's ends are the 2.5 % and 97.5 % quantiles of the resampled values
    (here, by construction, 1, 2, ..., 200)."""
    values = iter(range(1, 201))
    monkeypatch.setattr(U, "resample", lambda out, draw, calls, series: out)
    monkeypatch.setattr(U, "replication_metrics", lambda out, w: {"x": float(next(values))})
    rec = loadlike()
    b = U.bootstrap(rec, WARMUP_S, 3, timeseries, resamples=200)["x"]
    xs = np.arange(1, 201, dtype=float)
    assert b["ci_low"] == pytest.approx(np.quantile(xs, 0.025))  # 5.975
    assert b["ci_high"] == pytest.approx(np.quantile(xs, 0.975))  # 195.025
    assert b["se"] == pytest.approx(xs.std(ddof=1))


def test_whole_run_counters_are_not_resampled() -> None:
    """The dedup store's peak is a counter of the whole run: the bootstrap says so, not
    "every resample gives the same value"."""
    from dataclasses import replace

    rec = loadlike()
    rec = replace(rec, counters={**rec.counters, "dedup_peak_entries": 12,
                                 "dedup_peak_bytes": 3400})
    boot = U.bootstrap(rec, WARMUP_S, 3, timeseries, resamples=4)
    assert boot[S.M_DEDUP_PEAK_ENTRIES] == {"ci_note": U.NOTE_COUNTER}
    assert boot[S.M_DEDUP_PEAK_BYTES] == {"ci_note": U.NOTE_COUNTER}
