"""The simulator's dedup store keeps an outcome exactly as the literal window table says
(tests/data/dedup_windows.py), the same table the reference stores are tested with."""

from __future__ import annotations

import math

import pytest

from rtalab.sim.model.dedup import DedupStore
from tests.data.dedup_windows import WINDOW_CASES
from tests.test_model_components import _req


def _at(completed_s: float, window_s: float, at: float | str) -> float:
    if at == "end":
        return completed_s + window_s
    if at == "after_end":
        return math.nextafter(completed_s + window_s, math.inf)
    return float(at)


@pytest.mark.parametrize(("completed_s", "window_s", "at", "expected"), WINDOW_CASES)
def test_sim_store_follows_the_window_table(completed_s: float, window_s: float,
                                            at: float | str, expected: str) -> None:
    store = DedupStore("request-guid", window_s=window_s, entry_bytes=1, peak_from_s=0.0)
    key = store.key(_req(1))
    e = store.open(key, 0.0, 1)
    store.close(key, e, completed_s, 0, None, 1)
    got = store.lookup(key, _at(completed_s, window_s, at))
    assert ("replayed" if got is e else "new") == expected
