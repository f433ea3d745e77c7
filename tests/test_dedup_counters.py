"""The per-process claim counters of every backend (``PollingStore``): a stale claim is
booked as lost or reclaimed, and ``hits`` counts claims that found the key known."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rtalab.loadtests.dedup import open_store


@pytest.fixture(params=["memory", "sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dedup.db'}"
    return str(request.getfixturevalue("redis_url"))


def _counters(url: str, on_stale: str) -> tuple[int, dict[str, object]]:
    """Claim a key, claim it again past its 1-s lease (stale), then claim it once more."""
    t0 = time.time()

    async def main() -> tuple[int, dict[str, object]]:
        async with open_store(url, 300.0, lease_s=1.0, on_stale=on_stale) as s:
            first = await s.claim("ctx", "k", "A", t0)
            second = await s.claim("ctx", "k", "B", t0 + 5.0)
            third = await s.claim("ctx", "k", "C", t0 + 5.1)
            assert (first.state, second.stale, third.stale) == ("new", True, False)
            st = await s.stats()
            keys = ("claims", "claim_new", "claim_done", "claim_in_flight", "stale_lost",
                    "stale_reclaimed")
            return st.hits, {k: st.extra.get(k, 0) for k in keys}

    return asyncio.run(main())


def test_a_stale_claim_under_fail_is_booked_lost(url: str) -> None:
    hits, counters = _counters(url, "fail")
    # lost: the second and third claims both get the lost outcome (done)
    assert counters == {"claims": 3, "claim_new": 1, "claim_done": 2, "claim_in_flight": 0,
                        "stale_lost": 1, "stale_reclaimed": 0}
    assert hits == 2


def test_a_stale_claim_under_reclaim_is_booked_reclaimed(url: str) -> None:
    hits, counters = _counters(url, "reclaim")
    # B takes the key over (a new claim for B, stale); C finds B's claim in flight
    assert counters == {"claims": 3, "claim_new": 2, "claim_done": 0, "claim_in_flight": 1,
                        "stale_lost": 0, "stale_reclaimed": 1}
    assert hits == 1
