"""The Reasoner's request validation (rtalab.loadtests.reasoner.intake.parse_turn), called
directly: each bound and each metadata type, one case that must be refused and one just
inside that must pass.  Expected codes written out (errors.md §2)."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import Message, Part, Role

from rtalab.loadtests.reasoner.intake import Bounds, Rejection, TurnRequest, parse_turn
from rtalab.loadtests.reasoner.wire import Keys, to_struct

K = Keys()
B = Bounds()
SCHEMA = "schema-validation"


def _msg(text: str = "hi", meta: dict[str, Any] | None = None, role: Any = Role.ROLE_USER,
         parts: list[Part] | None = None, **ids: str) -> Message:
    m = Message(message_id=ids.get("message_id", "m1"), role=role,
                context_id=ids.get("context_id", ""),
                parts=parts if parts is not None else [Part(text=text)])
    if meta:
        m.metadata.CopyFrom(to_struct(meta))
    return m


def _parse(msg: Message, active: bool = True, hooks: bool = False) -> TurnRequest | Rejection:
    return parse_turn(msg, keys=K, active=active, bounds=B, test_hooks=hooks)


def _code(r: TurnRequest | Rejection) -> str | None:
    return r.code if isinstance(r, Rejection) else None


def test_a_valid_turn_reads_every_field() -> None:
    r = _parse(_msg(meta={K("turnId"): "t1", K("requestGuid"): "g1", K("interactionId"): "i1",
                          K("sideEffect"): True, K("handoff"): False,
                          K("directives"): ["progress"]}))
    assert r == TurnRequest(active=True, turn_id="t1", request_guid="g1", interaction_id="i1",
                            side_effect=True, handoff=False, directives=frozenset({"progress"}))


def test_profile_keys_without_the_extension_are_refused() -> None:
    assert _code(_parse(_msg(meta={K("requestGuid"): "g1"}), active=False)) == \
        "extension-inactive"
    assert _parse(_msg(meta={"other": 1}), active=False) == TurnRequest(active=False)


def test_text_bound_counts_utf8_bytes_not_characters() -> None:
    at = "é" * (B.text_part_bytes // 2)  # 2 bytes each: exactly the bound
    assert isinstance(_parse(_msg(at)), TurnRequest)
    over = "é" * (B.text_part_bytes // 2 + 1)  # fewer characters than the bound, more bytes
    assert len(over) < B.text_part_bytes
    r = _parse(_msg(over))
    assert _code(r) == SCHEMA and "text part larger" in r.detail


def test_message_bound_sums_the_parts() -> None:
    part = "a" * B.text_part_bytes
    n = B.message_bytes // B.text_part_bytes
    assert isinstance(_parse(_msg(parts=[Part(text=part)] * n)), TurnRequest)
    r = _parse(_msg(parts=[Part(text=part)] * n + [Part(text="a")]))
    assert _code(r) == SCHEMA and "message parts larger" in r.detail


def test_part_count_empty_message_and_role() -> None:
    assert isinstance(_parse(_msg(parts=[Part(text="a")] * B.max_parts)), TurnRequest)
    assert _code(_parse(_msg(parts=[Part(text="a")] * (B.max_parts + 1)))) == SCHEMA
    assert _code(_parse(_msg(parts=[]))) == SCHEMA
    assert _code(_parse(_msg(role=Role.ROLE_AGENT))) == SCHEMA
    assert _code(_parse(_msg(role=Role.ROLE_UNSPECIFIED))) == SCHEMA  # not the user: refused


def test_identifier_bounds() -> None:
    ok = "x" * B.id_chars
    assert isinstance(_parse(_msg(meta={K("requestGuid"): ok})), TurnRequest)
    for bad in ("", "x" * (B.id_chars + 1), 7, None, ["g"]):
        r = _parse(_msg(meta={K("requestGuid"): bad}))
        assert _code(r) == SCHEMA, bad
    assert _code(_parse(_msg(context_id="c" * (B.id_chars + 1)))) == SCHEMA
    assert isinstance(_parse(_msg(context_id="c" * B.id_chars)), TurnRequest)


@pytest.mark.parametrize("bad", [1, 0, "true", None])
def test_flags_must_be_booleans(bad: Any) -> None:
    assert _code(_parse(_msg(meta={K("sideEffect"): bad}))) == SCHEMA
    assert _code(_parse(_msg(meta={K("handoff"): bad}))) == SCHEMA


def test_directives_must_be_known_strings() -> None:
    assert _code(_parse(_msg(meta={K("directives"): ["progress", "dance"]}))) == SCHEMA
    assert _code(_parse(_msg(meta={K("directives"): "progress"}))) == SCHEMA
    assert _code(_parse(_msg(meta={K("directives"): [1]}))) == SCHEMA
    r = _parse(_msg(meta={K("directives"): []}))
    assert isinstance(r, TurnRequest) and r.directives == frozenset()


def test_metadata_bound() -> None:
    key = K("note")
    base = len(f'{{"{key}":""}}'.encode())
    assert isinstance(_parse(_msg(meta={key: "a" * (B.metadata_bytes - base)})), TurnRequest)
    r = _parse(_msg(meta={key: "a" * (B.metadata_bytes - base + 1)}))
    assert _code(r) == SCHEMA and "metadata larger" in r.detail


def test_test_hooks_are_read_only_when_on_and_bounded() -> None:
    meta = {K("test.forceError"): "internal", K("test.delayS"): 1.5}
    off = _parse(_msg(meta=meta))
    assert isinstance(off, TurnRequest) and off.force_error is None and off.delay_s is None
    on = _parse(_msg(meta=meta), hooks=True)
    assert isinstance(on, TurnRequest) and (on.force_error, on.delay_s) == ("internal", 1.5)
    for bad in (-0.1, B.max_test_delay_s + 1, True, "1"):
        assert _code(_parse(_msg(meta={K("test.delayS"): bad}), hooks=True)) == SCHEMA, bad
    assert isinstance(_parse(_msg(meta={K("test.delayS"): B.max_test_delay_s}), hooks=True),
                      TurnRequest)
    assert _code(_parse(_msg(meta={K("test.forceError"): "nope"}), hooks=True)) == SCHEMA
