"""The chaos proxy's L7 app (raw ASGI): JSON-RPC over HTTP/SSE, HTTP+JSON and WebSocket
with faults.

Requests and frames are passed through byte for byte, headers included
(``Authorization``, ``A2A-Version``, ``A2A-Extensions`` and, back, the echo and
``X-RTA-Worker``); only hop-by-hop headers are dropped.  Faults (see
:mod:`rtalab.loadtests.chaos.config` for the mapping from ``[network]``):

- uplink, per request (a JSON-RPC POST or WebSocket frame, or an HTTP+JSON
  ``POST /message:stream`` / ``/message:send``), from the request's own
  random stream (seed, requestGuid and how often that guid was seen): latency,
  loss (black-holed), duplication (a copy sent upstream later; its answer is
  read and discarded; on WebSocket it carries the id ``chaos-dup-N``, whose
  frames are swallowed); for ``duplicate_first`` of them the copy goes first and
  the original follows (HTTP: once the server started answering the copy, plus
  the duplicate delay; WebSocket: behind it on the same socket);
- downlink, per stream event: latency, reordering within the window, a
  connection cut at an event (SSE: the caller's TCP connection is reset; WS: the
  socket is reset, every request on it is cut);
- black-hole outages: requests arriving in an uplink window are never forwarded
  (held until the caller gives up), stream events in a downlink window are
  swallowed, and a stream whose end state vanished is held open until the caller gives
  up (nothing, not even the stream's end, gets through a partition); ``loss`` outages: each
  request is black-holed and each stream event lost with the outage's ``loss`` (a stream
  whose end state was lost ends without one: noticed, as in the simulator).  ``reset`` and
  ``reasoner-down`` outages are the gate's (:mod:`rtalab.loadtests.chaos.gate`).

Anything malformed is forwarded unchanged (the upstream answers it); an
unreachable upstream gets HTTP 502 with a JSON-RPC error (WebSocket: the upgrade
is refused with 502).  Every injection is a line of ``chaos.jsonl``.

With a :class:`~rtalab.loadtests.chaos.balancer.Balancer` (several ``--upstream``) the proxy is
also the fleet's load balancer: each HTTP request, each duplicate copy and each WebSocket
upgrade goes to the replica the policy picks, and the response's ``X-RTA-Worker`` becomes
``r<i>/<worker>`` so the ledger tells which replica answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from rtalab.loadtests.common.tls import ClientTls

from .balancer import Balancer
from .config import ChaosConfig, rng_for, uplink_faults
from .gate import Gate
from .ledger import ChaosLedger
from .release import Releaser, StreamTiming
from .wire import RpcInfo, SseSplitter, parse_frame, parse_request, sse_data

log = logging.getLogger("rtalab.chaos")
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "host",
                        "content-length"})
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_WS_FRAME = 8 * 1024 * 1024
GUID_MEMORY = 200_000
UPSTREAM_ERROR = -32099
COPY_FIRST_WAIT_S = 5.0  # the longest an original is held for its copy to be answered first


class DropConnection(Exception):
    """Raised inside the app after the caller's connection was reset on purpose."""


def _jsonrpc_error(rpc_id: Any, code: int, message: str) -> bytes:
    """A JSON-RPC error body."""
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id,
                       "error": {"code": code, "message": message}}).encode()


# google.rpc status names of the proxy's own HTTP+JSON answers
_GRPC_STATUS = {413: "INVALID_ARGUMENT", 502: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def _error_body(info: RpcInfo, status: int, code: int, message: str) -> bytes:
    """The proxy's own error answer in the request's binding: a JSON-RPC error, or (HTTP+JSON)
    a google.rpc-style error object (A2A's HTTP+JSON error form)."""
    if info.binding == "rest":
        return json.dumps({"error": {"code": status, "status": _GRPC_STATUS.get(
            status, "UNKNOWN"), "message": message}}).encode()
    return _jsonrpc_error(info.rpc_id, code, message)


def _forward_headers(raw: list[tuple[bytes, bytes]], drop_ws: bool = False
                     ) -> list[tuple[str, str]]:
    """Request headers to send upstream (hop-by-hop and, for WS, handshake headers removed)."""
    out = []
    for k, v in raw:
        name = k.decode("latin-1").lower()
        if name in HOP_BY_HOP or (drop_ws and name.startswith("sec-websocket-")):
            continue
        out.append((name, v.decode("latin-1")))
    return out


WORKER_HEADER = "x-rta-worker"


def _response_headers(items: Any, drop_ws: bool = False,
                      replica: int | None = None) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to pass back (with ``replica``: ``X-RTA-Worker`` prefixed
    ``r<replica>/``)."""
    out = []
    for k, v in items:
        name = k.lower() if isinstance(k, str) else k.decode("latin-1").lower()
        if name in HOP_BY_HOP or (drop_ws and name.startswith("sec-websocket-")):
            continue
        value = v.encode("latin-1") if isinstance(v, str) else v
        if replica is not None and name == WORKER_HEADER:
            value = f"r{replica}/".encode("latin-1") + value
        out.append((name.encode("latin-1"), value))
    return out


class ChaosProxy:
    """ASGI app: forward to ``upstream`` with the faults of ``cfg``; log them to ``ledger``."""

    def __init__(self, cfg: ChaosConfig, upstream: str, ledger: ChaosLedger,
                 gate: Gate | None = None, t0: float | None = None,
                 tls: ClientTls | None = None, balancer: Balancer | None = None):
        self.cfg = cfg
        self.tls = tls or ClientTls()  # how the proxy verifies the upstream
        self.upstream = upstream.rstrip("/")
        self.balancer = balancer  # None: one upstream, no balancing
        self.ledger = ledger
        self.gate = gate
        self.t0 = t0 if t0 is not None else time.monotonic()
        self.client: httpx.AsyncClient | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._dups = 0
        self.up, self.down = cfg.network.uplink, cfg.network.downlink
        self.outage_rng = np.random.default_rng([cfg.seed, 28])  # 'loss' outages' draws

    # ------------------------------------------------------------------ helpers

    def now_s(self) -> float:
        """Seconds since the proxy's clock start."""
        return time.monotonic() - self.t0

    def blackholed(self, direction: str) -> bool:
        """True inside a black-hole outage window on ``direction``."""
        return self.cfg.outage_at(self.now_s(), direction, "blackhole") is not None

    def outage_lost(self, direction: str) -> bool:
        """Inside a ``loss`` outage on ``direction``: this request / stream event is lost (its
        own draw, from the outage stream; False outside one)."""
        o = self.cfg.outage_at(self.now_s(), direction, "loss")
        return o is not None and bool(self.outage_rng.random() < o.loss)

    def rng(self, info: RpcInfo) -> np.random.Generator:
        """The random stream of this request: seed, its key and its repeat count."""
        key = info.key
        n = self._seen.pop(key, 0)
        self._seen[key] = n + 1
        if len(self._seen) > GUID_MEMORY:
            self._seen.popitem(last=False)
        return rng_for(self.cfg.seed, f"{key}#{n}")

    def spawn(self, coro: Awaitable[Any]) -> None:
        """A background task kept alive until done."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def drop(self, scope: dict[str, Any]) -> None:
        """Reset the caller's connection (via the gate) and abort this handler."""
        if self.gate is not None:
            self.gate.abort(scope.get("client"))
        raise DropConnection()

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any],
                       send: Callable[..., Any]) -> None:
        """Dispatch lifespan, HTTP and WebSocket."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._ws(scope, receive, send)

    async def _lifespan(self, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        """Open / close the upstream HTTP client."""
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.client = httpx.AsyncClient(
                    timeout=httpx.Timeout(connect=10.0, read=None, write=30.0, pool=None),
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
                    verify=self.tls.context())
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                for t in list(self.tasks):
                    t.cancel()
                if self.client is not None:
                    await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ HTTP / SSE

    async def _read_body(self, receive: Callable[..., Any]) -> bytes | None:
        """The request body; None if the caller left or it is too large (b"" if empty)."""
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ValueError("body too large")
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)

    async def _answer(self, send: Callable[..., Any], status: int, body: bytes) -> None:
        """A small JSON answer from the proxy itself."""
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _hold(self, receive: Callable[..., Any], send: Callable[..., Any],
                    info: RpcInfo) -> None:
        """Black-hole: never answer until the caller gives up (504 after ``max_hold_s``)."""
        try:
            async with asyncio.timeout(self.cfg.max_hold_s):
                while (await receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            await self._answer(send, 504, _error_body(info, 504, UPSTREAM_ERROR,
                                                      "chaos: request black-holed"))

    def pick(self, key: str) -> int | None:
        """The replica for a request with sticky ``key`` (None: no balancer, one upstream)."""
        return None if self.balancer is None else self.balancer.pick(key)

    def _url(self, scope: dict[str, Any], ws: bool = False, replica: int | None = None) -> str:
        """The upstream URL of this request (on ``replica``'s upstream, when balancing)."""
        qs = scope.get("query_string", b"")
        base = self.upstream if replica is None else self.balancer.upstreams[replica]  # type: ignore[union-attr]  # a replica is only picked when balancing
        if ws and base.startswith("http"):
            base = "ws" + base[4:]
        path = cast("bytes", scope.get("raw_path", scope["path"].encode()))
        return base + path.decode("latin-1").split("?")[0] + (
            f"?{qs.decode('latin-1')}" if qs else "")

    @contextlib.contextmanager
    def _in_flight(self, replica: int | None) -> Any:
        """Count a request in flight on ``replica`` (nothing without a balancer)."""
        if replica is None:
            yield
            return
        assert self.balancer is not None
        with self.balancer.using(replica):
            yield

    def _connect_failed(self, replica: int | None, e: Exception) -> None:
        """Tell the balancer a connect to ``replica`` failed (other errors are not its)."""
        if replica is not None and isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout,
                                                  OSError)):
            assert self.balancer is not None
            self.balancer.failed(replica)

    async def _http(self, scope: dict[str, Any], receive: Callable[..., Any],
                    send: Callable[..., Any]) -> None:
        """One HTTP request through the faults."""
        try:
            body = await self._read_body(receive)
        except ValueError:
            await self._answer(send, 413, _jsonrpc_error(None, -32600, "request body too large"))
            return
        if body is None:
            return
        method = scope["method"]
        obj, info = parse_request(body, scope["path"]) if method == "POST" and body else (
            None, RpcInfo(binding="sse" if scope["path"] == "/" else "rest"))
        faulty = bool(info.method)
        rng = self.rng(info) if faulty else None
        if self.blackholed("uplink"):
            self.ledger.record("blackhole", binding=info.binding, request_guid=info.request_guid,
                               rpc_id=info.rpc_id, what="request")
            await self._hold(receive, send, info)
            return
        if rng is not None:
            f = uplink_faults(self.up, rng, info.method in self.cfg.methods,
                              self.cfg.duplicate_first)
            if f.lost or self.outage_lost("uplink"):
                self.ledger.record("lost", binding=info.binding, request_guid=info.request_guid,
                                   rpc_id=info.rpc_id)
                await self._hold(receive, send, info)
                return
            if f.delay_s > 0:
                await asyncio.sleep(f.delay_s)
            if f.duplicate and f.duplicate_first:  # the copy reaches the server first
                started = asyncio.Event()
                self.spawn(self._duplicate_http(scope, body, info, 0.0, started,
                                                f.duplicate_delay_s, obj))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(started.wait(), COPY_FIRST_WAIT_S)
                await asyncio.sleep(f.duplicate_delay_s)
            elif f.duplicate:
                self.spawn(self._duplicate_http(scope, body, info, f.duplicate_delay_s,
                                                sticky=obj))
        replica = self.pick(self._sticky_key(obj, info))
        with self._in_flight(replica):
            await self._forward(scope, receive, send, body, info, rng, replica)

    def _sticky_key(self, obj: Any, info: RpcInfo) -> str:
        """What the sticky balancer hashes: the body's contextId, else the request's key."""
        return "" if self.balancer is None else self.balancer.key_of(obj, info.key)

    async def _forward(self, scope: dict[str, Any], receive: Callable[..., Any],
                       send: Callable[..., Any], body: bytes, info: RpcInfo,
                       rng: np.random.Generator | None, replica: int | None) -> None:
        """Send the request to the upstream (``replica``'s) and relay its answer."""
        assert self.client is not None
        req = self.client.build_request(scope["method"], self._url(scope, replica=replica),
                                        headers=_forward_headers(scope["headers"]), content=body)
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.HTTPError as e:
            self._connect_failed(replica, e)
            await self._answer(send, 502, _error_body(
                info, 502, UPSTREAM_ERROR, f"chaos: upstream unreachable ({type(e).__name__})"))
            return
        try:
            relay = self._relay(scope, resp, send, info, rng, replica)
            watcher = asyncio.ensure_future(self._until_disconnect(receive))
            work = asyncio.ensure_future(relay)
            done, _ = await asyncio.wait({watcher, work}, return_when=asyncio.FIRST_COMPLETED)
            watcher.cancel()
            if work in done:
                try:
                    work.result()  # DropConnection propagates: uvicorn closes the transport
                except httpx.HTTPError:  # the upstream died mid-answer: so does the caller's
                    if self.gate is not None:
                        self.gate.abort(scope.get("client"))
                    raise DropConnection() from None
                except OSError:  # the caller went away while we were writing
                    return
            else:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, DropConnection, OSError):
                    await work
        finally:
            await resp.aclose()

    @staticmethod
    async def _until_disconnect(receive: Callable[..., Any]) -> None:
        """Return when the caller disconnects."""
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _relay(self, scope: dict[str, Any], resp: httpx.Response,
                     send: Callable[..., Any], info: RpcInfo,
                     rng: np.random.Generator | None, replica: int | None = None) -> None:
        """Pass the upstream response back; SSE events go through the downlink faults."""
        headers = _response_headers(resp.headers.raw, replica=replica)
        sse = (resp.headers.get("content-type", "").startswith("text/event-stream")
               and not resp.headers.get("content-encoding") and rng is not None)
        await send({"type": "http.response.start", "status": resp.status_code,
                    "headers": headers})
        if not sse:
            async for chunk in resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        assert rng is not None

        async def deliver(event: bytes) -> None:
            await send({"type": "http.response.body", "body": event, "more_body": True})

        timing = StreamTiming(self.down, rng, self.cfg.reorder_terminal)
        releaser = Releaser(deliver) if timing.active else None
        loop = asyncio.get_running_loop()
        splitter = SseSplitter()
        swallowed = 0
        partitioned = False  # the terminal event vanished in a blackhole window
        try:
            async for chunk in resp.aiter_raw():
                for event in splitter.feed(chunk):
                    ev = parse_frame(sse_data(event))
                    if self.blackholed("downlink"):
                        swallowed += 1
                        partitioned = partitioned or ev.terminal
                        continue
                    if self.outage_lost("downlink"):  # a 'loss' outage: this event is lost
                        swallowed += 1
                        continue
                    if timing.draw_drop():
                        self.ledger.record("drop", binding=info.binding,
                                           request_guid=info.request_guid,
                                           rpc_id=info.rpc_id, events=timing.events)
                        if releaser is not None:
                            releaser.cancel()
                        self.drop(scope)
                    if releaser is None:
                        timing.events += 1
                        await deliver(event)
                    else:
                        releaser.put(timing.release(loop.time(), ev.terminal,
                                                    ev.sequence_id is not None), event)
            if releaser is not None:
                await releaser.drain()
            if partitioned:  # as in a partition, not even the stream's end gets through: the
                # caller's timers end the attempt (the simulator's lost terminal, never noticed)
                await asyncio.sleep(self.cfg.max_hold_s)
        finally:
            if releaser is not None:
                releaser.cancel()
            self._stream_done(info.binding, info, timing, swallowed)
        await send({"type": "http.response.body", "body": splitter.rest()})

    def _stream_done(self, binding: str, info: RpcInfo, timing: StreamTiming,
                     swallowed: int) -> None:
        """Ledger lines of a finished stream."""
        if timing.delayed:
            self.ledger.record("reorder", binding=binding, request_guid=info.request_guid,
                               rpc_id=info.rpc_id, events=timing.events, delayed=timing.delayed,
                               overtaken=timing.overtaken, out_of_order=timing.overtaken > 0)
        if swallowed:
            self.ledger.record("swallowed", binding=binding, request_guid=info.request_guid,
                               rpc_id=info.rpc_id, events=swallowed)

    async def _duplicate_http(self, scope: dict[str, Any], body: bytes, info: RpcInfo,
                              delay_s: float, started: asyncio.Event | None = None,
                              lead_s: float = 0.0, sticky: Any = None) -> None:
        """The extra copy of a request: sent ``delay_s`` later (or first, setting ``started``
        once the server answers it, the original ``lead_s`` behind), its answer discarded.
        A balancer routes it as a request of its own (``sticky``: the decoded body)."""
        await asyncio.sleep(delay_s)
        assert self.client is not None
        status: int | str = "unanswered"
        replica = self.pick(self._sticky_key(sticky, info))
        try:
            with self._in_flight(replica):
                async with self.client.stream(scope["method"], self._url(scope, replica=replica),
                                              content=body,
                                              headers=_forward_headers(scope["headers"])) as r:
                    if started is not None:
                        started.set()
                    async for _ in r.aiter_raw():
                        pass
                    status = r.status_code
        except httpx.HTTPError as e:
            self._connect_failed(replica, e)
            status = f"error: {type(e).__name__}"
        finally:  # recorded once the copy's answer is in (or on shutdown)
            if started is not None:
                started.set()
            first = started is not None
            self.ledger.record("duplicate", binding=info.binding, request_guid=info.request_guid,
                               rpc_id=info.rpc_id,
                               delay_s=round(-lead_s if first else delay_s, 6),
                               copy_status=status, first=first)

    # ------------------------------------------------------------------ WebSocket

    async def _ws(self, scope: dict[str, Any], receive: Callable[..., Any],
                  send: Callable[..., Any]) -> None:
        """One WebSocket: upgrade upstream first (denials are passed back), then relay."""
        if (await receive())["type"] != "websocket.connect":
            return
        if self.blackholed("uplink"):
            self.ledger.record("blackhole", binding="ws", what="upgrade")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.max_hold_s):
                    while (await receive())["type"] != "websocket.disconnect":
                        pass
            return
        # a socket is balanced once, at its upgrade (sticky: by the caller's address)
        client = scope.get("client") or ("", 0)
        replica = self.pick(f"ws:{client[0]}:{client[1]}")
        with self._in_flight(replica):
            await self._ws_to(scope, receive, send, replica)

    async def _ws_to(self, scope: dict[str, Any], receive: Callable[..., Any],
                     send: Callable[..., Any], replica: int | None) -> None:
        """Upgrade on ``replica``'s upstream (or the one upstream) and relay the socket."""
        try:
            url = self._url(scope, ws=True, replica=replica)
            up = await connect(url, ssl=self.tls.context_for(url),
                               additional_headers=_forward_headers(scope["headers"], True),
                               open_timeout=10, max_size=MAX_WS_FRAME, ping_interval=None,
                               compression=None, close_timeout=2)
        except InvalidStatus as e:
            r = e.response
            await self._deny(scope, send, r.status_code, bytes(r.body or b""),
                             _response_headers(r.headers.raw_items(), True, replica))
            return
        except (OSError, TimeoutError, InvalidHandshake) as e:
            self._connect_failed(replica, e)
            await self._deny(scope, send, 502, _jsonrpc_error(
                None, UPSTREAM_ERROR, f"chaos: upstream unreachable ({type(e).__name__})"),
                [(b"content-type", b"application/json")])
            return
        try:
            assert up.response is not None
            await send({"type": "websocket.accept",
                        "headers": _response_headers(up.response.headers.raw_items(), True,
                                                     replica)})
            await _WsRelay(self, scope, receive, send, up).run()
        finally:
            await up.close()

    async def _deny(self, scope: dict[str, Any], send: Callable[..., Any], status: int,
                    body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """Refuse the upgrade with ``status`` (or close 1011 if denials are unsupported)."""
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1011})
            return
        headers = [h for h in headers if h[0] != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})


def _id_key(rpc_id: Any) -> str:
    """A hashable key for any JSON-RPC id."""
    return json.dumps(rpc_id, sort_keys=True)


class _WsRelay:
    """Both directions of one proxied WebSocket."""

    def __init__(self, proxy: ChaosProxy, scope: dict[str, Any], receive: Callable[..., Any],
                 send: Callable[..., Any], up: ClientConnection):
        self.p, self.scope, self.receive, self.send, self.up = proxy, scope, receive, send, up
        self.discard: dict[str, tuple[RpcInfo, float, bool]] = {}  # (info, delay, copy first)
        self.streams: dict[str, tuple[RpcInfo, StreamTiming, list[int]]] = {}
        self.releaser: Releaser | None = None
        self.conn_rng = proxy.rng(RpcInfo(method="ws", rpc_id=id(self)))
        self.sent_lock = asyncio.Lock()

    async def deliver(self, frame: str | bytes) -> None:
        """Send one frame to the caller."""
        key = "text" if isinstance(frame, str) else "bytes"
        await self.send({"type": "websocket.send", key: frame})

    async def run(self) -> None:
        """Relay until either side closes; a drop resets the caller."""
        timing = StreamTiming(self.p.down, self.conn_rng, self.p.cfg.reorder_terminal)
        if timing.active:
            self.releaser = Releaser(self.deliver)
        tasks = [asyncio.ensure_future(self.client_to_upstream()),
                 asyncio.ensure_future(self.upstream_to_client())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                exc = t.exception()
                if isinstance(exc, DropConnection):
                    raise exc
            up_closed = tasks[1] in done
            if up_closed and self.releaser is not None:
                await self.releaser.drain()
            if up_closed:
                code = self.up.close_code or 1000
                with contextlib.suppress(Exception):
                    await self.send({"type": "websocket.close",
                                     "code": code if code not in (1005, 1006, 1015) else 1011})
        finally:
            for t in tasks:
                t.cancel()
            if self.releaser is not None:
                self.releaser.cancel()
            for key in list(self.discard):
                self.copy_done(key, "unanswered")

    async def client_to_upstream(self) -> None:
        """Caller frames -> upstream, through the uplink faults."""
        p = self.p
        while True:
            msg = await self.receive()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("text")
            if data is None:
                data = msg.get("bytes") or b""
            obj, info = parse_request(data)
            if not info.method:
                await self.up.send(data)
                continue
            rng = p.rng(info)
            if p.blackholed("uplink"):
                p.ledger.record("blackhole", binding="ws", request_guid=info.request_guid,
                                rpc_id=info.rpc_id, what="request")
                continue
            f = uplink_faults(p.up, rng, info.method in p.cfg.methods, p.cfg.duplicate_first)
            if f.lost or p.outage_lost("uplink"):
                p.ledger.record("lost", binding="ws", request_guid=info.request_guid,
                                rpc_id=info.rpc_id)
                continue
            self.streams[_id_key(info.rpc_id)] = (info, StreamTiming(
                p.down, rng, p.cfg.reorder_terminal), [0])
            if f.duplicate and f.duplicate_first and isinstance(obj, dict):
                # the copy first on the socket, the original duplicate_delay_s behind it
                p._dups += 1
                copy = dict(obj, id=f"chaos-dup-{p._dups}")
                self.discard[_id_key(copy["id"])] = (info, -f.duplicate_delay_s, True)
                p.spawn(self._send_pair(json.dumps(copy), data, f.delay_s,
                                        f.duplicate_delay_s))
                continue
            if f.delay_s > 0:  # later frames with shorter delays overtake this one
                p.spawn(self._send_later(data, f.delay_s))
            else:
                await self.up.send(data)
            if f.duplicate and isinstance(obj, dict):
                p._dups += 1
                copy = dict(obj, id=f"chaos-dup-{p._dups}")
                self.discard[_id_key(copy["id"])] = (info, f.duplicate_delay_s, False)
                p.spawn(self._send_copy(copy, f.delay_s + f.duplicate_delay_s))

    async def _send_later(self, data: str | bytes, delay_s: float) -> None:
        """Forward a frame after its uplink delay."""
        await asyncio.sleep(delay_s)
        with contextlib.suppress(ConnectionClosed):
            await self.up.send(data)

    async def _send_pair(self, first: str | bytes, then: str | bytes, delay_s: float,
                         gap_s: float) -> None:
        """Forward ``first`` after ``delay_s``, then ``then`` ``gap_s`` later (one socket:
        the order is kept)."""
        await asyncio.sleep(delay_s)
        with contextlib.suppress(ConnectionClosed):
            await self.up.send(first)
            await asyncio.sleep(gap_s)
            await self.up.send(then)

    async def _send_copy(self, copy: dict[str, Any], delay_s: float) -> None:
        """The duplicate of a request frame, sent later (its frames are discarded)."""
        await asyncio.sleep(delay_s)
        with contextlib.suppress(ConnectionClosed):
            await self.up.send(json.dumps(copy))

    def copy_done(self, key: str, status: str) -> None:
        """Ledger line of a duplicate, once its answer ended (or its socket closed)."""
        info, delay_s, first = self.discard.pop(key)
        self.p.ledger.record("duplicate", binding="ws", request_guid=info.request_guid,
                             rpc_id=info.rpc_id, delay_s=round(delay_s, 6), copy_status=status,
                             first=first)

    async def upstream_to_client(self) -> None:
        """Upstream frames -> caller, through the downlink faults."""
        p = self.p
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ConnectionClosed):
            async for frame in self.up:
                ev = parse_frame(frame)
                key = _id_key(ev.rpc_id)
                if key in self.discard:
                    if ev.terminal:
                        self.copy_done(key, "answered")
                    continue
                info, timing, swallowed = self.streams.get(key) or (
                    RpcInfo(rpc_id=ev.rpc_id), StreamTiming(p.down, self.conn_rng,
                                                             p.cfg.reorder_terminal), [0])
                if ev.terminal:
                    self.streams.pop(key, None)
                if p.blackholed("downlink") or p.outage_lost("downlink"):
                    swallowed[0] += 1
                else:
                    if timing.draw_drop():
                        p.ledger.record("drop", binding="ws", request_guid=info.request_guid,
                                        rpc_id=info.rpc_id, events=timing.events,
                                        in_flight=len(self.streams))
                        p.drop(self.scope)
                    if self.releaser is None:
                        timing.events += 1
                        await self.deliver(frame)
                    else:
                        self.releaser.put(timing.release(loop.time(), ev.terminal,
                                                    ev.sequence_id is not None), frame)
                if ev.terminal:
                    p._stream_done("ws", info, timing, swallowed[0])
