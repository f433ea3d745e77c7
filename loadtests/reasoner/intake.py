"""Validation of an incoming turn message: negotiation, size bounds and profile metadata.

``parse_turn`` turns a ``SendMessageRequest`` message into a :class:`TurnRequest`
or a :class:`Rejection` carrying the error code of errors.md §2.  Nothing here
does I/O; the bounds are the operational profile's suggested values.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from a2a.types import Message, Role
from google.protobuf.json_format import MessageToDict

from rtalab.loadtests.reasoner.wire import Keys
from rtalab.sim.policy.codes import ALL_CODES, ErrorCode

DIRECTIVES: tuple[str, ...] = ("progress", "handoff", "end_session")


@dataclass(frozen=True)
class Bounds:
    """Size bounds (bytes of UTF-8 / compact JSON); oversize input is rejected, never truncated."""

    text_part_bytes: int = 32 * 1024
    data_part_bytes: int = 16 * 1024
    message_bytes: int = 64 * 1024  # all parts of one message (the history-update bound)
    metadata_bytes: int = 8 * 1024
    max_parts: int = 16
    id_chars: int = 256
    body_bytes: int = 256 * 1024  # one HTTP request body or WebSocket frame
    max_test_delay_s: float = 60.0

    def as_card_params(self) -> dict[str, int]:
        """The bounds advertised in the agent card's extension params."""
        return {"textPartBytes": self.text_part_bytes, "dataPartBytes": self.data_part_bytes,
                "messageBytes": self.message_bytes, "metadataBytes": self.metadata_bytes,
                "maxParts": self.max_parts, "bodyBytes": self.body_bytes}


@dataclass(frozen=True)
class Rejection:
    """A request refused before execution: FAILED with ``code``."""

    code: str
    detail: str = ""
    retry_after_ms: int | None = None


@dataclass(frozen=True)
class TurnRequest:
    """The profile fields of one accepted turn message."""

    active: bool  # extension negotiated
    turn_id: str | None = None
    request_guid: str | None = None
    interaction_id: str | None = None
    side_effect: bool | None = None  # None: sample the workload's side_effect_share
    handoff: bool = False
    directives: frozenset[str] | None = None  # client-supported directive types, None = all
    force_error: str | None = None  # test hook
    delay_s: float | None = None  # test hook: reasoning time override


def _compact_len(value: Any) -> int:
    """Bytes of the compact JSON encoding of ``value``."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _check_parts(msg: Message, b: Bounds) -> str | None:
    """Problem with the message parts, or None."""
    if not msg.parts:
        return "message has no parts"
    if len(msg.parts) > b.max_parts:
        return f"more than {b.max_parts} parts"
    total = 0
    for i, part in enumerate(msg.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            size = len(part.text.encode("utf-8"))
            if size > b.text_part_bytes:
                return f"part {i}: text part larger than {b.text_part_bytes} bytes"
        elif kind == "data":
            size = _compact_len(MessageToDict(part.data))
            if size > b.data_part_bytes:
                return f"part {i}: data part larger than {b.data_part_bytes} bytes"
        elif kind is None:
            return f"part {i}: empty part"
        else:
            return f"part {i}: {kind} parts are not accepted"
        total += size
    if total > b.message_bytes:
        return f"message parts larger than {b.message_bytes} bytes"
    return None


def _id_value(meta: dict[str, Any], key: str, b: Bounds) -> str | None:
    """A string identifier from metadata (absent -> None); raises ValueError if malformed."""
    if key not in meta:
        return None
    v = meta[key]
    if not isinstance(v, str) or not v or len(v) > b.id_chars:
        raise ValueError(f"{key.rsplit('/', 1)[-1]} must be a non-empty string of <= "
                         f"{b.id_chars} characters")
    return v


def _bool_value(meta: dict[str, Any], key: str) -> bool | None:
    """A boolean flag from metadata (absent -> None); raises ValueError if not a bool."""
    if key not in meta:
        return None
    v = meta[key]
    if not isinstance(v, bool):
        raise ValueError(f"{key.rsplit('/', 1)[-1]} must be a boolean")
    return v


def _directives(meta: dict[str, Any], key: str) -> frozenset[str] | None:
    """The client's supported directive types (absent -> None)."""
    if key not in meta:
        return None
    v = meta[key]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError("directives must be a list of strings")
    unknown = sorted(set(v) - set(DIRECTIVES))
    if unknown:
        raise ValueError(f"unknown directive types {unknown}")
    return frozenset(v)


class PlantedFault(RuntimeError):
    """Raised by the ``rta/test.raise`` hook: a planted bug for the fuzzer's negative control."""


def _test_hooks(meta: dict[str, Any], keys: Keys, b: Bounds) -> tuple[str | None, float | None]:
    """``rta/test.forceError`` and ``rta/test.delayS`` (only read when test hooks are on);
    ``rta/test.raise: true`` makes turn parsing raise (an unhandled exception on purpose)."""
    if meta.get(keys("test.raise")) is True:
        raise PlantedFault("planted by rta/test.raise")
    force = meta.get(keys("test.forceError"))
    if force is not None and force not in ALL_CODES:
        raise ValueError("test.forceError must be an error code")
    delay = meta.get(keys("test.delayS"))
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)
                              or not math.isfinite(delay) or not 0 <= delay <= b.max_test_delay_s):
        raise ValueError(f"test.delayS must be a number in [0, {b.max_test_delay_s:g}]")
    return force, (float(delay) if delay is not None else None)


def _check_ids(msg: Message, b: Bounds) -> str | None:
    """Problem with the core identifiers of the message, or None."""
    for name in ("message_id", "context_id", "task_id"):
        if len(getattr(msg, name)) > b.id_chars:
            return f"{name} longer than {b.id_chars} characters"
    if msg.role != Role.ROLE_USER:
        return "role must be ROLE_USER"
    return None


def parse_turn(msg: Message, *, keys: Keys, active: bool, bounds: Bounds,
               test_hooks: bool) -> TurnRequest | Rejection:
    """Validate one turn message (negotiation first, then shape and size)."""
    meta = MessageToDict(msg.metadata)
    if not active and any(keys.is_profile_key(k) for k in meta):
        return Rejection(ErrorCode.EXTENSION_INACTIVE.value)
    problem = _check_ids(msg, bounds) or _check_parts(msg, bounds)
    if problem is None and _compact_len(meta) > bounds.metadata_bytes:
        problem = f"metadata larger than {bounds.metadata_bytes} bytes"
    if problem:
        return Rejection(ErrorCode.SCHEMA_VALIDATION.value, problem)
    if not active:
        return TurnRequest(active=False)
    try:
        force, delay = _test_hooks(meta, keys, bounds) if test_hooks else (None, None)
        return TurnRequest(
            active=True,
            turn_id=_id_value(meta, keys("turnId"), bounds),
            request_guid=_id_value(meta, keys("requestGuid"), bounds),
            interaction_id=_id_value(meta, keys("interactionId"), bounds),
            side_effect=_bool_value(meta, keys("sideEffect")),
            handoff=bool(_bool_value(meta, keys("handoff"))),
            directives=_directives(meta, keys("directives")),
            force_error=force,
            delay_s=delay,
        )
    except ValueError as e:
        return Rejection(ErrorCode.SCHEMA_VALIDATION.value, str(e))
