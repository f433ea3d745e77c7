"""Binding 2: JSON-RPC over WebSocket, one socket per call, several requests in flight on it.

``websockets.sync.client`` works under gevent's monkey patching (NOTES.md).
One reader greenlet per socket routes every frame to the queue of its
JSON-RPC ``id``; frames of different requests interleave freely.  The
upgrade carries auth and ``A2A-Extensions``; its response's echo (within the
negotiation timeout) activates the profile for the call.  Each request is
reported as a Locust stats row of type ``WS`` when its stream ends.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import gevent
from gevent.queue import SimpleQueue

from loadtests.live.call import StreamBroken
from loadtests.live.wire import cancel_request, headers

REQUEST_NAME = "SendStreamingMessage"
_BROKEN = object()


class WsExchange:
    """One request on the call's socket: its frames come from the reader greenlet."""

    def __init__(self, channel: WsChannel, rpc_id: str, name: str = REQUEST_NAME) -> None:
        self.channel = channel
        self.rpc_id = rpc_id
        self.name = name
        self.queue: SimpleQueue = SimpleQueue()  # no task tracking: cheaper per frame
        self.http_status: int | None = 101
        self.worker = channel.worker
        self.echo = channel.echo
        self._t0 = time.perf_counter()
        self._start = time.time()
        self._done = False

    def next_frame(self) -> dict[str, Any] | None:
        """The next frame of this request (raises StreamBroken if the socket closed)."""
        item = self.queue.get()
        if item is _BROKEN:
            raise StreamBroken(f"socket closed: {self.channel.close_reason}")
        return item

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


class WsChannel:
    """A call's WebSocket: opened at the start of the call, closed at its end."""

    binding = "ws"

    def __init__(self, base_url: str, ext_uri: str, token: str | None, events: Any) -> None:
        self.url = base_url.replace("http://", "ws://").replace("https://", "wss://").rstrip(
            "/") + "/ws"
        self.ext_uri = ext_uri
        self.token = token
        self.events = events
        self.ws: Any = None
        self.routes: dict[str, WsExchange] = {}
        self.reader: gevent.Greenlet | None = None
        self.echo = False
        self.worker: str | None = None
        self.close_reason = ""
        self.active = False

    def open(self, negotiation_s: float) -> bool | None:
        """Upgrade; True if the extension was echoed within ``negotiation_s`` (0: no limit)."""
        self._connect(True)
        return self.echo and (negotiation_s <= 0 or self.connect_s <= negotiation_s)

    def _connect(self, active: bool) -> None:
        from websockets.sync.client import connect

        t0 = time.perf_counter()
        self.active = active
        try:
            self.ws = connect(self.url, additional_headers=headers(self.ext_uri, self.token,
                                                                   active, sse=False),
                              open_timeout=10.0, close_timeout=1.0, max_size=2**22,
                              compression=None)
        except Exception as e:
            self.close_reason = str(e)
            raise StreamBroken(f"upgrade failed: {e}") from None
        self.connect_s = time.perf_counter() - t0
        h = self.ws.response.headers
        self.echo = self.ext_uri in (h.get("A2A-Extensions") or "")
        self.worker = h.get("X-RTA-Worker")
        self.close_reason = ""
        self.reader = gevent.spawn(self._read)

    def _read(self) -> None:
        ws = self.ws
        try:
            while True:
                frame = json.loads(ws.recv())
                ex = self.routes.get(str(frame.get("id")))
                if ex is not None:
                    ex.queue.put(frame)
        except Exception as e:  # any end of the socket ends its requests
            self.close_reason = str(e) or type(e).__name__
        for ex in list(self.routes.values()):
            ex.queue.put(_BROKEN)
        self.ws = None

    def send(self, rpc_id: str, body: bytes, active: bool) -> WsExchange:
        """Send one request frame (reconnecting first if the socket was lost)."""
        if self.ws is None:
            self._connect(self.active)
        ex = WsExchange(self, rpc_id)
        self.routes[rpc_id] = ex
        try:
            self.ws.send(body.decode())
        except Exception as e:
            ex.close(f"send failed: {e}")
            raise StreamBroken(f"send failed: {e}") from None
        return ex

    def cancel(self, rpc_id: str, task_id: str, active: bool, timeout_s: float = 2.0) -> None:
        """``CancelTask`` on the socket; its answer is awaited (at most ``timeout_s``) so a
        call that ends right after a barge-in does not close the socket under it."""
        if self.ws is None:
            return
        ex = WsExchange(self, rpc_id, "CancelTask")
        self.routes[rpc_id] = ex
        failure = None
        try:
            self.ws.send(cancel_request(rpc_id, task_id).decode())
            if ex.queue.get(timeout=timeout_s) is _BROKEN:
                failure = "socket closed"
        except Exception as e:  # a cancel is advisory: record, never raise
            failure = str(e) or type(e).__name__
        ex.close(failure)

    def close(self) -> None:
        """Close the socket and stop the reader."""
        ws, self.ws = self.ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()
        if self.reader is not None:
            self.reader.kill(block=False)
