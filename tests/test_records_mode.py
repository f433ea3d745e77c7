"""``[run] records``: bounded-memory runs compute the same metrics as the full records.

Every preset is run twice at the same seed, keeping every row (the exact path,
``replication_metrics`` on the tables) and keeping none (``Tally``, the rows folded in as
they are written): counts, shares, means and hazards agree exactly (up to float summation
order), percentiles within the sketch's stated error.  A sampled run keeps exactly the
sampled calls' rows of the full run, in every table.
"""

from __future__ import annotations

import itertools
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
from tests.oneoff.metric_dump import MANY_DUPLICATES

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


# --------------------------------------------------------------------------- hazards folded

HAZARDS = (S.M_DUP_GUID_PER_1K, S.M_REEXEC_TURN_PER_1K, S.M_DUP_SESSION_PER_1K,
           S.M_GHOST_PER_1K, S.M_SIDE_EFFECTS_PER_SE_TURN)


def test_folded_hazards_are_exact_on_a_run_full_of_duplicates() -> None:
    sc = load_scenario("retry_storm").with_overrides(MANY_DUPLICATES)
    full = run_once(sc, 3)
    exact = replication_metrics(full, sc.run.warmup_s)
    folded = run_once(sc.with_overrides({"run.records": "none"}), 3).metrics
    assert folded is not None
    assert {k: folded[k] for k in HAZARDS} == {k: exact[k] for k in HAZARDS}
    # what the folding has to get right is there: extra runs of a requestGuid, in degraded
    # calls too (left out), re-executed turns, ghosts, executions after their turn ended
    se, tu = full.side_effects, full.turns.set_index(S.INTERACTION_ID)
    degraded = full.calls[S.CALL_ID][full.calls[S.DEGRADED]]
    dup = se[S.REQUEST_GUID].duplicated()
    assert exact[S.M_DUP_GUID_PER_1K] > 20 and exact[S.M_REEXEC_TURN_PER_1K] > 20
    assert exact[S.M_GHOST_PER_1K] > 20
    assert (dup & se[S.CALL_ID].isin(degraded)).sum() > 0
    late = se[S.EXECUTED_S].to_numpy() > tu.loc[se[S.INTERACTION_ID], S.END_S].to_numpy()
    assert (late & dup.to_numpy()).sum() > 0


def _brute_hazards(guids: list[int], turns: list[int], calls: list[int],
                   failed: set[int], degraded: set[int]) -> tuple[int, int, int]:
    """(extra, re-executed, ghosts) counted the obvious way."""
    seen: dict[int, int] = {}
    extra = 0
    per_turn: dict[int, set[int]] = {}
    for g, t, c in zip(guids, turns, calls, strict=True):
        if g in seen and c not in degraded:
            extra += 1
        seen[g] = seen.get(g, 0) + 1
        per_turn.setdefault(t, set()).add(g)
    reexec = sum(1 for gs in per_turn.values() if len(gs) > 1)
    return extra, reexec, len(failed & set(per_turn))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hazards_folded_in_chunks_count_as_the_whole_ledger(seed: int) -> None:
    from rtalab.sim.model.tally import Hazards

    rng = np.random.default_rng(seed)
    n_turns = 3000
    turn_call = np.sort(rng.integers(0, 700, n_turns))  # a turn belongs to one call
    guid_turn = rng.integers(0, n_turns, 5000)          # a requestGuid to one turn
    rows = rng.integers(0, 5000, 12_000)                 # executions: repeats abound
    guids = rows.astype(np.int64)
    turns = guid_turn[rows].astype(np.int64)
    calls = turn_call[turns].astype(np.int64)
    failed = rng.choice(n_turns, 400, replace=False)
    degraded = rng.choice(700, 60, replace=False)
    h = Hazards()
    cuts = np.sort(rng.choice(len(rows), 40, replace=False))
    bounds = [0, *cuts.tolist(), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):  # ids growing chunk by chunk
        h.executed(guids[a:b], turns[a:b], calls[a:b])
        if i == 10:
            h.failed(failed[: 200])
            h.degraded(degraded[: 30])
    h.failed(failed[200:])
    h.degraded(degraded[30:])
    want = _brute_hazards(guids.tolist(), turns.tolist(), calls.tolist(),
                          set(failed.tolist()), set(degraded.tolist()))
    assert (h.extra(), h.reexecuted, h.ghosts()) == want
    assert h.executions == len(rows)
    assert min(want) > 50  # every count is exercised


def test_rank_is_numpys_inverted_cdf_index_without_the_array() -> None:
    """``rank(n, q)`` is the index np.percentile(np.arange(n), q, "inverted_cdf") picks,
    computed on scalars: the same number for every n and q, including the ones whose
    ``n * q / 100`` lands on (or a rounding error off) an integer."""
    from rtalab.sim.shared.sketch import rank

    rng = np.random.default_rng(11)
    qs = [0, 0.1, 1, 5, 10, 25, 33.3, 50, 66.6, 75, 90, 95, 99, 99.5, 99.9, 99.99, 100,
          *S.PERCENTILES, *rng.uniform(0, 100, 40).tolist()]
    ns = [*range(1, 400), 999, 1000, 1001, 4096, 10**5, 10**5 + 1,
          *rng.integers(1, 3 * 10**5, 30).tolist()]
    for n in ns:
        idx = np.arange(n, dtype=np.float64)
        want = np.percentile(idx, qs, method="inverted_cdf").astype(np.int64).tolist()
        assert [rank(int(n), q) for q in qs] == want, n


@pytest.mark.parametrize("seed", [1, 2])
def test_settled_hazard_ids_stay_exact_under_late_duplicates(seed: int,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """The windows settle their old ids (compressed blocks) while late executions of them
    keep coming: every count is still the brute-force one."""
    from rtalab.sim.model.tally import Hazards, Window

    monkeypatch.setattr(Window, "BLOCK", 64)
    monkeypatch.setattr(Hazards, "SETTLE_LAG", 1)
    rng = np.random.default_rng(seed)
    n_guids = 6000
    guid_turn = np.arange(n_guids) // 2            # two requestGuids a turn, minted in order
    turn_call = np.arange(n_guids // 2) // 4       # four turns a call
    # executions mostly in id order, a fifth of them a late copy of an id long settled
    fresh = np.repeat(np.arange(n_guids), 1 + (rng.random(n_guids) < 0.3))
    late = (fresh * rng.random(len(fresh))).astype(np.int64)
    rows = np.where(rng.random(len(fresh)) < 0.2, late, fresh)
    guids = rows.astype(np.int64)
    turns = guid_turn[rows].astype(np.int64)
    calls = turn_call[turns].astype(np.int64)
    failed = rng.choice(n_guids // 2, 600, replace=False)
    degraded = rng.choice(n_guids // 8, 80, replace=False)
    h = Hazards()
    settled_hits = 0
    for i, a in enumerate(range(0, len(rows), 150)):
        g, t, c = guids[a:a + 150], turns[a:a + 150], calls[a:a + 150]
        settled_hits += int((g < h.guid_run.lo).sum() + (t < h.turn.lo).sum())
        h.executed(g, t, c)
        h.failed(failed[(failed >= 50 * i) & (failed < 50 * (i + 1))])
        h.degraded(degraded[(degraded >= 12 * i) & (degraded < 12 * (i + 1))])
        h.settle()
    h.failed(failed[failed >= 50 * (i + 1)])
    h.degraded(degraded[degraded >= 12 * (i + 1)])
    want = _brute_hazards(guids.tolist(), turns.tolist(), calls.tolist(),
                          set(failed.tolist()), set(degraded.tolist()))
    assert (h.extra(), h.reexecuted, h.ghosts()) == want
    assert min(want) > 50 and settled_hits > 500  # the late ones did hit settled blocks
    assert all(w.lo > 0 and w.blocks for w in (h.guid_run, h.turn))
    assert h.turn.lo > n_guids // 4  # most turns are settled: the array is the recent ones


def test_the_end_folds_the_open_calls_rows_in_slices_and_counts_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The calls still open at the end are recorded a slice at a time (a fold after each, not
    one burst of rows: the peak RSS of a long run); the metrics are those of all records."""
    from rtalab.sim.model import live, world

    sc = load_scenario("retry_storm").with_overrides({**MANY_DUPLICATES, "run.drain_s": 0.0})
    exact = replication_metrics(run_once(sc, 3), sc.run.warmup_s)
    during = [False]
    folds: list[int] = []  # calls still open at each fold made while the end records them
    real_fold, real_flush = world.World._fold, live.LiveLayer.flush

    def fold(self: world.World) -> None:
        if during[0]:
            folds.append(len(self.live.sessions))
        real_fold(self)

    def flush(self: live.LiveLayer, *args: object) -> None:
        during[0] = True
        real_flush(self, *args)  # type: ignore[arg-type]
        during[0] = False

    monkeypatch.setattr(world, "FLUSH_FOLD_CALLS", 3)
    monkeypatch.setattr(world.World, "_fold", fold)
    monkeypatch.setattr(live.LiveLayer, "flush", flush)
    out = run_once(sc.with_overrides({"run.records": "none"}), 3)
    assert out.metrics is not None and disagreements(exact, out.metrics) == []
    for k in (S.M_TURNS, S.M_CALLS, S.M_DUP_GUID_PER_1K, S.M_REEXEC_TURN_PER_1K,
              S.M_DUP_SESSION_PER_1K, S.M_GHOST_PER_1K, S.M_SPURIOUS_TIMEOUTS_PER_1K):
        assert out.metrics[k] == exact[k], k
    assert len(folds) >= 3 and folds == sorted(folds, reverse=True)  # slice by slice
