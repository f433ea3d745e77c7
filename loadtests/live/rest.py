"""Binding: A2A's HTTP+JSON (REST) binding, read without buffering through Locust's FastHttpUser.

The same streaming reader as :mod:`rtalab.loadtests.live.sse` (lines straight from the
geventhttpclient response, the whole stream as one Locust stats row, a half-read
socket never returned to the pool), on the HTTP+JSON routes of A2A 1.0:

- ``POST /message:stream`` with the ``SendMessageRequest`` as its body (the JSON-RPC
  request's ``params``, byte for byte: the same ids, text and ``rta/*`` metadata) answers
  an SSE stream of ``StreamResponse`` objects (``{"task": ...}``, ``{"statusUpdate": ...}``,
  ``{"artifactUpdate": ...}``); each is handed to the Live layer as the JSON-RPC response
  object ``{"result": <StreamResponse>}`` (:func:`rtalab.loadtests.live.wire.rest_frame`), so
  reordering, the ledgers and every rule are the same code on every binding;
- an error is an HTTP status with a google.rpc-style body (``{"error": {"code", "status",
  "message", "details": [google.rpc.ErrorInfo ...]}}``, as a2a-sdk's REST routes answer):
  before the stream it is a non-2xx answer, during it an ``event: error`` whose data is
  that object; both become one error frame carrying the profile's code (the ErrorInfo's
  metadata under the extension's key or ``errorCode``, else the code of the HTTP status);
- ``POST /tasks/{id}:cancel`` (barge-in; its Task's ``rta/sideEffect`` is read) and
  ``GET /tasks/{id}`` (:meth:`RestChannel.get_task`);
- the profile is asked for with the ``A2A-Extensions`` header and the first answer's echo
  activates it, as on JSON-RPC; the bearer token and ``A2A-Version: 1.0`` go as headers.

Certificates are verified by the user's connection pool (the locustfile's
``ssl_context_factory``: :class:`rtalab.loadtests.common.tls.ClientTls`), as on JSON-RPC.
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import quote

from rtalab.loadtests.live.bindings import ChannelContext
from rtalab.loadtests.live.call import StreamBroken
from rtalab.loadtests.live.sse import SseChannel, SseExchange
from rtalab.loadtests.live.wire import (
    cancel_answer_side_effect,
    headers,
    http_error_frame,
    rest_frame,
)

STREAM_PATH: Final = "/message:stream"
_PARAMS: Final = b',"params":'


def rest_body(jsonrpc_body: bytes) -> bytes:
    """The ``SendMessageRequest`` of a ``SendStreamingMessage`` JSON-RPC request body: its
    ``params`` value, cut out of the bytes (the Live layer's bodies end with it: no decode
    and re-encode per attempt); any other body is decoded and its ``params`` re-encoded."""
    i = jsonrpc_body.find(_PARAMS)
    if i > 0 and jsonrpc_body.endswith(b"}") and jsonrpc_body.rfind(_PARAMS) == i:
        return jsonrpc_body[i + len(_PARAMS):-1]
    obj = json.loads(jsonrpc_body)
    return json.dumps(obj["params"], separators=(",", ":")).encode()


def task_path(task_id: str, suffix: str = "") -> str:
    """``/tasks/{id}`` (``suffix``: ``:cancel``), the id percent-encoded."""
    return f"/tasks/{quote(task_id, safe='')}{suffix}"


class RestExchange(SseExchange):
    """One ``POST /message:stream`` in flight: StreamResponse events as JSON-RPC objects."""

    path = STREAM_PATH
    name = "message:stream"
    _result = True  # what _frame does of a StreamResponse, inline in the read loop

    def __init__(self, client: Any, body: bytes, hdrs: dict[str, str], ext_uri: str) -> None:
        self._ext_uri = ext_uri
        super().__init__(client, body, hdrs, ext_uri)

    # a method, not a bound method stored on the instance: that would be a reference cycle
    # (the exchange -> its bound method -> the exchange), every exchange with its response,
    # socket buffers and headers freed only by the cyclic collector
    def _frame(self, obj: Any) -> dict[str, Any]:
        """A StreamResponse (or an ``error`` event's object) as a JSON-RPC response object."""
        if type(obj) is dict and "error" not in obj:
            return {"result": obj}  # the common case, without a call
        return rest_frame(obj, self._ext_uri)


class RestChannel(SseChannel):
    """A call's HTTP+JSON binding: every request is its own HTTP request on the user's pool
    (no upgrade: the first answer's echo decides, as on JSON-RPC)."""

    binding = "rest"

    def send(self, rpc_id: str, body: bytes, active: bool) -> RestExchange:
        """Start one streaming request (``body``: the JSON-RPC request the Live layer built)."""
        return RestExchange(self.client, rest_body(body), self._headers[active], self.ext_uri)

    def cancel(self, rpc_id: str, task_id: str, active: bool) -> str | None:
        """``POST /tasks/{id}:cancel`` (best effort); the ``rta/sideEffect`` its Task reports,
        if any."""
        try:
            with self.client.post(task_path(task_id, ":cancel"), data=b"{}",
                                  headers=headers(self.ext_uri, self.token, active, sse=False),
                                  catch_response=True, name="tasks:cancel") as r:
                r.success()
                return cancel_answer_side_effect({"result": r.json()}, self.ext_uri)
        except Exception:  # a cancel is advisory
            return None

    def get_task(self, task_id: str, active: bool) -> dict[str, Any]:
        """``GET /tasks/{id}`` as the JSON-RPC object the other bindings answer: ``{"result":
        {"task": ...}}``, or one error frame with the profile's code (404: the task is not
        known; raises StreamBroken when the server does not answer)."""
        with self.client.get(task_path(task_id), name="tasks:get", catch_response=True,
                             headers=headers(self.ext_uri, self.token, active, sse=False)) as r:
            status = r.status_code or 0
            if not status:
                r.failure(f"connection failed: {r.error}")
                raise StreamBroken(f"connection failed: {r.error}")
            if not 200 <= status < 300:
                r.failure(f"HTTP {status}")
                return http_error_frame(status, r.content, r.headers or {}, self.ext_uri)
            try:
                task = r.json()
            except ValueError as e:
                r.failure(f"unreadable answer: {e}")
                raise StreamBroken(f"unreadable answer: {e}") from None
            r.success()
            return {"result": {"task": task}}



def open_channel(ctx: ChannelContext) -> RestChannel:
    """The registry's factory (:mod:`rtalab.loadtests.live.bindings`): requests on the user's
    pool."""
    return RestChannel(ctx.client, ctx.ext_uri, ctx.token)
