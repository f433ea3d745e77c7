"""Binding 1: JSON-RPC over HTTP with SSE, read without buffering through Locust's FastHttpUser.

``FastHttpSession.iter_lines`` buffers 1 KB blocks (events arrive late); this
reader takes lines straight from the geventhttpclient response
(``readline(b"\\n")``), so each event is handed over as soon as its line is
complete.  Each request is one Locust stats row (``SendStreamingMessage``)
whose response time is set to the whole stream (Locust's default is the time to
headers), and every exception is reported as a failure (else the turn is not counted).
An abandoned stream (timeout, barge-in) releases its
socket instead of returning it to the pool.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from geventhttpclient.header import Headers

from rtalab.loadtests.common.tls import reason
from rtalab.loadtests.live.bindings import ChannelContext
from rtalab.loadtests.live.call import StreamBroken
from rtalab.loadtests.live.wire import (
    cancel_answer_side_effect,
    cancel_request,
    decode_frame,
    headers,
    http_error_frame,
)

REQUEST_NAME = "SendStreamingMessage"
JSON_WS = b" \t\r\n"  # JSON's whitespace: what json.loads ignores around a value
WORKER_HEADER = "x-rta-worker"
_ENTRY = dict.get  # a Headers' stored entry of a lower-case field name (no Python-level call)


def header(h: Any, name: str) -> Any:
    """``h.get(name)`` of a response's headers, ``name`` in lower case.  geventhttpclient's
    :class:`Headers` is a dict of lower-cased names to ``(field, value)`` entries (a list of
    them for a repeated field): a single field is read from its entry, without the Python
    ``get`` (which raises and catches a KeyError for every absent field); anything else
    through ``get``."""
    if type(h) is Headers:
        entry = _ENTRY(h, name)
        if entry is None:
            return None
        if type(entry) is tuple:
            return entry[1]
    return h.get(name)


class SseExchange:
    """One streaming request in flight: events are read line by line as they arrive."""

    path = "/"  # where the request is POSTed
    name = REQUEST_NAME  # its Locust stats row
    # what turns a decoded event into the JSON-RPC response object the Live layer reads
    # (None: it is one already); an attribute, not a method call, on the hottest path
    _frame: Callable[[Any], dict[str, Any]] | None = None
    # the common case of ``_frame`` done inline: an object without ``error`` is the
    # ``result`` of the JSON-RPC response object (an HTTP+JSON StreamResponse)
    _result = False

    def __init__(self, client: Any, body: bytes, hdrs: dict[str, str], ext_uri: str) -> None:
        self._t0 = time.perf_counter()
        self._cm = client.post(self.path, data=body, headers=hdrs, stream=True,
                               catch_response=True, name=self.name)
        self._r = self._cm.__enter__()
        self._done = False
        self._failed: str | None = None
        r = self._r
        self.http_status: int | None = r.status_code or None
        h = r.headers  # a Headers (never tested for truth: its len() walks every field)
        if h is None:
            h = {}
        self.worker: str | None = header(h, WORKER_HEADER)
        self.echo = ext_uri in (header(h, "a2a-extensions") or "")
        self._raw: Any = getattr(r, "_response", None)  # geventhttpclient's raw response
        err = getattr(r, "error", None)
        if self._raw is None or not self.http_status:
            why = reason(err) if isinstance(err, BaseException) else err  # a certificate named
            self.close(f"connection failed: {why}")
            raise StreamBroken(f"connection failed: {why}")
        # a refused request (non-2xx): Locust has read its body already (the raw stream
        # gives b''): it is in ``content``, read as sent and mapped to a code
        self._refused: dict[str, Any] | None = None
        if not 200 <= self.http_status < 300:
            try:
                body = r.content
            except Exception:  # an unreadable body: the status alone decides the code
                body = b""
            self._refused = http_error_frame(self.http_status, body, h, ext_uri)
        self._json = self.http_status != 200 or "event-stream" not in (
            header(h, "content-type") or "")
        self._plain = self._json or self._refused is not None  # not an event stream

    def next_frame(self) -> dict[str, Any] | None:
        """The next JSON-RPC object of the stream, or None at its end (raises StreamBroken)."""
        if self._plain:
            return self._answer()
        raw = self._raw
        while True:
            try:
                line = raw.readline(b"\n")
            except Exception as e:
                raise StreamBroken(f"stream broken: {e}") from None
            if not line:
                return None
            if line.startswith(b"data:"):
                try:  # json.loads of the field's value, in one scan of the common case
                    obj = decode_frame(line[5:].strip(JSON_WS).decode())
                except ValueError as e:
                    raise StreamBroken(f"bad event: {e}") from None
                if self._frame is None:
                    return obj  # type: ignore[no-any-return]  # a JSON-RPC response object
                if self._result and type(obj) is dict and "error" not in obj:
                    return {"result": obj}
                return self._frame(obj)

    def _answer(self) -> dict[str, Any] | None:
        """:meth:`next_frame` of an answer that is no event stream: a refused request's one
        error frame, or a plain JSON answer (401, JSON-RPC error) as one frame; then the end."""
        if self._refused is not None:  # one error frame, then the end
            frame, self._refused, self._json = self._refused, None, False
            return frame
        if self._json:
            self._json = False
            try:
                body = self._raw.read()
                obj = json.loads(body) if body else None
            except Exception as e:
                raise StreamBroken(f"unreadable answer: {e}") from None
            return obj if obj is None or self._frame is None else self._frame(obj)
        self._plain = False  # read what the raw stream still has (nothing: its end)
        return self.next_frame()

    def close(self, failure: str | None = None) -> None:
        """Report the request (failure text if any) and release its connection."""
        if self._done:
            return
        self._done = True
        raw = self._raw
        if raw is not None and (failure or not raw.message_complete):
            pool, sock = getattr(raw, "_pool", None), getattr(raw, "_sock", None)
            if pool is not None and sock is not None:
                pool.release_socket(sock)  # never reuse a half-read connection
            raw._sock = raw._pool = None
        self._r.request_meta["response_time"] = (time.perf_counter() - self._t0) * 1000.0
        if failure:
            self._r.failure(failure)
        else:
            self._r.success()
        self._cm.__exit__(None, None, None)


class SseChannel:
    """A call's binding over HTTP/SSE: every request is its own POST on the user's pool."""

    binding = "sse"

    def __init__(self, client: Any, ext_uri: str, token: str | None) -> None:
        self.client = client
        self.ext_uri = ext_uri
        self.token = token
        # a streaming request's headers, profile asked for or not (the client copies them)
        self._headers = {a: headers(ext_uri, token, a) for a in (True, False)}

    def open(self, negotiation_s: float) -> bool | None:
        """No upgrade on this binding: the first request's echo decides (None = not yet)."""
        return None

    def send(self, rpc_id: str, body: bytes, active: bool) -> SseExchange:
        """Start one streaming request."""
        return SseExchange(self.client, body, self._headers[active], self.ext_uri)

    def cancel(self, rpc_id: str, task_id: str, active: bool) -> str | None:
        """``CancelTask`` (best effort); the ``rta/sideEffect`` its answer reports, if any."""
        try:
            with self.client.post("/", data=cancel_request(rpc_id, task_id),
                                  headers=headers(self.ext_uri, self.token, active, sse=False),
                                  catch_response=True, name="CancelTask") as r:
                r.success()
                return cancel_answer_side_effect(r.json(), self.ext_uri)
        except Exception:  # a cancel is advisory
            return None

    def close(self) -> None:
        """Nothing per call: connections belong to the user's pool."""


def open_channel(ctx: ChannelContext) -> SseChannel:
    """The registry's factory (:mod:`rtalab.loadtests.live.bindings`): requests on the user's
    pool."""
    return SseChannel(ctx.client, ctx.ext_uri, ctx.token)
