"""Bearer-token authentication for every binding, checked before extension negotiation.

Tokens map to principals (``token -> principal``) from ``--token T=P`` flags,
``--tokens FILE`` (``T=P`` or ``T P`` per line, ``#`` comments, or a JSON object)
and the env var ``RTALAB_REASONER_TOKENS`` (``T=P,T2=P2``).  With no token
configured authentication is off and every caller is ``anonymous``.

Failures (missing, malformed or unknown token) never reach the A2A handler:

- JSON-RPC over HTTP (``POST /``): HTTP 401 with a JSON-RPC error body
  ``{"code": -32040, "message": "Unauthorized", "data": {"<ext>/errorCode": "auth"}}``
  carrying the request's ``id`` when it can be read;
- REST: HTTP 401 with the REST error shape (``error.status = "UNAUTHENTICATED"``);
- WebSocket: the upgrade is refused with HTTP 401 and the same JSON-RPC body
  (``id`` null); the socket is never opened;
- gRPC: status ``UNAUTHENTICATED`` with a ``google.rpc.ErrorInfo`` (reason ``AUTH``),
  from the interceptor of :mod:`rtalab.loadtests.reasoner.grpc_binding`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from starlette.authentication import AuthCredentials, SimpleUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rtalab.loadtests.reasoner import metrics
from rtalab.loadtests.reasoner.jsontext import BadJson, load_strict
from rtalab.loadtests.reasoner.wire import Keys

TOKENS_ENV = "RTALAB_REASONER_TOKENS"
AUTH_ERROR_CODE = -32040
JSONRPC_PATH = "/"


class TokenError(ValueError):
    """A token specification cannot be read."""


def parse_pair(text: str) -> tuple[str, str]:
    """``TOKEN=PRINCIPAL`` (or ``TOKEN PRINCIPAL``) -> (token, principal)."""
    sep = "=" if "=" in text else None
    parts = text.split(sep, 1) if sep else text.split(None, 1)
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise TokenError(f"token spec {text.strip()[:40]!r} must look like TOKEN=PRINCIPAL")
    token, principal = parts[0].strip(), parts[1].strip()
    if any(c.isspace() for c in token):
        raise TokenError("a token must not contain whitespace")
    return token, principal


def read_token_file(path: str | Path) -> dict[str, str]:
    """Tokens from a JSON object file or a ``TOKEN=PRINCIPAL`` per line file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read token file {path}: {e}") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TokenError(f"token file {path}: bad JSON: {e}") from None
        if not all(isinstance(k, str) and isinstance(v, str) and k and v
                   for k, v in data.items()):
            raise TokenError(f"token file {path}: expected {{\"token\": \"principal\"}}")
        return dict(data)
    pairs = [parse_pair(line) for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return dict(pairs)


def collect_tokens(flags: Iterable[str] = (), files: Iterable[str] = (),
                   env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Merge tokens from the env var, files and flags (later sources win)."""
    env = os.environ if env is None else env
    tokens: dict[str, str] = {}
    raw = env.get(TOKENS_ENV, "")
    tokens.update(parse_pair(p) for p in raw.split(",") if p.strip())
    for f in files:
        tokens.update(read_token_file(f))
    tokens.update(parse_pair(t) for t in flags)
    return tokens


def _digest(token: str) -> bytes:
    """Tokens are looked up by hash, so lookup time does not depend on token prefixes."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def _bearer(scope: Scope) -> str | None:
    """The bearer token of the Authorization header, if well formed."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def jsonrpc_auth_error(request_id: Any, keys: Keys) -> dict[str, Any]:
    """The JSON-RPC error object of an authentication failure."""
    return {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": AUTH_ERROR_CODE, "message": "Unauthorized",
                      "data": {keys("errorCode"): "auth"}}}


def rest_auth_error() -> dict[str, Any]:
    """The REST error object of an authentication failure."""
    return {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "Unauthorized",
                      "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                   "reason": "AUTH", "domain": "rtalab",
                                   "metadata": {"errorCode": "auth"}}]}}


def _request_id(body: bytes) -> Any:
    """The JSON-RPC id of a request body, or None."""
    try:
        data = load_strict(body)
    except BadJson:
        return None
    rid = data.get("id") if isinstance(data, dict) else None
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


class BearerAuth:
    """ASGI middleware: sets ``scope["user"]``/``scope["auth"]`` or answers 401."""

    def __init__(self, app: ASGIApp, tokens: Mapping[str, str], keys: Keys,
                 public_paths: Iterable[str] = ()):
        self.app = app
        self.keys = keys
        self.enabled = bool(tokens)
        self._principals = {_digest(t): p for t, p in tokens.items()}
        self.public_paths = frozenset(public_paths)

    def principal(self, token: str | None) -> str | None:
        """The principal of ``token`` (None: missing or unknown); also the gRPC binding's
        check (loadtests/reasoner/grpc_binding.py), against the same table."""
        return self._principals.get(_digest(token)) if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate HTTP and WebSocket scopes outside the public paths."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        principal = "anonymous"
        if self.enabled and scope["path"] not in self.public_paths:
            found = self.principal(_bearer(scope))
            if found is None:
                await self._deny(scope, receive, send)
                return
            principal = found
        scope["user"] = SimpleUser(principal)
        scope["auth"] = AuthCredentials(["authenticated"])
        await self.app(scope, receive, send)

    async def _deny(self, scope: Scope, receive: Receive, send: Send) -> None:
        """401 in the shape of the binding."""
        ws = scope["type"] == "websocket"
        binding = "ws" if ws else ("jsonrpc" if scope["path"] == JSONRPC_PATH else "rest")
        metrics.AUTH_FAILURES.labels(binding).inc()
        if ws:
            if "websocket.http.response" not in scope.get("extensions", {}):
                await send({"type": "websocket.close", "code": 1008})
                return
            await _send_json(send, 401, jsonrpc_auth_error(None, self.keys), "websocket.http")
            return
        if binding == "jsonrpc":
            body = await _read_body(receive)
            payload = jsonrpc_auth_error(_request_id(body), self.keys)
        else:
            payload = rest_auth_error()
        await _send_json(send, 401, payload, "http")


async def _read_body(receive: Receive) -> bytes:
    """The whole request body (already bounded by the body-limit middleware)."""
    chunks: list[bytes] = []
    while True:
        msg: Message = await receive()
        if msg["type"] != "http.request":
            break
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            break
    return b"".join(chunks)


async def _send_json(send: Send, status: int, payload: dict[str, Any], prefix: str) -> None:
    """Send a JSON response (``prefix`` ``http`` or ``websocket.http`` for a denial)."""
    body = json.dumps(payload).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()),
               (b"www-authenticate", b'Bearer realm="rtalab", error="invalid_token"')]
    await send({"type": f"{prefix}.response.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.response.body", "body": body})
