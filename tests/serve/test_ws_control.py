"""WebSocket control frames are bounded (rtalab.loadtests.reasoner.wsguard), over raw sockets.

A client with a valid token floods pings and never reads the pongs: its connection is closed
with 1008, the server's memory (RSS, measured) does not grow and returns after close, another
client's turns are served at their normal pace meanwhile.  Invalid UTF-8 in a text frame is
closed with 1007 without a traceback.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from tests.serve.conftest import ALICE, Reasoner, headers, message, stream

flooded = Reasoner.fixture("flooded", "A Reasoner for the control-frame tests.", witness=False)


def _rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame (FIN set)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Raw:
    """A raw socket after the upgrade, with the bytes read past the upgrade response."""

    def __init__(self, sock: socket.socket, rest: bytes):
        self.sock = sock
        self.rest = rest


def _open(r: Reasoner, rcvbuf: int = 4096) -> Raw:
    """A raw WebSocket on /ws after a successful upgrade (tiny receive buffer: a client that
    does not read fills the server's send buffer quickly)."""
    host, port = r.url.removeprefix("http://").split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    h = headers(ALICE, sse=False)
    lines = ["GET /ws HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
             *(f"{name}: {value}" for name, value in h.items())]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        assert chunk, "closed during the upgrade"
        got += chunk
    assert got.startswith(b"HTTP/1.1 101"), got[:200]
    return Raw(s, got.split(b"\r\n\r\n", 1)[1])


def _close_code(raw: Raw) -> int | None:
    """Read what the server sent until it closed; the code of its close frame (None: none)."""
    data, s = raw.rest, raw.sock
    s.settimeout(10)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    i = 0
    while i + 2 <= len(data):
        op, n = data[i] & 0x0F, data[i + 1] & 0x7F
        j = i + 2
        if n == 126:
            n, j = struct.unpack("!H", data[j:j + 2])[0], j + 2
        elif n == 127:
            n, j = struct.unpack("!Q", data[j:j + 8])[0], j + 8
        if op == 0x8 and n >= 2:
            return int(struct.unpack("!H", data[j:j + 2])[0])
        i = j + n
    return None


def _flood(raw: Raw, seconds: float) -> bool:
    """Send pings as fast as possible, never reading; True if the server cut the socket."""
    s = raw.sock
    ping = _frame(0x9, b"x" * 125)
    deadline = time.monotonic() + seconds
    s.settimeout(1.0)
    try:
        while time.monotonic() < deadline:
            s.sendall(ping * 64)
    except (BrokenPipeError, ConnectionResetError):
        return True
    except TimeoutError:  # the server stopped reading (closed, or its buffer is full)
        return True
    return False


def test_ping_flood_is_closed_memory_bounded_others_served(flooded: Reasoner) -> None:
    """Clients in turn (8 or more, for 3 s) flood pings and never read: each is cut off
    (the server stops reading / resets it), the server's RSS stays within 30 MiB of where it
    started (without the bound: +23 MiB per second) and is there after close, and another
    client's turns keep their normal pace meanwhile."""
    pid = int(flooded.get_json("/healthz")["pid"])
    closed_before = _closed(flooded, "ws-control-flood")
    with flooded.ws() as warm:  # warm up: the first turn allocates lazily
        assert warm.request(stream(message("hello"), rid="w")).final_state
    before = _rss_mib(pid)
    turns: list[float] = []
    stop = threading.Event()

    def other_client() -> None:
        with flooded.ws() as w:
            i = 0
            while not stop.is_set():
                t0 = time.monotonic()
                turn = w.request(stream(message("what is my balance"), rid=f"o{i}"))
                assert turn.final_state == "TASK_STATE_COMPLETED"
                turns.append(time.monotonic() - t0)
                i += 1

    t = threading.Thread(target=other_client, daemon=True)
    t.start()
    peak = before
    floods = 0
    t_end = time.monotonic() + 3.0
    while floods < 8 or time.monotonic() < t_end:  # flood for 3 s at least, 8 sockets or more
        s = _open(flooded)
        assert _flood(s, seconds=10.0), "the flood was never cut off"
        s.sock.close()
        floods += 1
        peak = max(peak, _rss_mib(pid))
    stop.set()
    t.join(30)
    after = _rss_mib(pid)
    print(f"{floods} floods; RSS MiB before {before:.1f}, peak {peak:.1f}, after {after:.1f}; "
          f"other client's "
          f"{len(turns)} turns: max {max(turns, default=0):.2f} s")
    assert peak - before < 30, (before, peak)
    assert after - before < 30, (before, after)
    assert len(turns) >= 3 and max(turns) < 3.0, turns  # others' turns: ~0.1 s here
    assert _closed(flooded, "ws-control-flood") - closed_before == floods
    assert 'rta_reasoner_unhandled_exceptions_total{logger="uvicorn"} 0.0' in flooded.metrics()


def test_ping_flood_gets_close_1008(flooded: Reasoner) -> None:
    """500 pings at once, then the client reads: a few pongs, then close 1008."""
    s = _open(flooded, rcvbuf=1 << 16)
    try:
        s.sock.sendall(_frame(0x9, b"x" * 100) * 500)
        assert _close_code(s) == 1008
    finally:
        s.sock.close()


def _closed(r: Reasoner, reason: str) -> float:
    """``rta_reasoner_connections_closed_total{reason}``."""
    for line in r.metrics().splitlines():
        if line.startswith(f'rta_reasoner_connections_closed_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_pings_at_a_sane_rate_are_answered(flooded: Reasoner) -> None:
    s = _open(flooded, rcvbuf=1 << 16)
    try:
        for i in range(30):
            s.sock.sendall(_frame(0x9, f"p{i}".encode()))
            time.sleep(0.06)  # the client's pace (17/s), not synchronisation
        s.sock.sendall(_frame(0x8, struct.pack("!H", 1000)))
        assert _close_code(s) == 1000  # answered, never policed
    finally:
        s.sock.close()


@pytest.mark.parametrize("payload", [b"\xff\xfe", b"{\"a\": \"\xc3\x28\"}", b"\xed\xa0\x80"])
def test_invalid_utf8_is_closed_1007_without_traceback(flooded: Reasoner, payload: bytes) -> None:
    for _ in range(20):
        s = _open(flooded)
        s.sock.sendall(_frame(0x1, payload))
        assert _close_code(s) == 1007
        s.sock.close()
    m = flooded.metrics()
    for logger in ("uvicorn", "rtalab", "a2a", "starlette"):
        assert f'rta_reasoner_unhandled_exceptions_total{{logger="{logger}"}} 0.0' in m
    assert "Traceback" not in flooded.proc.log_text()
    with flooded.ws() as w:  # the server is fine
        assert w.request(stream(message("hi"), rid="x")).final_state == "TASK_STATE_COMPLETED"
