"""The bootstrap's fast draws (:mod:`rtalab.loadtests.loadrun.resample`) change nothing but speed.

A short simulation's tables in a load run's form (string ids, as ``build_output`` gives
them): the identity draw gives every metric of the run itself, bit for bit; a random draw
gives what the plain construction gives (every row of each drawn call, by a merge, each
copy with ids of its own); ids shared by two calls stay shared in first copies."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache

import numpy as np
import pandas as pd

from rtalab.loadtests.loadrun.resample import ID_COLUMNS, TABLES, CallResampler
from rtalab.loadtests.loadrun.tables import timeseries
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.summary import replication_metrics

WARMUP_S = 5.0


@cache
def records(preset: str = "lossy_network", duration_s: float = 40.0) -> S.RunRecords:
    sc = load_scenario(preset, [f"run.duration_s={duration_s}", f"run.warmup_s={WARMUP_S}"])
    out = run_once(sc, 3)

    def strings(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        for c in ID_COLUMNS:
            if c in df.columns:
                df[c] = ("x" + df[c].astype(str)).astype(object)
        for c in (S.OUTCOME, S.END_REASON, S.ERROR_CODE, S.DISPOSITION, S.PHASE):
            if c in df.columns:  # names as strings, missing as None (the ledger's form)
                df[c] = df[c].astype(object).where(df[c].notna(), None)
        return df

    rec = S.RunRecords(**{t: strings(getattr(out, t)) for t in TABLES},
                       timeseries=pd.DataFrame(), counters={"end_s": duration_s}, seed=3,
                       replication=0, duration_s=duration_s)
    return replace(rec, timeseries=timeseries(rec, duration_s))


def merged_draw(out: S.RunRecords, draw: np.ndarray) -> S.RunRecords:
    """The plain construction: a merge of each table on the drawn calls, copy ``j`` of a call
    with ids suffixed ``#j``."""
    calls = out.calls[S.CALL_ID].to_numpy()
    picked = calls[draw]
    copy = pd.Series(picked).groupby(picked).cumcount().to_numpy()
    keyed = pd.DataFrame({"_k": picked, "_copy": copy, "_order": np.arange(len(picked))})
    first = keyed.drop_duplicates("_k").set_index("_k")["_order"]
    keyed["_call_order"] = keyed["_k"].map(first)
    tables = {}
    for name in TABLES:
        df = getattr(out, name)
        m = keyed.merge(df.assign(_k=df[S.CALL_ID], _row=np.arange(len(df))), on="_k")
        m = m.sort_values(["_call_order", "_copy", "_row"], kind="stable")
        for c in ID_COLUMNS:
            if c in m.columns:
                m[c] = m[c].astype(str) + "#" + m["_copy"].astype(str)
        tables[name] = m[df.columns].reset_index(drop=True)
    new = replace(out, **tables)
    return replace(new, timeseries=timeseries(new, out.duration_s))


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    differ = {k: (a[k], b[k]) for k in a
              if not (a[k] == b[k] or (a[k] is not None and b[k] is not None
                                       and math.isnan(a[k]) and math.isnan(b[k])))}
    assert not differ, differ


def test_the_identity_draw_is_the_run_itself() -> None:
    out = records()
    rs = CallResampler(out, timeseries)
    assert_same(replication_metrics(rs.draw(np.arange(len(out.calls))), WARMUP_S),
                replication_metrics(out, WARMUP_S))


def test_a_random_draw_gives_what_a_merge_gives() -> None:
    out = records()
    assert len(out.side_effects) and len(out.executions)  # every table is exercised
    rs = CallResampler(out, timeseries)
    rng = np.random.default_rng(7)
    for _ in range(3):
        draw = rng.integers(0, len(out.calls), len(out.calls))
        assert np.bincount(draw).max() >= 2  # calls drawn twice: their copies are new calls
        assert_same(replication_metrics(rs.draw(draw), WARMUP_S),
                    replication_metrics(merged_draw(out, draw), WARMUP_S))


def test_copies_get_ids_of_their_own_and_first_copies_keep_shared_ones() -> None:
    out = records()
    rs = CallResampler(out, timeseries)
    draw = np.array([0, 0, 1])  # call 0 twice, call 1 once
    new = rs.draw(draw)
    assert len(new.calls) == 3 and new.calls[S.CALL_ID].nunique() == 3
    turns = new.turns
    per_call = turns.groupby(S.CALL_ID)[S.INTERACTION_ID].apply(frozenset)
    assert len(set().union(*per_call)) == sum(len(s) for s in per_call)  # no id shared
    # a task id shared by two calls (a server answering two calls with one task) stays shared
    shared = out.attempts.copy()
    a0 = shared.index[shared[S.CALL_ID].eq(out.calls[S.CALL_ID].iloc[0])][0]
    a1 = shared.index[shared[S.CALL_ID].eq(out.calls[S.CALL_ID].iloc[1])][0]
    shared.loc[a1, S.TASK_ID] = shared.loc[a0, S.TASK_ID]
    rs2 = CallResampler(replace(out, attempts=shared), timeseries)
    tasks = rs2.draw(np.array([0, 1])).attempts.groupby(S.CALL_ID)[S.TASK_ID].apply(set)
    assert set.intersection(*tasks)
