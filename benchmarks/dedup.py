"""Micro-benchmark of a dedup store: claim + complete pairs per second, and their CPU cost.

``loop_cpu_us_per_op`` is the CPU time of the event-loop thread per pair
(``time.thread_time``): what a Reasoner worker's loop pays.  ``cpu_us_per_op``
is the whole process (adds the SQLite thread); with the GIL both compete with
the Reasoner for the same core.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from rtalab.loadtests.dedup import open_store, parse_store_url


async def bench_store_async(url: str, n: int, *, concurrency: int = 1,
                            window_s: float = 300.0) -> dict[str, Any]:
    """Run ``n`` claim+complete pairs on a fresh context, ``concurrency`` at a time."""
    if n < 1 or concurrency < 1:
        raise ValueError("n and concurrency must be >= 1")
    backend = parse_store_url(url)[0]
    ctx = f"bench-{uuid.uuid4().hex[:12]}"
    outcome = {"state": "TASK_STATE_COMPLETED", "chunks": ["a" * 40] * 3, "code": None}
    async with open_store(url, window_s) as store:
        for i in range(min(n, 20)):  # warm-up: connections, statement cache, pages
            await store.claim(f"{ctx}-warm", str(i), "w", time.time())
            await store.complete(f"{ctx}-warm", str(i), outcome, time.time(), owner="w")
        keys = iter(range(n))

        async def worker() -> None:
            for i in keys:
                key = f"g{i}"
                claim = await store.claim(ctx, key, "bench", time.time())
                assert claim.state == "new"
                await store.complete(ctx, key, outcome, time.time(), owner="bench")

        wall0, cpu0, loop0 = time.perf_counter(), time.process_time(), time.thread_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        loop_cpu = time.thread_time() - loop0
    return {"backend": backend, "url": url, "n": n, "concurrency": concurrency,
            "seconds": wall, "ops_per_s": n / wall, "us_per_op": wall / n * 1e6,
            "cpu_us_per_op": cpu / n * 1e6, "loop_cpu_us_per_op": loop_cpu / n * 1e6}


def bench_store(url: str, n: int, *, concurrency: int = 1,
                window_s: float = 300.0) -> dict[str, Any]:
    """Claims+completes per second for the store at ``url`` (runs its own event loop)."""
    return asyncio.run(bench_store_async(url, n, concurrency=concurrency, window_s=window_s))
