"""Request fingerprints in the dedup rule (issue 19): one table, every store, the simulator.

A key reused by a request with another fingerprint is a *conflict* (neither replayed
nor executed), judged before the window's end and before the lease.  The table is
driven through THE rule (:func:`rtalab.sim.shared.dedup_rule.judge`), through the public API of the
memory, SQLite (inline and threaded) and Redis stores (the Redis Lua script, on a real
redis-server) and, for its done rows, through the simulator's store.  Expected verdicts
are written out.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import uuid
from pathlib import Path

import pytest

from rtalab.loadtests.dedup import open_store
from rtalab.loadtests.dedup.base import Claim
from rtalab.sim.model.dedup import DedupStore as SimStore
from rtalab.sim.shared.dedup_rule import Row, judge

C = 1_000_000.0  # the first claim's time (exact in binary)
W, L = 60.0, 120.0
UP = math.inf

# (row state made by owner "A" at C with fingerprint `stored`, claim time, policy,
#  dead owner named by the claimant, presented fingerprint, expected verdict)
CASES: list[tuple[str, str, float, str, str | None, str, str]] = [
    ("in_flight", "x", C + 1, "fail", None, "y", "conflict"),
    ("in_flight", "x", C + 1, "fail", None, "x", "in_flight"),
    ("in_flight", "x", C + 1, "fail", None, "", "in_flight"),  # "" never conflicts
    ("in_flight", "", C + 1, "fail", None, "y", "in_flight"),
    ("in_flight", "x", C + L + 1, "fail", None, "y", "conflict"),  # before the lease
    ("in_flight", "x", C + L + 1, "fail", None, "x", "lost"),
    ("in_flight", "x", C + L, "fail", None, "x", "in_flight"),  # at its lease: not yet stale
    ("in_flight", "x", math.nextafter(C + L, UP), "fail", None, "x", "lost"),
    ("in_flight", "x", C + L + 1, "reclaim", None, "y", "conflict"),
    ("in_flight", "x", C + L + 1, "reclaim", None, "x", "reclaim"),
    ("in_flight", "x", C + 1, "fail", "A", "y", "conflict"),  # a dead owner's key: refused
    ("in_flight", "x", C + 1, "fail", "A", "x", "lost"),
    ("done", "x", C + 1, "fail", None, "y", "conflict"),
    ("done", "x", C + W, "fail", None, "y", "conflict"),  # closed window: still live at c + w
    ("done", "x", math.nextafter(C + W, UP), "fail", None, "y", "insert"),  # expired: new
    ("done", "x", C + 1, "fail", None, "x", "done"),
    ("done", "", C + 1, "fail", None, "y", "done"),
]
BACKENDS = ["memory", "sqlite", "sqlite-thread", "redis"]


def _row(state: str, stored: str) -> Row:
    """The row the store holds for a case."""
    if state == "done":
        return Row("done", "A", C, C, "{}", fingerprint=stored)
    return Row("in_flight", "A", C, fingerprint=stored)


def _verdict(claim: Claim) -> str:
    """A store's claim answer in the rule's words."""
    if claim.state == "new":
        return "reclaim" if claim.stale else "insert"
    if claim.state == "done":
        return "lost" if claim.stale else "done"
    return claim.state


def _url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store URL of a backend (Redis: the session's real redis-server)."""
    if backend == "redis":
        return str(request.getfixturevalue("redis_url"))
    return {"memory": "memory", "sqlite": f"sqlite:///{tmp_path / 'd.db'}",
            "sqlite-thread": f"sqlite:///{tmp_path / 'd.db'}?inline=0"}[backend]


def test_the_rule_table() -> None:
    got = [judge(_row(state, fa), now, W, L, policy, dead, fb)  # type: ignore[arg-type]
           for state, fa, now, policy, dead, fb, _ in CASES]
    assert got == [c[-1] for c in CASES]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_store_follows_the_table(backend: str, request: pytest.FixtureRequest,
                                       tmp_path: Path) -> None:
    url = _url(backend, request, tmp_path)
    ctx = f"fp-{uuid.uuid4().hex}"

    async def main() -> list[str]:
        got = []
        for i, (state, fa, now, policy, dead, fb, _) in enumerate(CASES):
            async with open_store(url, W, lease_s=L, on_stale=policy) as store:
                key = f"case-{i}"
                assert (await store.claim(ctx, key, "A", C, fingerprint=fa)).state == "new"
                if state == "done":
                    assert await store.complete(ctx, key, {"n": i}, C, owner="A")
                got.append(_verdict(await store.claim(ctx, key, "B", now, dead_owner=dead,
                                                      fingerprint=fb)))
        return got

    assert asyncio.run(main()) == [c[-1] for c in CASES]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reclaim_keeps_the_stored_fingerprint(backend: str, request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    """A stale entry reclaimed by a claim that presents no fingerprint (a continuation or
    side-effect guard) still holds the original request's: a reuse of the key by another
    request is refused afterwards."""
    url = _url(backend, request, tmp_path)
    ctx = f"rc-{uuid.uuid4().hex}"

    async def main() -> tuple[str, str, str]:
        async with open_store(url, W, lease_s=L, on_stale="reclaim") as store:
            await store.claim(ctx, "k", "A", C, fingerprint="x")
            taken = await store.claim(ctx, "k", "B", C + L + 1, fingerprint="")
            other = await store.claim(ctx, "k", "D", C + L + 2, fingerprint="y")
            same = await store.claim(ctx, "k", "E", C + L + 3, fingerprint="x")
            return _verdict(taken), other.state, same.state

    assert asyncio.run(main()) == ("reclaim", "conflict", "in_flight")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_outcome_written_into_a_store_that_lost_its_entry_keeps_its_fingerprint(
        backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A held outcome written (no owner) after the store lost the entry -- a Redis without
    persistence restarted empty -- carries the fingerprint of the request that produced it:
    a reuse of the key by another request is still refused, its own retry replayed; an
    entry that already has a fingerprint keeps it."""
    url = _url(backend, request, tmp_path)
    ctx = f"lw-{uuid.uuid4().hex}"

    async def main() -> tuple[str, str, str, str]:
        async with open_store(url, W, lease_s=L) as store:
            assert await store.complete(ctx, "k", {"paid": 10}, C, fingerprint="x")
            other = await store.claim(ctx, "k", "B", C + 1, fingerprint="y")
            same = await store.claim(ctx, "k", "D", C + 2, fingerprint="x")
            await store.claim(ctx, "k2", "A", C, fingerprint="x")
            assert await store.complete(ctx, "k2", {"paid": 10}, C, fingerprint="y")
            kept = await store.claim(ctx, "k2", "B", C + 1, fingerprint="y")
            kept_same = await store.claim(ctx, "k2", "D", C + 1, fingerprint="x")
            return other.state, same.state, kept.state, kept_same.state

    assert asyncio.run(main()) == ("conflict", "done", "conflict", "done")


def test_a_conflict_writes_nothing(tmp_path: Path) -> None:
    """After a refused reuse the original's outcome is still there for its own retries."""
    async def main() -> None:
        async with open_store(f"sqlite:///{tmp_path / 'd.db'}", W) as store:
            await store.claim("c", "g:1", "A", C, fingerprint="pay-10-bob")
            await store.complete("c", "g:1", {"paid": 10}, C, owner="A")
            assert (await store.claim("c", "g:1", "B", C + 1,
                                      fingerprint="pay-5000-mallory")).state == "conflict"
            again = await store.claim("c", "g:1", "C", C + 2, fingerprint="pay-10-bob")
            assert (again.state, again.outcome) == ("done", {"paid": 10})

    asyncio.run(main())


def test_sqlite_file_from_before_fingerprints_is_upgraded(tmp_path: Path) -> None:
    """An existing store file without the column gets it; its rows never conflict."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE dedup (context_id TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL,
            owner TEXT NOT NULL, claimed_at REAL NOT NULL, completed_at REAL, t REAL NOT NULL,
            outcome TEXT, PRIMARY KEY (context_id, key));
        INSERT INTO dedup VALUES ('c', 'g:1', 'done', 'A', 1000000.0, 1000000.0, 1000000.0,
                                  '{"old": true}');
    """)
    db.commit()
    db.close()

    async def main() -> None:
        async with open_store(f"sqlite:///{path}", W) as store:
            old = await store.claim("c", "g:1", "B", C + 1, fingerprint="y")
            assert (old.state, old.outcome) == ("done", {"old": True})
            await store.claim("c", "g:2", "B", C + 1, fingerprint="x")
            assert (await store.claim("c", "g:2", "D", C + 2, fingerprint="y")).state == \
                "conflict"

    asyncio.run(main())


@pytest.mark.parametrize("now, fb, expected", [
    (C + 1, ("t1", 0, True), "conflict"), (C + W, ("t2", 0, False), "conflict"),
    (C + 1, ("t1", 0, False), "done"), (math.nextafter(C + W, UP), ("t1", 0, True), "insert"),
])
def test_simulator_store_follows_the_rule(now: float, fb: tuple, expected: str) -> None:
    """The simulator's store: a stored entry presented another fingerprint is a conflict."""
    store = SimStore("request-guid", window_s=W, entry_bytes=1, peak_from_s=0.0)
    entry = store.open("k", C - 5, 1, fingerprint=("t1", 0, False))
    store.close("k", entry, C, 0, None, 1)
    got = store.lookup("k", now)
    verdict = "insert" if got is None else "conflict" if store.conflicts(got, fb) else "done"
    assert verdict == expected
