"""Extension negotiation: echo the activated extension in ``A2A-Extensions``.

The client asks for the profile with the request header ``A2A-Extensions:
<uri>`` (comma-separated lists and repeated headers allowed).  The SDK parses it
into ``ServerCallContext.requested_extensions`` but never answers, so this ASGI
middleware adds the echo to every HTTP response and to the WebSocket upgrade
response (``websocket.accept`` headers).  It sits inside the auth middleware:
a 401 carries no echo.

The same middleware stamps those responses with ``X-RTA-Worker: <pid>``, the
identity of the worker process that served them, whether or not the extension
was negotiated, so tests (and operators) can tell which of ``--workers N``
answered a given connection.
"""

from __future__ import annotations

import os

from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_HEADER = HTTP_EXTENSION_HEADER.lower().encode("latin-1")
WORKER_HEADER = "X-RTA-Worker"
_WORKER_HEADER = WORKER_HEADER.lower().encode("latin-1")


def requested_extensions(scope: Scope) -> set[str]:
    """Extension URIs requested by the client's ``A2A-Extensions`` headers."""
    values = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == _HEADER]
    return get_requested_extensions(values)


class ExtensionEcho:
    """ASGI middleware adding ``A2A-Extensions: <uri>`` when the client requested ``uri``.

    It also adds ``X-RTA-Worker: <pid>`` to every HTTP response start and
    WebSocket accept it sees (the pid is read per connection, so the header is
    right whichever process built the app).
    """

    def __init__(self, app: ASGIApp, uri: str):
        self.app = app
        self.uri = uri
        self._header = (_HEADER, uri.encode("latin-1"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap ``send`` to stamp the worker and, when the extension was requested, echo it."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        added = [(_WORKER_HEADER, str(os.getpid()).encode("latin-1"))]
        if self.uri in requested_extensions(scope):
            added.append(self._header)

        async def stamp(message: Message) -> None:
            """Add the headers to the response start / upgrade accept."""
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *added]
            await send(message)

        await self.app(scope, receive, stamp)
