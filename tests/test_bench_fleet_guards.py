"""``rtalab bench fleet``'s executor comparison, with the timing faked (issue 31: each planted
bug of the "fleet bench" area of tests/oneoff/mutate.py fails one of these): no Dask cluster,
no runs -- the line it prints and what ``make bench`` reads from it."""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Iterator

import pytest

import rtalab.benchmarks.fleet as F
from rtalab.benchmarks import run as R

HOUR = ("fleet hour: 1,000 calls (4,000 turns) CPU 1.0 s, wall 2.0 s (target <= 180 s) "
        "peak RSS 100 MiB (target <= 1.5 GiB)\n")


def _executors(monkeypatch: pytest.MonkeyPatch, times: dict[str, Iterator[float]],
               summaries: dict[str, str]) -> str:
    monkeypatch.setitem(sys.modules, "distributed", types.ModuleType("distributed"))

    def fake(duration_s: float, replications: int, seed: int, *, processes: int | None = None,
             dask: str | None = None) -> tuple[float, str]:
        name = "dask" if dask else "processes"
        return next(times[name]), summaries[name]

    monkeypatch.setattr(F, "time_parts", fake)
    lines: list[str] = []
    F._executors(argparse.Namespace(parts_duration=1800.0, seed=1), lines.append)
    [line] = lines
    return line


def test_the_best_of_each_and_dask_speed_as_processes_over_dask(
        monkeypatch: pytest.MonkeyPatch) -> None:
    line = _executors(monkeypatch, {"processes": iter([8.0, 6.0]), "dask": iter([9.0, 7.5])},
                      {"processes": "S", "dask": "S"})
    assert "2 processes 6.00 s, Dask LocalCluster(2) 7.50 s, summaries identical" in line
    assert "Dask / processes 0.80 x (target >= 0.85 x)" in line
    [*_, dask] = R.parse_fleet(HOUR + line, "c")
    assert (dask.value, dask.verdict) == (0.8, "WARN")


def test_executors_that_disagree_are_different_and_read_as_zero(
        monkeypatch: pytest.MonkeyPatch) -> None:
    line = _executors(monkeypatch, {"processes": iter([6.0, 6.0]), "dask": iter([5.0, 5.0])},
                      {"processes": "A", "dask": "B"})
    assert "summaries DIFFERENT" in line
    [*_, dask] = R.parse_fleet(HOUR + line, "c")
    assert (dask.value, dask.verdict) == (0.0, "WARN")
