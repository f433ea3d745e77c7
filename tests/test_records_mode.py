"""``[run] records``: bounded-memory runs compute the same metrics as the full records.

Every preset is run twice at the same seed, keeping every row (the exact path,
``replication_metrics`` on the tables) and keeping none (``Tally``, the rows folded in as
they are written): counts, shares, means and hazards agree exactly (up to float summation
order), percentiles within the sketch's stated error.  A sampled run keeps exactly the
sampled calls' rows of the full run, in every table.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hdrh.histogram import HdrHistogram

from rtalab.sim.config import ConfigError
from rtalab.sim.model.tally import sample_mask
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.sketch import ABSOLUTE_ERROR_S, RELATIVE_ERROR, Sketch, within_error
from rtalab.sim.shared.summary import percentile, percentile_served, replication_metrics, summarize

PRESETS = ("baseline", "retry_storm", "lossy_network", "metastable_spike", "release_gate")
PERCENTILE_PREFIXES = (S.M_TTFC_PREFIX, S.M_COMPLETION_PREFIX, S.M_CALLER_TTFC_PREFIX,
                       S.M_CALLER_COMPLETION_PREFIX, S.M_QUEUE_WAIT_PREFIX)


def disagreements(exact: dict, folded: dict) -> list[tuple[str, object, object]]:
    bad: list[tuple[str, object, object]] = []
    if list(exact) != list(folded):
        return [("<names>", list(exact), list(folded))]
    for k, x in exact.items():
        y = folded[k]
        if k.startswith(PERCENTILE_PREFIXES):
            ok = within_error(y, x)
        elif x is None or y is None:
            ok = x is y
        else:
            ok = math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        if not ok:
            bad.append((k, x, y))
    return bad


@pytest.mark.parametrize("preset", PRESETS)
def test_no_records_gives_the_metrics_of_all_records(preset: str) -> None:
    sc = load_scenario(preset)
    exact = replication_metrics(run_once(sc, 3), sc.run.warmup_s)
    out = run_once(sc.with_overrides({"run.records": "none"}), 3)
    assert out.metrics is not None
    assert len(out.turns) == len(out.attempts) == len(out.executions) == 0
    assert disagreements(exact, out.metrics) == []
    # hazards and counts are exact, not merely close (what a release decision reads)
    for k in (S.M_TURNS, S.M_CALLS, S.M_DUP_GUID_PER_1K, S.M_REEXEC_TURN_PER_1K,
              S.M_DUP_SESSION_PER_1K, S.M_GHOST_PER_1K, S.M_SPURIOUS_TIMEOUTS_PER_1K):
        assert out.metrics[k] == exact[k], k


def test_the_storm_exercises_the_joins() -> None:
    """retry_storm has spurious timeouts and duplicate side effects: the joins above are
    checked on non-zero values, not only on zeros."""
    sc = load_scenario("retry_storm")
    m = run_once(sc.with_overrides({"run.records": "none"}), 3).metrics
    assert m[S.M_SPURIOUS_TIMEOUTS_PER_1K] > 0
    assert m[S.M_DUP_GUID_PER_1K] + m[S.M_REEXEC_TURN_PER_1K] > 0


def test_a_sample_keeps_exactly_the_sampled_calls_rows() -> None:
    sc = load_scenario("retry_storm").with_overrides({"run.duration_s": 120.0})
    full = run_once(sc, 5)
    part = run_once(sc.with_overrides({"run.records": "sample:0.2"}), 5)
    none = run_once(sc.with_overrides({"run.records": "none"}), 5)
    assert part.metrics == none.metrics  # the sample changes what is kept, not the numbers
    calls = part.calls[S.CALL_ID].to_numpy()
    assert 0.1 * len(full.calls) < len(calls) < 0.3 * len(full.calls)
    for name in ("attempts", "turns", "calls", "executions", "side_effects"):
        f, p = getattr(full, name), getattr(part, name)
        want = f[f[S.CALL_ID].isin(calls)].reset_index(drop=True)
        pd.testing.assert_frame_equal(p.reset_index(drop=True), want, check_categorical=True)
        assert set(p[S.CALL_ID]) <= set(calls)
    pd.testing.assert_frame_equal(part.timeseries, full.timeseries)


def test_same_seed_same_numbers_and_summary_reads_folded_metrics() -> None:
    sc = load_scenario("baseline").with_overrides({"run.records": "none",
                                                    "run.duration_s": 60.0})
    a, b = run_once(sc, 1), run_once(sc, 1)
    assert a.metrics == b.metrics
    s = summarize([a, b], sc.run.warmup_s)
    assert s["metrics"][S.M_TURNS]["values"] == [a.metrics[S.M_TURNS]] * 2


@pytest.mark.parametrize("bad", ["some", "sample:0", "sample:1.5", "sample:x", ""])
def test_a_bad_records_value_is_named(bad: str) -> None:
    with pytest.raises(ConfigError, match="records"):
        load_scenario("baseline").with_overrides({"run.records": bad})


def test_sample_mask_is_seeded_and_of_the_stated_share() -> None:
    ids = np.arange(200_000, dtype=np.int64)
    m1, m2 = sample_mask(ids, 0.01, 7), sample_mask(ids, 0.01, 8)
    assert (m1 == sample_mask(ids, 0.01, 7)).all()
    assert not (m1 == m2).all()
    # binomial(200000, 0.01): sd ~ 44.5; 5 sd either side
    assert abs(int(m1.sum()) - 2000) < 225


# --------------------------------------------------------------------------- the sketch


def test_bucketing_is_the_librarys() -> None:
    rng = np.random.default_rng(1)
    us = np.unique(np.rint(rng.lognormal(0, 4, 30_000) * 1e5).astype(np.int64))
    us = us[us < 10**11]
    s = Sketch()
    s.add(us / 1e6)
    h = HdrHistogram(1, 10 * 24 * 3600 * 10**6, 3)
    for v in us.tolist():
        h.record_value(v)
    assert np.array_equal(np.ctypeslib.as_array(s.hist.counts), np.ctypeslib.as_array(h.counts))


@pytest.mark.parametrize("n", [1, 2, 7, 100, 5001])
def test_percentiles_are_within_the_stated_error(n: int) -> None:
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.lognormal(-1, 1.5, n), [0.0]])
    x_inf = np.concatenate([x, np.full(n // 5, math.inf), [math.nan]])
    s = Sketch()
    for part in np.array_split(x_inf, 3):
        s.add(part)
    for q in (0, 1, 50, 90, 95, 99, 99.9, 100):
        exact = percentile(x, q)
        got = s.percentile(q)
        assert abs(got - exact) <= RELATIVE_ERROR * exact + ABSOLUTE_ERROR_S, (q, got, exact)
        assert within_error(s.percentile(q, served=True), percentile_served(x_inf, q))
    assert Sketch().percentile(50) is None


def test_merged_sketches_equal_one_sketch_and_survive_pickling() -> None:
    import pickle

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.exponential(0.4, 3000), [math.inf] * 30])
    whole, a, b = Sketch(), Sketch(), Sketch()
    whole.add(x)
    a.add(x[:1000])
    b.add(x[1000:])
    a.merge(pickle.loads(pickle.dumps(b)))
    assert len(a) == len(whole) == 3030
    for q in (50, 95, 99):
        assert a.percentile(q) == whole.percentile(q)
        assert a.percentile(q, served=True) == whole.percentile(q, served=True)
    assert Sketch.decode(a.encode()).percentile(99) == whole.percentile(99)
