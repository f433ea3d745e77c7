"""The report's fleet section one safeguard at a time (issue 31: each planted bug of the "fleet
report" area of tests/oneoff/mutate.py fails one of these), from summary dicts: no runs."""

from __future__ import annotations

from typing import Any

import pytest

from rtalab.sim.report.runs import FLEET_SHARE, _fleet_table, _fmt_stats, fleet_figure, fleet_load
from rtalab.sim.shared.fmt import fmt_value


def _summary(n: int) -> dict[str, Any]:
    met: dict[str, Any] = {}
    for r in range(n):
        met[f"fleet.replica_utilisation.r{r}"] = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.7}
        met[f"fleet.replica_requests_share.r{r}"] = {"mean": 1 / n, "ci_low": None,
                                                     "ci_high": None}
    met["fleet.utilisation_imbalance"] = {"mean": 1.1, "ci_low": 1.0, "ci_high": 1.2}
    return {"metrics": met}


def test_replicas_are_in_number_order_past_ten() -> None:
    fleet = fleet_load(_summary(12))
    assert fleet is not None and [r for r, _, _ in fleet["replicas"]] == list(range(12))


def test_a_ci_with_a_bound_missing_is_a_dash() -> None:
    name = "fleet.replica_utilisation.r0"
    assert _fmt_stats({"mean": 0.5, "ci_low": None, "ci_high": 0.7}, name)[1] == "–"
    assert _fmt_stats({"mean": 0.5, "ci_low": 0.4, "ci_high": None}, name)[1] == "–"
    assert _fmt_stats({"mean": 0.5, "ci_low": 0.4, "ci_high": 0.7}, name)[1] != "–"


def test_the_share_column_is_the_requests_share() -> None:
    fleet = fleet_load(_summary(4))
    assert fleet is not None
    assert [s["mean"] for _, _, s in fleet["replicas"]] == [0.25] * 4
    assert [u["mean"] for _, u, _ in fleet["replicas"]] == [0.5] * 4


def test_the_note_gives_the_even_split_as_one_over_n() -> None:
    fleet = fleet_load(_summary(3))
    assert fleet is not None
    table = _fleet_table(fleet)
    assert f"an even split is {fmt_value(1 / 3, FLEET_SHARE)} of the requests" in table["note"]


def test_the_figures_whiskers_are_the_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Utilisation 50 % with CI 40–70 %: whiskers 10 below, 20 above."""
    import matplotlib.axes

    seen: dict[str, Any] = {}
    real = matplotlib.axes.Axes.bar

    def bar(self: Any, x: Any, y: Any, *args: Any, **kw: Any) -> Any:
        seen["yerr"] = kw.get("yerr")
        return real(self, x, y, *args, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    fleet = fleet_load(_summary(2))
    assert fleet is not None
    fleet_figure(fleet)
    lo, hi = seen["yerr"]
    assert lo == pytest.approx([10.0, 10.0]) and hi == pytest.approx([20.0, 20.0])
