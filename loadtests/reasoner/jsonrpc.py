"""JSON-RPC decoding and dispatch shared by the HTTP/SSE and WebSocket bindings.

``decode_request`` checks one JSON-RPC request strictly and cheaply (no
tracebacks in the logs for malformed input): ``-32700`` parse error, ``-32600``
invalid request, ``-32601`` unknown method, ``-32602`` invalid params.  The
dispatcher then calls the SDK's own per-method processing (version check,
streaming vs unary) on the profile request handler, so both bindings behave
exactly like the SDK's JSON-RPC endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, cast

from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import (
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    JSONRPCError,
    MethodNotFoundError,
)
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import A2AError, ContentTypeNotSupportedError
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message as ProtoMessage
from jsonrpc.jsonrpc2 import JSONRPC20Response
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rtalab.loadtests.reasoner import metrics
from rtalab.loadtests.reasoner.executor import PLAN_KEY
from rtalab.loadtests.reasoner.jsontext import BadJson, load_strict

STREAMING_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
METHODS: dict[str, type[ProtoMessage]] = dict(JsonRpcDispatcher.METHOD_TO_MODEL)
log = logging.getLogger("rtalab.reasoner")

RequestId = str | int | None


@dataclass(frozen=True)
class Decoded:
    """A well-formed request: id, method and the parsed proto params."""

    id: RequestId
    method: str
    params: ProtoMessage
    has_id: bool


@dataclass(frozen=True)
class DecodeError:
    """A malformed request: the JSON-RPC error to answer with."""

    id: RequestId
    error: JSONRPCError | A2AError

    def response(self) -> dict[str, Any]:
        """The JSON-RPC error response object."""
        return build_error_response(self.id, self.error)


def _json_media_type(content_type: str | None) -> bool:
    """Absent, ``application/json`` or any ``+json`` type (parameters ignored)."""
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def content_type_error(decoded: DecodeError, content_type: str | None) -> DecodeError:
    """A body that is not JSON, sent as a non-JSON media type (``text/plain``...), is
    ``ContentTypeNotSupportedError`` (-32005): A2A §9.1 wants ``application/json``
    requests.  Only on the parse-error path: JSON under any label is still served."""
    error = decoded.error  # (decode_request's errors are all JSON-RPC ones)
    if (not isinstance(error, JSONRPCError) or error.code != JSONParseError().code
            or _json_media_type(content_type)):
        return decoded
    return DecodeError(None, ContentTypeNotSupportedError(
        message="Content-Type must be application/json"))


def _short(text: str, limit: int = 200) -> str:
    """Error details are clipped (they may quote the request)."""
    return text if len(text) <= limit else text[:limit] + "..."


def decode_request(raw: bytes | str) -> Decoded | DecodeError:
    """Validate one JSON-RPC 2.0 request (no batches)."""
    try:
        body = load_strict(raw)
    except BadJson as e:
        if e.kind == "unicode":  # decoded, but echoing any of it would not serialise
            return DecodeError(None, InvalidRequestError(message=f"Invalid request: {e}"))
        return DecodeError(None, JSONParseError(message=_short(str(e))))
    if not isinstance(body, dict):
        why = "Batch requests are not supported" if isinstance(body, list) else \
            "A request must be a JSON object"
        return DecodeError(None, InvalidRequestError(message=why))
    rid = body.get("id")
    if isinstance(rid, bool) or not (rid is None or isinstance(rid, str | int)):
        return DecodeError(None, InvalidRequestError(
            message="Invalid request: id must be a string, integer, or null"))
    if body.get("jsonrpc") != "2.0":
        return DecodeError(rid, InvalidRequestError(
            message="Invalid request: 'jsonrpc' must be exactly '2.0'"))
    method = body.get("method")
    if not isinstance(method, str) or not method:
        return DecodeError(rid, InvalidRequestError(message="Method is required"))
    model = METHODS.get(method)
    if model is None:
        return DecodeError(rid, MethodNotFoundError())
    params = body.get("params", {})
    if not isinstance(params, dict):
        return DecodeError(rid, InvalidParamsError(message="params must be an object"))
    try:
        proto = ParseDict(params, model(), ignore_unknown_fields=True)
    except Exception as e:  # ParseError, TypeError, ValueError, RecursionError...
        return DecodeError(rid, InvalidParamsError(data={"parseError": _short(str(e))}))
    return Decoded(rid, method, proto, "id" in body)


class ProfileJsonRpcDispatcher(JsonRpcDispatcher):
    """The SDK's JSON-RPC dispatcher with strict decoding and a binding-neutral ``dispatch``."""

    async def dispatch(self, req: Decoded, context: ServerCallContext
                       ) -> dict[str, Any] | AsyncGenerator[dict[str, Any], None]:
        """A JSON-RPC response object, or a stream of them for streaming methods."""
        context.state["method"] = req.method
        context.state["request_id"] = req.id
        context.tenant = getattr(req.params, "tenant", "")
        try:
            if req.method in STREAMING_METHODS:
                return await self._process_streaming_request(req.id, req.params, context)
            result = await self._process_non_streaming_request(req.params, context)
            # json-rpc has no types: its response's data is the JSON-RPC object
            return cast("dict[str, Any]", JSONRPC20Response(result=result, _id=req.id).data)
        except A2AError as e:
            return build_error_response(req.id, e)
        except Exception as e:
            log.exception("unhandled error in %s", req.method)
            return build_error_response(req.id, InternalError(message=_short(str(e))))

    async def handle_requests(self, request: Request) -> Response:
        """POST / : decode, dispatch, answer JSON or SSE."""
        decoded = decode_request(await request.body())
        if isinstance(decoded, DecodeError):
            body = content_type_error(decoded, request.headers.get("content-type")).response()
            metrics.BAD_REQUESTS.labels("http", str(body["error"]["code"])).inc()
            return JSONResponse(body)
        context = self._context_builder.build(request)
        result = await self.dispatch(decoded, context)
        response = self._create_response(context, result)
        plan = context.state.get(PLAN_KEY)
        if isinstance(result, dict) and plan is not None:  # known once the answer is complete
            value = plan.timing.server_timing()
            if value:
                response.headers["Server-Timing"] = value
        return response
