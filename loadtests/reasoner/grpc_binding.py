"""The A2A gRPC binding of the Reasoner: the SDK's ``GrpcHandler`` on the same request handler.

One ``grpc.aio`` server per worker process, on the worker's asyncio loop, started and
stopped by the app lifespan (:mod:`rtalab.loadtests.reasoner.app`), so a gRPC turn goes through
exactly the pipeline of the JSON-RPC, REST and WebSocket bindings: the same
:class:`~rtalab.loadtests.reasoner.handler.ProfileRequestHandler` (negotiation, validation,
tenancy, dedup, rate limits, the witness), the same executor, capacity pool, task store
and metrics.  With ``--workers N`` every worker binds the same port (``SO_REUSEPORT``,
gRPC's default on Linux) and the kernel spreads the connections.

What this module adds around the SDK's servicer:

- **auth** (an interceptor, before any handler runs): the ``authorization: Bearer <token>``
  metadata against the same token table as the HTTP bindings; a failure is status
  ``UNAUTHENTICATED`` with a ``google.rpc.ErrorInfo`` (reason ``AUTH``, metadata
  ``errorCode: auth``), the gRPC form of the HTTP 401 (A2A §5.4);
- **negotiation**: the client asks for the profile with the ``a2a-extensions`` metadata;
  the server's echo is the ``a2a-extensions`` initial metadata (the SDK never echoes; the
  HTTP bindings' :class:`~rtalab.loadtests.reasoner.negotiation.ExtensionEcho` does the same on
  headers), sent before the first event, with ``x-rta-worker: <pid>``;
- **bounds**: ``grpc.max_receive_message_length`` is the body bound (a larger request is
  ``RESOURCE_EXHAUSTED``), ``grpc.max_concurrent_streams`` bounds a connection's streams;
- **safe failures**: an exception that is not an A2A error is ``INTERNAL`` with a fixed
  text (never a traceback or an internal address on the wire); A2A errors keep the SDK's
  canonical mapping (TaskNotFound = ``NOT_FOUND`` ...), except where the SDK's table
  departs from A2A §5.4: ``UnsupportedOperationError``, ``PushNotificationNotSupportedError``
  and ``VersionNotSupportedError`` are ``UNIMPLEMENTED`` (the SDK says
  ``FAILED_PRECONDITION``);
- **version**: an ``a2a-version`` metadata naming a version this server does not speak
  (not 1.x) is ``VersionNotSupportedError`` (the SDK checks ``A2A-Version`` on JSON-RPC
  and REST only); a call without it is served as 1.0.

Profile rejections (errors.md: a FAILED task with ``rta/errorCode``) are stream events, as
on every binding: gRPC statuses carry only what the binding itself refuses.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from a2a.auth.user import UnauthenticatedUser, User
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.grpc_handler import (
    DefaultGrpcServerCallContextBuilder,
    GrpcHandler,
)
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import (
    A2A_ERROR_REASONS,
    A2AError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from a2a.utils.grpc_status import status_to_grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from rtalab.loadtests.common.tls import ServerTls
from rtalab.loadtests.reasoner import metrics
from rtalab.loadtests.reasoner.auth import BearerAuth
from rtalab.loadtests.reasoner.negotiation import WORKER_HEADER

#: a servicer's call context (requests and responses are the A2A protobuf messages)
Context = grpc.aio.ServicerContext[Any, Any]

log = logging.getLogger("rtalab.reasoner")
EXT_METADATA = "a2a-extensions"
AUTH_METADATA = "authorization"
WORKER_METADATA = WORKER_HEADER.lower()
INTERNAL_TEXT = "Something went wrong on our side."
VERSION_METADATA = "a2a-version"
# A2A §5.4's gRPC column where the SDK's _ERROR_CODE_MAP says FAILED_PRECONDITION.
SPEC_STATUS: dict[type[A2AError], grpc.StatusCode] = {
    UnsupportedOperationError: grpc.StatusCode.UNIMPLEMENTED,
    PushNotificationNotSupportedError: grpc.StatusCode.UNIMPLEMENTED,
    VersionNotSupportedError: grpc.StatusCode.UNIMPLEMENTED,
}
MAX_CONCURRENT_STREAMS = 1000  # one load generator process multiplexes all its calls


def free_port(host: str) -> int:
    """A free TCP port on ``host`` (for ``--grpc-port 0``, chosen once before the workers
    start so that all of them bind the same one)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def version_supported(values: list[str]) -> bool:
    """``a2a-version`` metadata: absent, or a 1.x version (the patch and minor are ignored,
    as the SDK's ``validate_version`` does on the HTTP bindings)."""
    for value in values:
        major = value.strip().split(".", 1)[0]
        return major == "1"
    return True


def _metadata(context: Any, key: str) -> list[str]:
    """The values of metadata ``key`` (lower case) of a call."""
    md = context.invocation_metadata() if hasattr(context, "invocation_metadata") else context
    out = []
    for k, v in md or ():
        if k == key:
            out.append(v if isinstance(v, str) else v.decode("latin-1"))
    return out


def _bearer(values: list[str]) -> str | None:
    """The token of the first ``authorization: Bearer <token>`` value, if well formed."""
    for value in values:
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        return token if scheme.lower() == "bearer" and token else None
    return None


def auth_status(keys_error_code: str = "auth") -> grpc.Status | Any:
    """The rich UNAUTHENTICATED status (google.rpc.Status with an ErrorInfo)."""
    info = error_details_pb2.ErrorInfo(reason="AUTH", domain="rtalab",
                                       metadata={"errorCode": keys_error_code})
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=grpc.StatusCode.UNAUTHENTICATED.value[0],
                               message="Unauthorized", details=[detail])
    return status_to_grpc(status)


class _Principal(User):
    """An authenticated caller."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        """Always: only a known token makes one."""
        return True

    @property
    def user_name(self) -> str:
        """The principal the token maps to."""
        return self._name


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses a call without a known bearer token (``UNAUTHENTICATED``) before it reaches
    the servicer; nothing is checked when no token is configured."""

    def __init__(self, auth: BearerAuth) -> None:
        self.auth = auth

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: Any) -> Any:
        """Pass the call on, or answer it with the refusal."""
        handler = await continuation(details)
        if handler is None or not self.auth.enabled:
            return handler
        if self.auth.principal(_bearer(_metadata(details.invocation_metadata,
                                                 AUTH_METADATA))) is not None:
            return handler
        metrics.AUTH_FAILURES.labels("grpc").inc()
        refusal = auth_status()

        async def deny(request: Any, context: Context) -> Any:
            context.set_trailing_metadata(refusal.trailing_metadata)
            await context.abort(refusal.code, refusal.details)

        kw = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny, **kw)
        return grpc.unary_unary_rpc_method_handler(deny, **kw)


class ProfileContextBuilder(DefaultGrpcServerCallContextBuilder):
    """The SDK's context (requested extensions from ``a2a-extensions``) with the principal of
    the bearer token (already checked by :class:`AuthInterceptor`)."""

    def __init__(self, auth: BearerAuth) -> None:
        self.auth = auth

    def build_user(self, context: Context) -> User:
        """``anonymous`` when auth is off, else the token's principal."""
        if not self.auth.enabled:
            return _Principal("anonymous")
        name = self.auth.principal(_bearer(_metadata(context, AUTH_METADATA)))
        return _Principal(name) if name is not None else UnauthenticatedUser()


class ProfileGrpcHandler(GrpcHandler):
    """The SDK's servicer with the extension echo and safe internal errors."""

    def __init__(self, request_handler: Any, auth: BearerAuth, ext_uri: str) -> None:
        super().__init__(request_handler, ProfileContextBuilder(auth))
        self.ext_uri = ext_uri

    def _build_call_context(self, context: Context,
                            request: Any) -> ServerCallContext:
        versions = _metadata(context, VERSION_METADATA)
        if not version_supported(versions):
            raise VersionNotSupportedError(
                message=f"A2A version '{versions[0][:20]}' is not supported; this server "
                        "speaks 1.0.")
        call_context = super()._build_call_context(context, request)
        call_context.state["binding"] = "grpc"
        return call_context

    async def abort_context(self, error: A2AError, context: Context) -> None:
        """The SDK's rich status, with A2A §5.4's code where the SDK's table departs."""
        code = SPEC_STATUS.get(type(error))
        if code is None:
            await super().abort_context(error, context)
            return
        info = error_details_pb2.ErrorInfo(
            reason=A2A_ERROR_REASONS.get(type(error), "UNKNOWN_ERROR"),
            domain="a2a-protocol.org")
        detail = any_pb2.Any()
        detail.Pack(info)
        status = status_to_grpc(status_pb2.Status(
            code=code.value[0], message=getattr(error, "message", None) or str(error),
            details=[detail]))
        context.set_trailing_metadata(tuple(status.trailing_metadata))
        await context.abort(status.code, status.details)

    async def _echo(self, context: Context) -> None:
        """Initial metadata: the worker, and the echo when the profile was asked for."""
        md = [(WORKER_METADATA, str(os.getpid()))]
        requested = ",".join(_metadata(context, EXT_METADATA))
        if self.ext_uri in (u.strip() for u in requested.split(",")):
            md.append((EXT_METADATA, self.ext_uri))
        await context.send_initial_metadata(tuple(md))

    async def _internal(self, context: Context, e: Exception) -> None:
        log.error("gRPC call failed (%s)", type(e).__name__, exc_info=e)
        await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_TEXT)

    async def SendStreamingMessage(
            self, request: a2a_pb2.SendMessageRequest, context: Context,
    ) -> AsyncIterable[a2a_pb2.StreamResponse]:
        """The turn's events, after the echo."""
        await self._echo(context)
        try:
            async for item in super().SendStreamingMessage(request, context):
                yield item
        except (grpc.aio.AbortError, grpc.RpcError):
            raise
        except Exception as e:
            await self._internal(context, e)

    async def SubscribeToTask(
            self, request: a2a_pb2.SubscribeToTaskRequest, context: Context,
    ) -> AsyncIterable[a2a_pb2.StreamResponse]:
        """A task's events, after the echo."""
        await self._echo(context)
        try:
            async for item in super().SubscribeToTask(request, context):
                yield item
        except (grpc.aio.AbortError, grpc.RpcError):
            raise
        except Exception as e:
            await self._internal(context, e)

    async def _handle_unary(self, request: Any, context: Context,
                            handler_func: Any, default_response: Any) -> Any:
        await self._echo(context)
        try:
            return await super()._handle_unary(request, context, handler_func,
                                               default_response)
        except (grpc.aio.AbortError, grpc.RpcError):
            raise
        except Exception as e:
            await self._internal(context, e)
        return default_response


class GrpcBinding:
    """The worker's gRPC server (started and stopped by the app lifespan)."""

    def __init__(self, request_handler: Any, auth: BearerAuth, ext_uri: str, host: str,
                 port: int, tls: ServerTls, max_message_bytes: int) -> None:
        self.handler = ProfileGrpcHandler(request_handler, auth, ext_uri)
        self.auth = auth
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Bind and serve (every worker on the same port)."""
        server = grpc.aio.server(
            interceptors=[AuthInterceptor(self.auth)],
            options=[("grpc.so_reuseport", 1),
                     ("grpc.max_receive_message_length", self.max_message_bytes),
                     ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS)])
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(self.handler, server)
        if self.tls.enabled:
            server.add_secure_port(self.address, self.tls.grpc_credentials())
        else:
            server.add_insecure_port(self.address)
        await server.start()
        self.server = server
        log.info("gRPC binding on %s (%s)", self.address, "TLS" if self.tls.enabled else
                 "plaintext")

    async def stop(self, grace_s: float = 2.0) -> None:
        """Stop accepting; give the streams in flight ``grace_s``."""
        if self.server is not None:
            await self.server.stop(grace_s)
            self.server = None
