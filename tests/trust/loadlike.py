"""A load run's records without a load run: a short simulation, its tables in the form
``rtalab.loadtests.loadrun.tables.build_output`` gives them (string ids, no server-side
executions, the time series rebuilt from the client's records)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd

from rtalab.loadtests.loadrun.resample import ID_COLUMNS
from rtalab.loadtests.loadrun.tables import timeseries
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S

WARMUP_S = 5.0


def _strings(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for c in ID_COLUMNS:
        if c in df.columns:
            df[c] = df[c].astype(str).astype(object)
    return df


@cache
def loadlike(preset: str = "lossy_network", duration_s: float = 60.0, seed: int = 3,
             overrides: tuple[str, ...] = ()) -> S.RunRecords:
    """The records of ``preset`` simulated for ``duration_s``, as a load run has them."""
    sc = load_scenario(preset, [f"run.duration_s={duration_s}", f"run.warmup_s={WARMUP_S}",
                                *overrides])
    out = run_once(sc, seed)
    rec = S.RunRecords(attempts=_strings(out.attempts), turns=_strings(out.turns),
                       calls=_strings(out.calls), executions=_strings(out.executions.iloc[:0]),
                       side_effects=_strings(out.side_effects), timeseries=pd.DataFrame(),
                       counters={"end_s": duration_s}, seed=seed, replication=0,
                       duration_s=duration_s)
    return replace(rec, timeseries=timeseries(rec, duration_s))
