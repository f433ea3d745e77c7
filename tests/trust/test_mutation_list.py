"""The mutation list of tests/oneoff/mutate.py stays valid as the code moves: every old
text occurs exactly once in its file, every test file exists."""

from __future__ import annotations

from tests.oneoff.mutate import MUTATIONS, Mutation, validate


def test_every_mutation_applies_exactly_once() -> None:
    assert validate() == []


def test_validate_reports_a_stale_mutation() -> None:
    stale = Mutation("x", "sim/shared/stats.py", "this text is nowhere", "y", (), "stale")
    assert validate((stale,)) == ["sim/shared/stats.py: old text found 0 times (stale)"]


def test_every_area_has_mutations() -> None:
    areas = {m.area for m in MUTATIONS}
    assert {"intervals", "multiple comparisons", "tune", "calibration"} <= areas
