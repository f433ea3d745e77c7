"""The side-effecting tool call of a turn: an HTTP POST to the witness service.

Without a witness URL the tool is simulated in process (a sleep drawn from
``[reasoner].tool_latency_s``), so the Reasoner also runs stand-alone.  Either
way the call is bounded by ``upstream_timeout_s`` (0 = unbounded): a timeout is
``upstream-timeout`` even though the tool may still finish — that "slow
success" is exactly what the witness ledger exposes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import httpx
import numpy as np

from rtalab.sim.dist import Dist

ToolResult = Literal["ok", "timeout", "error"]
EXECUTE_PATH = "/execute"
log = logging.getLogger("rtalab.reasoner")


LEDGER_PATH = "/ledger"
LOOKUP_TIMEOUT_S = 5.0  # a recovery lookup in the witness ledger gives up after this
LOOKUP_MAX_PAGES = 10  # ... or after this many pages of one context's executions


def ledger_url(witness: str) -> str | None:
    """The witness ledger (``GET``), when ``witness`` is a base URL; None for a tool URL with
    a path (nothing known to ask)."""
    path = urlsplit(witness).path
    return witness.rstrip("/") + LEDGER_PATH if path in ("", "/") else None


def execute_url(witness: str) -> str:
    """The POST target: ``witness`` itself if it has a path, else ``<witness>/execute``."""
    path = urlsplit(witness).path
    return witness if path not in ("", "/") else witness.rstrip("/") + EXECUTE_PATH


@dataclass(frozen=True)
class ToolCall:
    """Identifiers sent to the tool (never transcript text)."""

    context_id: str
    task_id: str
    turn_id: str | None
    request_guid: str | None
    interaction_id: str | None
    principal: str
    server: str | None = None  # --instance: which Reasoner (a fleet's replica) ran it

    def as_json(self) -> dict[str, str | None]:
        """The JSON body of the witness request (``server`` only with ``--instance``)."""
        body = {"contextId": self.context_id, "taskId": self.task_id, "turnId": self.turn_id,
                "requestGuid": self.request_guid, "interactionId": self.interaction_id,
                "principal": self.principal}
        if self.server is not None:
            body["server"] = self.server
        return body


class Tool:
    """Runs one side effect with the upstream timeout."""

    def __init__(self, witness: str | None, timeout_s: float, latency: Dist,
                 rng: np.random.Generator, client: httpx.AsyncClient | None = None):
        self.url = execute_url(witness) if witness else None
        self.ledger_url = ledger_url(witness) if witness else None
        self.timeout_s = timeout_s
        self.latency = latency
        self.rng = rng
        self.client = client

    async def executed(self, context_id: str, request_guid: str) -> bool | None:
        """Whether the witness recorded an execution of ``request_guid`` in ``context_id``
        (recovery after a crash); None when there is no witness ledger to ask or it did not
        answer."""
        if self.ledger_url is None or self.client is None:
            return None
        since = 0
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                for _ in range(LOOKUP_MAX_PAGES):
                    r = await self.client.get(self.ledger_url, params={
                        "contextId": context_id, "since": since, "limit": 10_000})
                    if r.status_code != 200:
                        return None
                    page = r.json()
                    if any(row.get("requestGuid") == request_guid for row in page["rows"]):
                        return True
                    if not page.get("more"):
                        return False
                    since = int(page["nextSince"])
        except (TimeoutError, httpx.HTTPError, ValueError, KeyError, TypeError,
                AttributeError) as e:
            log.warning("witness lookup failed (%s) ctx=%s guid=%s", type(e).__name__,
                        context_id, request_guid)
        return None

    async def call(self, call: ToolCall) -> ToolResult:
        """``ok``, ``timeout`` (gave up waiting) or ``error`` (the tool answered a failure)."""
        try:
            async with asyncio.timeout(self.timeout_s if self.timeout_s > 0 else None):
                if self.url is None:
                    await asyncio.sleep(self.latency.sample(self.rng))
                    return "ok"
                assert self.client is not None
                r = await self.client.post(self.url, json=call.as_json())
                if r.status_code >= 400:
                    log.warning("tool error status=%d ctx=%s task=%s guid=%s", r.status_code,
                                call.context_id, call.task_id, call.request_guid)
                    return "error"
                return "ok"
        except TimeoutError:
            return "timeout"
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:  # never sent: did not run
            log.warning("tool unreachable (%s) ctx=%s task=%s guid=%s", type(e).__name__,
                        call.context_id, call.task_id, call.request_guid)
            return "error"
        except httpx.HTTPError as e:  # sent, answer lost: it may have run (never "did not")
            log.warning("tool answer lost (%s) ctx=%s task=%s guid=%s", type(e).__name__,
                        call.context_id, call.task_id, call.request_guid)
            return "timeout"
