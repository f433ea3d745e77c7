"""The side-effect witness: a ledger of every execution of a side-effecting tool call.

It plays the part of the external system a side effect lands in (a payment, a
booking): it sees each tool execution at the time the tool *finishes* — also
when the Reasoner had already given up on it (``upstream-timeout``, the "slow
success").  Counting its ledger per requestGuid, per logical turn and per
session gives the three hazards of docs/contracts.md; the load tests' witness
service writes the same ledger.
"""

from __future__ import annotations

import pandas as pd

from rtalab.sim.model.messages import Request
from rtalab.sim.model.recorder import Table, row_writer
from rtalab.sim.shared.schema import (
    CALL_ID,
    CONTEXT_ID,
    EXECUTED_S,
    INTERACTION_ID,
    REQUEST_GUID,
    SIDE_EFFECT_EXECUTIONS,
    SIDE_EFFECT_REQUEST_GUIDS,
    SIDE_EFFECTS_TABLE,
)

# the ledger row, cell by cell (rtalab.sim.model.recorder.row_writer)
LEDGER_ROW = ("req, context_id, executed_s", {
    CALL_ID: "req.call_id",
    INTERACTION_ID: "req.interaction_id",
    REQUEST_GUID: "req.request_guid",
    CONTEXT_ID: "context_id",
    EXECUTED_S: "executed_s",
})


class Witness:
    """Appends one ledger row per side-effect execution."""

    def __init__(self) -> None:
        self.ledger = Table(SIDE_EFFECTS_TABLE)
        self._row = row_writer(self.ledger, {}, *LEDGER_ROW)
        self.executions = 0

    def record(self, executed_s: float, req: Request, context_id: int) -> None:
        """The tool call of ``req`` (in session ``context_id``) finished at ``executed_s``."""
        self.executions += 1
        self._row(req, context_id, executed_s)


def per_turn(ledger: pd.DataFrame) -> pd.DataFrame:
    """Executions and distinct requestGuids per logical turn (index: replication, turn)."""
    g = ledger.groupby(["replication", INTERACTION_ID], sort=True)[REQUEST_GUID]
    return pd.DataFrame({SIDE_EFFECT_EXECUTIONS: g.size(), SIDE_EFFECT_REQUEST_GUIDS: g.nunique()})
