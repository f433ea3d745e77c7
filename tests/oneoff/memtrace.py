"""Memory over simulated time of the fleet benchmark's run (``rtalab bench fleet``'s scenario).

Every ``--every`` simulated seconds: the process RSS (``/proc/self/statm``), its highest
value seen since the previous line (sampled every ``--probe`` simulated seconds), CPython's
allocated blocks, glibc's heap (``mallinfo2``: bytes in use, free inside the arenas,
mmapped), the dedup entries held and the bytes of the run-long per-id state (the tally's
hazards and joins, the Reasoner's session sets).  The samples are extra events in the
queue: the run's results are not the point here (tests/oneoff/metric_dump.py is).

    PYTHONPATH=$PWD python tests/oneoff/memtrace.py --calls 1000000 --fraction 1.0
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import sys
import threading
import time
import traceback
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 2.0**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo() -> tuple[float, float, float]:
    """(in use, free in arenas, mmapped) MiB from glibc, or NaNs."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        f = libc.mallinfo2
    except (OSError, AttributeError):
        return float("nan"), float("nan"), float("nan")
    f.restype = _MallInfo2
    m = f()
    return m.uordblks / MIB, m.fordblks / MIB, m.hblkhd / MIB


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE / MIB


def _state_bytes(world: Any) -> int:
    from rtalab.sim.model.fleet import Fleet

    n = world.tally.state_bytes() if world.tally is not None else 0
    reps = world.reasoner.replicas if isinstance(world.reasoner, Fleet) else [world.reasoner]
    for rep in reps:
        for name in ("known_contexts", "sessions_opened"):
            obj = getattr(rep, name)
            nb = getattr(obj, "nbytes", None)
            n += nb() if callable(nb) else 0
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=1_000_000, help="calls per simulated hour")
    p.add_argument("--fraction", type=float, default=1.0, help="share of the hour")
    p.add_argument("--every", type=float, default=300.0, help="simulated s between lines")
    p.add_argument("--probe", type=float, default=10.0, help="simulated s between RSS probes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--watch", action="store_true",
                   help="a thread reads the RSS every 2 ms and names where it was highest")
    args = p.parse_args(argv)

    from rtalab.benchmarks.fleet import fleet_scenario
    from rtalab.sim.model.clock import call_later, sim_time
    from rtalab.sim.model.world import World
    from rtalab.sim.runner import _assemble
    from rtalab.sim.shared.summary import summarize

    sc = fleet_scenario(args.calls, args.fraction, "none")
    world = World(sc, args.seed, 0)
    hi = [rss_mib()]
    c0 = time.process_time()
    print(f"{'sim s':>6s} {'RSS MiB':>8s} {'max MiB':>8s} {'blocks k':>9s} {'malloc use':>10s} "
          f"{'malloc free':>11s} {'mmap':>6s} {'dedup k':>8s} {'per-id MiB':>10s} {'CPU s':>6s}",
          flush=True)

    def probe(_: Any = None) -> None:
        hi[0] = max(hi[0], rss_mib())
        if sim_time(world.env) + args.probe < world.end_s:
            call_later(world.env, args.probe, probe)

    def line(_: Any = None) -> None:
        now = sim_time(world.env)
        r = rss_mib()
        use, free, mm = _mallinfo()
        store = world.reasoner.store
        entries = store.held() if store is not None else 0
        print(f"{now:6.0f} {r:8.1f} {max(hi[0], r):8.1f} {sys.getallocatedblocks() / 1e3:9.0f} "
              f"{use:10.1f} {free:11.1f} {mm:6.1f} {entries / 1e3:8.0f} "
              f"{_state_bytes(world) / MIB:10.2f} {time.process_time() - c0:6.1f}", flush=True)
        hi[0] = r
        if now + args.every <= world.end_s:
            call_later(world.env, args.every, line)

    call_later(world.env, args.probe, probe)
    call_later(world.env, args.every, line)
    top: list[Any] = [0.0, "", 0.0]
    done = threading.Event()
    main_id = threading.get_ident()

    def watch() -> None:  # where the run reaches its highest RSS (every 2 ms of wall time)
        while not done.wait(0.002):
            r = rss_mib()
            if r > top[0]:
                frame = sys._current_frames().get(main_id)
                top[:] = [r, "".join(traceback.format_stack(frame, 8)) if frame else "",
                          sim_time(world.env)]

    watcher = threading.Thread(target=watch, daemon=True)
    if args.watch:
        watcher.start()
    raw = world.run()
    print(f"after the loop: RSS {rss_mib():.1f} MiB", flush=True)
    out = _assemble(raw, sc, args.seed, 0)
    summarize([out], sc.run.warmup_s)
    done.set()
    if args.watch:
        watcher.join()
        print(f"the highest RSS seen {top[0]:.1f} MiB, at {top[2]:.0f} simulated s, in:\n"
              f"{top[1]}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"after the metrics: RSS {rss_mib():.1f} MiB; peak RSS {peak:.1f} MiB; "
          f"{int(out.counters['calls']):,} calls, {int(out.counters['turns']):,} turns; "
          f"CPU {time.process_time() - c0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
