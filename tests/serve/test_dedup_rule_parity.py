"""Parity of THE dedup rule (rtalab.sim.shared.dedup_rule, docs/decisions.md D4) and the Redis
store's Lua script.

One table of cases (a stored row or none, the claim's time, window, lease, stale
policy, dead owner) is judged by the Python rule, which the simulator's store
and the memory/SQLite stores call, and by the Redis claim script on a real
redis-server (the row is written into the entry's hash first).  Verdicts must be
identical, including at the exact window and lease boundaries.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from rtalab.loadtests.dedup.redis import RedisStore
from rtalab.sim.shared.dedup_rule import Row, StalePolicy, Verdict, judge

C = 1_000_000.0  # completed_at / claimed_at of the stored rows (exact in binary)
W, L = 60.0, 120.0
UP = math.inf
Case = tuple[Row | None, float, float, float, StalePolicy, str | None]

CASES: list[Case] = [
    (None, C, W, L, "fail", None),
    # done rows: inside, exactly at, just after and long after the closed window
    *[(Row("done", "A", C - 5, C, '{"n": 1}'), now, w, L, "fail", None)
      for w in (W, 0.0, 0.1)
      for now in (C, C + w / 2, C + w, math.nextafter(C + w, UP), C + w + 1)],
    # in-flight rows: inside, exactly at and just after the lease, with either policy
    *[(Row("in_flight", "A", C), now, W, lease, policy, None)
      for lease in (L, 0.25)
      for now in (C, C + lease, math.nextafter(C + lease, UP), C + lease + 5)
      for policy in ("fail", "reclaim")],
    # a dead owner named by the claimant (the owner's, or someone else's)
    *[(Row("in_flight", "A", C), C + 1, W, L, policy, dead)
      for dead in ("A", "B") for policy in ("fail", "reclaim")],
    (Row("done", "A", C - 5, C, '{"n": 1}'), C + 1, W, L, "fail", "A"),  # done: dead irrelevant
]
_LUA_TO_RULE = {"new": "insert", "reclaimed": "reclaim", "done": "done",
                "in_flight": "in_flight", "lost": "lost"}


async def _redis_verdicts(url: str, cases: list[Case]) -> list[Verdict]:
    """The Redis claim script's verdict for each case (each on its own entry)."""
    verdicts: list[Verdict] = []
    for i, (row, now, window, lease, policy, dead) in enumerate(cases):
        store = RedisStore(url, window, lease_s=lease, on_stale=policy)
        await store.start()
        try:
            key = store.entry_key("ctx", f"case-{i}")
            assert store._client is not None
            await store._client.delete(key)
            if row is not None:
                fields = {"s": "d" if row.state == "done" else "i", "o": row.owner,
                          "c": repr(row.claimed_at)}
                if row.state == "done":
                    fields |= {"t": repr(row.completed_at), "r": row.outcome or "{}"}
                await store._client.hset(key, mapping=fields)
            verdict, _, _ = await store._claim_or_peek("claim", "ctx", f"case-{i}", "Z", now,
                                                       dead)
            verdicts.append(_LUA_TO_RULE[verdict])  # type: ignore[arg-type]
        finally:
            await store.close()
    return verdicts


def test_python_rule_and_redis_script_agree(redis_url: str) -> None:
    python = [judge(row, now, w, lease, policy, dead) for row, now, w, lease, policy, dead in CASES]
    redis = asyncio.run(_redis_verdicts(redis_url, CASES))
    mismatches = [(i, CASES[i], p, r) for i, (p, r) in enumerate(zip(python, redis, strict=True))
                  if p != r]
    assert mismatches == []
    # The table covers every verdict, and the boundaries say what D4 says.
    assert set(python) == {"insert", "done", "in_flight", "lost", "reclaim"}
    done = Row("done", "A", C - 5, C, "{}")
    assert judge(done, C + W, W, L, "fail") == "done"  # closed: still replayed at c + w
    assert judge(done, math.nextafter(C + W, UP), W, L, "fail") == "insert"


@pytest.mark.parametrize("now", [C + W, math.nextafter(C + W, UP)])
def test_simulator_store_follows_the_rule(now: float) -> None:
    """The simulator's store keeps (or drops) a stored outcome exactly when the rule does."""
    from rtalab.sim.model.dedup import DedupStore as SimStore

    store = SimStore("request-guid", window_s=W, entry_bytes=1, peak_from_s=0.0)
    entry = store.open("k", C - 5, 1)
    store.close("k", entry, C, 0, None, 1)
    kept = store.lookup("k", now) is entry
    assert kept == (judge(Row("done", "", C - 5, C, "{}"), now, W, L, "fail") == "done")
