"""Reasoning capacity of one worker process: ``workers`` concurrent turns, a bounded queue.

The same load-shedding rules as the simulator (docs/decisions.md D3, ``[reasoner]``):

- ``queue_limit``: a turn that would wait while that many already wait is
  refused at once (``full``);
- ``queue_timeout_s`` (0 = off): a turn that waited that long for a worker is
  refused (:class:`QueueTimeout`); both refusals answer ``queue_full_code``
  (``rate-limited`` carries ``retryAfterMs``), and nothing of the turn ran;
- ``queue_discipline``: which waiting turn a freed worker takes, ``fifo``
  (oldest first) or ``lifo`` (newest first: under overload the newest request
  is the one whose client is still waiting, the oldest has probably timed out).

``workers`` means what it means in the simulator: turns reasoned concurrently
by the whole Reasoner.  With one worker process the pool is this process's
:class:`Capacity`.  With ``--workers N`` processes the supervisor runs one
:class:`CapacityBroker` (a thread serving a Unix socket) holding the single
pool, and every process asks it through a :class:`RemoteCapacity`: same rules,
one queue for all processes.  A process that dies frees what it held (its
connection closes).  The broker's round trip (~0.1 ms) is part of the queue wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class QueueTimeout(Exception):
    """A turn waited longer than ``queue_timeout_s`` for a worker."""


class QueueFull(Exception):
    """The waiting room was full when the turn arrived (refused at once)."""


class Capacity:
    """Workers handed to waiters in FIFO or LIFO order, with a waiting-room limit and deadline."""

    def __init__(self, workers: int, queue_limit: int, discipline: str = "fifo",
                 timeout_s: float = 0.0):
        if discipline not in ("fifo", "lifo"):
            raise ValueError(f"queue discipline must be fifo or lifo, got {discipline!r}")
        self.workers = workers
        self.queue_limit = queue_limit
        self.lifo = discipline == "lifo"
        self.timeout_s = timeout_s
        self.busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Turns waiting for a worker."""
        return len(self._waiters)

    def full(self) -> bool:
        """True if a new turn would have to wait and the waiting room is full."""
        return self.busy + self.waiting >= self.workers + self.queue_limit

    async def admit(self) -> int:
        """Take a worker, or raise :class:`QueueFull` / :class:`QueueTimeout`; return the
        turns at the Reasoner when the service starts (in service, this one included, plus
        waiting: the simulator's load-latency count)."""
        if self.full():
            raise QueueFull("the waiting room is full")
        await self.acquire()
        return self.busy + self.waiting

    async def acquire(self) -> None:
        """Take a worker, waiting in line if none is free; raise QueueTimeout past the deadline."""
        if self.busy < self.workers and not self._waiters:
            self.busy += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait((fut,), timeout=self.timeout_s or None)
        except BaseException:  # cancelled while waiting
            self._leave(fut)
            raise
        if not fut.done():  # the deadline passed first
            self._leave(fut)
            raise QueueTimeout(f"waited more than {self.timeout_s:g} s for a worker")

    def _leave(self, fut: asyncio.Future[None]) -> None:
        """Leave the line; a worker handed over meanwhile is passed on."""
        if fut.done() and not fut.cancelled():
            self.release()
            return
        fut.cancel()
        with contextlib.suppress(ValueError):  # (already handed over and popped)
            self._waiters.remove(fut)

    def release(self) -> None:
        """Free a worker: hand it to the next waiter (FIFO or LIFO), or back to the pool (and
        out of it while a capacity drop has left more busy than there are workers)."""
        if self.busy <= self.workers and self._hand_over():
            return  # the worker passes on: busy stays the same
        self.busy -= 1

    def _hand_over(self) -> bool:
        while self._waiters:
            nxt = self._waiters.pop() if self.lifo else self._waiters.popleft()
            if not nxt.done():
                nxt.set_result(None)
                return True
        return False

    def set_workers(self, workers: int) -> None:
        """Change the number of workers (a capacity drop and its end, the simulator's
        ``reasoner.capacity_drops``): turns in service finish; fewer workers means the
        next ones wait, more means waiting turns start at once."""
        self.workers = max(0, int(workers))
        while self.busy < self.workers and self._hand_over():
            self.busy += 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one reasoning worker for the duration of the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()


# ---------------------------------------------------------------------------- several processes


class CapacityBroker:
    """The one pool of a multi-process Reasoner, served on a Unix socket (line protocol).

    Client lines: ``A <id>`` (admit), ``R <id>`` (release that worker), ``C <id>`` (the
    admit ``id`` was abandoned: leave the line, or give back the worker if it was granted
    meanwhile), ``W <n>`` (set the pool's workers: :meth:`Capacity.set_workers`).
    Broker lines: ``G <id> <n>`` (granted; ``n`` as :meth:`Capacity.admit`),
    ``F <id>`` (full), ``T <id>`` (queue timeout).
    """

    def __init__(self, cap: Capacity, path: str):
        self.cap = cap
        self.path = path

    async def serve(self, ready: threading.Event | None = None) -> None:
        """Serve until cancelled."""
        server = await asyncio.start_unix_server(self._client, path=self.path)
        if ready is not None:
            ready.set()
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held = 0
        pending: dict[str, asyncio.Task[None]] = {}
        granted: set[str] = set()

        async def admit(rid: str) -> None:
            nonlocal held
            try:
                n = await self.cap.admit()
            except QueueFull:
                writer.write(f"F {rid}\n".encode())
            except QueueTimeout:
                writer.write(f"T {rid}\n".encode())
            else:
                held += 1
                granted.add(rid)
                writer.write(f"G {rid} {n}\n".encode())
            finally:
                pending.pop(rid, None)

        try:
            while line := await reader.readline():
                op, _, rid = line.decode().strip().partition(" ")
                if op == "A":
                    pending[rid] = asyncio.create_task(admit(rid))
                elif op == "W":
                    self.cap.set_workers(int(rid))
                elif op in ("R", "C"):
                    task = pending.pop(rid, None) if op == "C" else None
                    if task is not None:
                        task.cancel()
                    elif rid in granted:
                        granted.discard(rid)
                        held -= 1
                        self.cap.release()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:  # the process went away: what it waited for and held is freed
            for task in list(pending.values()):
                task.cancel()
            for _ in range(held):
                self.cap.release()
            writer.close()


def start_broker(cap: Capacity, path: str) -> threading.Thread:
    """Run a :class:`CapacityBroker` on ``path`` in a daemon thread (returns once listening)."""
    ready = threading.Event()
    broker = CapacityBroker(cap, path)
    thread = threading.Thread(target=lambda: asyncio.run(broker.serve(ready)), daemon=True,
                              name="rtalab-capacity-broker")
    thread.start()
    if not ready.wait(10.0):
        raise RuntimeError(f"capacity broker did not start on {path}")
    return thread


class RemoteCapacity:
    """A worker process's view of the broker's pool (the :class:`Capacity` interface)."""

    def __init__(self, path: str, workers: int):
        self.path = path
        self.workers = workers
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: dict[str, asyncio.Future[tuple[str, int]]] = {}
        self._ids = itertools.count()
        self._held: list[str] = []  # granted ids (workers are interchangeable)
        self._lock = asyncio.Lock()
        self._reader_task: asyncio.Task[None] | None = None

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is None:
                reader, self._writer = await asyncio.open_unix_connection(self.path)
                self._reader_task = asyncio.create_task(self._read(reader))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            op, rid, *rest = line.decode().split()
            fut = self._waiting.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result((op, int(rest[0]) if rest else 0))
        for fut in self._waiting.values():  # the broker is gone
            if not fut.done():
                fut.set_exception(ConnectionError("capacity broker closed the connection"))

    async def admit(self) -> int:
        """As :meth:`Capacity.admit`, decided by the broker."""
        writer = await self._connect()
        rid = str(next(self._ids))
        fut: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        writer.write(f"A {rid}\n".encode())
        try:
            op, n = await fut
        except asyncio.CancelledError:
            self._waiting.pop(rid, None)
            writer.write(f"C {rid}\n".encode())
            raise
        if op == "F":
            raise QueueFull("the waiting room is full")
        if op == "T":
            raise QueueTimeout("waited too long for a worker")
        self._held.append(rid)
        return n

    async def set_workers(self, workers: int) -> None:
        """As :meth:`Capacity.set_workers`, on the broker's pool (every process's)."""
        writer = await self._connect()
        self.workers = max(0, int(workers))
        writer.write(f"W {self.workers}\n".encode())
        await writer.drain()

    def release(self) -> None:
        """Give one worker back to the pool."""
        if self._writer is not None and self._held:
            self._writer.write(f"R {self._held.pop()}\n".encode())

    async def close(self) -> None:
        """Close the connection (the broker frees what this process held)."""
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
