"""The chaos proxy's gRPC side: the A2A gRPC binding forwarded call by call, with faults.

A ``grpc.aio`` server with one generic handler takes every method of
``lf.a2a.v1.A2AService`` (unary or server-streaming, read from the service descriptor; any
other method is forwarded as unary) with identity (de)serializers: the request's bytes and
its metadata (``authorization``, ``a2a-version``, ``a2a-extensions`` ...) go upstream
unchanged on one HTTP/2 channel (plaintext, or TLS verified with the proxy's ``--ca`` /
``--client-cert``); the upstream's initial metadata (the ``a2a-extensions`` echo,
``x-rta-worker``), messages, status, details and trailers (``grpc-status-details-bin``: the
``google.rpc.ErrorInfo``) come back as sent.  Only the request's identity is decoded
(``SendMessageRequest.message.metadata``'s ``.../requestGuid``) and, per stream message,
its end state and ``.../sequenceId``.

Faults are those of the HTTP proxy with the same ``[network]`` keys and random streams (one
per requestGuid), at the level of HTTP/2 streams, not TCP packets (docs/chaos.md):

- uplink, per ``SendStreamingMessage`` / ``SendMessage``: latency; loss (the call is held,
  never forwarded, until the caller gives up; ``DEADLINE_EXCEEDED`` after ``max_hold_s``);
  duplication: the same RPC (same bytes, same metadata) sent upstream a second time on a
  stream of its own, its answer read and discarded; for ``duplicate_first`` of them the copy
  goes first and the original follows once the server started answering the copy, plus the
  duplicate delay;
- downlink, per stream message: latency, reordering within the window (messages carrying a
  sequenceId only; the end state last unless ``reorder_terminal``), a cut at a message: the
  upstream call is cancelled and the caller's stream ends with ``UNAVAILABLE`` (what a proxy
  reports for an upstream stream reset); the HTTP/2 connection and its other streams go on;
- outages: ``blackhole`` (calls arriving in an uplink window held, messages in a downlink
  window swallowed, a stream whose end state vanished held open), ``loss`` (each call and
  each message lost with the outage's ``loss``); ``reset`` and ``reasoner-down`` are the
  TCP gate's in front of this server (the HTTP/2 connection reset: every stream on it).

Every injection is a line of ``chaos.jsonl`` with ``binding: "grpc"``, as on HTTP.

With several ``--grpc-upstream`` (a fleet's replicas, in the order of the ``--upstream``
URLs) each call, and each duplicate copy, goes to the replica the HTTP side's balancer picks
(sticky: by ``SendMessageRequest.message.context_id``, else the requestGuid); the calls in
flight count for ``least_outstanding``, the health probes and the rotation are the HTTP
side's, and the initial metadata's ``x-rta-worker`` becomes ``r<i>/<pid>``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import grpc.aio

from rtalab.loadtests.common.tls import ClientTls, ServerTls, client_grpc_credentials
from rtalab.loadtests.live.grpc_channel import RECONNECT_OPTIONS

from .config import uplink_faults
from .proxy import COPY_FIRST_WAIT_S, WORKER_HEADER, ChaosProxy
from .release import Releaser, StreamTiming
from .wire import TERMINAL, RpcInfo

MAX_MESSAGE = 8 * 1024 * 1024
# metadata the transport sets itself (never copied onto the other leg)
_TRANSPORT_MD = ("user-agent", "te", "content-type", "host")


def _service() -> tuple[str, dict[str, bool]]:
    """The A2A service's full name and, per method, whether its answer is a stream."""
    # lazy: +60 ms (a2a, starlette, google) off importing grpc_proxy
    from a2a.types import a2a_pb2

    s = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
    return s.full_name, {m.name: bool(m.server_streaming) for m in s.methods}


def _forward_md(md: Any, replica: int | None = None) -> tuple[tuple[str, Any], ...]:
    """Metadata to copy onto the other leg (pseudo-headers and transport keys removed; with
    ``replica``, ``x-rta-worker`` prefixed ``r<replica>/``)."""
    out = []
    for k, v in md or ():
        if k.startswith(":") or k.startswith("grpc-") or k in _TRANSPORT_MD:
            continue
        if replica is not None and k == WORKER_HEADER:
            v = f"r{replica}/{v}"
        out.append((k, v))
    return tuple(out)


def context_of(method: str, body: bytes) -> str:
    """The ``message.context_id`` of a ``SendMessageRequest`` (``""`` for anything else)."""
    if method not in ("SendStreamingMessage", "SendMessage"):
        return ""
    # lazy: +47 ms (a2a, starlette, google) off importing grpc_proxy
    from a2a.types import SendMessageRequest
    from google.protobuf.message import DecodeError

    try:
        return str(SendMessageRequest.FromString(body).message.context_id)
    except (DecodeError, ValueError):
        return ""


def _trailers(md: Any) -> tuple[tuple[str, Any], ...]:
    """Upstream trailers to pass back (``grpc-status-details-bin`` kept: the ErrorInfo)."""
    return tuple((k, v) for k, v in md or ()
                 if k == "grpc-status-details-bin" or not (k.startswith(":") or k.startswith(
                     "grpc-") or k in _TRANSPORT_MD))


def _suffix_value(struct: Any, name: str) -> Any:
    """The field of a protobuf Struct whose key ends in ``/name`` (None if absent)."""
    for k, v in struct.fields.items():
        if k == name or k.endswith("/" + name):
            return v
    return None


def request_info(method: str, body: bytes) -> RpcInfo:
    """The identity of a gRPC request: its method and, for a ``SendMessageRequest``, the
    requestGuid of its message's metadata (nothing on undecodable bytes)."""
    if method not in ("SendStreamingMessage", "SendMessage"):
        return RpcInfo(binding="grpc")
    # lazy: +59 ms (a2a, starlette, google) off importing grpc_proxy
    from a2a.types import SendMessageRequest
    from google.protobuf.message import DecodeError

    try:
        req = SendMessageRequest.FromString(body)
    except (DecodeError, ValueError):
        return RpcInfo(method=method, binding="grpc")
    v = _suffix_value(req.message.metadata, "requestGuid")
    guid = v.string_value if v is not None and v.WhichOneof("kind") == "string_value" else ""
    return RpcInfo(method=method, rpc_id="", request_guid=guid, binding="grpc")


def event_info(body: bytes) -> tuple[bool, bool]:
    """(end state, carries a sequenceId) of one ``StreamResponse``'s bytes."""
    # lazy: +74 ms (a2a, starlette, google) off importing grpc_proxy
    from a2a.types import StreamResponse, TaskState
    from google.protobuf.message import DecodeError

    try:
        sr = StreamResponse.FromString(body)
    except (DecodeError, ValueError):
        return False, False
    kind = sr.WhichOneof("payload")
    if kind is None:
        return False, False
    part = getattr(sr, kind)
    if kind == "message":
        return True, False
    state = TaskState.Name(part.status.state) if kind in ("task", "status_update") else ""
    has_seq = _suffix_value(part.metadata, "sequenceId") is not None
    return state in TERMINAL, has_seq


def _unary(ch: grpc.aio.Channel, path: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    """``ch.unary_unary(path)``: raw bytes both ways (no (de)serializer)."""
    return ch.unary_unary(path)


def _unary_stream(ch: grpc.aio.Channel, path: str
                  ) -> grpc.aio.UnaryStreamMultiCallable[bytes, bytes]:
    """``ch.unary_stream(path)``: raw bytes both ways (no (de)serializer)."""
    return ch.unary_stream(path)


class _Cut(Exception):
    """The caller's stream is ended on purpose (a drop)."""


class GrpcChaos:
    """The gRPC half of one chaos proxy: shares ``proxy``'s clock, seed, random streams,
    outages and ledger."""

    def __init__(self, proxy: ChaosProxy, upstream: str, secure: bool,
                 tls: ClientTls | None = None, upstreams: tuple[str, ...] = ()):
        self.p = proxy
        self.cfg = proxy.cfg
        self.upstream, self.secure = upstream, secure
        self.upstreams = upstreams or (upstream,)  # several: a fleet, balanced by proxy's
        self.tls = tls or ClientTls()
        self.channel: grpc.aio.Channel | None = None
        self.channels: list[grpc.aio.Channel] = []
        self.service, self.streaming = _service()

    def open(self) -> None:
        """The upstream channels (on the running loop)."""
        # reconnect within 0.1-1 s of a lost upstream (a restarted Reasoner): gRPC's default
        # backoff (1 s growing to 120 s) would fail calls fast long after it is back
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE), *RECONNECT_OPTIONS]
        self.channels = [grpc.aio.secure_channel(u, client_grpc_credentials(self.tls),
                                                 options=opts) if self.secure
                         else grpc.aio.insecure_channel(u, options=opts)
                         for u in self.upstreams]
        self.channel = self.channels[0]

    async def close(self) -> None:
        """Close the upstream channels."""
        for c in self.channels:
            await c.close()

    def _pick(self, name: str, req: bytes, info: RpcInfo) -> int | None:
        """The replica of one call (None: one upstream, not balanced)."""
        if len(self.channels) < 2 or self.p.balancer is None:
            return None
        key = context_of(name, req) if self.p.balancer.policy == "sticky" else ""
        return self.p.pick(key or info.key)

    def _on(self, replica: int | None) -> grpc.aio.Channel:
        """The channel to ``replica`` (the one upstream's when not balanced)."""
        channel = self.channel if replica is None else self.channels[replica]
        assert channel is not None
        return channel

    # ------------------------------------------------------------------ dispatch

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler: every method, raw bytes both ways."""
        chaos = self

        class _Handler(grpc.GenericRpcHandler):
            def service(self, details: Any) -> Any:
                path = details.method
                name = path.rsplit("/", 1)[-1]
                if chaos.streaming.get(name):
                    async def stream(req: bytes, ctx: Any) -> None:
                        await chaos.stream(path, name, req, ctx)
                    return grpc.unary_stream_rpc_method_handler(stream)

                async def unary(req: bytes, ctx: Any) -> bytes:
                    return await chaos.unary(path, name, req, ctx)
                return grpc.unary_unary_rpc_method_handler(unary)

        return _Handler()

    async def _hold(self, ctx: Any) -> None:
        """Black-hole: never answer until the caller gives up (``DEADLINE_EXCEEDED`` after
        ``max_hold_s``)."""
        await asyncio.sleep(self.cfg.max_hold_s)
        await ctx.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "chaos: request black-holed")

    async def _uplink(self, path: str, info: RpcInfo, req: bytes, md: Any, ctx: Any,
                      streaming: bool) -> Any:
        """The uplink faults of one call; the random stream for its downlink (None when the
        call carries no message).  Holds the call (never returns) when it is lost."""
        if self.p.blackholed("uplink"):
            self.p.ledger.record("blackhole", binding="grpc", request_guid=info.request_guid,
                                 what="request")
            await self._hold(ctx)
        if not info.method:
            return None
        rng = self.p.rng(info)
        f = uplink_faults(self.p.up, rng, info.method in self.cfg.methods,
                          self.cfg.duplicate_first)
        if f.lost or self.p.outage_lost("uplink"):
            self.p.ledger.record("lost", binding="grpc", request_guid=info.request_guid)
            await self._hold(ctx)
        if f.delay_s > 0:
            await asyncio.sleep(f.delay_s)
        if f.duplicate and f.duplicate_first:  # the copy reaches the server first
            started = asyncio.Event()
            self.p.spawn(self._duplicate(path, req, md, info, streaming, 0.0, started,
                                         f.duplicate_delay_s,
                                         self._pick(path.rsplit("/", 1)[-1], req, info)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(started.wait(), COPY_FIRST_WAIT_S)
            await asyncio.sleep(f.duplicate_delay_s)
        elif f.duplicate:
            self.p.spawn(self._duplicate(path, req, md, info, streaming, f.duplicate_delay_s,
                                         replica=self._pick(path.rsplit("/", 1)[-1], req,
                                                            info)))
        return rng

    async def _duplicate(self, path: str, req: bytes, md: Any, info: RpcInfo, streaming: bool,
                         delay_s: float, started: asyncio.Event | None = None,
                         lead_s: float = 0.0, replica: int | None = None) -> None:
        """The extra copy of a call (same bytes, same metadata), its answer discarded; with
        ``started``, set once the server answers the copy (the original ``lead_s`` behind);
        sent to ``replica`` when balancing."""
        await asyncio.sleep(delay_s)
        channel = self._on(replica)
        status = "unanswered"
        try:
            call: grpc.aio.Call
            with self.p._in_flight(replica):
                if streaming:
                    call = scall = _unary_stream(channel, path)(req, metadata=md)
                    await scall.initial_metadata()
                    if started is not None:
                        started.set()
                    async for _ in scall:
                        pass
                else:
                    call = ucall = _unary(channel, path)(req, metadata=md)
                    await ucall
                status = (await call.code()).name
        except grpc.aio.AioRpcError as e:
            status = e.code().name
        finally:
            if started is not None:
                started.set()
            first = started is not None
            self.p.ledger.record("duplicate", binding="grpc", request_guid=info.request_guid,
                                 rpc_id="", delay_s=round(-lead_s if first else delay_s, 6),
                                 copy_status=status, first=first)

    # ------------------------------------------------------------------ calls

    async def unary(self, path: str, name: str, req: bytes, ctx: Any) -> bytes:
        """One unary call through the uplink faults (and the downlink outages)."""
        info = request_info(name, req)
        md = _forward_md(ctx.invocation_metadata())
        await self._uplink(path, info, req, md, ctx, False)
        replica = self._pick(name, req, info)
        call = _unary(self._on(replica), path)(req, metadata=md)
        try:
            with self.p._in_flight(replica):
                answer = await call
        except grpc.aio.AioRpcError as e:
            await self._abort(ctx, e.code(), e.details(), e.trailing_metadata())
            raise  # not reached: abort raises
        if self.p.blackholed("downlink") or self.p.outage_lost("downlink"):
            self.p.ledger.record("swallowed", binding="grpc", request_guid=info.request_guid,
                                 events=1)
            await self._hold(ctx)
        ctx.set_trailing_metadata(_trailers(await call.trailing_metadata()))
        return answer

    @staticmethod
    async def _abort(ctx: Any, code: Any, details: str | None, trailers: Any) -> None:
        """End the caller's call with the upstream's status, details and trailers."""
        await ctx.abort(code, details or "", _trailers(trailers))

    async def stream(self, path: str, name: str, req: bytes, ctx: Any) -> None:
        """One server-streaming call: uplink faults, then every message through the
        downlink faults."""
        info = request_info(name, req)
        md = _forward_md(ctx.invocation_metadata())
        rng = await self._uplink(path, info, req, md, ctx, True)
        replica = self._pick(name, req, info)
        call = _unary_stream(self._on(replica), path)(req, metadata=md)
        try:
            with self.p._in_flight(replica):
                head = await call.initial_metadata()
                if head:
                    await ctx.send_initial_metadata(_forward_md(head, replica))
                await self._relay(call, ctx, info, rng)
        except grpc.aio.AioRpcError as e:
            await self._abort(ctx, e.code(), e.details(), e.trailing_metadata())
        except _Cut:
            call.cancel()
            await ctx.abort(grpc.StatusCode.UNAVAILABLE, "chaos: stream cut")
        except asyncio.CancelledError:  # the caller went away: so does the upstream call
            call.cancel()
            raise
        code = await call.code()
        if code != grpc.StatusCode.OK:
            await self._abort(ctx, code, await call.details(), await call.trailing_metadata())
        ctx.set_trailing_metadata(_trailers(await call.trailing_metadata()))

    async def _relay(self, call: Any, ctx: Any, info: RpcInfo, rng: Any) -> None:
        """Upstream messages -> caller: outages, cuts, latency and reordering."""
        p = self.p
        timing = StreamTiming(p.down, rng, self.cfg.reorder_terminal) if rng is not None \
            else None
        releaser = Releaser(ctx.write) if timing is not None and timing.active else None
        loop = asyncio.get_running_loop()
        swallowed, partitioned = 0, False
        try:
            async for msg in call:
                terminal, has_seq = event_info(msg)
                if p.blackholed("downlink"):
                    swallowed += 1
                    partitioned = partitioned or terminal
                    continue
                if p.outage_lost("downlink"):
                    swallowed += 1
                    continue
                if timing is None:
                    await ctx.write(msg)
                    continue
                if timing.draw_drop():
                    p.ledger.record("drop", binding="grpc", request_guid=info.request_guid,
                                    rpc_id="", events=timing.events)
                    raise _Cut()
                if releaser is None:
                    timing.events += 1
                    await ctx.write(msg)
                else:
                    releaser.put(timing.release(loop.time(), terminal, has_seq), msg)
            if releaser is not None:
                await releaser.drain()
            if partitioned:  # not even the stream's end gets through a partition
                await asyncio.sleep(self.cfg.max_hold_s)
        finally:
            if releaser is not None:
                releaser.cancel()
            if timing is not None:
                p._stream_done("grpc", info, timing, swallowed)


async def start_grpc(chaos: GrpcChaos, port: int, tls: ServerTls) -> tuple[grpc.aio.Server, int]:
    """The proxy's gRPC server on 127.0.0.1:``port`` (0: any; TLS with ``tls``); the port."""
    chaos.open()
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                      ("grpc.max_send_message_length", MAX_MESSAGE),
                                      ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((chaos.handler(),))
    address = f"127.0.0.1:{port}"
    bound = (server.add_secure_port(address, tls.grpc_credentials()) if tls.enabled
             else server.add_insecure_port(address))
    await server.start()
    return server, bound
