"""The bootstrap's hot paths give what their plain definitions give, on hostile inputs.

A load run's bootstrap computes every metric of 200 resampled runs, so three steps of it
take a cheaper road than the obvious one (the time series' rates as a bincount of floors,
the spurious timeouts on row masks, the re-executed turns on integer codes): each is held
here to the obvious one -- ``np.histogram`` over the 1-s edges, the function on the
filtered frames, a frame's ``drop_duplicates`` -- including edge values (a row exactly on
a second, at the end, beyond it, before 0, not finite) and masks that cut rows away."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from rtalab.loadtests.loadrun.tables import timeseries
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import (
    _turns_with_several,
    percentile,
    percentile_served,
    percentiles,
    percentiles_served,
    spurious_timeouts,
    timeseries_metrics,
)
from tests.test_resample import records


def test_the_series_rates_are_the_histogram_of_one_second_bins() -> None:
    rec = records()
    n = math.ceil(rec.duration_s)
    starts = rec.turns[S.START_S].to_numpy(dtype=float).copy()
    starts[:8] = [0.0, -0.0, 1.0, 7.0, float(n), n + 0.5, -0.5, math.nan]
    sends = rec.attempts[S.SEND_S].to_numpy(dtype=float).copy()
    sends[:5] = [2.0, float(n), n - 1e-9, math.inf, -1e-9]
    rec = replace(rec, turns=rec.turns.assign(**{S.START_S: starts}),
                  attempts=rec.attempts.assign(**{S.SEND_S: sends}))
    ts = timeseries(rec, rec.duration_s)
    edges = np.arange(n + 1, dtype=float)

    def hist(x: np.ndarray) -> np.ndarray:
        return np.histogram(x[np.isfinite(x)], bins=edges)[0].astype(float)

    completed = (rec.turns[S.OUTCOME] == "completed").to_numpy()
    retries = rec.attempts[S.ATTEMPT].to_numpy() > 1
    for column, expected in ((S.OFFERED_TURNS_PER_S, hist(starts)),
                             (S.ATTEMPTS_PER_S, hist(sends)),
                             (S.RETRIES_PER_S, hist(sends[retries])),
                             (S.COMPLETED_TURNS_PER_S,
                              hist(rec.turns[S.END_S].to_numpy(dtype=float)[completed]))):
        got = ts[column].to_numpy()
        assert got.dtype == np.float64 and np.array_equal(got, expected), column
    assert ts[S.OFFERED_TURNS_PER_S].iloc[0] >= 2 and ts[S.OFFERED_TURNS_PER_S].iloc[-1] >= 1


def test_spurious_timeouts_on_masks_are_those_of_the_filtered_tables() -> None:
    """Silent reasoning of ~1.5 s against a 1-s timer: many attempts time out, some of them
    spuriously; the masks cut attempts and executions independently."""
    sc = load_scenario("baseline", [
        "reasoner.reasoning_time_s={dist='exp', mean=1.5}", "reasoner.progress_directive=false",
        "live.timeouts.turn_response_s=1.0", "run.duration_s=40"])
    out = run_once(sc, 5)
    at, ex = out.attempts, out.executions
    whole = spurious_timeouts(at, ex)
    assert whole[1] > 20 and 0 < whole[0] < whole[1], whole
    assert spurious_timeouts(at, ex, np.ones(len(at), bool), np.ones(len(ex), bool)) == whole
    rng = np.random.default_rng(1)
    for share in (0.3, 0.7, 0.95):
        a_keep, e_keep = rng.random(len(at)) < share, rng.random(len(ex)) < share
        expected = spurious_timeouts(at[a_keep], ex[e_keep])
        assert spurious_timeouts(at, ex, a_keep, e_keep) == expected, share
        assert spurious_timeouts(at, ex, a_keep, None) == spurious_timeouts(at[a_keep], ex)


def _several_by_frame(turns: np.ndarray, guids: np.ndarray) -> int:
    pairs = pd.DataFrame({"t": turns, "g": guids}).drop_duplicates()
    _, per_turn = np.unique(pairs["t"].to_numpy(), return_counts=True)
    return int((per_turn > 1).sum())


def test_turns_with_several_guids_count_as_a_frame_counts_them() -> None:
    rng = np.random.default_rng(2)
    assert _turns_with_several(np.array([], dtype=object), np.array([], dtype=object)) == 0
    for size in (1, 2, 7, 60, 500):
        t = rng.integers(0, max(1, size // 3), size)
        g = rng.integers(0, max(1, size // 2), size)
        named = (t.astype(str).astype(object), ("x" + g.astype(str)).astype(object))
        for tt, gg in ((t, g), named):
            assert _turns_with_several(tt, gg) == _several_by_frame(tt, gg), size
    # a turn with one guid seen twice is not re-executed; one with two guids is
    t = np.array(["a", "a", "b", "b", "c"], dtype=object)
    g = np.array(["1", "1", "2", "3", "4"], dtype=object)
    assert _turns_with_several(t, g) == 1


def test_series_metrics_are_the_means_over_the_window_frame() -> None:
    """The window is [warm-up, duration): the rows at the warm-up's second count, the one at
    the duration does not; each figure is pandas' reduction over the window's frame."""
    sc = load_scenario("retry_storm", ["run.duration_s=30", "run.warmup_s=5"])
    ts = run_once(sc, 4).timeseries.copy()
    ts.loc[ts.index[6:9], [S.DEDUP_BYTES, S.BUSY_WORKERS]] = math.nan  # a load run's NaN gauges
    warmup, duration = 5.0, 25.0
    t_s = ts[S.T_S].to_numpy()
    assert {warmup, duration} <= set(t_s.tolist())
    w = ts[(t_s >= warmup) & (t_s < duration)]
    m = timeseries_metrics(ts, warmup, duration)
    expected = {S.M_DEDUP_MEAN_BYTES: float(w[S.DEDUP_BYTES].mean()),
                S.M_OFFERED_TURNS_PER_S: float(w[S.OFFERED_TURNS_PER_S].mean()),
                S.M_GOODPUT: float(w[S.COMPLETED_TURNS_PER_S].mean()),
                S.M_MEAN_IN_PROGRESS: float(w[S.TURNS_IN_PROGRESS].mean()),
                S.M_CONCURRENT_CALLS_MEAN: float(w[S.CALLS_IN_PROGRESS].mean()),
                S.M_CONCURRENT_CALLS_PEAK: float(w[S.CALLS_IN_PROGRESS].max()),
                S.M_UTILISATION: float(w[S.BUSY_WORKERS].sum() / w[S.WORKER_CAPACITY].sum())}
    assert m == expected
    assert timeseries_metrics(ts, duration, duration) == {}


def _window_figures(ts: pd.DataFrame, warmup: float, duration: float) -> dict[str, Any]:
    """The series metrics as pandas' reductions over the window's frame (the definition)."""
    t_s = ts[S.T_S].to_numpy()
    w = ts[(t_s >= warmup) & (t_s < duration)]
    busy, capacity = w[S.BUSY_WORKERS].sum(), w[S.WORKER_CAPACITY].sum()
    return {S.M_DEDUP_MEAN_BYTES: float(w[S.DEDUP_BYTES].mean()),
            S.M_OFFERED_TURNS_PER_S: float(w[S.OFFERED_TURNS_PER_S].mean()),
            S.M_GOODPUT: float(w[S.COMPLETED_TURNS_PER_S].mean()),
            S.M_MEAN_IN_PROGRESS: float(w[S.TURNS_IN_PROGRESS].mean()),
            S.M_CONCURRENT_CALLS_MEAN: float(w[S.CALLS_IN_PROGRESS].mean()),
            S.M_CONCURRENT_CALLS_PEAK: float(w[S.CALLS_IN_PROGRESS].max()),
            S.M_UTILISATION: float(busy) / float(capacity) if capacity else None}


def test_series_metrics_without_a_series_are_pandas_reductions_bit_for_bit() -> None:
    """The window's reductions on numpy (no Series built) give pandas' numbers exactly, on
    a simulated series (int64), a load run's (float, its server gauges all NaN: the means
    NaN, the utilisation undefined), float columns with scattered NaNs and awkward values
    (and all below 0), an all-NaN window, a float32 column, and a nullable column pandas
    reduces itself."""
    rng = np.random.default_rng(3)
    sim = run_once(load_scenario("retry_storm", ["run.duration_s=30", "run.warmup_s=5"]),
                   4).timeseries
    rec = records()
    load = timeseries(rec, rec.duration_s)
    noisy = sim.astype({c: float for c in sim.columns if c != S.T_S})
    for c in noisy.columns.drop(S.T_S):
        x = rng.lognormal(0.0, 3.0, len(noisy)) * rng.choice([1e-9, 1.0, 1e9], len(noisy))
        x[rng.random(len(x)) < 0.3] = math.nan
        noisy[c] = x
    negative = noisy.assign(**{S.CALLS_IN_PROGRESS: -noisy[S.CALLS_IN_PROGRESS].abs()})
    all_nan = noisy.assign(**{S.CALLS_IN_PROGRESS: math.nan, S.DEDUP_BYTES: math.nan})
    narrow = sim.assign(**{S.DEDUP_BYTES: sim[S.DEDUP_BYTES].astype(np.float32) / 3})
    nullable = sim.assign(**{S.BUSY_WORKERS: pd.array([None, *sim[S.BUSY_WORKERS][1:]],
                                                      dtype="Int64")})
    for name, ts in (("sim", sim), ("load", load), ("noisy", noisy), ("negative", negative),
                     ("all-nan", all_nan),
                     ("float32", narrow), ("nullable", nullable)):
        duration = float(ts[S.T_S].max())
        for warmup in (0.0, 2.0, 5.0):
            got = timeseries_metrics(ts, warmup, duration)
            assert repr(got) == repr(_window_figures(ts, warmup, duration)), (name, warmup)
    assert math.isnan(timeseries_metrics(load, 0.0, 4.0)[S.M_DEDUP_MEAN_BYTES])
    assert timeseries_metrics(load, 0.0, 4.0)[S.M_UTILISATION] is None


def test_percentiles_in_one_call_are_each_percentile() -> None:
    """The replication's latency percentiles come from one numpy call per array: each is
    what :func:`percentile` (and :func:`percentile_served`) gives at that q, on arrays with
    ties, NaN, +inf, -inf, one value, none, and q on an exact rank (n = 20, 100, 200)."""
    rng = np.random.default_rng(4)
    qs = (*S.PERCENTILES, 0, 1, 25, 50, 75, 100)
    for n in (0, 1, 2, 3, 7, 20, 33, 100, 200, 999):
        for kind in ("plain", "ties", "holes"):
            x = rng.lognormal(-1.0, 1.0, n)
            if kind == "ties":
                x = np.round(x, 1)
            if kind == "holes" and n:
                x[rng.random(n) < 0.2] = math.nan
                x[rng.random(n) < 0.2] = math.inf
                x[rng.random(n) < 0.05] = -math.inf
            assert percentiles(x, qs) == [percentile(x, q) for q in qs], (n, kind)
            assert percentiles_served(x, qs) == [percentile_served(x, q) for q in qs], (n, kind)
