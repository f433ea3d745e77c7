"""The witness: the Reasoner's tool/workflow upstream, recording every side effect durably.

``POST /execute`` with ``{contextId, turnId, requestGuid, [interactionId, taskId,
principal]}`` performs one side effect and answers ``{ok, executionId}``.
``contextId`` is required; the other identifiers are strings or ``null`` (a
request without that identifier).

When does the side effect "happen"?  At completion: after the sampled latency
(or the slow-success delay) the execution is appended to the ledger, and only
then is the answer sent.  An execution runs as its own task, shielded from the
request: a caller that gives up or disconnects does not stop it, so a slow
success is recorded even though nobody is listening any more.  Injected
errors and hangs do not execute anything.  Executions still pending when the
witness stops (or on ``POST /reset``) never happen and are not recorded.

Other routes: ``GET /ledger`` (``?since=ID&contextId=C&limit=N``, oldest first,
at most 10,000 rows a page), ``GET /ledger/summary`` (``?contextId=C``; with it,
``executingInContext``: that context's executions under way),
``GET|POST /faults``, ``GET /healthz`` and, with ``--test-hooks`` only,
``POST /reset``.  Malformed input gets a 400 (413 if too large) JSON error,
never a 5xx; injected failures carry ``"fault"`` in the body and an
``X-Witness-Fault`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rtalab.loadtests.witness.faults import FaultError, Faults
from rtalab.loadtests.witness.ledger import MAX_PAGE, Ledger

log = logging.getLogger("rtalab.witness")

ID_FIELDS = ("contextId", "turnId", "requestGuid", "interactionId", "taskId", "principal",
             "server")
MAX_ID_CHARS = 256
MAX_BODY_BYTES = 64 * 1024
FAULT_HEADER = "X-Witness-Fault"


class BadRequest(Exception):
    """Input the caller must fix: answered with ``status`` (400 or 413) and a JSON error."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _error(message: str, status: int, **extra: Any) -> JSONResponse:
    """A JSON error answer."""
    return JSONResponse({"ok": False, "error": message, **extra}, status_code=status,
                        headers={FAULT_HEADER: str(extra["fault"])} if "fault" in extra else None)


async def read_json(request: Request, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """The request body as JSON, read with a size bound (raise :class:`BadRequest`)."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise BadRequest(f"bad Content-Length {length!r}")
        if int(length) > max_bytes:
            raise BadRequest(f"body larger than {max_bytes} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BadRequest(f"body larger than {max_bytes} bytes", 413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise BadRequest("empty body: expected a JSON object")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("body is not valid JSON") from None


def parse_ids(body: Any) -> dict[str, str | None]:
    """The identifiers of an execute request (raise :class:`BadRequest`)."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    ids: dict[str, str | None] = {}
    for name in ID_FIELDS:
        v = body.get(name)
        if v is None:
            if name == "contextId":
                raise BadRequest("contextId is required")
            ids[name] = None
            continue
        if not isinstance(v, str) or not v:
            raise BadRequest(f"{name} must be a non-empty string or null, got {type(v).__name__}")
        if len(v) > MAX_ID_CHARS:
            raise BadRequest(f"{name} longer than {MAX_ID_CHARS} characters")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(f"{name} is not valid Unicode") from None
        ids[name] = v
    return ids


def _int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """An integer query parameter within [lo, hi] (raise :class:`BadRequest`)."""
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        v = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {text!r}") from None
    if not lo <= v <= hi:
        raise BadRequest(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


class Witness:
    """State of one witness process: ledger, faults, RNG, counters, pending executions."""

    def __init__(self, db_path: str | Path, faults: Faults, *, test_hooks: bool = False,
                 seed: int | None = None):
        self.ledger = Ledger(db_path)
        self.initial_faults = faults
        self.faults = faults
        self.test_hooks = test_hooks
        self.rng = np.random.default_rng(seed)
        self.served: Counter[str] = Counter()
        self.pending: set[asyncio.Task[Any]] = set()
        self.executing: Counter[str] = Counter()  # contextId -> executions under way

    def _track(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """Keep a reference to a pending execution or hang until it ends."""
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        return task

    def _executed(self, ctx: str) -> None:
        """One execution of ``ctx`` is no longer under way."""
        self.executing[ctx] -= 1
        if self.executing[ctx] <= 0:
            del self.executing[ctx]

    async def cancel_pending(self) -> None:
        """Cancel pending executions and hangs (they never happen)."""
        tasks = list(self.pending)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _execute(self, ids: dict[str, str | None], t_start: float, delay_s: float,
                       outcome: str) -> tuple[int, float]:
        """The side effect: wait ``delay_s``, then append to the ledger."""
        await asyncio.sleep(delay_s)
        t_end = time.time()
        return await self.ledger.record(ids, t_start, t_end, outcome), t_end

    # ------------------------------------------------------------------ routes

    async def execute(self, request: Request) -> Response:
        """``POST /execute``: one side effect, or an injected fault."""
        t_start = time.time()
        self.served["requests"] += 1
        try:
            ids = parse_ids(await read_json(request))
        except BadRequest:
            self.served["badRequest"] += 1
            raise
        faults = self.faults
        fate = faults.draw(self.rng)
        self.served[fate] += 1
        if fate == "error":
            await asyncio.sleep(faults.latency_s.sample(self.rng))
            status = int(self.rng.choice(faults.error_status))
            return _error("injected fault: tool error", status, fault="error")
        if fate == "timeout":
            hang = self._track(asyncio.ensure_future(asyncio.sleep(faults.hang_s)))
            try:
                await asyncio.wait((hang,))  # ends early on POST /reset
            finally:
                hang.cancel()
            return _error("injected fault: tool hung", 504, fault="timeout")
        delay = faults.slow_success_delay_s if fate == "slow-success" else (
            faults.latency_s.sample(self.rng))
        task = self._track(asyncio.ensure_future(self._execute(ids, t_start, delay, fate)))
        ctx = ids.get("contextId") or ""
        self.executing[ctx] += 1
        task.add_done_callback(lambda _t: self._executed(ctx))
        try:
            execution_id, t_end = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this request was cancelled; the execution goes on
            return _error("witness reset: execution cancelled", 503, fault="reset")
        return JSONResponse({"ok": True, "executionId": execution_id, "outcome": fate,
                             "tStart": t_start, "tEnd": t_end})

    async def ledger_rows(self, request: Request) -> Response:
        """``GET /ledger``: a page of executions after ``since``."""
        since = _int_param(request, "since", 0, 0, 2**62)
        limit = _int_param(request, "limit", 1000, 1, MAX_PAGE)
        rows = await self.ledger.rows(since, request.query_params.get("contextId"), limit)
        return JSONResponse({"rows": rows, "nextSince": rows[-1]["id"] if rows else since,
                             "more": len(rows) == limit})

    async def summary(self, request: Request) -> Response:
        """``GET /ledger/summary``: execution and duplicate counts, plus what was served."""
        s = await self.ledger.summary(request.query_params.get("contextId"))
        s["served"] = dict(self.served)
        s["pending"] = len(self.pending)
        ctx = request.query_params.get("contextId")
        if ctx is not None:  # executions of this context under way (not hangs)
            s["executingInContext"] = self.executing.get(ctx, 0)
        return JSONResponse(s)

    async def get_faults(self, request: Request) -> Response:
        """``GET /faults``."""
        return JSONResponse(self.faults.to_json())

    async def set_faults(self, request: Request) -> Response:
        """``POST /faults``: change some fault fields (JSON object), answer the new set."""
        try:
            self.faults = self.faults.updated(await read_json(request))
        except FaultError as e:
            raise BadRequest(str(e)) from None
        log.info("faults now %s", self.faults.to_json())
        return JSONResponse(self.faults.to_json())

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``."""
        return JSONResponse({"ok": True, "testHooks": self.test_hooks,
                             "pending": len(self.pending), "pid": os.getpid()})

    async def reset(self, request: Request) -> Response:
        """``POST /reset`` (test hooks): cancel pending work, empty the ledger, restore faults."""
        if not self.test_hooks:
            return _error("not found (POST /reset needs --test-hooks)", 404)
        await self.cancel_pending()
        deleted = await self.ledger.clear()
        self.faults = self.initial_faults
        self.served.clear()
        return JSONResponse({"ok": True, "deleted": deleted})


async def _bad_request(request: Request, exc: Exception) -> Response:
    """BadRequest -> 400/413 JSON."""
    assert isinstance(exc, BadRequest)
    return _error(str(exc), exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    """404/405 and other HTTP errors as JSON."""
    assert isinstance(exc, HTTPException)
    return _error(str(exc.detail), exc.status_code)


async def _crash(request: Request, exc: Exception) -> Response:
    """A witness bug: JSON 500 (logged), never an HTML page."""
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error("internal witness error (not an injected fault)", 500)


def create_app(db_path: str | Path, faults: Faults | None = None, *, test_hooks: bool = False,
               seed: int | None = None) -> Starlette:
    """The witness ASGI app with its ledger at ``db_path``."""
    w = Witness(db_path, faults or Faults(), test_hooks=test_hooks, seed=seed)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await w.ledger.open()
        log.info("witness ready ledger=%s test_hooks=%s", w.ledger.path, test_hooks)
        try:
            yield
        finally:
            await w.cancel_pending()
            await w.ledger.close()

    routes = [
        Route("/execute", w.execute, methods=["POST"]),
        Route("/ledger", w.ledger_rows, methods=["GET"]),
        Route("/ledger/summary", w.summary, methods=["GET"]),
        Route("/faults", w.get_faults, methods=["GET"]),
        Route("/faults", w.set_faults, methods=["POST"]),
        Route("/healthz", w.healthz, methods=["GET"]),
        Route("/reset", w.reset, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={BadRequest: _bad_request, HTTPException: _http_error,
                                        Exception: _crash})
    app.state.witness = w
    return app
