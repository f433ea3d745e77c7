"""The fast ledger reader (DuckDB) and the plain ``json.loads`` reference reader agree.

Each tricky file is first shown to go through the fast path (so the comparison
is not the reference compared with itself), then both frames are compared
column by column, dtypes included.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rtalab.loadtests.check.ledger import (
    SCHEMAS,
    LedgerError,
    _read_table,
    events_from_frame,
    read_events,
    read_jsonl,
    read_reference,
)

# one JSON object per line; blank lines are allowed and skipped
TRICKY: dict[str, list[str]] = {
    "attempts": [
        # all fields, plus extra ones (nested object, unicode) the checker ignores
        json.dumps({"run_id": "r", "call_id": "c1", "turn_index": 0, "interaction_id": "i1",
                    "phase": "initial", "request_guid": "g-1", "context_id": "ctx-1",
                    "context_id_learned": None, "injected": "", "side_effect": True,
                    "send_s": 1764567890.123456, "end_s": 1764567890.5, "outcome": "completed",
                    "error_code": None, "retry_after_ms": None, "decision": None, "echo": True,
                    "events": 6, "events_without_seq": 0, "order_violations": 0,
                    "directive": {"payload": [1, {"ß": "✓"}]}, "extra": "ünïcødé"}),
        "",
        # numeric ids (int and float), missing fields, floats where ints are expected
        json.dumps({"call_id": 7, "turn_index": 1.0, "interaction_id": 7.5, "request_guid": 12,
                    "side_effect": False, "send_s": 3, "events": 2.0, "echo": False}),
        # unicode ids, escaped unicode, booleans as numbers, ints for floats, int ids
        '{"call_id": "c\\u00e9-\u2603", "turn_index": 2, "request_guid": "g-\U0001f600", '
        '"side_effect": 1, "echo": 0, "send_s": 5, "end_s": 6, "retry_after_ms": 250, '
        '"outcome": "failed", "error_code": "rate-limited", "decision": "retry", '
        '"context_id": 0, "injected": "resend"}',
        # numeric strings in number columns, boolean strings, a boolean id, -0.0, 1e20
        json.dumps({"call_id": True, "turn_index": 3, "request_guid": "g-4", "send_s": "7.25",
                    "side_effect": "false", "echo": "true", "context_id": -0.0,
                    "context_id_learned": 1e20, "events": "3"}),
        # nothing but the keys
        json.dumps({"call_id": "c9", "turn_index": 0, "request_guid": "g-9"}),
    ],
    "events": [
        json.dumps({"request_guid": "g-1", "attempt_key": "g-1#0", "recv_s": 1.5, "kind": "task",
                    "state": "TASK_STATE_SUBMITTED", "sequence_id": None}),
        json.dumps({"request_guid": "g-1", "attempt_key": "g-1#0", "recv_s": 2, "kind": "status",
                    "sequence_id": 0}),  # int sequenceId, 0-based
        json.dumps({"request_guid": "g-1", "attempt_key": "g-1#0", "recv_s": 2.5,
                    "kind": "artifact", "sequence_id": 1.0, "played_index": 0,
                    "artifact": {"name": "ünï", "parts": []}}),  # float sequenceId, extra
        json.dumps({"request_guid": 42, "kind": "artifact", "sequence_id": 2,
                    "played_index": 1.0}),  # numeric guid, no attempt_key, no recv_s
        "",
        json.dumps({"attempt_key": "g-\u00e9#1", "kind": "error"}),
        json.dumps({"kind": "status", "sequence_id": "3"}),  # no stream key at all
    ],
    "turns": [
        json.dumps({"call_id": "c1", "turn_index": 0, "interaction_id": "i1",
                    "side_effect": True, "outcome": "completed", "end_reason": "completed",
                    "told_caller": "success", "ttfc_s": 0.1}),
        json.dumps({"call_id": 7, "turn_index": 1, "outcome": "unfinished",
                    "end_reason": "end-of-run", "end_s": None}),
        json.dumps({"call_id": "c\u2603", "turn_index": 2.0, "side_effect": None,
                    "told_caller": "none"}),
        json.dumps({"call_id": "c4", "turn_index": 1.5}),  # not a whole number: stays float
    ],
    "witness": [
        json.dumps({"id": 1, "contextId": "ctx-1", "requestGuid": "g-1", "interactionId": "i1",
                    "taskId": "t", "principal": "alice", "tStart": 1.0}),
        json.dumps({"id": 2.0, "contextId": 5, "requestGuid": 12, "interactionId": None}),
        json.dumps({"id": 3, "requestGuid": "g-\U0001f600"}),
    ],
}


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    """``lines`` as ``name.jsonl``."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(SCHEMAS.keys() - {"chaos"}))
def test_fast_reader_equals_reference_on_tricky_input(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, TRICKY[name])
    assert _read_table(path, name) is not None, "the fast path must accept this file"
    ref = read_reference(path, name)
    assert list(ref.columns) == list(SCHEMAS[name])
    assert len(ref) == sum(1 for line in TRICKY[name] if line)
    pd.testing.assert_frame_equal(read_jsonl(path, name), ref, check_exact=True)


def test_reference_reader_coerces_as_the_contract_says(tmp_path: Path) -> None:
    a = read_reference(write(tmp_path, "attempts", TRICKY["attempts"]), "attempts")
    assert a["call_id"].tolist() == ["c1", "7", "c\u00e9-\u2603", "true", "c9"]
    assert a["interaction_id"].tolist()[:2] == ["i1", "7.5"]
    assert a["request_guid"].tolist()[1:3] == ["12", "g-\U0001f600"]
    assert a["context_id"].tolist()[2:4] == ["0", "-0.0"]
    assert a["context_id_learned"].tolist()[3] == "1e+20"
    assert a["turn_index"].dtype == np.int64 and a["turn_index"].tolist() == [0, 1, 2, 3, 0]
    assert a["send_s"].tolist()[:4] == [1764567890.123456, 3.0, 5.0, 7.25]
    assert a["side_effect"].tolist() == [True, False, True, False, None]
    assert a["echo"].tolist() == [True, False, False, True, None]
    assert a["events"].dtype == np.float64  # missing in one row


def test_fast_events_equal_reference_events(tmp_path: Path) -> None:
    path = write(tmp_path, "events", TRICKY["events"])
    assert _read_table(path, "events") is not None
    fast, ref = read_events(path), events_from_frame(read_reference(path, "events"))
    pd.testing.assert_frame_equal(fast.frame, ref.frame, check_exact=True)
    assert fast.names.tolist() == ref.names.tolist() == ["g-1#0", "42", "g-\u00e9#1"]
    assert fast.frame["stream"].tolist() == [0, 0, 0, 1, 2, -1]
    assert fast.frame["sequence_id"].tolist()[1:4] == [0.0, 1.0, 2.0]
    assert fast.frame["task"].tolist() == [True, False, False, False, True, False]


@pytest.mark.parametrize("name", sorted(SCHEMAS.keys() - {"chaos"}))
def test_empty_file_gives_the_same_empty_frame(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, [])
    ref = read_reference(path, name)
    assert ref.empty and list(ref.columns) == list(SCHEMAS[name])
    pd.testing.assert_frame_equal(read_jsonl(path, name), ref)
    if name == "events":
        assert len(read_events(path)) == 0


def test_uncastable_value_falls_back_to_the_reference(tmp_path: Path) -> None:
    lines = [json.dumps({"call_id": "c", "turn_index": "first", "request_guid": "g",
                         "send_s": 1.0})]
    path = write(tmp_path, "attempts", lines)
    assert _read_table(path, "attempts") is None  # the fast reader refuses it
    got = read_jsonl(path, "attempts")
    pd.testing.assert_frame_equal(got, read_reference(path, "attempts"))
    assert np.isnan(got["turn_index"].iloc[0])


@pytest.mark.parametrize(("line", "why"), [("{not json", "not valid JSON"),
                                           ("[1, 2]", "not a JSON object")])
def test_bad_line_is_a_one_line_ledger_error(tmp_path: Path, line: str, why: str) -> None:
    path = write(tmp_path, "events", [json.dumps({"kind": "task"}), "", line])
    with pytest.raises(LedgerError, match=f"line 3 is {why}"):
        read_events(path)
