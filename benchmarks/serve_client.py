"""The serve bench's load generator: a raw asyncio HTTP/1.1 SSE client of the Reasoner.

Written on raw streams (uvloop when installed) so the client costs little CPU; the
wire constants (extension URI, end states, event kinds) come from
:mod:`rtalab.loadtests.wireclient`, the module the tests' client lives in.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rtalab.loadtests.wireclient import EVENT_KINDS, frame_ends, headers, k, message, state, stream

CHUNKS = 3
TURN_TIMEOUT_S = 30.0
MIN_RATE_PER_S = 5.0  # a measurement slower than this is aborted (bounds the run's duration)
TOKEN, PRINCIPAL = "rtalab-bench-token", "bench"

# --------------------------------------------------------------------------- load generator


class TurnError(Exception):
    """The turn did not end as expected (its message is the error kind)."""


def request_bytes(host: str, port: int, body: bytes) -> bytes:
    """One HTTP/1.1 keep-alive POST / with the profile's headers (:func:`headers`)."""
    fields = {"Host": f"{host}:{port}", **headers(TOKEN), "Content-Length": str(len(body))}
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"POST / HTTP/1.1\r\n{head}\r\n".encode("ascii") + body


def turn_body(run_id: str, i: int, context: int | None = None) -> bytes:
    """A SendStreamingMessage of turn ``i`` (unique ids, no side effect) on context number
    ``context`` (default ``i``: a new context)."""
    ids = f"{run_id}-{i}"
    ctx = f"{run_id}-{i if context is None else context}"
    msg = message(ctx=f"c-{ctx}", guid=f"g-{ids}", turn=f"t-{ids}", message_id=f"m-{ids}",
                  interaction=f"i-{ids}", meta={k("sideEffect"): False})
    return json.dumps(stream(msg, rid=f"r-{ids}"), separators=(",", ":")).encode()


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
        if frame_ends(frame):  # the wire's frame-end rule (wireclient)
            self.final = str(state(result))
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
