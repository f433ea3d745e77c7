"""THE side-effect rule (rtalab.sim.shared.dedup_rule: "never claim nothing ran without proof"), as
a table and as the simulator obeys it: no simulated answer that the side effect did not run
(a FAILED attempt other than upstream-timeout) is contradicted by the witness ledger."""

from __future__ import annotations

import pytest

from rtalab.sim.runner import run_once
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.dedup_rule import known_side_effect, may_start
from tests.test_model_dedup import side_effect_turns


@pytest.mark.parametrize(("progress", "witnessed", "has_ledger", "want"), [
    ("done", None, True, "ran"),
    ("done", False, True, "ran"),  # the record is proof enough
    (None, True, True, "ran"),  # the tool's ledger saw it
    ("started", True, True, "ran"),
    ("none", None, True, "not-run"),  # the tool answered that it did not run
    ("started", False, True, "unknown"),  # may still be running
    ("started", None, False, "unknown"),
    ("unknown", None, True, "unknown"),
    (None, False, True, "not-run"),  # no start recorded, and the ledger agrees
    (None, None, False, "not-run"),  # no start recorded (rule 1), nothing to contradict it
    (None, None, True, "unknown"),  # a ledger that cannot be asked: no proof
])
def test_known_side_effect(progress: str | None, witnessed: bool | None, has_ledger: bool,
                           want: str) -> None:
    assert known_side_effect(progress, witnessed, has_ledger) == want


def test_a_start_that_cannot_be_recorded_is_never_made() -> None:
    assert may_start(True) and not may_start(False)


def test_the_simulator_never_says_nothing_ran_of_an_execution() -> None:
    """Injected failures (internal, rate-limited, ...) and upstream timeouts over side-effect
    turns with network duplicates and retries: every FAILED attempt whose requestGuid the
    witness saw executed says upstream-timeout (may have run), none claims it did not run."""
    sc = side_effect_turns(**{
        "reasoner.dedup": "request-guid", "reasoner.dedup_window_s": 300.0,
        "reasoner.errors": {"internal": 0.15, "rate-limited": 0.05},
        "reasoner.upstream_timeout_s": 0.3, "run.duration_s": 120.0, "run.replications": 1})
    out = run_once(sc, seed=7)
    at, se = out.attempts, out.side_effects
    ran = set(se[S.REQUEST_GUID])
    failed = at[at[S.OUTCOME] == "failed"]
    assert len(failed) > 50 and ran  # the run exercised both
    said_not_run = failed[failed[S.ERROR_CODE] != "upstream-timeout"]
    assert len(said_not_run) > 20
    contradicted = said_not_run[said_not_run[S.REQUEST_GUID].isin(ran)]
    assert contradicted.empty, contradicted.head()
    # (and the other side: timeouts did hide executions, which the hazards count)
    timed_out = failed[failed[S.ERROR_CODE] == "upstream-timeout"]
    assert timed_out[S.REQUEST_GUID].isin(ran).any()
