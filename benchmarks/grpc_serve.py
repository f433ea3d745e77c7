"""``rtalab bench grpc``: the Reasoner's turns/s over gRPC against its JSON-RPC/SSE figure.

One Reasoner subprocess (1 worker, in-memory dedup store in ``request-guid`` mode, the
serve bench's pure-protocol turn: no reasoning time, 3 chunks, no tool) serves both
bindings; the load generator in this process drives ``--concurrency`` closed-loop users
over one binding at a time:

- ``jsonrpc``: the serve bench's raw asyncio HTTP/1.1 SSE client
  (:func:`rtalab.benchmarks.serve_client.drive`);
- ``grpc``: ``grpc.aio`` server-streaming calls on one channel (HTTP/2 streams
  multiplexed), each turn checked like the SSE one (Task first, 3 chunks, COMPLETED).

Rounds alternate the order (``jsonrpc grpc``, ``grpc jsonrpc``, ...) after a warm-up of
both; only the steady state is timed (the ``--turns`` completions after the first
``--concurrency``).  Figures per binding: median turns/s and server CPU per turn (read from
``/proc``, so it holds even when the client competes for the CPUs); the verdict figure is
the median of per-round ratios gRPC / JSON-RPC turns/s (target >= 0.9), printed beside the
CPU ratio (JSON-RPC CPU per turn / gRPC CPU per turn).  Server and client are pinned to
different CPUs when there are two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rtalab.benchmarks.serve import reasoner_args
from rtalab.benchmarks.serve_client import (
    CHUNKS,
    TOKEN,
    Snapshot,
    Window,
    drive,
    event_loop_factory,
    turn_body,
)
from rtalab.benchmarks.serve_cpu import cpu_split, group_cpu_s, pin_process
from rtalab.loadtests.common.procs import LOCALHOST, ManagedProcess, start_reasoner
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI
from rtalab.sim.shared.argtypes import positive_int

TARGET_RATIO = 0.9
TURN_TIMEOUT_S = 30.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab bench grpc``."""
    p.add_argument("--turns", type=positive_int, default=600, help="timed turns per run")
    p.add_argument("--concurrency", type=positive_int, default=20,
                   help="closed-loop users (SSE connections / gRPC streams)")
    p.add_argument("--rounds", type=positive_int, default=3, help="alternating rounds")


def _grpc_address(proc: ManagedProcess) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{proc.url}/.well-known/agent-card.json", timeout=20) as r:
        card = json.loads(r.read())
    return next(i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC")


async def drive_grpc(address: str, turns: int, concurrency: int,
                     window: Window | None = None) -> dict[str, int]:
    """``turns`` turns over ``concurrency`` closed-loop gRPC users on one channel; the
    errors by kind (each completion booked in ``window``)."""
    import grpc
    from a2a.types import SendMessageRequest, TaskState, a2a_pb2_grpc
    from google.protobuf.json_format import ParseDict

    run_id = uuid.uuid4().hex[:12]
    numbers = iter(range(turns))
    errors: dict[str, int] = {}
    md = (("a2a-version", "1.0"), ("a2a-extensions", DEFAULT_EXT_URI),
          ("authorization", f"Bearer {TOKEN}"))
    done = TaskState.TASK_STATE_COMPLETED
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)

        async def user() -> None:
            for i in numbers:
                request = ParseDict(json.loads(turn_body(run_id, i))["params"],
                                    SendMessageRequest())
                t0 = time.perf_counter()
                kinds: dict[str, int] = {}
                final = None
                try:
                    async for sr in stub.SendStreamingMessage(request, metadata=md,
                                                              timeout=TURN_TIMEOUT_S):
                        kind = sr.WhichOneof("payload")
                        kinds[kind] = kinds.get(kind, 0) + 1
                        if kind == "status_update" and sr.status_update.status.state in (
                                done, TaskState.TASK_STATE_FAILED):
                            final = sr.status_update.status.state
                except grpc.aio.AioRpcError as e:
                    errors[e.code().name] = errors.get(e.code().name, 0) + 1
                    continue
                if final != done or kinds.get("task") != 1 or kinds.get(
                        "artifact_update") != CHUNKS:
                    errors["incomplete"] = errors.get("incomplete", 0) + 1
                    continue
                if window is not None:
                    window.completed(time.perf_counter() - t0)

        await asyncio.gather(*(user() for _ in range(min(concurrency, turns))))
    return errors


def measure(binding: str, proc: ManagedProcess, address: str, turns: int,
            concurrency: int) -> dict[str, Any]:
    """One timed run over ``binding``: turns/s, server CPU per turn, errors."""
    def snap() -> Snapshot:
        return Snapshot(time.perf_counter(), group_cpu_s(proc.pid), None, time.process_time())

    window = Window(concurrency, turns, snap)
    total = turns + 2 * concurrency

    async def run() -> dict[str, int]:
        if binding == "grpc":
            return await drive_grpc(address, total, concurrency, window)
        assert proc.port is not None
        _, errors = await drive(LOCALHOST, proc.port, total, concurrency, window=window)
        return dict(errors)

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        errors = runner.run(run())
    if window.start is None or window.end is None:
        raise RuntimeError(f"{binding}: the timed window did not fill (errors: {errors})")
    dt = window.end.t - window.start.t
    cpu = (window.end.server_cpu_s or 0.0) - (window.start.server_cpu_s or 0.0)
    return {"binding": binding, "turns_per_s": turns / dt, "cpu_ms_per_turn": 1000 * cpu / turns,
            "errors": errors}


def run_bench(args: argparse.Namespace) -> int:
    """Start the Reasoner, run the rounds, print the table."""
    split = cpu_split()
    tmp = Path(tempfile.mkdtemp(prefix="rtalab-bench-grpc-"))
    proc = start_reasoner(dedup="memory", log_path=tmp / "reasoner.log",
                          extra_args=[*reasoner_args(args.concurrency), "--dedup-mode",
                                      "request-guid", "--grpc-port", "0"])
    results: dict[str, list[dict[str, Any]]] = {"jsonrpc": [], "grpc": []}
    failed = False
    try:
        if split is not None:
            import os

            pin_process(proc.pid, split[1])
            os.sched_setaffinity(0, split[0])
        address = _grpc_address(proc)
        for b in ("jsonrpc", "grpc"):  # warm-up
            measure(b, proc, address, max(50, args.turns // 5), args.concurrency)
        for rnd in range(args.rounds):
            order = ("jsonrpc", "grpc") if rnd % 2 == 0 else ("grpc", "jsonrpc")
            for b in order:
                r = measure(b, proc, address, args.turns, args.concurrency)
                results[b].append(r)
                failed = failed or bool(r["errors"])
                print(f"round {rnd + 1}/{args.rounds} {b:8s} {r['turns_per_s']:7.0f} turns/s "
                      f"{r['cpu_ms_per_turn']:6.2f} ms CPU/turn errors={r['errors'] or 0}",
                      file=sys.stderr)
    finally:
        proc.stop()
    ratios = [g["turns_per_s"] / j["turns_per_s"] for j, g in zip(results["jsonrpc"],
                                                                  results["grpc"], strict=True)]
    cpu_ratios = [j["cpu_ms_per_turn"] / g["cpu_ms_per_turn"] for j, g in
                  zip(results["jsonrpc"], results["grpc"], strict=True) if g["cpu_ms_per_turn"]]
    med = {b: (statistics.median(r["turns_per_s"] for r in rs),
               statistics.median(r["cpu_ms_per_turn"] for r in rs)) for b, rs in results.items()}
    print(f"{'binding':8s} {'turns/s':>9s} {'server ms CPU/turn':>19s}   (concurrency "
          f"{args.concurrency}, {args.turns} timed turns x {args.rounds} rounds)")
    for b, (rate, cpu) in med.items():
        print(f"{b:8s} {rate:9.0f} {cpu:19.2f}")
    ratio = statistics.median(ratios)
    print(f"grpc / jsonrpc turns/s: {ratio:.2f}x [rounds {min(ratios):.2f}..{max(ratios):.2f}] "
          f"(target >= {TARGET_RATIO}x: {'PASS' if ratio >= TARGET_RATIO else 'WARN'}); "
          f"CPU-per-turn ratio jsonrpc / grpc {statistics.median(cpu_ratios):.2f}x")
    return 1 if failed else 0
