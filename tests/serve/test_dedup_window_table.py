"""Every reference store keeps an outcome exactly as the literal window table says
(tests/data/dedup_windows.py), the same table the simulator's store is tested with."""

from __future__ import annotations

import math
import time

import pytest

from rtalab.loadtests.dedup.base import DedupStore
from tests.data.dedup_windows import WINDOW_CASES
from tests.serve.test_dedup_store import run_with, store_url  # noqa: F401  (fixture)


@pytest.mark.parametrize(("completed_s", "window_s", "at", "expected"), WINDOW_CASES)
def test_store_follows_the_window_table(store_url: str, completed_s: float,  # noqa: F811
                                        window_s: float, at: float | str,
                                        expected: str) -> None:
    t0 = float(int(time.time()))  # whole seconds: every offset in the table is exact
    done = t0 + completed_s
    end = done + window_s
    now = end if at == "end" else math.nextafter(end, math.inf) if at == "after_end" \
        else t0 + float(at)

    async def body(s: DedupStore) -> None:
        await s.claim("ctx", "g", "A", t0)
        assert await s.complete("ctx", "g", {"k": 1}, done, owner="A")
        c = await s.claim("ctx", "g", "B", now)
        got = "replayed" if c.state == "done" and c.outcome == {"k": 1} else c.state
        assert got == expected

    run_with(store_url, body, window_s=window_s)
