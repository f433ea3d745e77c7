"""What the figures draw, read back from the matplotlib objects (not pixels): a per-second
rate is drawn as its 5-s centred mean, worker capacity as steps, a sampled gauge as
sampled; the answers' figures are laid out so their labels are inside the image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rtalab.sim.answers.figure import new_figure, save_figure
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.plots import plot_timeseries

T = list(range(10))
OFFERED = [0, 0, 0, 0, 10, 0, 0, 0, 0, 0]  # one spike: its 5-s centred mean is a plateau of 2
CAPACITY = [4, 4, 4, 2, 2, 2, 4, 4, 4, 4]
BUSY = [1, 3, 0, 2, 2, 1, 4, 0, 1, 3]


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Figure:
    """The figure ``plot_timeseries`` saves for a one-replication series of 10 s."""
    saved: list[Figure] = []
    original = Figure.savefig

    def keep(self: Figure, *args: Any, **kw: Any) -> Any:
        saved.append(self)
        return original(self, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    ts = pd.DataFrame({S.REPLICATION: 0, S.T_S: T, S.OFFERED_TURNS_PER_S: OFFERED,
                       S.WORKER_CAPACITY: CAPACITY, S.BUSY_WORKERS: BUSY})
    plot_timeseries(ts, load_scenario("baseline"), tmp_path / "ts.png")
    assert len(saved) == 1
    return saved[0]


def line(fig: Figure, panel: str, label: str) -> Any:
    ax = next(a for a in fig.axes if a.get_title(loc="left") == panel)
    return next(ln for ln in ax.get_lines() if ln.get_label() == label)


def test_a_rate_is_drawn_as_its_5_s_centred_mean_at_the_bin_centre(drawn: Figure) -> None:
    ln = line(drawn, "Offered load and server work", "offered turns/s (5 s mean)")
    assert list(ln.get_xdata()) == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5]
    assert list(ln.get_ydata()) == [0, 0, 2, 2, 2, 2, 2, 0, 0, 0]
    assert ln.get_drawstyle() == "default"


def test_worker_capacity_is_drawn_as_steps_and_a_gauge_as_sampled(drawn: Figure) -> None:
    cap = line(drawn, "Reasoner workers", "worker capacity")
    assert cap.get_drawstyle() == "steps-post"
    assert list(cap.get_xdata()) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # sampled at t_s + 1
    assert list(cap.get_ydata()) == CAPACITY
    busy = line(drawn, "Reasoner workers", "busy workers")
    assert busy.get_drawstyle() == "default"
    assert list(busy.get_ydata()) == BUSY  # not smoothed


def labels_outside(fig: Figure) -> list[str]:
    """The axis labels and titles of ``fig`` that stick out of the image."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer, box = canvas.get_renderer(), fig.bbox
    out = []
    for ax in fig.axes:
        for text in (ax.xaxis.label, ax.yaxis.label, ax.title):
            b = text.get_window_extent(renderer)
            if text.get_text() and (b.x0 < box.x0 or b.y0 < box.y0 or b.x1 > box.x1
                                    or b.y1 > box.y1):
                out.append(text.get_text())
    return out


def a_small_figure() -> Figure:
    fig = new_figure(4, 2.5)
    ax = fig.add_subplot()
    ax.plot([0, 1], [1e6, 2e6])
    ax.set(ylabel="attempts per turn (ratio)", xlabel="offered load, calls per second",
           title="a title")
    return fig


def test_the_check_sees_labels_cut_off_without_a_layout() -> None:
    assert labels_outside(a_small_figure()) == ["offered load, calls per second",
                                                "attempts per turn (ratio)"]


def test_save_figure_lays_out_so_labels_are_inside(tmp_path: Path) -> None:
    fig = a_small_figure()
    save_figure(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    assert labels_outside(fig) == []
