"""Wire vocabulary of the Realtime Agent profile: metadata keys and the events the Reasoner emits.

Every builder here returns a protobuf event of ``a2a.types``; ``rta/*`` metadata is
only attached when the extension was negotiated (``active``), except the error
code of a FAILED status, which is always present (see docs/reasoner.md).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any, cast

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.struct_pb2 import Struct, Value

BINDING_KEY = "binding"  # ServerCallContext.state: the binding a request came in on
DEFAULT_EXT_URI = "https://schemas.salesforce.com/a2a/ext/realtime-agent/v0.1"

Event = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent

TERMINAL_STATES = frozenset({
    TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED,
})
# States at which one request's stream ends (the turn may continue on the same task).
STREAM_END_STATES = TERMINAL_STATES | {TaskState.TASK_STATE_INPUT_REQUIRED}
END_STATE_NAMES = frozenset(TaskState.Name(s) for s in STREAM_END_STATES)  # their JSON names
EVENT_KINDS = ("task", "statusUpdate", "artifactUpdate", "message")  # a StreamResponse's fields

SAFE_TEXT: dict[str, str] = {
    "schema-validation": "The request failed validation.",
    "unsupported-directive": "The turn needs a directive the client does not support.",
    "extension-inactive": "Profile metadata was sent without negotiating the extension.",
    "auth": "Not authorized.",
    "rate-limited": "Too many requests; retry later.",
    "upstream-timeout": "A dependency did not respond in time.",
    "session-not-found": "Unknown or expired session.",
    "internal": "Something went wrong on our side.",
}


# rta/sideEffect on a terminal status: the turn's side effect ran and is not undone (errors.md
# §4 roll-forward) / its tool call started and its outcome is unknown (do not assume it did
# not run)
ROLLED_FORWARD = "rolled-forward"
SIDE_EFFECT_UNKNOWN = "unknown"
RECOVERED_TEXT = ("The request's side effect ran; the server restarted before it could "
                  "reply (rolled forward, not undone).")
CANCELED_TEXT = {
    ROLLED_FORWARD: "canceled: the turn was canceled after its side effect ran "
                    "(rolled forward, not undone).",
    SIDE_EFFECT_UNKNOWN: "canceled: the turn was canceled after its side effect was "
                         "started; whether it ran is unknown.",
}


@dataclass(frozen=True)
class Keys:
    """The full metadata keys (``<ext URI>/<name>``) for one extension URI."""

    uri: str = DEFAULT_EXT_URI

    def __call__(self, name: str) -> str:
        """``<uri>/<name>``."""
        return f"{self.uri}/{name}"

    @property
    def prefix(self) -> str:
        """Prefix shared by every profile key."""
        return f"{self.uri}/"

    def is_profile_key(self, key: str) -> bool:
        """True for ``rta/*`` keys of this extension."""
        return key.startswith(self.prefix)


def now_status(state: TaskState, message: Message | None = None) -> TaskStatus:
    """A TaskStatus stamped with the current wall-clock time."""
    status = TaskStatus(state=state)
    status.timestamp.GetCurrentTime()
    if message is not None:
        status.message.CopyFrom(message)
    return status


def to_struct(data: dict[str, Any]) -> Struct:
    """A protobuf Struct from plain JSON data."""
    s = Struct()
    s.update(data)
    return s


def data_part(data: dict[str, Any]) -> Part:
    """A DataPart carrying a JSON object."""
    v = Value()
    v.struct_value.update(data)
    return Part(data=v)


class EventFactory:
    """Builds the events of one task; numbers ``rta/sequenceId`` when the extension is active."""

    def __init__(self, keys: Keys, task_id: str, context_id: str, active: bool, next_seq: int = 0):
        self.keys = keys
        self.task_id = task_id
        self.context_id = context_id
        self.active = active
        self.next_seq = next_seq

    def _event_meta(self, event_type: str | None = None) -> dict[str, Any]:
        """Event-level metadata: the next sequenceId (+ eventType) when active, else nothing."""
        if not self.active:
            return {}
        meta: dict[str, Any] = {self.keys("sequenceId"): self.next_seq}
        self.next_seq += 1
        if event_type:
            meta[self.keys("eventType")] = event_type
        return meta

    def _message(self, parts: list[Part], meta: dict[str, Any] | None = None) -> Message:
        """An agent message on this task."""
        msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_AGENT,
                      context_id=self.context_id, task_id=self.task_id, parts=parts)
        if meta:
            msg.metadata.CopyFrom(to_struct(meta))
        return msg

    def _status(self, state: TaskState, message: Message | None,
                meta: dict[str, Any]) -> TaskStatusUpdateEvent:
        """A status update with event metadata."""
        ev = TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id,
                                   status=now_status(state, message))
        if meta:
            ev.metadata.CopyFrom(to_struct(meta))
        return ev

    def submitted(self) -> Task:
        """The initial Task (no history: transcripts are never echoed or stored for replay)."""
        return Task(id=self.task_id, context_id=self.context_id,
                    status=now_status(TaskState.TASK_STATE_SUBMITTED))

    def directive(self, directive_type: str, state: TaskState,
                  data: dict[str, Any] | None = None, text: str = "") -> TaskStatusUpdateEvent:
        """A directive status update (``progress`` while WORKING, ``handoff`` at INPUT_REQUIRED)."""
        meta = self._event_meta("directive")
        if not self.active:
            parts = [Part(text=text)] if text else []
            return self._status(state, self._message(parts) if parts else None, meta)
        body = {"directiveType": directive_type, **(data or {})}
        parts = [data_part(body)] + ([Part(text=text)] if text else [])
        msg_meta = {self.keys("eventType"): "directive",
                    self.keys("directiveType"): directive_type}
        return self._status(state, self._message(parts, msg_meta), meta)

    def working(self) -> TaskStatusUpdateEvent:
        """A plain WORKING status (no directive)."""
        return self._status(TaskState.TASK_STATE_WORKING, None, self._event_meta())

    def chunk(self, index: int, count: int, text: str) -> TaskArtifactUpdateEvent:
        """One spoken chunk: artifact ``spoken`` appended to, last_chunk on the final one."""
        art = Artifact(artifact_id=f"{self.task_id}-spoken", name="spoken",
                       parts=[Part(text=text)])
        ev = TaskArtifactUpdateEvent(task_id=self.task_id, context_id=self.context_id,
                                     artifact=art, append=index > 0,
                                     last_chunk=index == count - 1)
        meta = self._event_meta()
        if meta:
            ev.metadata.CopyFrom(to_struct(meta))
        return ev

    def completed(self, side_effect: str | None = None) -> TaskStatusUpdateEvent:
        """Terminal COMPLETED (``side_effect``: a recovered turn whose side effect ran, with
        ``rta/sideEffect`` and a text saying the reply was lost)."""
        if side_effect is None:
            return self._status(TaskState.TASK_STATE_COMPLETED, None, self._event_meta())
        msg = self._message([Part(text=RECOVERED_TEXT)], {self.keys("sideEffect"): side_effect})
        return self._status(TaskState.TASK_STATE_COMPLETED, msg, self._event_meta())

    def canceled(self, side_effect: str | None = None) -> TaskStatusUpdateEvent:
        """Terminal CANCELED; ``side_effect``: what became of the turn's side effect when it
        had started before the cancel (:data:`ROLLED_FORWARD` or :data:`SIDE_EFFECT_UNKNOWN`,
        carried as ``rta/sideEffect`` on the status message, negotiated or not, like
        ``rta/errorCode``, with a text saying so)."""
        if side_effect is None:
            msg = self._message([Part(text="canceled: the turn was canceled.")])
        else:
            msg = self._message([Part(text=CANCELED_TEXT[side_effect])],
                                {self.keys("sideEffect"): side_effect})
        return self._status(TaskState.TASK_STATE_CANCELED, msg, self._event_meta())

    def failed(self, code: str, retry_after_ms: int | None = None,
               detail: str = "", side_effect: str | None = None) -> TaskStatusUpdateEvent:
        """Terminal FAILED with a safe text part and ``rta/errorCode`` (+ ``rta/retryAfterMs``,
        ``rta/sideEffect``)."""
        text = f"{code}: {detail or SAFE_TEXT.get(code, 'Request failed.')}"
        meta: dict[str, Any] = {self.keys("errorCode"): code}
        if retry_after_ms is not None:
            meta[self.keys("retryAfterMs")] = int(retry_after_ms)
        if side_effect is not None:
            meta[self.keys("sideEffect")] = side_effect
        return self._status(TaskState.TASK_STATE_FAILED, self._message([Part(text=text)], meta),
                            self._event_meta())


def event_state(ev: Event) -> TaskState | None:
    """The task state an event carries, if any."""
    if isinstance(ev, Task | TaskStatusUpdateEvent):
        return ev.status.state
    return None


def is_stream_end(ev: Event) -> bool:
    """True if one request's stream ends at this event (terminal or INPUT_REQUIRED)."""
    state = event_state(ev)
    return state is not None and state in STREAM_END_STATES


def json_kind(ev: dict[str, Any]) -> str:
    """``task``, ``statusUpdate``, ``artifactUpdate`` or ``message`` (a JSON stream payload)."""
    return next(iter(ev))


def json_state(ev: dict[str, Any]) -> str | None:
    """The task state of a JSON task / statusUpdate payload."""
    body = ev[json_kind(ev)]
    return cast("str | None", body.get("status", {}).get("state"))


def frame_ends(frame: dict[str, Any]) -> bool:
    """True if this JSON-RPC response frame ends its request's stream (an error, a unary
    result, or an event at a stream-end state)."""
    if "error" in frame:
        return True
    result = frame.get("result") or {}
    if not isinstance(result, dict) or len(result) != 1 or json_kind(result) not in EVENT_KINDS:
        return True  # a unary result
    return json_state(result) in END_STATE_NAMES


def error_code_of(ev: Event, keys: Keys) -> str | None:
    """``rta/errorCode`` of a FAILED event, else None."""
    if event_state(ev) != TaskState.TASK_STATE_FAILED:
        return None
    status = ev.status  # type: ignore[union-attr]  # a FAILED state comes on a Task or status update
    value = status.message.metadata.fields.get(keys("errorCode"))
    return value.string_value if value is not None else "internal"


def _stream_response(ev: Event) -> StreamResponse:
    """Wrap an event in the StreamResponse oneof."""
    sr = StreamResponse()
    if isinstance(ev, Task):
        sr.task.CopyFrom(ev)
    elif isinstance(ev, Message):
        sr.message.CopyFrom(ev)
    elif isinstance(ev, TaskStatusUpdateEvent):
        sr.status_update.CopyFrom(ev)
    else:
        sr.artifact_update.CopyFrom(ev)
    return sr


def _unwrap(sr: StreamResponse) -> Event:
    """The event inside a StreamResponse."""
    kind = sr.WhichOneof("payload")
    if kind is None:
        raise ValueError("stored event has no payload")
    return cast("Event", getattr(sr, kind))


def pack_event(ev: Event) -> str:
    """Compact storable form: base64 of the serialized StreamResponse (10x cheaper than JSON)."""
    return base64.b64encode(_stream_response(ev).SerializeToString()).decode("ascii")


def unpack_event(text: str) -> Event:
    """Inverse of :func:`pack_event`."""
    sr = StreamResponse()
    sr.ParseFromString(base64.b64decode(text, validate=True))
    return _unwrap(sr)
