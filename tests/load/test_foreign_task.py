"""Issue 25 point 7a: a server that answers a turn with another call's stored turn.

The planted ``turn-key-rewrite`` Reasoner dedups by turnId alone (per-call turnIds
``t-1``, ``t-2``, ... repeat across calls and principals) and rewrites the contextId
of what it replays to the caller's own: ``cross-session-answer`` (which compares
contextIds) sees nothing, and with no side effect anywhere no witness rule can.
``foreign-task-answer`` must fail, on both bindings; the correct Reasoner on the
same workload must pass it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.load.conftest import jsonl, load_run

ARGS = ["--binding", "both", "--duration", "3", "--set", 'load.turn_ids="per_call"',
        "--set", "workload.side_effect_share=0.0", "--set", "workload.handoff_share=0.0"]


def _given_foreign_tasks(attempts: list[dict[str, Any]]) -> set[str]:
    """Bindings of attempts answered with a taskId first answered to another call's turn
    (computed here from the ledger, not taken from the verdict)."""
    owner: dict[str, tuple[str, int]] = {}
    bindings = set()
    for a in sorted(attempts, key=lambda r: r["send_s"]):
        task = a.get("task_id_answered")
        if not task:
            continue
        turn = (a["call_id"], a["turn_index"])
        if owner.setdefault(task, turn) != turn:
            bindings.add(a["binding"])
    return bindings


def test_a_replayed_foreign_turn_fails_foreign_task_answer(tmp_path: Path, read_json) -> None:
    variants = {"correct": [], "bug": ["--unsafe-bug", "turn-key-rewrite"]}
    with ThreadPoolExecutor(2) as pool:
        for name in variants:
            (tmp_path / name).mkdir()
        futures = {name: pool.submit(load_run, tmp_path / name, *ARGS, *extra)
                   for name, extra in variants.items()}
        done = {name: f.result() for name, f in futures.items()}

    p, run = done["correct"]
    assert p.returncode == 0, p.stderr
    verdict = read_json(run / "verdict.json")
    rules = {r["name"]: r for r in verdict["rules"]}
    assert rules["foreign-task-answer"]["status"] == "pass", rules["foreign-task-answer"]
    assert _given_foreign_tasks(jsonl(run / "ledger" / "attempts.jsonl")) == set()

    p, run = done["bug"]
    assert p.returncode == 1, p.stderr
    verdict = read_json(run / "verdict.json")
    # the reference Reasoner's own /metrics count executed turns only (3 ran, ~40 were
    # answered): the integrity rule sees it too, a foreign server would not expose them
    assert "foreign-task-answer" in verdict["failed"], verdict["failed"]
    assert set(verdict["failed"]) <= {"foreign-task-answer", "server-ledger-agree"}
    rules = {r["name"]: r for r in verdict["rules"]}
    assert rules["cross-session-answer"]["status"] == "pass"  # the rewrite hides it there
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert not any(a["context_id"] and a["context_id_learned"]
                   and a["context_id"] != a["context_id_learned"] for a in attempts)
    assert _given_foreign_tasks(attempts) == {"sse", "ws"}
    assert "foreign-task-answer" in (run / "verdict.txt").read_text()
