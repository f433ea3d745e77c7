"""Column names, categories and dtypes of the run records, shared by simulated and measured runs.

A run (simulated or a load test) produces six tables, one flat row per thing:

* ``attempts``     — one row per request the Live layer sent (its view of it);
* ``turns``        — one row per logical turn (a user utterance), whatever the retries;
* ``calls``        — one row per call (a Live-layer session);
* ``executions``   — one row per request copy the Reasoner received (server ledger);
* ``side_effects`` — one row per side-effect execution seen by the witness (witness ledger);
* ``timeseries``   — one row per second of simulated / wall time.

Columns are named by what they mean, not by simulator internals; times are seconds
from the start of the run (``_s``).  Identifiers are opaque: the simulator uses
integers, a load run may use strings.  The meaning of every column is in
``docs/metrics.md``.  Categorical columns take their values from the tuples below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from rtalab.sim import vocab as V
from rtalab.sim.policy.codes import ALL_CODES
from rtalab.sim.vocab import values

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION: Final[int] = 1

# --------------------------------------------------------------------------- categories

# the vocabulary's values (rtalab.sim.vocab) in their fixed on-disk order (the codes)
PHASES: Final = values(V.Phase)
ATTEMPT_OUTCOMES: Final = values(V.AttemptOutcome)
TURN_OUTCOMES: Final = values(V.TurnOutcome)
DECISIONS: Final = values(V.Decision)
END_REASONS: Final = values(V.EndReason)
CALL_END_REASONS: Final = values(V.CallEndReason)
DISPOSITIONS: Final = (
    "executed", "replayed", "joined", "rate-limited", "queue-full", "session-not-found",
    "unserved", "queue-timeout",
    # one row per CancelTask received: queued work dropped / running work stopped at its next
    # step / side effect already ran, the task rolls forward / task already ended (or unknown)
    "cancel-dropped", "cancel-stopped", "cancel-rolled-forward", "cancel-too-late",
    # a request reusing a live key with another fingerprint (rtalab.sim.shared.dedup_rule.conflicts)
    "key-conflict",
)
CANCEL_DISPOSITIONS: Final = ("cancel-dropped", "cancel-stopped", "cancel-rolled-forward",
                              "cancel-too-late")
STATUSES: Final = (V.AttemptOutcome.COMPLETED.value, V.AttemptOutcome.INPUT_REQUIRED.value,
                   V.AttemptOutcome.FAILED.value)
ERROR_CODES: Final = ALL_CODES

# --------------------------------------------------------------------------- column names

REPLICATION: Final = "replication"
CALL_ID: Final = "call_id"
TURN_INDEX: Final = "turn_index"
INTERACTION_ID: Final = "interaction_id"  # the logical turn (rta/interactionId), kept by retries
LIVE_INSTANCE: Final = "live_instance"
PHASE: Final = "phase"
ATTEMPT: Final = "attempt"
REQUEST_GUID: Final = "request_guid"
TASK_ID: Final = "task_id"  # rta/turnId == taskId carried by the request
CONTEXT_ID: Final = "context_id"
DELAY_BEFORE_S: Final = "delay_before_s"
SEND_S: Final = "send_s"
FIRST_RESPONSE_S: Final = "first_response_s"
FIRST_CHUNK_S: Final = "first_chunk_s"
END_S: Final = "end_s"
OUTCOME: Final = "outcome"
ERROR_CODE: Final = "error_code"
RETRY_AFTER_MS: Final = "retry_after_ms"
DECISION: Final = "decision"
REPLAYED: Final = "replayed"
REQUEST_DUPLICATED: Final = "request_duplicated"
REQUEST_LOST: Final = "request_lost"
CHUNKS_LOST: Final = "chunks_lost"

START_S: Final = "start_s"
END_REASON: Final = "end_reason"
ATTEMPTS: Final = "attempts"
RETRIES: Final = "retries"
TTFC_S: Final = "ttfc_s"
COMPLETION_S: Final = "completion_s"
SIDE_EFFECT: Final = "side_effect"
HANDOFF: Final = "handoff"
HANDOFF_WAIT_S: Final = "handoff_wait_s"
SIDE_EFFECT_EXECUTIONS: Final = "side_effect_executions"
SIDE_EFFECT_REQUEST_GUIDS: Final = "side_effect_request_guids"
ESCALATED: Final = "escalated"

ARRIVAL_S: Final = "arrival_s"
TURNS_PLANNED: Final = "turns_planned"
TURNS_STARTED: Final = "turns_started"
SESSIONS_OPENED: Final = "sessions_opened"
DEGRADED: Final = "degraded"  # no A2A-Extensions echo within the negotiation timeout

NETWORK_DUPLICATE: Final = "network_duplicate"
DISPOSITION: Final = "disposition"
SERVICE_START_S: Final = "service_start_s"
SERVICE_END_S: Final = "service_end_s"
STATUS: Final = "status"

EXECUTED_S: Final = "executed_s"

T_S: Final = "t_s"
OFFERED_TURNS_PER_S: Final = "offered_turns_per_s"
ATTEMPTS_PER_S: Final = "attempts_per_s"
RETRIES_PER_S: Final = "retries_per_s"
COMPLETED_TURNS_PER_S: Final = "completed_turns_per_s"
FAILED_TURNS_PER_S: Final = "failed_turns_per_s"
SERVER_REQUESTS_PER_S: Final = "server_requests_per_s"
SERVER_EXECUTIONS_PER_S: Final = "server_executions_per_s"
TURNS_IN_PROGRESS: Final = "turns_in_progress"
CALLS_IN_PROGRESS: Final = "calls_in_progress"
SERVER_IN_FLIGHT: Final = "server_in_flight"
QUEUE_LENGTH: Final = "queue_length"
BUSY_WORKERS: Final = "busy_workers"
WORKER_CAPACITY: Final = "worker_capacity"
DEDUP_ENTRIES: Final = "dedup_entries"
DEDUP_BYTES: Final = "dedup_bytes"

# --------------------------------------------------------------------------- tables
# A column spec is (name, kind): kind is "f8" (float, NaN = missing), "i8" (integer,
# -1 = none where documented), "bool", or a tuple of categories (pandas categorical,
# NaN = missing).

ColumnSpec = tuple[str, "str | tuple[str, ...]"]

ATTEMPTS_TABLE: Final[tuple[ColumnSpec, ...]] = (
    (CALL_ID, "i8"), (TURN_INDEX, "i8"), (INTERACTION_ID, "i8"), (LIVE_INSTANCE, "i8"),
    (PHASE, PHASES), (ATTEMPT, "i8"), (REQUEST_GUID, "i8"), (TASK_ID, "i8"),
    (CONTEXT_ID, "i8"), (DELAY_BEFORE_S, "f8"), (SEND_S, "f8"), (FIRST_RESPONSE_S, "f8"),
    (FIRST_CHUNK_S, "f8"), (END_S, "f8"), (OUTCOME, ATTEMPT_OUTCOMES), (ERROR_CODE, ERROR_CODES),
    (RETRY_AFTER_MS, "f8"), (DECISION, DECISIONS), (REPLAYED, "bool"),
    (REQUEST_DUPLICATED, "bool"), (REQUEST_LOST, "bool"), (CHUNKS_LOST, "i8"),
)

TURNS_TABLE: Final[tuple[ColumnSpec, ...]] = (
    (CALL_ID, "i8"), (TURN_INDEX, "i8"), (INTERACTION_ID, "i8"), (LIVE_INSTANCE, "i8"),
    (START_S, "f8"), (END_S, "f8"), (OUTCOME, TURN_OUTCOMES), (END_REASON, END_REASONS),
    (ERROR_CODE, ERROR_CODES), (ATTEMPTS, "i8"), (RETRIES, "i8"), (TTFC_S, "f8"),
    (COMPLETION_S, "f8"), (SIDE_EFFECT, "bool"), (HANDOFF, "bool"), (HANDOFF_WAIT_S, "f8"),
    (ESCALATED, "bool"),
)
# appended to TURNS_TABLE from the witness ledger when the run ends
TURNS_WITNESS_COLUMNS: Final[tuple[ColumnSpec, ...]] = (
    (SIDE_EFFECT_EXECUTIONS, "i8"), (SIDE_EFFECT_REQUEST_GUIDS, "i8"),
)

CALLS_TABLE: Final[tuple[ColumnSpec, ...]] = (
    (CALL_ID, "i8"), (LIVE_INSTANCE, "i8"), (ARRIVAL_S, "f8"), (END_S, "f8"),
    (TURNS_PLANNED, "i8"), (TURNS_STARTED, "i8"), (END_REASON, CALL_END_REASONS),
    (DEGRADED, "bool"),
)
# appended to CALLS_TABLE from the Reasoner's session ledger when the run ends
CALLS_SERVER_COLUMNS: Final[tuple[ColumnSpec, ...]] = ((SESSIONS_OPENED, "i8"),)

EXECUTIONS_TABLE: Final[tuple[ColumnSpec, ...]] = (
    (CALL_ID, "i8"), (INTERACTION_ID, "i8"), (REQUEST_GUID, "i8"), (TASK_ID, "i8"),
    (PHASE, PHASES), (CONTEXT_ID, "i8"), (NETWORK_DUPLICATE, "bool"), (ARRIVAL_S, "f8"),
    (DISPOSITION, DISPOSITIONS), (SERVICE_START_S, "f8"), (SERVICE_END_S, "f8"),
    (STATUS, STATUSES), (ERROR_CODE, ERROR_CODES),
)

SIDE_EFFECTS_TABLE: Final[tuple[ColumnSpec, ...]] = (
    (CALL_ID, "i8"), (INTERACTION_ID, "i8"), (REQUEST_GUID, "i8"), (CONTEXT_ID, "i8"),
    (EXECUTED_S, "f8"),
)

# event counts per 1-s bin [t_s, t_s + 1), computed from the records
TIMESERIES_RATES: Final = (
    OFFERED_TURNS_PER_S, ATTEMPTS_PER_S, RETRIES_PER_S, COMPLETED_TURNS_PER_S,
    FAILED_TURNS_PER_S, SERVER_REQUESTS_PER_S, SERVER_EXECUTIONS_PER_S,
)
# levels sampled at the end of each bin (t_s + 1), in the order the simulator samples them
SAMPLED_GAUGES: Final = (
    TURNS_IN_PROGRESS, CALLS_IN_PROGRESS, SERVER_IN_FLIGHT, QUEUE_LENGTH, BUSY_WORKERS,
    WORKER_CAPACITY, DEDUP_ENTRIES,
)
# ... and the gauges of the time series (dedup_bytes = dedup_entries x dedup_entry_bytes)
TIMESERIES_GAUGES: Final = (*SAMPLED_GAUGES, DEDUP_BYTES)
TIMESERIES_COLUMNS: Final = (REPLICATION, T_S, *TIMESERIES_RATES, *TIMESERIES_GAUGES)

TABLES: Final[dict[str, tuple[ColumnSpec, ...]]] = {
    "attempts": ATTEMPTS_TABLE,
    "turns": TURNS_TABLE + TURNS_WITNESS_COLUMNS,
    "calls": CALLS_TABLE + CALLS_SERVER_COLUMNS,
    "executions": EXECUTIONS_TABLE,
    "side_effects": SIDE_EFFECTS_TABLE,
}

# the figures of a run folder (drawn by rtalab.sim.shared.plots; named here, so a reader of
# the folder need not import matplotlib to find them)
LATENCY_CDF_PNG = "latency_cdf.png"
TIMESERIES_PNG = "timeseries.png"


def columns(table: str) -> tuple[str, ...]:
    """Column names of ``table`` in order, ``replication`` first."""
    if table == "timeseries":
        return TIMESERIES_COLUMNS
    return (REPLICATION, *(name for name, _ in TABLES[table]))


@dataclass(frozen=True, eq=False)
class RunRecords:
    """One replication's six tables (columns as above) and what the summary reads with them.

    ``rtalab.sim.runner.RunOutput`` adds the simulator's own facts; a load run builds one from
    its ledgers (``rtalab.loadtests.loadrun.tables.build_output``); ``rtalab.sim.shared.summary``
    reads either."""

    attempts: pd.DataFrame
    turns: pd.DataFrame
    calls: pd.DataFrame
    executions: pd.DataFrame
    side_effects: pd.DataFrame
    timeseries: pd.DataFrame
    counters: dict[str, Any]
    seed: int
    replication: int
    duration_s: float = 0.0


# --------------------------------------------------------------------------- summary keys
# summary["metrics"][name] = {"mean", "ci_low", "ci_high", "values"}; see docs/metrics.md.

M_TURNS: Final = "turns"
M_CALLS: Final = "calls"
M_SUCCESS_RATE: Final = "success_rate"
M_FAILED_SHARE: Final = "failed_share"
M_ABANDONED_SHARE: Final = "abandoned_share"
M_UNFINISHED_SHARE: Final = "unfinished_share"
M_CANCELLED_SHARE: Final = "cancelled_share"
M_FAILED_BY_REASON_PREFIX: Final = "failed_by_reason."  # + end reason of failed turns
M_ATTEMPT_OUTCOME_PREFIX: Final = "attempt_outcome."  # + attempt outcome: share of attempts
M_CALL_END_PREFIX: Final = "call_end."  # + call end reason: share of calls
M_ESCALATED_TURNS_REMOVED: Final = "escalation.removed_turn_share"
M_CONCURRENT_CALLS_MEAN: Final = "concurrent_calls.mean"
M_CONCURRENT_CALLS_PEAK: Final = "concurrent_calls.peak"
M_GHOST_PER_1K: Final = "hazard.ghost_successes_per_1k_turns"
M_SPURIOUS_TIMEOUTS_PER_1K: Final = "spurious_timeouts_per_1k_turns"
M_SPURIOUS_TIMEOUT_SHARE: Final = "spurious_timeout_share"
M_QUEUE_WAIT_PREFIX: Final = "queue.wait_s."  # + p50 / p99
M_CANCEL_PREFIX: Final = "cancel."  # + dropped / stopped / rolled_forward / too_late, per 1k
M_SHED_PER_1K: Final = "queue.shed_per_1k_turns"
M_FAILURE_RATE_PREFIX: Final = "failure_rate."  # + error code, or "none" (budget, no code)
M_TTFC_PREFIX: Final = "ttfc_s."  # + p50 / p95 / p99
M_COMPLETION_PREFIX: Final = "completion_s."  # + p50 / p95 / p99
# caller-perceived (docs/metrics.md): every offered turn, a turn not served counts as +inf
M_CALLER_TTFC_PREFIX: Final = "caller_ttfc_s."  # + p50 / p95 / p99
M_CALLER_COMPLETION_PREFIX: Final = "caller_completion_s."  # + p50 / p95 / p99
M_NOT_SERVED_SHARE: Final = "not_served_share"  # failed, abandoned or unfinished / offered
M_ATTEMPTS_PER_TURN: Final = "attempts_per_turn"
M_RETRIES_PER_TURN: Final = "retries_per_turn"
M_LOAD_AMPLIFICATION: Final = "load_amplification"
M_REJECTIONS_PER_TURN: Final = "server_rejections_per_turn"
M_DUP_GUID_PER_1K: Final = "hazard.duplicate_request_executions_per_1k_turns"
M_REEXEC_TURN_PER_1K: Final = "hazard.reexecuted_turns_per_1k_turns"
M_DUP_SESSION_PER_1K: Final = "hazard.duplicated_sessions_per_1k_turns"
M_SIDE_EFFECTS_PER_SE_TURN: Final = "side_effect_executions_per_side_effect_turn"
M_DEGRADED_CALL_SHARE: Final = "degraded_call_share"
M_DEDUP_PEAK_ENTRIES: Final = "dedup.peak_entries"
M_DEDUP_PEAK_BYTES: Final = "dedup.peak_bytes"
M_DEDUP_MEAN_BYTES: Final = "dedup.mean_bytes"
M_QUEUE_ARRIVAL_RATE: Final = "queue.arrival_rate_per_s"
M_QUEUE_THROUGHPUT: Final = "queue.throughput_per_s"
M_QUEUE_MEAN_WAIT: Final = "queue.mean_wait_s"
M_QUEUE_P_WAIT: Final = "queue.p_wait"
M_QUEUE_MEAN_LENGTH: Final = "queue.mean_length"
M_QUEUE_LITTLE_LAMBDA_W: Final = "queue.little_lambda_w"
M_UTILISATION: Final = "worker_utilisation"
M_OFFERED_TURNS_PER_S: Final = "offered_turns_per_s"
M_GOODPUT: Final = "goodput_turns_per_s"
M_RECOVERY_S: Final = "recovery_s"  # after the run's trigger
                                    # (rtalab.sim.shared.recovery.run_recovery_s)
M_MEAN_IN_PROGRESS: Final = "mean_turns_in_progress"
PERCENTILES: Final = (50, 95, 99)
