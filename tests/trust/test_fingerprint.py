"""The request fingerprint stored with a dedup entry (rtalab.loadtests.reasoner.idempotency.
request_fingerprint): every field of the request's meaning changes it (method, taskId, each
part, sideEffect, handoff), what is a key or a scope does not (messageId, contextId), and
fields are length-prefixed (no two splits of the same bytes collide)."""

from __future__ import annotations

from a2a.types import Message, Part, Role

from rtalab.loadtests.reasoner.idempotency import request_fingerprint


def _msg(*texts: str, task_id: str = "", message_id: str = "m1",
         context_id: str = "c1") -> Message:
    return Message(message_id=message_id, role=Role.ROLE_USER, context_id=context_id,
                   task_id=task_id, parts=[Part(text=t) for t in texts])


def _fp(msg: Message, method: str = "SendStreamingMessage", side_effect: bool | None = None,
        handoff: bool = False) -> str:
    return request_fingerprint(method, msg, side_effect, handoff)


def test_every_field_of_the_meaning_changes_the_fingerprint() -> None:
    base = _fp(_msg("book a table"))
    others = {
        "method": _fp(_msg("book a table"), method="SendMessage"),
        "taskId": _fp(_msg("book a table", task_id="t1")),
        "text": _fp(_msg("book a tablE")),
        "another part": _fp(_msg("book a table", "")),
        "sideEffect true": _fp(_msg("book a table"), side_effect=True),
        "sideEffect false": _fp(_msg("book a table"), side_effect=False),
        "handoff": _fp(_msg("book a table"), handoff=True),
    }
    assert all(v != base for v in others.values()), [k for k, v in others.items() if v == base]
    assert len(set(others.values())) == len(others)
    assert len(base) == 32 and int(base, 16) >= 0


def test_keys_and_scope_are_not_part_of_it() -> None:
    assert _fp(_msg("x", message_id="m1", context_id="c1")) == _fp(
        _msg("x", message_id="m2", context_id=""))


def test_fields_are_length_prefixed() -> None:
    assert _fp(_msg("ab", "c")) != _fp(_msg("a", "bc"))
    assert _fp(_msg("x", task_id="t"), method="Send") != _fp(_msg("x", task_id=""),
                                                             method="Sendt")
