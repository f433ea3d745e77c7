"""Binding 2: JSON-RPC over WebSocket, one socket per call, several requests in flight on it.

``websockets.sync.client`` works under gevent's monkey patching (about 7,300 turns/s on a core).
Frames of different requests interleave freely and are routed by their
JSON-RPC ``id``, without a reader greenlet of our own: a request that waits
for a frame while nobody reads the socket reads it itself (the common case of
one request at a time costs no hop through a queue and another greenlet);
frames of other requests it meets are handed to them, and when it stops
reading (its frame came, its timer fired, the socket ended) a waiting request
takes the socket over.  The upgrade carries auth and ``A2A-Extensions``; its
response's echo (within the negotiation timeout) activates the profile for
the call.  Each request is reported as a Locust stats row of type ``WS`` when
its stream ends.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

import gevent
from gevent.event import Event
from websockets.exceptions import InvalidStatus
from websockets.protocol import State
from websockets.sync.client import connect

from rtalab.loadtests.common.tls import ClientTls, reason
from rtalab.loadtests.live.bindings import ChannelContext
from rtalab.loadtests.live.call import StreamBroken
from rtalab.loadtests.live.wire import (
    JSON_SCAN,
    cancel_answer_side_effect,
    cancel_request,
    decode_frame,
    headers,
    http_error_frame,
)

REQUEST_NAME = "SendStreamingMessage"
_DECODE = decode_frame
_SCAN = JSON_SCAN
_OPEN = State.OPEN


class _CancelTimeout(Exception):
    """The answer to a ``CancelTask`` did not come in time."""


class WsExchange:
    """One request on the call's socket."""

    __slots__ = ("_done", "_start", "_t0", "broken", "channel", "echo", "frames",
                 "http_status", "name", "rpc_id", "wakeup", "worker", "ws")

    def __init__(self, channel: WsChannel, rpc_id: str, name: str = REQUEST_NAME) -> None:
        self.channel = channel
        self.ws = channel.ws  # the socket it was sent on
        self.rpc_id = rpc_id
        self.name = name
        self.frames: deque[dict[str, Any]] = deque()  # handed over by another request
        self.broken = False
        self.wakeup: Event | None = None  # made when it first has to wait for another reader
        self.http_status: int | None = 101
        self.worker = channel.worker
        self.echo = channel.echo
        self._t0 = time.perf_counter()
        self._start = time.time()
        self._done = False

    def next_frame(self) -> dict[str, Any] | None:
        """The next frame of this request (raises StreamBroken if the socket closed)."""
        ch = self.channel
        while True:
            if self.frames:
                return self.frames.popleft()
            if self.broken:
                raise StreamBroken(f"socket closed: {ch.close_reason}")
            if ch.reading is None:
                break
            self._wait()
        # nobody reads the socket: read it until our frame comes, handing over the others'
        ch.reading = self
        ws, routes, rpc_id = self.ws, ch.routes, self.rpc_id
        frame: dict[str, Any]  # (a JSON object: typed here, not cast per frame)
        try:
            while True:
                try:  # decode_frame, its one scan of the common case inline
                    text = ws.recv()
                    try:
                        frame, end = _SCAN(text, 0)
                    except StopIteration:
                        end = -1
                    if end != len(text):  # whitespace around it, or no JSON: the full decoder
                        frame = _DECODE(text)
                    rid = frame.get("id")
                except Exception as e:  # any end of the socket ends its requests
                    ch.lost(ws, str(e) or type(e).__name__)
                    raise StreamBroken(f"socket closed: {ch.close_reason}") from None
                if type(rid) is not str:
                    rid = str(rid)
                if rid == rpc_id:
                    return frame
                other = routes.get(rid)
                if other is not None:
                    other.frames.append(frame)
                    other.wake()
        finally:
            ch.reading = None
            if ch.waiting:  # the socket is free: a waiting request takes it over
                ch.waiting[0].wake()

    def _wait(self) -> None:
        """Another request reads the socket: wait until it hands a frame or the socket over."""
        wakeup = self.wakeup
        if wakeup is None:
            wakeup = self.wakeup = Event()
        else:
            wakeup.clear()
        waiting = self.channel.waiting
        waiting.append(self)
        try:
            wakeup.wait()
        finally:
            waiting.remove(self)

    def wake(self) -> None:
        """A frame was handed over, the socket ended, or the socket is free to read."""
        if self.wakeup is not None:
            self.wakeup.set()

    def close(self, failure: str | None = None) -> None:
        """Stop routing this id and report the request."""
        if self._done:
            return
        self._done = True
        self.channel.routes.pop(self.rpc_id, None)
        self.channel.events.request.fire(
            request_type="WS", name=self.name, start_time=self._start,
            response_time=(time.perf_counter() - self._t0) * 1000.0, response_length=0,
            exception=RuntimeError(failure) if failure else None, context={})


class UpgradeRefused(StreamBroken):
    """The server answered the WebSocket upgrade with an HTTP status instead of 101."""

    def __init__(self, status: int, body: bytes, headers: Any) -> None:
        super().__init__(f"upgrade refused: HTTP {status}")
        self.status, self.body, self.headers = status, body, headers


class RefusedExchange:
    """A request that could not be sent because the upgrade was refused: its answer is the
    refusal (status and body, mapped to the profile's code), one error frame."""

    def __init__(self, channel: WsChannel, refused: UpgradeRefused) -> None:
        self.channel = channel
        self.http_status: int | None = refused.status
        self.worker = None
        self.echo = False
        self._frame: dict[str, Any] | None = http_error_frame(
            refused.status, refused.body, refused.headers, channel.ext_uri)
        self._t0 = time.perf_counter()
        self._start = time.time()
        self._done = False

    def next_frame(self) -> dict[str, Any] | None:
        """The refusal as one error frame, then the end."""
        frame, self._frame = self._frame, None
        return frame

    def close(self, failure: str | None = None) -> None:
        """Report the request (always a failure: the upgrade was refused)."""
        if self._done:
            return
        self._done = True
        self.channel.events.request.fire(
            request_type="WS", name=REQUEST_NAME, start_time=self._start,
            response_time=(time.perf_counter() - self._t0) * 1000.0, response_length=0,
            exception=RuntimeError(failure or f"upgrade refused: HTTP {self.http_status}"),
            context={})


class WsChannel:
    """A call's WebSocket: opened at the start of the call, closed at its end."""

    binding = "ws"

    def __init__(self, base_url: str, ext_uri: str, token: str | None, events: Any,
                 tls: ClientTls | None = None) -> None:
        self.url = base_url.replace("http://", "ws://").replace("https://", "wss://").rstrip(
            "/") + "/ws"
        self.ext_uri = ext_uri
        self.token = token
        self.events = events
        self.ssl = (tls or ClientTls()).context_for(self.url)  # None for ws://
        self.ws: Any = None
        self.routes: dict[str, WsExchange] = {}
        self.reading: WsExchange | None = None  # the request reading the socket now
        self.waiting: list[WsExchange] = []  # requests waiting while another one reads
        self.echo = False
        self.worker: str | None = None
        self.close_reason = ""
        self.active = False

    def open(self, negotiation_s: float) -> bool | None:
        """Upgrade; True if the extension was echoed within ``negotiation_s`` (0: no limit)."""
        self._connect(True)
        return self.echo and (negotiation_s <= 0 or self.connect_s <= negotiation_s)

    def _connect(self, active: bool) -> None:
        t0 = time.perf_counter()
        self.active = active

        try:
            self.ws = connect(self.url, additional_headers=headers(self.ext_uri, self.token,
                                                                   active, sse=False),
                              open_timeout=10.0, close_timeout=1.0, max_size=2**22,
                              compression=None, ssl=self.ssl)
        except InvalidStatus as e:  # refused (401, 403, 404, 429, 5xx ...): read its body
            resp = e.response
            self.close_reason = f"upgrade refused: HTTP {resp.status_code}"
            raise UpgradeRefused(resp.status_code, bytes(resp.body or b""),
                                 resp.headers) from None
        except Exception as e:
            self.close_reason = reason(e)  # a certificate problem named in one line
            raise StreamBroken(f"upgrade failed: {self.close_reason}") from None
        self.connect_s = time.perf_counter() - t0
        h = self.ws.response.headers
        self.echo = self.ext_uri in (h.get("A2A-Extensions") or "")
        self.worker = h.get("X-RTA-Worker")
        self.close_reason = ""

    def lost(self, ws: Any, reason: str) -> None:
        """Socket ``ws`` ended: every request on it is broken; the next send reconnects."""
        self.close_reason = reason
        for other in list(self.routes.values()):
            if other.ws is ws:
                other.broken = True
                other.wake()
        if self.ws is ws:
            self.ws = None

    def send(self, rpc_id: str, body: bytes, active: bool) -> WsExchange | RefusedExchange:
        """Send one request frame (reconnecting first if the socket was lost); a refused
        upgrade is this request's answer (:class:`RefusedExchange`)."""
        ws = self.ws
        if ws is not None and ws.protocol.state is not _OPEN:  # it ended while nobody read
            self.lost(ws, "socket closed")
        if self.ws is None:
            try:
                self._connect(self.active)
            except UpgradeRefused as e:
                return RefusedExchange(self, e)
        ex = WsExchange(self, rpc_id)
        self.routes[rpc_id] = ex
        try:
            self.ws.send(body, text=True)
        except Exception as e:
            ex.close(f"send failed: {e}")
            raise StreamBroken(f"send failed: {e}") from None
        return ex

    def cancel(self, rpc_id: str, task_id: str, active: bool,
               timeout_s: float = 2.0) -> str | None:
        """``CancelTask`` on the socket; its answer is awaited (at most ``timeout_s``) so a
        call that ends right after a barge-in does not close the socket under it; the
        ``rta/sideEffect`` the answer reports, if any."""
        if self.ws is None:
            return None
        ex = WsExchange(self, rpc_id, "CancelTask")
        self.routes[rpc_id] = ex
        failure = None
        reported = None
        try:
            self.ws.send(cancel_request(rpc_id, task_id), text=True)
            with gevent.Timeout(timeout_s, _CancelTimeout):
                reported = cancel_answer_side_effect(ex.next_frame(), self.ext_uri)
        except StreamBroken:
            failure = "socket closed"
        except Exception as e:  # a cancel is advisory: record, never raise
            failure = str(e) or type(e).__name__
        ex.close(failure)
        return reported

    def close(self) -> None:
        """Close the socket."""
        ws, self.ws = self.ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()


def open_channel(ctx: ChannelContext) -> WsChannel:
    """The registry's factory (:mod:`rtalab.loadtests.live.bindings`): one socket per call."""
    return WsChannel(ctx.host, ctx.ext_uri, ctx.token, ctx.events, ctx.tls)
