"""The ghost-success rule reads what the server said about the side effect (issue 19).

A turn whose side effect executed while the caller was told it failed, or that was
cancelled, is a ghost unless an attempt of the turn reported ``rta/sideEffect``
(``rolled-forward``: it ran; ``unknown``: it may have run) in
``attempts.side_effect_reported``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rtalab.loadtests.check import check_run
from rtalab.loadtests.check.synth import clean_ledger, write_ledger

Ledger = dict[str, pd.DataFrame]


def _executed_turn(led: Ledger, told: str, outcome: str, reported: str | None) -> None:
    """Make the first executed side-effect turn end ``outcome`` (told ``told``), its attempts
    reporting ``reported``."""
    w = led["witness"].iloc[0]
    t, a = led["turns"], led["attempts"]
    t.loc[t.index[t["interaction_id"] == w["interactionId"]][0],
          ["told_caller", "outcome"]] = [told, outcome]
    a["side_effect_reported"] = None
    a.loc[a["interaction_id"] == w["interactionId"], "side_effect_reported"] = reported


@pytest.mark.parametrize("told, outcome, reported, ghosts", [
    ("failure", "failed", None, 1),
    ("failure", "failed", "unknown", 0),  # told: it may have run
    ("failure", "failed", "rolled-forward", 0),
    ("none", "cancelled", None, 1),  # a cancel that hid a side effect that ran
    ("none", "cancelled", "rolled-forward", 0),
    ("none", "cancelled", "bogus", 1),  # only the profile's values count
    ("success", "completed", None, 0),
])
def test_ghost_success_uses_the_reported_side_effect(tmp_path: Path, told: str, outcome: str,
                                                     reported: str | None, ghosts: int) -> None:
    led = clean_ledger(400, seed=3)
    _executed_turn(led, told, outcome, reported)
    write_ledger(tmp_path, led)
    r = check_run(tmp_path).rule("ghost-success")
    assert (r.status, r.count) == ("pass", ghosts)
