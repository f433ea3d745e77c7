"""Claim owners that name their process, so a claim of a crashed owner resolves at once.

An owner id is ``<host key>|<pid>|<process start time, ms>|<random>``.  The host
key is the host name, the kernel's boot id and the pid namespace: two owners
with the same host key are processes of one kernel and pid namespace, whose
liveness this process can check.  :func:`owner_gone` is True only when that
check proves the owner's process no longer exists (no process with that pid,
or one started at another time: the pid was reused).  An owner on another host
(Redis shared across hosts), a malformed or legacy owner id, or a check that
fails for any other reason is never declared gone: its claim waits for the
lease, as before.

Used by :meth:`rtalab.loadtests.reasoner.idempotency.Idempotency.enter`: a duplicate
that finds a claim in flight whose owner is gone asks the store to resolve it
now (``claim(..., dead_owner=owner)``: the lease rule of
:mod:`rtalab.sim.shared.dedup_rule` applied before the lease runs out), instead of waiting
``--dedup-wait-s`` for nothing.  A restarted server resolves its
predecessor's claims this way on the first duplicate that finds them.
"""

from __future__ import annotations

import os
import socket
import uuid
from functools import lru_cache

import psutil


def _read(path: str) -> str:
    """A small /proc file's content, or ``-`` where it does not exist."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "-"


@lru_cache(maxsize=1)
def host_key() -> str:
    """This process's host name, boot id and pid namespace (``|``-free)."""
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = "-"
    boot = _read("/proc/sys/kernel/random/boot_id")[:8]
    return f"{socket.gethostname()}/{boot}/{pidns}".replace("|", "_")


def _started_ms(pid: int) -> int:
    """The start time of process ``pid`` in ms since the epoch (raises psutil.Error)."""
    return int(psutil.Process(pid).create_time() * 1000)


@lru_cache(maxsize=1)
def _me() -> str:
    """``<host key>|<pid>|<start ms>`` of this process (cached per process: forked workers
    call it after the fork, the cache is per process)."""
    pid = os.getpid()
    return f"{host_key()}|{pid}|{_started_ms(pid)}"


def new_owner() -> str:
    """A unique owner id naming this process."""
    if _me().split("|")[1] != str(os.getpid()):  # forked after the cache was filled
        _me.cache_clear()
    return f"{_me()}|{uuid.uuid4().hex[:12]}"


def owner_gone(owner: str) -> bool:
    """True only if ``owner``'s process provably no longer exists (see the module docstring)."""
    parts = owner.split("|")
    if len(parts) != 4 or parts[0] != host_key():
        return False
    try:
        pid, started = int(parts[1]), int(parts[2])
    except ValueError:
        return False
    try:
        return _started_ms(pid) != started
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
