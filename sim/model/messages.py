"""The request message (one attempt) and what the Live layer has received of its response stream.

One :class:`Request` is allocated per attempt.  It travels the uplink as the
value of a SimPy event; the Reasoner and the downlink fill in the response
fields (arrival times are computed, see :mod:`rtalab.sim.model.network`), and the Live
layer reads them when its timer or the terminal event fires.
"""

from __future__ import annotations

from typing import Any

INF = float("inf")

# response status of an attempt (index into rtalab.sim.shared.schema.STATUSES)
COMPLETED, INPUT_REQUIRED, FAILED = 0, 1, 2
NO_CONTEXT = -1  # context_id of a first message without a client-minted contextId


class Request:
    """A Live-layer request (``SendStreamingMessage``) and its response as received."""

    __slots__ = (
        "attempt",
        "call_id",
        "chunk_arrivals",
        "chunks_lost",
        "complete_s",
        "context_id",
        "degraded",
        "delay_before_s",
        "duplicated",
        "error_code",
        "first_chunk_s",
        "first_response_s",
        "interaction_id",
        "lost",
        "open",
        "phase",
        "replayed",
        "request_guid",
        "resumes_task",
        "retry_after_ms",
        "send_s",
        "server_context_id",
        "side_effect",
        "status",
        "task_id",
        "terminal_lost",
        "turn",
        "wants_input",
    )

    def __init__(self, turn: Any, call_id: int, interaction_id: int, request_guid: int,
                 task_id: int, context_id: int, phase: int, side_effect: bool, wants_input: bool,
                 attempt: int, send_s: float, delay_before_s: float) -> None:
        self.turn = turn
        self.call_id = call_id
        self.interaction_id = interaction_id
        self.request_guid = request_guid
        self.task_id = task_id
        self.context_id = context_id
        self.phase = phase
        self.side_effect = side_effect  # this phase calls the side-effecting tool
        self.wants_input = wants_input  # the Reasoner answers INPUT_REQUIRED (handoff turn)
        self.resumes_task = False  # continuation on the task that is awaiting input
        self.attempt = attempt
        self.send_s = send_s
        self.delay_before_s = delay_before_s
        self.degraded = False  # core A2A session: no rta/* metadata (no requestGuid, no turnId)
        self.open = True  # the Live layer still listens to this attempt's stream
        self.lost = False
        self.duplicated = False
        self.replayed = False
        # response as received (arrival times at the Live layer)
        self.first_response_s = INF  # first message of any kind (progress, chunk, terminal)
        self.first_chunk_s = INF  # first PLAYABLE chunk (set by the Live layer's reorder buffer)
        self.chunk_arrivals: list[float] | None = None  # arrival of chunk k (inf: lost)
        self.complete_s = INF  # terminal state and every delivered chunk present
        self.terminal_lost = False
        self.chunks_lost = 0
        self.status = -1
        self.error_code: str | None = None
        self.retry_after_ms: float | None = None
        self.server_context_id = NO_CONTEXT
