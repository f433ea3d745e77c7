"""The one verdict: the checker's own rules proved to fail (issue 15 point 8), the
indeterminate executions, run-integrity checks, gates, interrupted runs and a reused witness.

Every test writes a synthetic ledger (rtalab.loadtests.check.synth) into a run folder, changes
one thing and asserts the exact verdict; expected values are written out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rtalab.loadtests.check import Verdict, check_run
from rtalab.loadtests.check.synth import EXT_SCENARIO, clean_ledger, write_ledger

N_TURNS = 200
Ledger = dict[str, pd.DataFrame]


@pytest.fixture
def led() -> Ledger:
    """A clean ledger (every rule passes)."""
    return clean_ledger(N_TURNS, seed=7)


def judge(run: Path, led: Ledger, scenario: str | None = EXT_SCENARIO,
          **files: object) -> Verdict:
    """Write the ledger (and any run files: ``meta``, ``counts``, ``gates``, ``summary``,
    ``restarts``) and check it."""
    write_ledger(run, led, scenario)
    for name, data in files.items():
        path = {"meta": run / "meta.json", "summary": run / "summary.json"}.get(
            name, run / "ledger" / f"{name}.json")
        if name == "restarts":
            (run / "ledger" / "restarts.jsonl").write_text(
                "".join(json.dumps({"t": t}) + "\n" for t in data), encoding="utf-8")  # type: ignore[attr-defined]
            continue
        path.write_text(json.dumps(data), encoding="utf-8")
    return check_run(run)


def retried(led: Ledger) -> tuple[int, int]:
    """Row indexes of a failed first attempt and of its retry (same turn and phase)."""
    a = led["attempts"]
    i = int(a.index[(a["outcome"] == "failed") & (a["injected"] == "")][0])
    same = a.index[(a["call_id"] == a.loc[i, "call_id"]) & (a["turn_index"] == a.loc[
        i, "turn_index"]) & (a.index != i) & (a["injected"] == "")]
    return i, int(same[0])


def extra_attempt(led: Ledger, i: int, k: int, dt: float, **values: object) -> None:
    """Append another attempt of the turn of row ``i``, sent ``dt`` s after it."""
    a = led["attempts"]
    row = a.loc[[i]].copy()
    row["request_guid"] = f"{a.loc[i, 'request_guid']}-x{k}"
    row["send_s"] = a.loc[i, "send_s"] + dt
    row["end_s"] = a.loc[i, "send_s"] + dt + 0.05
    row["events"] = 0
    for c, v in values.items():
        row[c] = v
    led["attempts"] = pd.concat([a, row], ignore_index=True)


# ------------------------------------------------------------------------ retry-after (§3)


def test_retry_after_is_measured_from_the_failed_attempts_end(tmp_path: Path, led: Ledger):
    """Hint 800 ms; the retry is 1.0 s after the failed attempt's send but 0.4 s after its end:
    too early (a checker measuring from the send would pass it)."""
    a = led["attempts"]
    i, j = retried(led)
    a.loc[i, ["error_code", "retry_after_ms"]] = ["rate-limited", 800.0]
    a.loc[i, "end_s"] = a.loc[i, "send_s"] + 0.6
    a.loc[j, "send_s"] = a.loc[i, "send_s"] + 1.0
    v = judge(tmp_path, led)
    assert v.failed == ["retry-after"]
    assert v.rule("retry-after").examples == (a.loc[i, "request_guid"],)
    a.loc[j, "send_s"] = a.loc[i, "send_s"] + 1.41  # 0.81 s after the end: allowed
    assert judge(tmp_path, led).ok


# ------------------------------------------------------------------------ retry-limit (§3)

NO_TIMEOUT_RETRY = EXT_SCENARIO + "retry_on_timeout = false\n"


@pytest.mark.parametrize("outcome", ["timeout", "response-lost", "total-timeout"])
def test_attempt_limit_applies_to_every_outcome_without_an_answer(tmp_path: Path, led: Ledger,
                                                                  outcome: str):
    """``retry_on_timeout = false``: an attempt that got no answer is never retried, whatever
    code the client wrote for it (the Live layer writes upstream-timeout, whose own limit
    is 3)."""
    a = led["attempts"]
    a["task_id"] = None  # no task known: the taskId rule has nothing to judge
    i, _ = retried(led)
    a.loc[i, ["outcome", "error_code"]] = [outcome, "upstream-timeout"]
    v = judge(tmp_path, led, NO_TIMEOUT_RETRY)
    assert v.failed == ["retry-limit"]
    assert v.rule("retry-limit").examples == (a.loc[i, "request_guid"],)
    assert judge(tmp_path, led).ok  # the default policy retries a timeout (limit 3)


def test_attempt_limit_after_response_lost_counts_every_attempt(tmp_path: Path, led: Ledger):
    """Three attempts lost, then a fourth: one retry beyond upstream-timeout's limit (3)."""
    i, j = retried(led)
    a = led["attempts"]
    a["task_id"] = None
    a.loc[[i, j], ["outcome", "error_code"]] = ["response-lost", "upstream-timeout"]
    extra_attempt(led, i, 3, 1.0, outcome="total-timeout", error_code="upstream-timeout")
    extra_attempt(led, i, 4, 1.5, outcome="completed", error_code=None)
    v = judge(tmp_path, led)
    assert v.failed == ["retry-limit"] and v.rule("retry-limit").count == 1


# ------------------------------------------------------------------------ non-retryable (§2, §3)


def test_non_retryable_judged_from_what_was_resent_not_the_decision_column(tmp_path: Path,
                                                                           led: Ledger):
    a = led["attempts"]
    i, _ = retried(led)
    a.loc[i, ["error_code", "decision"]] = ["schema-validation", "not-retryable"]
    v = judge(tmp_path, led)  # the client said "not retryable" but sent it again
    assert v.failed == ["retried-non-retryable"]
    assert v.rule("retried-non-retryable").examples == (a.loc[i, "request_guid"],)


def test_a_retry_decision_never_sent_is_no_violation(tmp_path: Path, led: Ledger):
    a = led["attempts"]
    i, j = retried(led)
    a.loc[i, ["error_code", "decision"]] = ["auth", "retry"]
    led["attempts"] = a.drop(index=j).reset_index(drop=True)
    v = judge(tmp_path, led)
    assert v.rule("retried-non-retryable").status == "pass"
    assert v.failed == ["auth"]  # the refusal itself is named


# ------------------------------------------------------------------------ ghost success


def test_ghost_success_without_a_turns_ledger(tmp_path: Path, led: Ledger):
    """No turns ledger: what the caller was told comes from the real attempts only; a
    client-injected copy that completed must not hide the ghost success."""
    w = led["witness"].iloc[0]
    a = led["attempts"]
    mine = a.index[a["request_guid"] == w["requestGuid"]]
    a.loc[mine, ["outcome", "error_code", "decision"]] = ["failed", "internal",
                                                          "attempts-exhausted"]
    copy = a.loc[[mine[0]]].assign(injected="resend", outcome="completed", error_code=None,
                                   send_s=a.loc[mine[0], "end_s"] + 0.1)
    led["attempts"] = pd.concat([a, copy], ignore_index=True)
    del led["turns"]
    v = judge(tmp_path, led)
    r = v.rule("ghost-success")
    label = f"{a.loc[mine[0], 'call_id']}#{a.loc[mine[0], 'turn_index']}"
    assert r.count == 1 and r.examples == (label,)
    assert v.indeterminate["ghost-success"]["count"] == 1
    assert v.indeterminate["ghost-success"]["examples"] == [w["requestGuid"]]


# ------------------------------------------------------------------------ taskId kept (§3)


def test_task_id_dropped_on_a_timeout_retry_fails_and_kept_passes(tmp_path: Path, led: Ledger):
    a = led["attempts"]
    i, j = retried(led)
    a["task_id"] = None
    a.loc[i, ["outcome", "error_code", "task_id_learned"]] = ["timeout", "upstream-timeout",
                                                               "task-77"]
    v = judge(tmp_path, led)
    assert v.failed == ["task-id-kept"]
    assert v.rule("task-id-kept").examples == (a.loc[i, "request_guid"],)
    a.loc[j, "task_id"] = "task-77"
    assert judge(tmp_path, led).ok
    # a retry after a FAILED state is a new task: never judged by this rule
    a.loc[i, "outcome"], a.loc[j, "task_id"] = "failed", None
    assert judge(tmp_path, led).ok


# ------------------------------------------------------------------------ indeterminate


def test_executions_of_requests_that_never_completed_are_classified(tmp_path: Path, led: Ledger):
    a, t, w = led["attempts"], led["turns"], led["witness"]
    g = list(w["requestGuid"].iloc[:4])
    row = {x: int(a.index[(a["request_guid"] == x) & (a["injected"] == "")][0]) for x in g}
    # 0: still open at the stop
    a.loc[row[g[0]], ["outcome", "end_s"]] = ["unfinished", None]
    tr = t.index[t["interaction_id"] == a.loc[row[g[0]], "interaction_id"]][0]
    t.loc[tr, ["outcome", "end_reason", "told_caller"]] = ["unfinished", "end-of-run", "none"]
    # 1: timed out while the server restarted (restart inside [send, end])
    a.loc[row[g[1]], ["outcome", "error_code"]] = ["timeout", "upstream-timeout"]
    restart = float(a.loc[row[g[1]], "send_s"]) + 0.01
    # 2: the caller was told failed
    a.loc[row[g[2]], ["outcome", "error_code"]] = ["timeout", "upstream-timeout"]
    tr = t.index[t["interaction_id"] == a.loc[row[g[2]], "interaction_id"]][0]
    t.loc[tr, ["outcome", "told_caller"]] = ["failed", "failure"]
    # 3: its answer was lost, the side effect ran
    a.loc[row[g[3]], ["outcome", "error_code"]] = ["response-lost", "upstream-timeout"]
    v = judge(tmp_path, led, restarts=[restart])
    ind = {k: (x["count"], x.get("examples")) for k, x in v.indeterminate.items()}
    assert ind["turns-cut-off-by-stop"][0] == 1
    assert ind["cut-off-by-stop"] == (1, [g[0]])
    assert ind["in-flight-at-restart"] == (1, [g[1]])
    assert ind["ghost-success"] == (1, [g[2]])
    assert ind["slow-success"] == (1, [g[3]])
    assert v.ok, v.failed  # indeterminate, never a violation
    assert "indeterminate (not violations)" in v.summary_text()


# ------------------------------------------------------------------------ integrity


def _answered(led: Ledger) -> int:
    return int(led["attempts"]["outcome"].isin(["completed", "failed"]).sum())


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (2, True), (3, False), (-1, False)])
def test_server_count_agrees_within_the_requests_without_an_answer(tmp_path: Path, led: Ledger,
                                                                   extra: int, ok: bool):
    """Two requests got no answer (cut off, timed out): the server may have answered 0..2 of
    them more than the ledger saw; more, or fewer than the ledger saw answered, fails."""
    a = led["attempts"]
    opened = a.index[a["outcome"] == "completed"][:2]
    a.loc[opened, "outcome"] = ["unfinished", "timeout"]
    a.loc[opened[1], "error_code"] = "upstream-timeout"
    counts = {"comparable": True, "server_turns_answered": _answered(led) + extra}
    v = judge(tmp_path, led, counts=counts)
    assert (v.rule("server-ledger-agree").status == "pass") is ok


def test_ledger_not_gathered_fails_its_named_check(tmp_path: Path, led: Ledger):
    gather = {"expected_processes": 2, "complete": False, "drained": False,
              "processes": {"w0": {"announced": {"batches": 3}, "batches_received": 3},
                            "w1": {"announced": {"batches": 4}, "batches_received": 2}}}
    v = judge(tmp_path, led, gather=gather)
    assert v.failed == ["ledger-gathered"]
    assert v.rule("ledger-gathered").examples == ("w1",)


# ------------------------------------------------------------------------ a reused witness


def test_a_reused_witness_counts_only_this_runs_rows(tmp_path: Path, led: Ledger):
    """Rows of an earlier run (id <= witness_since) are not this run's: no false unexpected."""
    w = led["witness"]
    old = w.iloc[:3].assign(id=[1, 2, 3], requestGuid=["old-1", "old-2", "old-3"],
                            interactionId=["old-i1", "old-i2", "old-i3"])
    led["witness"] = pd.concat([old, w.assign(id=w["id"] + 3)], ignore_index=True)
    counts = {"witness_since": 3, "witness_rows": len(w)}
    v = judge(tmp_path, led, counts=counts)
    assert v.ok and v.rule("witness-ledger-agree").status == "pass"
    counts["witness_since"] = 0  # read from the beginning: the old rows look unexpected
    assert judge(tmp_path, led, counts=counts).failed == ["unexpected", "witness-ledger-agree"]


# ------------------------------------------------------------------------ gates


def test_a_run_where_nothing_succeeded_never_passes(tmp_path: Path, led: Ledger):
    t = led["turns"]
    t[["outcome", "told_caller"]] = ["failed", "failure"]
    led["witness"] = led["witness"].iloc[:0]
    v = judge(tmp_path, led)
    assert "availability" in v.failed and not v.ok
    assert v.rule("availability").detail.startswith(f"0 of {N_TURNS} judged turns completed")


def test_availability_threshold_is_inclusive(tmp_path: Path, led: Ledger):
    t = led["turns"]
    bad = t.index[~t["side_effect"]][:20]  # 20 of 200 failed: 90.0 % completed
    t.loc[bad, ["outcome", "told_caller"]] = ["failed", "failure"]
    assert judge(tmp_path, led).rule("availability").status == "pass"
    t.loc[t.index[~t["side_effect"]][20], ["outcome", "told_caller"]] = ["failed", "failure"]
    assert judge(tmp_path, led).failed == ["availability"]


def test_slo_gates_replace_availability(tmp_path: Path, led: Ledger):
    summary = {"metrics": {"caller_completion_s.p99": {"mean": 4.5},
                           "success_rate": {"mean": 0.995}}}
    gates = {"slo": ["turn_completion_p99_s<=4", "success_rate>=0.99"]}
    v = judge(tmp_path, led, gates=gates, summary=summary)
    assert v.failed == ["slo turn_completion_p99_s<=4"]
    assert v.rule("slo success_rate>=0.99").status == "pass"
    assert v.rule("availability").status == "not-checked"
    detail = v.rule("slo turn_completion_p99_s<=4").detail
    assert "caller_completion_s.p99 = 4.5 (target <= 4)" in detail


def test_auth_refusals_fail_the_auth_rule(tmp_path: Path, led: Ledger):
    a = led["attempts"]
    first = a.index[(a["turn_index"] == 0) & (a["injected"] == "")][:3]
    a.loc[first, ["outcome", "error_code", "http_status", "echo", "events"]] = [
        "failed", "auth", 401, False, 1]
    v = judge(tmp_path, led)
    assert v.failed == ["auth"]  # a 401 carries no echo: not an extension-echo violation
    assert v.rule("auth").count == 3


# ------------------------------------------------------------------------ handoff


def test_a_server_that_never_asks_for_input_gives_a_warning_not_lost(tmp_path: Path,
                                                                      led: Ledger):
    """Handoff turns answered COMPLETED: their side effect was never sent (turn rows say
    so), so no ``lost``; a warning says that INPUT_REQUIRED never came."""
    t = led["turns"]
    t["input_required"] = False
    hand = t.index[~t["side_effect"]][:6]
    t.loc[hand, "handoff"] = True
    v = judge(tmp_path, led)
    assert v.ok
    assert v.warnings == ["6 of 6 handoff turns were answered COMPLETED without INPUT_REQUIRED: "
                          "the server never asked for input (its continuation and side effect "
                          "were not sent; handoff not exercised)"]
    assert "warning: 6 of 6 handoff turns" in v.summary_text()


# ------------------------------------------------------------------------ interrupted


def test_an_interrupted_run_counts_open_turns_indeterminate_and_never_passes(tmp_path: Path,
                                                                           led: Ledger):
    a, t = led["attempts"], led["turns"]
    open_calls = ["c3", "c7"]
    t.drop(index=t.index[t["call_id"].isin(open_calls) & (t["turn_index"] == 3)], inplace=True)
    meta = {"status": "interrupted", "kind": "load"}
    v = judge(tmp_path, led, meta=meta)
    assert v.rule("incomplete").status == "pass"
    assert v.indeterminate["turns-in-flight-at-interrupt"]["count"] == 2
    assert not v.ok and v.headline == "INTERRUPTED" and v.failed == []
    assert v.verdict_line().startswith("verdict: INTERRUPTED")
    assert v.rule("ledger-gathered").detail == "run interrupted before the ledger was gathered"
    del meta["status"]
    assert judge(tmp_path, led, meta=meta).failed == ["incomplete"]
    assert len(a)  # the attempts of the open turns stay in the ledger


# ------------------------------------------------------------------------ one data object


def test_verdict_json_round_trips_and_is_what_renderers_read(tmp_path: Path, led: Ledger):
    led["attempts"].loc[3, "echo"] = False
    v = judge(tmp_path, led)
    back = Verdict.read(tmp_path)
    assert back is not None and back.to_dict() == v.to_dict()
    assert back.failed == ["extension-echo"] and back.headline == "FAIL"
    from rtalab.sim.report.runs import _verdict

    shown = _verdict(tmp_path)
    assert shown is not None and shown["headline"] == "FAIL"
    assert shown["failed"] == ["extension-echo"]
