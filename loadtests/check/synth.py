"""Synthetic load-run ledgers (docs/ledger.md shapes) for the checker's tests and benchmark.

:func:`clean_ledger` builds, vectorised with numpy, a ledger that every rule
passes: calls of ``turns_per_call`` turns; a share of side-effect turns (one
witness execution each, under the requestGuid that completed); a share of turns
whose first attempt fails with ``upstream-timeout`` and is retried once under a
new requestGuid; a share of client-injected resends (same requestGuid, replayed,
no extra execution); every attempt streams a Task, a progress status, ``chunks``
artifacts and a terminal status, with sequenceIds from ``seq_start`` in order,
played in order.  Tests plant one violation into it; the benchmark writes it
with :func:`write_ledger`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

EXT_SCENARIO = """\
[live.retry]
max_attempts = 3
max_attempts_by_code = { internal = 2 }
"""


def clean_ledger(n_turns: int, *, seed: int = 1, turns_per_call: int = 4, chunks: int = 3,
                 side_effect_share: float = 0.3, retry_share: float = 0.1,
                 resend_share: float = 0.05, seq_start: int = 0) -> dict[str, pd.DataFrame]:
    """A consistent ledger of ``n_turns`` turns: attempts, events, turns and witness frames."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_turns)
    call = t // turns_per_call
    tidx = t % turns_per_call
    call_id = np.char.add("c", call.astype(str)).astype(object)
    inter = np.char.add("i", t.astype(str)).astype(object)
    side = rng.random(n_turns) < side_effect_share
    retried = rng.random(n_turns) < retry_share
    resent = rng.random(n_turns) < resend_share
    start = t * 0.01
    turns_of = _Turns(t, tidx, call_id, inter, side, retried, start)
    attempts, failed = _attempts(turns_of, resent, chunks)
    events = _events(attempts, failed, chunks, seq_start)
    turns, witness = _turns_and_witness(turns_of)
    return {"attempts": attempts, "events": events, "turns": turns, "witness": witness}


@dataclass(frozen=True)
class _Turns:
    """The synthetic turns' columns: index, index in the call, call, interaction, whether a
    side effect, whether retried, start."""

    t: np.ndarray
    tidx: np.ndarray
    call_id: np.ndarray
    inter: np.ndarray
    side: np.ndarray
    retried: np.ndarray
    start: np.ndarray

    @property
    def final_no(self) -> np.ndarray:
        """The number of each turn's last (completed) attempt."""
        return np.where(self.retried, 2, 1)


def _attempts(tu: _Turns, resent: np.ndarray, chunks: int) -> tuple[pd.DataFrame, np.ndarray]:
    """First attempts (failed if retried), retries (completed) and resend copies of the final
    requestGuid; (the attempts, which failed)."""
    t, retried = tu.t, tu.retried
    n_first, n_retry, n_resend = len(t), int(retried.sum()), int(resent.sum())
    ti = np.concatenate([t, t[retried], t[resent]])
    att_no = np.concatenate([np.ones(n_first, int), np.full(n_retry, 2), np.zeros(n_resend, int)])
    att_no[n_first + n_retry:] = tu.final_no[resent]
    guid = np.char.add(np.char.add("g", ti.astype(str)), np.char.add("-", att_no.astype(str)))
    failed = np.zeros(len(ti), bool)
    failed[:n_first] = retried
    injected = np.full(len(ti), "", dtype=object)
    injected[n_first + n_retry:] = "resend"
    ctx = np.char.add("ctx-", tu.call_id[ti].astype(str)).astype(object)
    send = tu.start[ti] + np.where(att_no == 2, 0.5, 0.0) + np.where(injected != "", 0.001, 0.0)
    attempts = pd.DataFrame({
        "run_id": "synth", "process": "w1", "binding": "sse", "call_id": tu.call_id[ti],
        "turn_index": tu.tidx[ti], "interaction_id": tu.inter[ti],
        "turn_id": np.char.add("t", ti.astype(str)).astype(object),
        "task_id": np.char.add("task-", guid).astype(object),
        "phase": "initial", "attempt": att_no, "request_guid": guid.astype(object),
        "context_id": ctx, "context_id_learned": ctx,
        "task_id_answered": np.char.add("task-", guid).astype(object), "injected": injected,
        "side_effect": tu.side[ti], "handoff": False, "send_s": send,
        "first_response_s": send + 0.01, "first_chunk_s": np.where(failed, np.nan, send + 0.1),
        "end_s": send + 0.3, "outcome": np.where(failed, "failed", "completed").astype(object),
        "state": np.where(failed, "TASK_STATE_FAILED", "TASK_STATE_COMPLETED").astype(object),
        "error_code": np.where(failed, "upstream-timeout", None).astype(object),  # type: ignore[call-overload]  # numpy stubs: where() takes no None
        "retry_after_ms": np.nan,
        "decision": np.where(failed, "retry", None).astype(object),  # type: ignore[call-overload]  # numpy stubs: where() takes no None
        "echo": True, "events": np.where(failed, 3, chunks + 3), "events_without_seq": 0,
        "order_violations": 0, "http_status": 200, "server_worker": "1",
    })
    return attempts, failed


def _events(attempts: pd.DataFrame, failed: np.ndarray, chunks: int,
            seq_start: int) -> pd.DataFrame:
    """Each attempt's events: task (no seq), progress status, chunks (played), terminal."""
    guid = attempts["request_guid"].to_numpy().astype(str)
    injected = attempts["injected"].to_numpy()
    send = attempts["send_s"].to_numpy()
    per = np.where(failed, 3, chunks + 3)
    ai = np.repeat(np.arange(len(attempts)), per)
    pos = np.arange(len(ai)) - np.repeat(np.cumsum(per) - per, per)
    last = pos == per[ai] - 1
    is_chunk = (pos >= 2) & ~last
    kind = np.where(pos == 0, "task", np.where(is_chunk, "artifact", "status")).astype(object)
    state = np.full(len(ai), None, dtype=object)
    state[pos == 0] = "TASK_STATE_SUBMITTED"
    state[pos == 1] = "TASK_STATE_WORKING"
    state[last] = np.where(failed[ai[last]], "TASK_STATE_FAILED", "TASK_STATE_COMPLETED")
    seq = np.where(pos == 0, np.nan, pos - 1 + seq_start).astype(float)
    played = np.where(is_chunk, pos - 2, np.nan)
    return pd.DataFrame({
        "request_guid": attempts["request_guid"].to_numpy()[ai],
        "attempt_key": np.char.add(guid[ai], np.where(injected[ai] != "", "#1", "#0")
                                   ).astype(object),
        "recv_s": send[ai] + 0.01 * pos, "kind": kind, "state": state, "sequence_id": seq,
        "played_index": played,
    })


def _turns_and_witness(tu: _Turns) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The turn rows (all completed) and one witness execution per side-effect turn."""
    t, final_no, start = tu.t, tu.final_no, tu.start
    final_guid = np.char.add(np.char.add("g", t.astype(str)),
                             np.char.add("-", final_no.astype(str)))
    turns = pd.DataFrame({
        "call_id": tu.call_id, "turn_index": tu.tidx, "interaction_id": tu.inter,
        "turn_id": np.char.add("t", t.astype(str)).astype(object), "side_effect": tu.side,
        "handoff": False, "start_s": start, "end_s": start + np.where(tu.retried, 0.8, 0.3),
        "outcome": "completed", "end_reason": "completed", "error_code": None,
        "attempts": final_no, "retries": final_no - 1, "ttfc_s": 0.1, "completion_s": 0.3,
        "told_caller": "success",
    })
    ws = np.flatnonzero(tu.side)
    witness = pd.DataFrame({
        "id": np.arange(1, len(ws) + 1),
        "contextId": np.char.add("ctx-", tu.call_id[ws].astype(str)),
        "turnId": turns["turn_id"].to_numpy()[ws], "requestGuid": final_guid[ws].astype(object),
        "interactionId": tu.inter[ws],
        "taskId": np.char.add("task-", final_guid[ws]).astype(object),
        "principal": "alice", "tStart": start[ws] + 0.1, "tEnd": start[ws] + 0.2,
        "outcome": "ok",
    })
    return turns, witness


def rows_for(n_rows: int) -> int:
    """Turns giving about ``n_rows`` ledger rows in all (calibrated on the default shares)."""
    probe = clean_ledger(2000)
    per_turn = sum(len(df) for df in probe.values()) / 2000
    return max(1, round(n_rows / per_turn))


def write_ledger(run_dir: str | Path, ledger: dict[str, pd.DataFrame],
                 scenario: str | None = EXT_SCENARIO) -> Path:
    """Write ``ledger`` as ``run_dir/ledger/<name>.jsonl`` (+ ``scenario.toml``); the run dir."""
    run = Path(run_dir)
    folder = run / "ledger"
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in ledger.items():
        df.to_json(folder / f"{name}.jsonl", orient="records", lines=True)
    if scenario is not None:
        (run / "scenario.toml").write_text(scenario, encoding="utf-8")
    return run
