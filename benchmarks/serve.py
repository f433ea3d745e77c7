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
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtalab.benchmarks.serve_client import (  # noqa: F401 - re-exported
    CHUNKS,
    MIN_RATE_PER_S,
    PRINCIPAL,
    TOKEN,
    TURN_TIMEOUT_S,
    Calls,
    Connection,
    Snapshot,
    TurnChecker,
    TurnError,
    Window,
    drive,
    event_loop_factory,
    request_bytes,
    turn_body,
)
from rtalab.benchmarks.serve_cpu import cpu_split, group_cpu_s, pin_process
from rtalab.benchmarks.serve_report import (  # noqa: F401 - re-exported
    MIN_CPU_S,
    RATIO_TARGET,
    SLOW_REMEDY,
    Sample,
    StoreSummary,
    comparison_lines,
    paired_ratios,
    ratios,
    table,
    versions_line,
)
from rtalab.benchmarks.util import Measurement, warn_if_busy, warn_unstable_all
from rtalab.loadtests.common.procs import (
    LOCALHOST,
    ManagedProcess,
    ProcessError,
    start_reasoner,
    start_redis,
)

STORES: tuple[str, ...] = ("none", "sqlite", "redis")
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
UNSTABLE_REMEDY = ("Close other programs (other VMs on the host count too), or use more "
                   "--rounds or a larger --turns.")


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
    from rtalab.sim.scenario import load_scenario

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
    from rtalab.sim.shared.results import host_info

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
