"""WebSocket control frames are bounded: a ping flood closes its own connection, never grows memory.

uvicorn's WebSocket protocol (``websockets-sansio``) answers every ping at once and writes the
pong whether or not the client reads: a client sending pings and never reading made the
server queue pongs without bound (23 MiB/s, held after close) and slowed every other client.
:class:`GuardedWsProtocol` (given to uvicorn as ``ws=``) adds, per connection:

- a **control-frame rate limit**: pings and unsolicited pongs draw from a token bucket of
  :data:`CONTROL_BURST` frames refilled at :data:`CONTROL_RATE_PER_S`; a client beyond it is
  closed with 1008 (policy violation);
- **backpressure** on the replies: a ping that arrives while the connection's unsent output
  exceeds :data:`PONG_BACKLOG_BYTES` (the client is not reading) closes it with 1008 too;
  RFC 6455 §5.5.3 lets pongs to unanswered pings be coalesced, so nothing is queued;
- a policed connection gets its close frame, its further input is discarded unparsed, and
  its socket is **aborted** after :data:`ABORT_AFTER_S` (or closed at the client's end of
  stream), so its buffers are freed even if the client never reads (memory returns after
  close);
- **invalid UTF-8** in a text message is closed with 1007 and one log line, without the
  traceback (and the unhandled-exceptions count) of uvicorn's own handler.

Every closure is counted in ``rta_reasoner_connections_closed_total{reason}``
(``ws-control-flood``, ``ws-backpressure``, ``ws-invalid-utf8``) and logged at most once a
second per reason (:mod:`rtalab.loadtests.reasoner.conns`).  Other connections are untouched.
"""

from __future__ import annotations

import time
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request

from rtalab.loadtests.reasoner.conns import guard

CONTROL_RATE_PER_S = 20.0  # pings + unsolicited pongs per second, sustained
CONTROL_BURST = 50.0
PONG_BACKLOG_BYTES = 64 * 1024  # unsent output beyond which a ping is a flood
ABORT_AFTER_S = 2.0  # a policed connection's socket is aborted this long after its close frame


class GuardedWsProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets-sansio protocol with the bounds of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._tokens = CONTROL_BURST
        self._refilled = time.monotonic()
        self._policed = False

    def _peer(self) -> str:
        return self.client[0] if self.client else "?"

    def _take(self) -> bool:
        """One control frame from the bucket; False when the client exceeds the rate."""
        now = time.monotonic()
        self._tokens = min(CONTROL_BURST, self._tokens + (now - self._refilled)
                           * CONTROL_RATE_PER_S)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _police(self, code: int, reason: str, text: str) -> None:
        """Close this connection with ``code`` (counted, throttled log): the close frame is
        written, what the client still sends is read and discarded (closing a socket with
        unread input would reset it and lose the close frame), and the socket is aborted
        after :data:`ABORT_AFTER_S` or at the client's end of stream."""
        if self._policed:
            return
        self._policed = True
        guard().closed(reason, self._peer())
        self.conn.data_to_send()  # drop the pongs owed: the close frame supersedes them
        if self.conn.close_sent is None:
            self.conn.fail(code, text)
            self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": text})
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.loop.call_later(ABORT_AFTER_S, self.transport.abort)

    def data_received(self, data: bytes) -> None:
        """A policed connection's input is discarded unparsed."""
        if self._policed:
            return
        super().data_received(data)

    def eof_received(self) -> None:
        """The client finished sending: a policed connection is closed now."""
        if self._policed:
            self.transport.close()
        return None

    def _allowed(self, event: Frame) -> bool:
        """Police one control frame (a ping, or a pong nobody asked for)."""
        if event.opcode == Opcode.PONG and self.pending_ping_payload is not None:
            return True  # the answer to our keep-alive ping
        if not self._take():
            self._police(1008, "ws-control-flood", "too many control frames")
            return False
        if (event.opcode == Opcode.PING
                and self.transport.get_write_buffer_size() > PONG_BACKLOG_BYTES):
            self._police(1008, "ws-backpressure", "pongs not read")
            return False
        return True

    def handle_events(self) -> None:
        """uvicorn's event dispatch with the control frames policed first (the parser has
        queued their replies meanwhile; a policed connection never writes them)."""
        for event in self.conn.events_received():
            if self._policed:
                continue  # drained: nothing of a policed connection is handled
            if isinstance(event, Request):
                self.handle_connect(event)
            elif isinstance(event, Frame):
                op = event.opcode
                if op in (Opcode.PING, Opcode.PONG) and not self._allowed(event):
                    continue
                if op == Opcode.CONT:
                    self.handle_cont(event)
                elif op == Opcode.TEXT:
                    self.handle_text(event)
                elif op == Opcode.BINARY:
                    self.handle_bytes(event)
                elif op == Opcode.PING:
                    self.handle_ping()
                elif op == Opcode.PONG:
                    self.handle_pong(event)
                elif op == Opcode.CLOSE:
                    self.handle_close(event)
        if self._policed:
            self.conn.data_to_send()

    def send_receive_event_to_app(self) -> None:
        """Invalid UTF-8 in a text message: 1007, one log line, no traceback."""
        if self.curr_msg_data_type == "text" and not self.close_sent:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            try:
                data.decode()
            except UnicodeDecodeError:
                self.frames = []
                self._police(1007, "ws-invalid-utf8", "invalid UTF-8")
                return
        super().send_receive_event_to_app()
