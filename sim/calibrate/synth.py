"""Synthetic observations with known truth: a FIFO multi-server queue per server process.

Used by the tests (recovery within stated tolerances), the 1M-row benchmark and the docs.
Each attempt: Poisson send times at ``rate_per_s``; uplink = ``intake_s`` + half the wire
time; a process chosen at random; FIFO queue on that process's ``workers_per_process``
workers; service = reasoning (+ tool on side-effect turns); first chunk
``first_chunk_s`` after the worker is freed; ``chunks`` chunks every ``chunk_s``; each
execution fails with ``error_share`` (code ``internal``) after its service.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from math import gamma
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from rtalab.sim.calibrate.observations import Observations


@dataclass(frozen=True)
class Truth:
    """The deployment the synthetic observations come from."""

    rate_per_s: float = 8.0
    n: int = 20_000
    processes: int = 2
    workers_per_process: int = 4
    reasoning: str = "gamma"  # gamma | lognormal | weibull | bimodal
    mean_s: float = 0.5
    cv: float = 0.5
    tool_mean_s: float = 0.3
    side_effect_share: float = 0.3
    first_chunk_s: float = 0.05
    chunks: int = 3
    chunk_s: float = 0.2
    wire_s: float = 0.004  # network round trip (both directions)
    intake_s: float = 0.002
    error_share: float = 0.02
    uplink_jitter_s: float = 0.0  # mean of an exponential extra uplink delay per request
    shared_pool: bool = False  # one pool of processes x workers_per_process for all processes
    queue_overhead_s: float = 0.0  # mean of an exponential cost of taking a worker (a broker)

    def draw_reasoning(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` reasoning times of the true law."""
        m, cv = self.mean_s, self.cv
        if self.reasoning == "gamma":
            k = 1 / cv**2
            return rng.gamma(k, m / k, n)
        if self.reasoning == "lognormal":
            s2 = np.log1p(cv**2)
            return rng.lognormal(np.log(m) - s2 / 2, np.sqrt(s2), n)
        if self.reasoning == "weibull":
            # shape 2 (cv ~0.52) scaled to the mean
            return m / gamma(1.5) * rng.weibull(2.0, n)
        # bimodal: short answers and long ones, no family fits
        short = rng.random(n) < 0.6
        return np.where(short, rng.normal(0.3 * m / 0.76, 0.02, n),
                        rng.normal(1.5 * m / 0.76, 0.05, n)).clip(0.01)


def synth_attempts(truth: Truth, seed: int = 0) -> pd.DataFrame:
    """The attempt rows (observation columns) of the synthetic deployment."""
    rng = np.random.default_rng(seed)
    n = truth.n
    send = np.cumsum(rng.exponential(1 / truth.rate_per_s, n))
    side = rng.random(n) < truth.side_effect_share
    svc = truth.draw_reasoning(rng, n) + np.where(side, rng.exponential(truth.tool_mean_s, n), 0)
    proc = rng.integers(truth.processes, size=n)
    half = truth.wire_s / 2
    arrive = send + half + truth.intake_s
    if truth.uplink_jitter_s > 0:  # the client cannot see it: its clock of the service jitters
        arrive = arrive + rng.exponential(truth.uplink_jitter_s, n)
    start = np.empty(n)
    if truth.shared_pool:  # one queue in front of every worker (a capacity broker)
        pool = [0.0] * (truth.workers_per_process * truth.processes)
        free = [pool] * truth.processes
    else:
        free = [[0.0] * truth.workers_per_process for _ in range(truth.processes)]
    for i in range(n):  # FIFO: in arrival order, the earliest free worker of the pool
        h = free[proc[i]]
        t = heapq.heappop(h)
        start[i] = max(arrive[i], t)
        heapq.heappush(h, start[i] + svc[i])
    if truth.queue_overhead_s > 0:  # the grant reaches the process later: service starts later
        start = start + rng.exponential(truth.queue_overhead_s, n)
    wait = start - arrive
    failed = rng.random(n) < truth.error_share
    first_resp = start + half
    chunk = start + svc + truth.first_chunk_s + half
    end = chunk + (truth.chunks - 1) * truth.chunk_s
    return pd.DataFrame({
        "send_s": send, "first_response_s": first_resp,
        "first_chunk_s": np.where(failed, np.nan, chunk),
        "end_s": np.where(failed, start + svc + half, end),
        "outcome": np.where(failed, "failed", "completed"),
        "error_code": np.where(failed, "internal", ""),
        "retry_after_ms": np.nan, "side_effect": side, "handoff": False,
        "worker": proc.astype(str),
        "server_intake_s": truth.intake_s, "server_queue_wait_s": wait,
        "server_service_s": svc,
        "server_first_chunk_delay_s": np.where(failed, np.nan, truth.first_chunk_s)})


def synth_observations(truth: Truth, seed: int = 0, server_timings: bool = True) -> Observations:
    """:class:`Observations` of the synthetic deployment (optionally without server timings)."""
    a = synth_attempts(truth, seed)
    if not server_timings:
        a = a.drop(columns=[c for c in a.columns if c.startswith("server_")])
    rng = np.random.default_rng(seed + 1)
    m = min(5000, truth.n)
    gaps = truth.chunk_s + rng.normal(0, 0.001, m * (truth.chunks - 1))
    return Observations(attempts=a, duration_s=float(a["send_s"].max()),
                        calls_per_s=truth.rate_per_s,
                        chunk_gaps_s=gaps, chunks=np.full(m, truth.chunks),
                        source=f"synthetic {truth}")


def write_run_dir(truth: Truth, run_dir: Path, seed: int = 0) -> Path:
    """A minimal load-run folder (``ledger/attempts.jsonl``, ``events.jsonl``) of the truth."""
    led = Path(run_dir) / "ledger"
    led.mkdir(parents=True, exist_ok=True)
    a = synth_attempts(truth, seed)
    a["call_id"] = [f"c{i // 4}" for i in range(len(a))]
    a.rename(columns={"worker": "server_worker"}).to_json(
        led / "attempts.jsonl", orient="records", lines=True)
    with open(led / "events.jsonl", "w", encoding="utf-8") as f:
        for i, row in enumerate(a.head(2000).itertuples()):
            if row.outcome != "completed":
                continue
            first_chunk_s = cast("float", row.first_chunk_s)
            for k in range(truth.chunks):
                f.write(json.dumps({"attempt_key": f"a{i}", "kind": "artifact",
                                    "recv_s": first_chunk_s + k * truth.chunk_s}) + "\n")
    (Path(run_dir) / "meta.json").write_text(json.dumps(
        {"kind": "load", "duration_s": float(a["send_s"].max())}))
    return Path(run_dir)
