"""Dedup stores, the cases last round's planted bugs slipped through, on every backend:
the window runs from the completion (not the claim), an in-flight entry outlives the
window until its lease, identifiers with ':' never collide, Redis keeps a done entry for
the whole window."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rtalab.loadtests.dedup import DedupStore
from tests.serve.test_dedup_store import BACKENDS, _url, run_with


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _url(request.param, request, tmp_path)


def test_the_window_runs_from_the_completion_not_the_claim(store_url: str) -> None:
    t0 = float(int(time.time()))
    window = 60.0

    async def body(s: DedupStore) -> None:
        assert (await s.claim("ctx", "g", "A", t0)).state == "new"
        assert await s.complete("ctx", "g", {"k": 1}, t0 + 100, owner="A")  # a long turn
        c = await s.claim("ctx", "g", "B", t0 + 150)  # 50 s after the completion
        assert (c.state, c.outcome) == ("done", {"k": 1})
        assert (await s.claim("ctx", "g", "B", t0 + 161)).state == "new"

    run_with(store_url, body, window_s=window)


def test_an_in_flight_entry_outlives_the_window_until_its_lease(store_url: str) -> None:
    """window 60 s, lease 120 s: an owner still running at 100 s is neither purged nor
    replaced; past lease + window the purge may drop it."""
    t0 = float(int(time.time()))

    async def body(s: DedupStore) -> None:
        assert (await s.claim("ctx", "g", "A", t0)).state == "new"
        await s.purge(t0 + 100)
        c = await s.claim("ctx", "g", "B", t0 + 100)
        assert (c.state, c.owner) == ("in_flight", "A")

    run_with(store_url, body, window_s=60.0, lease_s=120.0)


def test_identifiers_with_colons_never_collide(store_url: str) -> None:
    t0 = time.time()

    async def body(s: DedupStore) -> None:
        assert (await s.claim("a:b", "c", "A", t0)).state == "new"
        assert (await s.claim("a", "b:c", "B", t0)).state == "new"  # another entry
        assert (await s.claim("a:b", "c", "C", t0)).state == "in_flight"
        assert await s.bind("x:y", "alice", t0) == "alice"
        assert await s.bind("x", "bob", t0) == "bob"

    run_with(store_url, body)


def test_redis_keeps_a_done_entry_for_the_whole_window(redis_url: str) -> None:
    window = 60.0

    async def body(s: DedupStore) -> None:
        import redis.asyncio as aioredis

        t = time.time()
        await s.claim("ctx", "g", "A", t)
        await s.complete("ctx", "g", {"k": 1}, t, owner="A")
        client = aioredis.Redis.from_url(redis_url)
        try:
            ttl_ms = await client.pttl(s.entry_key("ctx", "g"))  # type: ignore[attr-defined]
        finally:
            await client.aclose()
        assert 0.9 * window * 1000 < ttl_ms <= window * 1000

    run_with(redis_url, body, window_s=window)


def test_a_purge_at_the_windows_last_instant_keeps_the_entry(store_url: str) -> None:
    """Closed window (rtalab.sim.shared.dedup_rule): an outcome completed at t is replayed at
    t + window, so a purge at that instant must not drop it; one after it may."""
    t0 = float(int(time.time()))

    async def body(s: DedupStore) -> None:
        await s.claim("ctx", "g", "A", t0)
        assert await s.complete("ctx", "g", {"k": 1}, t0, owner="A")
        await s.purge(t0 + 60.0)
        c = await s.claim("ctx", "g", "B", t0 + 60.0)
        assert (c.state, c.outcome) == ("done", {"k": 1})

    run_with(store_url, body, window_s=60.0)


async def _pttl(redis_url: str, key: str) -> int:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        return int(await client.pttl(key))
    finally:
        await client.aclose()


def test_redis_ttls_of_in_flight_and_lost_entries(redis_url: str) -> None:
    """window 60 s, lease 120 s: an in-flight entry lives lease + window (180 s), a lost
    outcome (the owner's lease ran out, policy fail) the window (60 s): neither is kept
    forever nor dropped early."""
    async def body(s: DedupStore) -> None:
        t = time.time()
        await s.claim("ctx", "g", "A", t)
        ttl = await _pttl(redis_url, s.entry_key("ctx", "g"))  # type: ignore[attr-defined]
        assert 0.9 * 180_000 < ttl <= 180_000
        lost = await s.claim("ctx", "g", "B", t + 121.0)
        assert (lost.state, lost.stale) == ("done", True)
        ttl = await _pttl(redis_url, s.entry_key("ctx", "g"))  # type: ignore[attr-defined]
        assert 0.9 * 60_000 < ttl <= 60_000

    run_with(redis_url, body, window_s=60.0, lease_s=120.0, on_stale="fail")


def test_redis_purge_keeps_index_entries_until_lease_plus_window(redis_url: str) -> None:
    """The in-flight index is trimmed of owners gone past lease + window (180 s), not
    past the lease alone."""
    async def body(s: DedupStore) -> None:
        t = float(int(time.time()))
        await s.claim("ctx", "g", "A", t)
        assert await s.purge(t + 150.0) == 0
        assert (await s.stats()).in_flight == 1
        assert await s.purge(t + 181.0) == 1

    run_with(redis_url, body, window_s=60.0, lease_s=120.0)
