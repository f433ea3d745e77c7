"""CPU accounting and pinning for the serve bench: a process group's CPU time from /proc,
and the split of the machine's CPUs between the servers and the load generator.
"""

from __future__ import annotations

import os
from pathlib import Path

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
