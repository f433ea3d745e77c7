"""``ledger/counts.json``: the ledger's counts next to the server's and the witness's -- a
side-effect request whose answer never arrived may have run (the witness may hold it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtalab.loadtests.loadrun.orchestrate import count_check
from rtalab.sim.vocab import AttemptOutcome as A


@pytest.mark.parametrize("outcome", [A.TIMEOUT, A.TOTAL_TIMEOUT, A.RESPONSE_LOST])
def test_a_side_effect_whose_answer_never_came_may_have_run(tmp_path: Path,
                                                             outcome: A) -> None:
    led = tmp_path / "ledger"
    led.mkdir()
    rows = [{"request_guid": "g1", "side_effect": True, "outcome": A.COMPLETED},
            {"request_guid": "g2", "side_effect": True, "outcome": outcome},
            {"request_guid": "g3", "side_effect": False, "outcome": outcome}]
    (led / "attempts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                        encoding="utf-8")
    out = count_check(tmp_path, None, 2, comparable=True)
    assert out["completed_side_effect_request_guids"] == 1
    assert out["maybe_executed_side_effect_request_guids"] == 1  # g2, whatever ended it
    assert out["witness_matches"] is True  # g1 and g2 in the witness: consistent
