"""``rtalab serve bench``: Reasoner turns/s and server CPU per turn for each dedup store.

What is measured.  One Reasoner subprocess per store (1 uvicorn worker each, on
a free port of 127.0.0.1), all alive for the whole run:

- ``none``: ``--dedup memory --dedup-mode none``: no dedup and no shared
  session bindings, the baseline;
- ``sqlite``: ``--dedup sqlite:///<temp>/dedup.sqlite`` (mode ``request-guid``);
- ``redis``: ``--dedup redis://127.0.0.1:P/0`` on a throw-away ``redis-server``.

Every turn is a ``SendStreamingMessage`` with a fresh turnId and requestGuid,
``sideEffect: false`` and the profile negotiated.  Turns come in calls: each
connection sends ``--turns-per-context`` consecutive turns on one new
contextId (default: the ``baseline`` preset's ``[workload].turns_per_call``,
4), so a shared store records one session binding per call plus a dedup claim
and completion per turn, as in the load tests; ``--turns-per-context 1`` opens
a new context every turn (one binding per turn: the worst case).  The server
answers SUBMITTED, the ``progress`` directive, 3 spoken chunks and COMPLETED,
with no reasoning time, no chunk cadence and no tool call (``--set``), so what
differs between the servers is the dedup store's work.  Anything else (a
FAILED status, a JSON-RPC error, a missing chunk, a broken connection, a
timeout) is counted as an error; a run with errors exits 1.

How.  The load generator runs in this process: ``--concurrency`` keep-alive
HTTP/1.1 connections, each a closed loop of turns, written as raw asyncio
streams (on uvloop when installed) so the client costs little CPU (~0.3 ms per
turn against the server's ~4).  Only the steady state is timed: the
``--turns`` completions after the first ``--concurrency`` ones, while every
connection is still busy.  Client and servers share the machine's CPUs, so
the stores are interleaved in rounds, in alternating order (``none sqlite
redis``, ``redis sqlite none``, ...) after a warm-up of each server; a figure
is the median over rounds with its spread, and a ratio is the median of
per-round ratios (each store against the ``none`` run of the same round),
which cancels slow drifts of the machine (and, with the alternation, the
advantage of a fixed place in the round).

Besides throughput, the CPU time of the server process (and ``redis-server``)
per turn is read from ``/proc/<pid>/stat`` (10 ms ticks).  It does not depend
on the share of the CPUs the server got, so it is the fairer figure when the
load generator or other programs compete; it still moves with the speed of
the core itself (co-tenants of a VM, SMT siblings), which the interleaving
averages out.

Latency is the time from writing the request to reading the terminal event.
At ``--concurrency`` the closed loop saturates the server, so most of that
latency is queueing (Little's law: concurrency ÷ throughput) and a store's
added p99 there mostly restates its throughput and the machine's noise; each
round therefore also runs a probe of ``--probe-turns`` turns at concurrency 1,
whose added p50/p99 latency (and CPU per turn) is the store's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.procs import LOCALHOST, ManagedProcess, ProcessError, start_reasoner, start_redis
from loadtests.wireclient import END_STATES, EVENT_KINDS, EXT
from sim.benchutil import Measurement, host_line, warn_if_busy, warn_unstable_all

STORES: tuple[str, ...] = ("none", "sqlite", "redis")
RATIO_TARGET = 0.9  # store throughput (and CPU-per-turn equivalent) >= 0.9 x none
CHUNKS = 3
# Per store and round: ~1 minute in all with the defaults (2 cores).  Many short rounds
# rather than a few long ones: on a shared machine the per-round ratio scatters by
# 10-15% (bursts of other programs) and rounds of 400 and 600 turns scattered alike,
# so in the same time the median of 10 ratios has about half the variance of the
# median of 5.
DEFAULT_TURNS = 300
DEFAULT_ROUNDS = 10
DEFAULT_CONCURRENCY = 50
DEFAULT_WARMUP = 300
DEFAULT_PROBE_TURNS = 50
BASELINE_PRESET = "baseline"  # its [workload].turns_per_call is the default turns per context
PROBE_SKIP = 5  # untimed turns before a probe
TURN_TIMEOUT_S = 30.0
MIN_CPU_S = 1.0  # CPU time below which a per-turn CPU figure is too coarse to print (10 ms ticks)
MIN_RATE_PER_S = 5.0  # a measurement slower than this is aborted (bounds the run's duration)
TOKEN, PRINCIPAL = "rtalab-bench-token", "bench"
UNSTABLE_REMEDY = ("Close other programs (other VMs on the host count too), or use more "
                   "--rounds or a larger --turns.")
SLOW_REMEDY = ("remedy: time the store's calls inside the server with time.thread_time() "
               "(SqliteStore.claim/complete/bind, SessionRegistry.admit, "
               "ProfileRequestHandler._settle; cProfile cannot dump: uvicorn re-raises SIGTERM), "
               "check that the -wal file stays small, and count store transactions per turn.")


# --------------------------------------------------------------------------- records


@dataclass
class Sample:
    """One measurement: ``turns`` turns against one store in one round."""

    store: str
    round: int
    turns: int
    wall_s: float
    server_cpu_s: float | None  # the Reasoner's process group
    helper_cpu_s: float | None  # redis-server (redis only)
    client_cpu_s: float
    latencies_s: list[float]  # the timed turns at --concurrency
    probe_latencies_s: list[float] = field(default_factory=list)  # the probe at concurrency 1
    probe_server_cpu_s: float | None = None  # the Reasoner (+ store server) during the probe
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def turns_per_s(self) -> float:
        """Completed turns per second of wall time."""
        return len(self.latencies_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def server_cpu_per_turn_s(self) -> float | None:
        """CPU seconds of the Reasoner plus its store server per completed turn."""
        if self.server_cpu_s is None or not self.latencies_s:
            return None
        return (self.server_cpu_s + (self.helper_cpu_s or 0.0)) / len(self.latencies_s)

    def as_json(self) -> dict[str, Any]:
        """Raw figures of this sample (latencies in ms)."""
        return {"store": self.store, "round": self.round, "turns": self.turns,
                "completed": len(self.latencies_s), "errors": dict(self.errors),
                "wall_s": self.wall_s, "turns_per_s": self.turns_per_s,
                "server_cpu_s": self.server_cpu_s, "store_server_cpu_s": self.helper_cpu_s,
                "client_cpu_s": self.client_cpu_s,
                "latencies_ms": [round(x * 1e3, 3) for x in self.latencies_s],
                "probe_server_cpu_s": self.probe_server_cpu_s,
                "probe_latencies_ms": [round(x * 1e3, 3) for x in self.probe_latencies_s]}


@dataclass
class StoreSummary:
    """The samples of one store, summarised across rounds."""

    store: str
    samples: list[Sample]

    @property
    def throughput(self) -> Measurement:
        """Turns/s per round."""
        return Measurement(f"{self.store} turns/s", "turns",
                           tuple(s.turns_per_s for s in self.samples), self.samples[0].turns)

    @property
    def cpu_ms_per_turn(self) -> list[float]:
        """Server CPU milliseconds per turn, per round (empty where /proc is unavailable)."""
        values = [s.server_cpu_per_turn_s for s in self.samples]
        return [v * 1e3 for v in values if v is not None]

    @property
    def cpu_ms(self) -> float | None:
        """Median server CPU ms per turn."""
        v = self.cpu_ms_per_turn
        return statistics.median(v) if v else None

    def percentile_ms(self, q: float, probe: bool = False) -> float:
        """The ``q`` quantile (0..1, nearest rank) in ms of the turn latency at
        ``--concurrency`` (or of the concurrency-1 probe), all rounds pooled; NaN if none."""
        lat = sorted(x for s in self.samples
                     for x in (s.probe_latencies_s if probe else s.latencies_s))
        if not lat:
            return float("nan")
        return lat[min(len(lat) - 1, max(0, round(q * len(lat)) - 1))] * 1e3

    @property
    def errors(self) -> Counter[str]:
        """Errors of every round, by kind."""
        total: Counter[str] = Counter()
        for s in self.samples:
            total.update(s.errors)
        return total

    @property
    def client_cpu_ms(self) -> float:
        """Median load-generator CPU ms per turn."""
        return statistics.median(s.client_cpu_s / max(1, len(s.latencies_s)) * 1e3
                                 for s in self.samples)

    def as_json(self) -> dict[str, Any]:
        """The summary figures."""
        m = self.throughput
        return {"turns_per_s_median": m.median, "turns_per_s": list(m.rates),
                "spread": m.spread, "server_cpu_ms_per_turn_median": self.cpu_ms,
                "server_cpu_ms_per_turn": self.cpu_ms_per_turn,
                "p50_ms": self.percentile_ms(0.50), "p99_ms": self.percentile_ms(0.99),
                "probe_p50_ms": self.percentile_ms(0.50, probe=True),
                "probe_p99_ms": self.percentile_ms(0.99, probe=True),
                "probe_server_cpu_ms_per_turn": self.probe_cpu_ms,
                "errors": sum(self.errors.values()), "client_cpu_ms_per_turn": self.client_cpu_ms}

    @property
    def probe_cpu_ms(self) -> float | None:
        """Server CPU ms per turn during the concurrency-1 probes (all rounds); None if they
        used less than :data:`MIN_CPU_S` (the /proc clock ticks every 10 ms)."""
        cpu = [s.probe_server_cpu_s for s in self.samples if s.probe_server_cpu_s is not None]
        n = sum(len(s.probe_latencies_s) for s in self.samples
                if s.probe_server_cpu_s is not None)
        return sum(cpu) / n * 1e3 if n and sum(cpu) >= MIN_CPU_S else None


# --------------------------------------------------------------------------- CPU time


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_cpu_s(pgid: int) -> float | None:
    """User + system CPU seconds of every live process in process group ``pgid`` (Linux /proc).

    Managed processes lead their own group, so this covers uvicorn workers too.
    None where ``/proc`` is unavailable.
    """
    proc = Path("/proc")
    if not (proc / str(pgid) / "stat").exists():
        return None
    ticks = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[2]) == pgid:  # field 5: pgrp
            ticks += int(fields[11]) + int(fields[12])  # fields 14, 15: utime, stime
    return ticks / _CLK_TCK


# --------------------------------------------------------------------------- load generator


class TurnError(Exception):
    """The turn did not end as expected (its message is the error kind)."""


def request_bytes(host: str, port: int, body: bytes) -> bytes:
    """One HTTP/1.1 keep-alive POST / with the profile's headers."""
    head = (f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nA2A-Version: 1.0\r\nA2A-Extensions: {EXT}"
            f"\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("ascii") + body


def turn_body(run_id: str, i: int, context: int | None = None) -> bytes:
    """A SendStreamingMessage of turn ``i`` (unique ids, no side effect) on context number
    ``context`` (default ``i``: a new context)."""
    ext = EXT
    ids = f"{run_id}-{i}"
    ctx = f"{run_id}-{i if context is None else context}"
    return json.dumps({
        "jsonrpc": "2.0", "id": f"r-{ids}", "method": "SendStreamingMessage",
        "params": {"message": {
            "messageId": f"m-{ids}", "role": "ROLE_USER", "contextId": f"c-{ctx}",
            "parts": [{"text": "what is my balance"}],
            "metadata": {f"{ext}/turnId": f"t-{ids}", f"{ext}/requestGuid": f"g-{ids}",
                         f"{ext}/interactionId": f"i-{ids}", f"{ext}/sideEffect": False}}},
    }, separators=(",", ":")).encode()


class TurnChecker:
    """Reads the SSE events of one turn and checks the expected shape."""

    def __init__(self, chunks: int):
        self.chunks = chunks
        self.kinds: Counter[str] = Counter()
        self.final: str | None = None
        self.ended_at = 0.0
        self._partial = b""

    def feed(self, data: bytes) -> None:
        """Consume body bytes (any split); parse complete ``data:`` lines."""
        buf = self._partial + data
        lines = buf.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                self._event(json.loads(line[5:]))

    def _event(self, frame: dict[str, Any]) -> None:
        """One JSON-RPC frame."""
        if self.final is not None:
            raise TurnError("event after the end")
        if "error" in frame:
            raise TurnError(f"jsonrpc {frame['error'].get('code')}")
        result = frame.get("result") or {}
        kind = next(iter(result), "") if isinstance(result, dict) and len(result) == 1 else ""
        if kind not in EVENT_KINDS:
            raise TurnError("unexpected result")
        self.kinds[kind] += 1
        state = result[kind].get("status", {}).get("state") if kind != "artifactUpdate" else None
        if state in END_STATES:
            self.final = state
            self.ended_at = time.perf_counter()

    def check(self) -> float:
        """The time of the terminal event; raise TurnError unless the turn completed in full."""
        if self.final is None:
            raise TurnError("no terminal state")
        if self.final != "TASK_STATE_COMPLETED":
            raise TurnError(self.final.removeprefix("TASK_STATE_").lower())
        if self.kinds["task"] != 1 or self.kinds["artifactUpdate"] != self.chunks:
            raise TurnError("missing events")
        return self.ended_at


class Connection:
    """One keep-alive HTTP/1.1 connection; ``turn`` sends a request and reads its SSE stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        """Connect to ``host:port``."""
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    def close(self) -> None:
        """Close the socket (no wait)."""
        self.writer.close()

    async def turn(self, request: bytes, chunks: int) -> float:
        """Send ``request``; return the time its terminal event arrived (raise TurnError)."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        headers = head.lower()
        checker = TurnChecker(chunks)
        if b"\r\ntransfer-encoding: chunked" in headers:
            while True:
                size = int((await self.reader.readline()).split(b";", 1)[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # (no trailers) the final CRLF
                    break
                checker.feed((await self.reader.readexactly(size + 2))[:-2])
        else:
            start = headers.find(b"\r\ncontent-length:")
            if start < 0:
                raise TurnError(f"http {status} without length")
            end = headers.index(b"\r\n", start + 2)
            checker.feed(await self.reader.readexactly(int(headers[start + 17:end])) + b"\n")
        checker.feed(b"\n")
        if status != 200:
            raise TurnError(f"http {status}")
        if b"\r\nconnection: close" in headers:
            raise TurnError("connection closed by server")
        return checker.check()


@dataclass(frozen=True)
class Snapshot:
    """Clock and CPU counters at one instant of a measurement."""

    t: float  # perf_counter
    server_cpu_s: float | None
    helper_cpu_s: float | None
    client_cpu_s: float


class Window:
    """The steady-state part of a drive: completions ``skip+1 .. skip+count``.

    Snapshots are taken when the ``skip``-th and the ``(skip+count)``-th turn
    complete, while every connection is still busy (the drive issues
    ``concurrency`` more turns than it times), so neither the ramp-up nor the
    ramp-down of the closed loop is in the figures.
    """

    def __init__(self, skip: int, count: int, snap: Callable[[], Snapshot]):
        self.skip = skip
        self.count = count
        self.snap = snap
        self.done = 0
        self.start: Snapshot | None = snap() if skip == 0 else None
        self.end: Snapshot | None = None
        self.latencies_s: list[float] = []

    def completed(self, latency_s: float) -> None:
        """Book one completed turn."""
        self.done += 1
        if self.done == self.skip:
            self.start = self.snap()
        elif self.skip < self.done <= self.skip + self.count:
            self.latencies_s.append(latency_s)
            if self.done == self.skip + self.count:
                self.end = self.snap()


class Calls:
    """The context of each turn of one connection: ``per_context`` consecutive turns of a
    connection share a contextId (a call), the next one opens a new context."""

    def __init__(self, per_context: int):
        if per_context < 1:
            raise ValueError(f"turns per context must be >= 1, got {per_context}")
        self.per_context = per_context
        self._context: int | None = None
        self._left = 0

    def context_of(self, i: int) -> int:
        """The context number of turn ``i`` (the number of the call's first turn)."""
        if self._left == 0:
            self._context, self._left = i, self.per_context
        self._left -= 1
        assert self._context is not None
        return self._context


async def drive(host: str, port: int, turns: int, concurrency: int, *, chunks: int = CHUNKS,
                window: Window | None = None, turns_per_context: int = 1,
                turn_timeout_s: float = TURN_TIMEOUT_S) -> tuple[list[float], Counter[str]]:
    """Run ``turns`` turns over ``concurrency`` closed-loop keep-alive connections, each
    a sequence of calls of ``turns_per_context`` turns on one new contextId.

    Returns the latencies (s) of the completed turns and the errors by kind;
    each completion is also booked in ``window``.
    """
    run_id = uuid.uuid4().hex[:12]
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    numbers: Iterator[int] = iter(range(turns))

    async def user() -> None:
        conn: Connection | None = None
        calls = Calls(turns_per_context)
        try:
            for i in numbers:
                request = request_bytes(host, port, turn_body(run_id, i, calls.context_of(i)))
                t0 = time.perf_counter()
                try:
                    async with asyncio.timeout(turn_timeout_s):
                        if conn is None:
                            conn = await Connection.open(host, port)
                        ended = await conn.turn(request, chunks)
                except TurnError as e:
                    errors[str(e)] += 1
                except TimeoutError:
                    errors["timeout"] += 1
                except (OSError, EOFError, asyncio.IncompleteReadError,
                        asyncio.LimitOverrunError, ValueError) as e:
                    errors[type(e).__name__] += 1
                else:
                    latencies.append(ended - t0)
                    if window is not None:
                        window.completed(ended - t0)
                    continue
                if conn is not None:  # after any error the connection's state is unknown
                    conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()

    await asyncio.gather(*(user() for _ in range(min(concurrency, turns))))
    return latencies, errors


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when installed (cheaper client), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


# --------------------------------------------------------------------------- servers


@dataclass
class Target:
    """A running Reasoner for one store (and the store's own server, if any)."""

    store: str
    reasoner: ManagedProcess
    helper: ManagedProcess | None = None


def reasoner_args(concurrency: int) -> list[str]:
    """Flags common to every Reasoner: a turn is pure protocol work (no sleeps, no tool)."""
    sets = ["reasoner.reasoning_time_s=0", "reasoner.first_chunk_s=0",
            f"reasoner.chunks={CHUNKS}", "reasoner.chunk_interval_s=0",
            "reasoner.errors={}", "reasoner.context_rate_per_s=0",
            f"reasoner.workers={max(8, concurrency)}", f"reasoner.queue_limit={concurrency}",
            "workload.side_effect_share=0"]
    args = ["--log-level", "warning", "--token", f"{TOKEN}={PRINCIPAL}"]
    for s in sets:
        args += ["--set", s]
    return args


def pin_process(pid: int, cpus: set[int]) -> bool:
    """Pin every thread of ``pid`` (threads made later inherit it) to ``cpus``; False if not."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), cpus)
    except (OSError, AttributeError):
        return False
    return True


def cpu_split() -> tuple[set[int], set[int]] | None:
    """(load generator CPUs, server CPUs) when this process may use >= 2 CPUs, else None."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    if len(cpus) < 2:
        return None
    return {cpus[0]}, set(cpus[1:])


def start_target(store: str, tmp: Path, concurrency: int,
                 redis: ManagedProcess | None, server_cpus: set[int] | None = None) -> Target:
    """Start the Reasoner of ``store`` on a free port (pinned to ``server_cpus`` if given)."""
    if store == "none":
        dedup, extra = "memory", ["--dedup-mode", "none"]
    elif store == "sqlite":
        dedup, extra = f"sqlite:///{tmp / 'dedup.sqlite'}", ["--dedup-mode", "request-guid"]
    else:
        assert redis is not None
        dedup, extra = redis.url, ["--dedup-mode", "request-guid"]
    proc = start_reasoner(dedup=dedup, extra_args=reasoner_args(concurrency) + extra,
                          log_path=tmp / f"reasoner-{store}.log")
    if server_cpus is not None:
        pin_process(proc.pid, server_cpus)
    return Target(store, proc, redis if store == "redis" else None)


def snapshot(target: Target) -> Snapshot:
    """Clock, server CPU (Reasoner, store server) and this process's CPU, now."""
    helper = group_cpu_s(target.helper.pid) if target.helper is not None else None
    return Snapshot(time.perf_counter(), group_cpu_s(target.reasoner.pid), helper,
                    time.process_time())


def _delta(a: float | None, b: float | None) -> float | None:
    """``b - a`` unless either is unknown."""
    return b - a if a is not None and b is not None else None


def measure(target: Target, rnd: int, turns: int, concurrency: int,
            probe_turns: int = 0, turns_per_context: int = 1) -> Sample:
    """Time ``turns`` turns in steady state (``concurrency`` turns before and after untimed),
    then ``probe_turns`` turns at concurrency 1 (after :data:`PROBE_SKIP` untimed ones)."""
    port = target.reasoner.port
    assert port is not None
    window = Window(concurrency, turns, lambda: snapshot(target))
    probe = Window(PROBE_SKIP, probe_turns, lambda: snapshot(target))
    total = turns + 2 * concurrency + (probe_turns + PROBE_SKIP if probe_turns else 0)
    deadline_s = 60.0 + total / MIN_RATE_PER_S

    async def run() -> Counter[str]:
        try:
            async with asyncio.timeout(deadline_s):
                _, errors = await drive(LOCALHOST, port, turns + 2 * concurrency, concurrency,
                                        window=window, turns_per_context=turns_per_context)
                if probe_turns:
                    _, more = await drive(LOCALHOST, port, probe_turns + PROBE_SKIP, 1,
                                          window=probe, turns_per_context=turns_per_context)
                    errors.update(more)
        except TimeoutError:
            raise RuntimeError(f"{target.store}: {total} turns not done within "
                               f"{deadline_s:.0f} s") from None
        return errors

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        errors = runner.run(run())
    if not target.reasoner.alive():
        raise ProcessError(f"the {target.store} Reasoner died (exit {target.reasoner.returncode})"
                           f"\n{target.reasoner.log_tail()}")
    start = window.start or snapshot(target)  # only with errors: the window did not fill
    end = window.end or snapshot(target)
    probe_cpu = None
    if probe.start is not None and probe.end is not None:
        probe_cpu = _delta(probe.start.server_cpu_s, probe.end.server_cpu_s)
        if probe_cpu is not None and target.helper is not None:
            probe_cpu += _delta(probe.start.helper_cpu_s, probe.end.helper_cpu_s) or 0.0
    return Sample(target.store, rnd, turns, end.t - start.t,
                  _delta(start.server_cpu_s, end.server_cpu_s),
                  _delta(start.helper_cpu_s, end.helper_cpu_s),
                  end.client_cpu_s - start.client_cpu_s, window.latencies_s,
                  probe.latencies_s, probe_cpu, errors)


def warm_up(target: Target, turns: int, concurrency: int,
            turns_per_context: int = 1) -> Counter[str]:
    """Untimed turns (imports, caches, store pages); their errors."""
    port = target.reasoner.port
    assert port is not None
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        _, errors = runner.run(drive(LOCALHOST, port, turns, concurrency,
                                     turns_per_context=turns_per_context))
    return errors


# --------------------------------------------------------------------------- report


def versions_line() -> str:
    """``host:`` line with the versions that shape the figures."""
    import sqlite3
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    import platform
    return host_line({"Python": platform.python_version(), "a2a-sdk": version("a2a-sdk"),
                      "uvicorn": version("uvicorn"), "uvloop": version("uvloop"),
                      "httptools": version("httptools"), "redis-py": version("redis"),
                      "SQLite": sqlite3.sqlite_version})


def _fmt_ms(v: float | None) -> str:
    """A millisecond figure, or n/a."""
    return "n/a" if v is None else f"{v:.2f}"


def table(summaries: Sequence[StoreSummary], concurrency: int) -> list[str]:
    """One row per store: median turns/s, spread, per-round turns/s, server CPU ms per turn
    (median), p50/p99 latency at ``concurrency`` and in the concurrency-1 probe, errors."""
    loaded, probe = f"c={concurrency}", "c=1"
    rows = [f"{'store':<7} {'turns/s':>8} {'spread':>6}  {'per round':<30} {'CPU ms/turn':>11} "
            f"{'p50 ' + loaded:>9} {'p99 ' + loaded:>9} {'p50 ' + probe:>8} "
            f"{'p99 ' + probe:>8} {'errors':>6}"]
    for s in summaries:
        m = s.throughput
        per_round = " ".join(f"{r:,.0f}" for r in m.rates)
        rows.append(f"{s.store:<7} {m.median:>8,.1f} {m.spread:>6.1%}  {per_round:<30} "
                    f"{_fmt_ms(s.cpu_ms):>11} {s.percentile_ms(0.5):>9.1f} "
                    f"{s.percentile_ms(0.99):>9.1f} {s.percentile_ms(0.5, True):>8.2f} "
                    f"{s.percentile_ms(0.99, True):>8.2f} {sum(s.errors.values()):>6}")
    helper = " (+ redis-server for redis)" if any(x.store == "redis" for x in summaries) else ""
    rows.append(f"(turns/s: median of the rounds; spread: (max - min) / median; CPU: the "
                f"Reasoner process{helper} per turn, median; latencies in ms, rounds pooled)")
    return rows


def paired_ratios(base: StoreSummary, other: StoreSummary) -> tuple[list[float], list[float]]:
    """Per round: ``other`` turns/s ÷ ``base`` turns/s, and ``base`` CPU per turn ÷ ``other``
    CPU per turn (both >= 1 when ``other`` is cheaper).  The two measurements of a round ran
    back to back, so their ratio is immune to slow drifts of the machine's load."""
    tp: list[float] = []
    cpu: list[float] = []
    for b, o in zip(base.samples, other.samples, strict=False):
        if b.turns_per_s > 0:
            tp.append(o.turns_per_s / b.turns_per_s)
        bc, oc = b.server_cpu_per_turn_s, o.server_cpu_per_turn_s
        if bc is not None and oc:
            cpu.append(bc / oc)
    return tp, cpu


def ratios(base: StoreSummary, other: StoreSummary) -> dict[str, Any]:
    """Median paired throughput and CPU-per-turn ratios (per round too) and added latencies."""
    tp, cpu = paired_ratios(base, other)
    return {"throughput_ratio": statistics.median(tp) if tp else None,
            "cpu_per_turn_ratio": statistics.median(cpu) if cpu else None,
            "throughput_ratio_per_round": tp, "cpu_per_turn_ratio_per_round": cpu,
            "p50_added_ms": other.percentile_ms(0.5) - base.percentile_ms(0.5),
            "p99_added_ms": other.percentile_ms(0.99) - base.percentile_ms(0.99),
            "probe_p50_added_ms": (other.percentile_ms(0.5, True)
                                   - base.percentile_ms(0.5, True)),
            "probe_p99_added_ms": (other.percentile_ms(0.99, True)
                                   - base.percentile_ms(0.99, True))}


def _ratio_text(label: str, v: float | None, per_round: Sequence[float],
                judged: bool) -> tuple[str, str | None]:
    """``label 0.95x [0.93..0.97]`` plus the PASS/WARN verdict against the target if ``judged``."""
    if v is None:
        return f"{label} n/a", None
    text = f"{label} {v:.2f}x"
    if len(per_round) > 1:
        text += f" [rounds {min(per_round):.2f}..{max(per_round):.2f}]"
    if not judged:
        return text, None
    verdict = "PASS" if v >= RATIO_TARGET else "WARN"
    return f"{text} (target >= {RATIO_TARGET:g}x: {verdict})", verdict


def comparison_lines(base: StoreSummary, others: Sequence[StoreSummary], concurrency: int
                     ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The ratio and added-latency lines of each store against ``none``."""
    lines: list[str] = []
    figures: dict[str, dict[str, Any]] = {}
    for s in others:
        r = ratios(base, s)
        judged = s.store == "sqlite"  # the target is SQLite's (issue 3, acceptance 5)
        tp_text, tp_verdict = _ratio_text("throughput ratio", r["throughput_ratio"],
                                          r["throughput_ratio_per_round"], judged)
        cpu_text, cpu_verdict = _ratio_text("CPU-per-turn ratio", r["cpu_per_turn_ratio"],
                                            r["cpu_per_turn_ratio_per_round"], judged)
        lines.append(f"{s.store} vs none: {tp_text}, {cpu_text}")
        if "WARN" in (tp_verdict, cpu_verdict):
            lines.append(f"  {SLOW_REMEDY}")
        figures[s.store] = {**r, "throughput_verdict": tp_verdict,
                            "cpu_per_turn_verdict": cpu_verdict}
    added = ", ".join(f"{s.store} {figures[s.store]['p99_added_ms']:+.1f} ms" for s in others)
    lines.append(f"p99 added latency vs none at concurrency {concurrency} (saturated, mostly "
                 f"queueing): {added}")
    if any(s.probe_latencies_s for s in base.samples):
        added = ", ".join(f"{s.store} {figures[s.store]['probe_p99_added_ms']:+.2f} ms "
                          f"(p50 {figures[s.store]['probe_p50_added_ms']:+.2f} ms)"
                          for s in others)
        lines.append(f"p99 added latency vs none at concurrency 1 (the store's own cost): "
                     f"{added}")
    return lines, figures


# --------------------------------------------------------------------------- command


def parse_stores(text: str) -> tuple[str, ...]:
    """argparse type: a comma-separated subset of :data:`STORES` (order kept, no repeats)."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in STORES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of "
                                         f"{','.join(STORES)}, got {text!r}")
    return names


def _count(text: str, minimum: int = 1) -> int:
    """argparse type: an integer >= ``minimum``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def default_turns_per_context() -> int:
    """Turns per call of the ``baseline`` preset (``[workload].turns_per_call``, its mean
    rounded up, at least 1): the default number of turns per contextId."""
    from sim.scenario import load_scenario

    return max(1, math.ceil(load_scenario(BASELINE_PRESET).workload.turns_per_call.mean))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rtalab serve bench``."""
    p.add_argument("--turns", type=_count, default=DEFAULT_TURNS, metavar="N",
                   help=f"timed turns per store and round (default {DEFAULT_TURNS:,}: about a "
                        "minute in all)")
    p.add_argument("--rounds", type=_count, default=DEFAULT_ROUNDS, metavar="K",
                   help=f"interleaved rounds (default {DEFAULT_ROUNDS})")
    p.add_argument("--concurrency", type=_count, default=DEFAULT_CONCURRENCY, metavar="C",
                   help=f"keep-alive connections, each a closed loop of turns "
                        f"(default {DEFAULT_CONCURRENCY})")
    p.add_argument("--warmup", type=_count, default=DEFAULT_WARMUP, metavar="N",
                   help=f"untimed turns per store before the rounds (default {DEFAULT_WARMUP})")
    p.add_argument("--probe-turns", type=lambda t: _count(t, 0), default=DEFAULT_PROBE_TURNS,
                   metavar="N", help="turns per store and round at concurrency 1 for the "
                                     f"unloaded latency (default {DEFAULT_PROBE_TURNS}; 0: none)")
    p.add_argument("--turns-per-context", type=_count, default=None, metavar="N",
                   help="turns per contextId, in sequence on one connection like the turns of "
                        "a call; the first binds the context (default: the "
                        f"{BASELINE_PRESET} preset's [workload].turns_per_call; 1: every turn "
                        "opens a new context, the worst case for a shared store)")
    p.add_argument("--stores", type=parse_stores, default=STORES, metavar="LIST",
                   help="comma-separated stores to compare (default none,sqlite,redis)")
    p.add_argument("--json", metavar="FILE", default=None, help="also save the figures as JSON")
    p.add_argument("--no-pin", dest="pin", action="store_false",
                   help="do not pin the servers and the load generator to separate CPUs")


def progress(line: str) -> None:
    """A progress line on stderr (the figures go to stdout)."""
    print(line, file=sys.stderr, flush=True)


def run_bench(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    """Run the benchmark; 0 on a clean run (WARN included), 1 on errors or a failed server."""
    out("rtalab serve bench")
    out(versions_line())
    warn_if_busy(out)
    stores = list(args.stores)
    if getattr(args, "turns_per_context", None) is None:
        args.turns_per_context = default_turns_per_context()
    per_context = args.turns_per_context
    prior_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    started = time.perf_counter()
    samples: dict[str, list[Sample]] = {}
    with tempfile.TemporaryDirectory(prefix="rtalab-serve-bench-") as tmp_name, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        try:
            split = cpu_split() if getattr(args, "pin", True) else None
            server_cpus = split[1] if split else None
            if split:
                pin_process(os.getpid(), split[0])
                stack.callback(pin_process, os.getpid(), prior_cpus)
            redis: ManagedProcess | None = None
            if "redis" in stores:
                try:
                    redis = stack.enter_context(start_redis(log_path=tmp / "redis.log"))
                    if server_cpus is not None:
                        pin_process(redis.pid, server_cpus)
                except FileNotFoundError:
                    stores.remove("redis")
                    out("redis-server not found (install the Debian package redis-server): "
                        f"benching {','.join(stores) or 'nothing'} only")
            if not stores:
                return 1
            probe = (f", then {args.probe_turns} at concurrency 1" if args.probe_turns else "")
            calls = ("1 turn per contextId (every turn opens a new context: the worst case)"
                     if per_context == 1 else
                     f"{per_context} turns per contextId (a call; the first binds the context)")
            out(f"setup: 1 uvicorn worker per store ({', '.join(stores)}), started once; "
                f"{args.warmup:,} warm-up turns each, then {args.rounds} interleaved round(s) "
                "(alternating order) "
                f"of {args.turns:,} timed turns per store at concurrency {args.concurrency}"
                f"{probe}; {calls}; a turn = progress directive + {CHUNKS} chunks + "
                "COMPLETED, no reasoning time, no side effect; "
                + (f"servers pinned to CPU {sorted(server_cpus)}, load generator to CPU "
                   f"{sorted(split[0])}" if split and server_cpus else
                   "the load generator shares the CPUs"))
            targets = [stack.enter_context(_target(s, tmp, args.concurrency, redis,
                                                   server_cpus))
                       for s in stores]
            errors: Counter[str] = Counter()
            for t in targets:
                errors.update(warm_up(t, args.warmup, args.concurrency, per_context))
            if errors:
                out(f"ERROR: warm-up turns failed: {dict(errors)}")
                return 1
            samples = {s: [] for s in stores}
            for rnd in range(args.rounds):
                for t in (targets if rnd % 2 == 0 else targets[::-1]):  # ABBA: no order bias
                    samples[t.store].append(measure(t, rnd, args.turns, args.concurrency,
                                                    args.probe_turns, per_context))
                progress(f"round {rnd + 1}/{args.rounds}: " + ", ".join(
                    f"{st} {samples[st][-1].turns / samples[st][-1].wall_s:,.0f} turns/s"
                    for st in stores))
        except (ProcessError, RuntimeError) as e:
            out(f"ERROR: {str(e).splitlines()[0]}")
            return 1
    summaries = [StoreSummary(s, samples[s]) for s in stores]
    by_name = {s.store: s for s in summaries}
    for line in table(summaries, args.concurrency):
        out(line)
    if all(s.probe_cpu_ms for s in summaries):
        base = by_name["none"].probe_cpu_ms if "none" in by_name else None
        out("server CPU ms/turn at concurrency 1: " + ", ".join(
            f"{s.store} {s.probe_cpu_ms:.2f}"
            + (f" ({base / s.probe_cpu_ms:.2f}x)" if base and s.store != "none" else "")
            for s in summaries if s.probe_cpu_ms))
    client = statistics.median(s.client_cpu_ms for s in summaries)
    out(f"load generator CPU: {client:.2f} ms/turn; "
        f"run took {time.perf_counter() - started:.0f} s")
    figures: dict[str, dict[str, Any]] = {}
    if "none" in by_name and len(summaries) > 1:
        lines, figures = comparison_lines(by_name["none"],
                                          [s for s in summaries if s.store != "none"],
                                          args.concurrency)
        for line in lines:
            out(line)
    measurements = [s.throughput for s in summaries]
    measurements += [Measurement(f"{s.store} CPU/turn", "ms", tuple(s.cpu_ms_per_turn),
                                 args.turns) for s in summaries if s.cpu_ms_per_turn]
    warn_unstable_all(measurements, out, UNSTABLE_REMEDY)
    total_errors = sum(sum(s.errors.values()) for s in summaries)
    if total_errors:
        detail = "; ".join(f"{s.store}: {dict(s.errors)}" for s in summaries if s.errors)
        out(f"ERROR: {total_errors} turn(s) failed ({detail}); the figures are not valid")
    if args.json:
        _save_json(Path(args.json), args, summaries, figures)
        out(f"figures saved to {args.json}")
    return 1 if total_errors else 0


@contextlib.contextmanager
def _target(store: str, tmp: Path, concurrency: int, redis: ManagedProcess | None,
            server_cpus: set[int] | None) -> Iterator[Target]:
    """A started :class:`Target`, stopped on exit."""
    t = start_target(store, tmp, concurrency, redis, server_cpus)
    try:
        yield t
    finally:
        t.reasoner.stop()


def _save_json(path: Path, args: argparse.Namespace, summaries: Sequence[StoreSummary],
               figures: dict[str, dict[str, Any]]) -> None:
    """Write settings, host, raw samples, summaries and ratios to ``path``."""
    from sim.results import host_info

    data = {"command": "rtalab serve bench", "argv": sys.argv,
            "settings": {"turns": args.turns, "rounds": args.rounds,
                         "concurrency": args.concurrency, "warmup": args.warmup,
                         "probe_turns": args.probe_turns,
                         "turns_per_context": args.turns_per_context,
                         "stores": [s.store for s in summaries], "chunks": CHUNKS,
                         "ratio_target": RATIO_TARGET},
            "host": host_info(), "host_line": versions_line(),
            "summary": {s.store: s.as_json() for s in summaries},
            "comparison": figures,
            "samples": [x.as_json() for s in summaries for x in s.samples]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
