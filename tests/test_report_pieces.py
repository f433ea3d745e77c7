"""The report's pieces and its assembly (rtalab.sim.report.pieces, .render) in process: facts,
numbers, and which folders get the comparison."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from rtalab.sim.report import render
from rtalab.sim.report.pieces import as_float, fact_rows, new_section


def test_facts_keep_zero_and_false_and_leave_out_only_the_empty() -> None:
    rows = fact_rows([("turns", 0), ("chaos", False), ("seed", None), ("note", ""),
                      ("replications", 3)])
    assert rows == [("turns", "0"), ("chaos", "False"), ("replications", "3")]


@pytest.mark.parametrize("v", [math.nan, math.inf, -math.inf, "nan", None, "x"])
def test_as_float_is_none_for_anything_not_a_finite_number(v: Any) -> None:
    assert as_float(v) is None


def test_as_float_reads_numbers_and_their_text() -> None:
    assert (as_float("2.5"), as_float(3), as_float(0)) == (2.5, 3.0, 0.0)


def test_two_runs_or_more_are_compared_with_the_first(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A report of two run folders holds their comparison (and one of one folder none)."""
    compared: list[list[Any]] = []

    def section(path: Path) -> tuple[dict[str, Any], Any]:
        return new_section("run", path.name, path), f"run {path.name}"

    def comparison(runs: list[Any]) -> None:
        compared.append(list(runs))

    monkeypatch.setattr(render, "section", section)
    monkeypatch.setattr(render, "runs_comparison", comparison)
    render.render_report([tmp_path / "a"])
    assert compared == []
    render.render_report([tmp_path / "a", tmp_path / "b"])
    assert compared == [["run a", "run b"]]
    render.render_report([tmp_path / "a", tmp_path / "b"], comparison=False)
    assert len(compared) == 1
