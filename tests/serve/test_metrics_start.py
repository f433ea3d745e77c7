"""The Reasoner's turn counter is exported before its first answer.

A load run compares its ledger with ``rta_reasoner_turns_total`` (ledger/counts.json
``server_turns_answered``/``server_matches``); a server restarted late in a run, or one that
has answered nothing yet, must still show the counter at 0, not leave it out.
"""

from __future__ import annotations

from rtalab.loadtests.loadrun.orchestrate import parse_prometheus, server_turns_answered
from tests.serve.conftest import Reasoner

fresh = Reasoner.fixture("fresh", "A Reasoner with two workers that has answered nothing.",
                         witness=False, workers=2)


def test_turn_counter_is_exported_at_zero_before_any_turn(fresh: Reasoner) -> None:
    metrics = parse_prometheus(fresh.metrics())
    assert any(key.startswith("rta_reasoner_turns_total{") for key in metrics), sorted(metrics)
    assert server_turns_answered(metrics) == 0.0
