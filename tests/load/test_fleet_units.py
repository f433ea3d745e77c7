"""The load run's fleet figures from ledger rows (no processes): per-replica request shares
from the attempts' ``r<i>/`` worker, the hazards by cause from the witness's ``server``."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from rtalab.loadtests.loadrun.fleet import hazard_counters, replica_of, share_counters
from rtalab.loadtests.witness.ledger import Ledger

T0 = 1000.0


def _w(uid: str, guid: str | None, server: str | None, t: float) -> dict:
    return {"interactionId": uid, "requestGuid": guid, "server": server, "tEnd": T0 + t}


def _turns(*uids: str, start: float = 2.0) -> list[dict]:
    return [{"interaction_id": u, "start_s": T0 + start} for u in uids]


def test_hazards_split_by_cause_as_the_simulator() -> None:
    witness = [_w("a", "g1", "r0", 3), _w("a", "g1", "r1", 4),   # cross replica
               _w("b", "g2", "r1", 3), _w("b", "g2", "r1", 9),   # r1 killed at 5: after restart
               _w("c", "g3", "r0", 3), _w("c", "g3", "r0", 4),   # same replica
               _w("d", "g4", "r0", 3), _w("d", "g5", "r1", 4),   # turn re-run, new guid
               _w("e", None, "r0", 3), _w("e", None, "r1", 4),   # degraded: no guid, no call
               _w("z", "g9", "r0", 0.5), _w("z", "g9", "r1", 0.6)]  # warm-up turn
    restarts = [{"how": "replica", "replica": 1, "t": T0 + 5}, {"how": "crash", "t": T0 + 6}]
    turns = _turns("a", "b", "c", "d", "e") + _turns("z", start=0.1)
    m = hazard_counters(witness, turns, restarts, T0, warmup_s=1.0)
    per = 1000.0 / 5
    assert m["fleet.dup_request_guid_cross_replica_per_1k_turns"] == per
    assert m["fleet.dup_request_guid_after_restart_per_1k_turns"] == per
    assert m["fleet.dup_request_guid_same_replica_per_1k_turns"] == per
    assert m["fleet.reexecuted_turn_cross_replica_per_1k_turns"] == per  # d
    assert m["fleet.reexecuted_turn_same_replica_per_1k_turns"] == 0
    # a witness that names no replica (one Reasoner): no fleet figures at all
    assert hazard_counters([_w("a", "g1", None, 3)], turns, [], T0, 1.0) == {}


def test_request_shares_from_the_replica_stamp() -> None:
    assert replica_of("r12/345") == 12 and replica_of("345") is None and replica_of(None) is None
    attempts = [{"server_worker": w, "send_s": T0 + t} for w, t in (
        ("r0/1", 2), ("r0/1", 3), ("r1/2", 4), ("r0/1", 0.5), (None, 3), ("7", 3))]
    m = share_counters(attempts, T0, 3, (1.0, 10.0))
    assert m["fleet.replica_requests_share.r0"] == 2 / 3
    assert m["fleet.replica_requests_share.r1"] == 1 / 3
    assert m["fleet.replica_requests_share.r2"] == 0.0
    assert m["fleet.requests_imbalance"] == 2.0  # max 2 / mean 1
    assert share_counters([{"server_worker": "123", "send_s": T0 + 2}], T0, 2, (1, 10)) == {}


def test_the_witness_names_the_server_and_reads_an_older_ledger(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as c:  # a ledger written before the server column existed
        c.execute("CREATE TABLE executions (id INTEGER PRIMARY KEY AUTOINCREMENT, context_id "
                  "TEXT NOT NULL, turn_id TEXT, request_guid TEXT, interaction_id TEXT, "
                  "task_id TEXT, principal TEXT, t_start REAL NOT NULL, t_end REAL NOT NULL, "
                  "outcome TEXT NOT NULL)")
        c.execute("INSERT INTO executions (context_id, t_start, t_end, outcome) "
                  "VALUES ('c0', 1, 2, 'ok')")

    async def go() -> list[dict]:
        led = Ledger(old)
        await led.open()
        try:
            await led.record({"contextId": "c1", "server": "r1"}, 3.0, 4.0, "ok")
            return await led.rows()
        finally:
            await led.close()

    rows = asyncio.run(go())
    assert [(r["contextId"], r["server"]) for r in rows] == [("c0", None), ("c1", "r1")]
