"""The checker's rules on synthetic ledgers: each fails exactly when its violation is planted.

Every test starts from a clean synthetic ledger (every rule passes), plants one
violation, and asserts that the set of failed rules is exactly that rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rtalab.loadtests.check import Verdict, check_run
from rtalab.loadtests.check.rules import HAZARDS, RULE_NAMES
from rtalab.loadtests.check.synth import clean_ledger, write_ledger
from rtalab.loadtests.check.verdict import per_1k

N_TURNS = 400
Ledger = dict[str, pd.DataFrame]


@pytest.fixture
def led() -> Ledger:
    """A clean ledger of 400 turns."""
    return clean_ledger(N_TURNS, seed=3)


def judge(tmp_path: Path, led: Ledger, **kw: object) -> Verdict:
    """Write the ledger into a run folder and check it."""
    write_ledger(tmp_path, led)
    return check_run(tmp_path, **kw)  # type: ignore[arg-type]


def failed(v: Verdict) -> set[str]:
    """Names of failed rules."""
    return set(v.failed)


def side_effect_turn(led: Ledger) -> pd.Series:
    """The first witness row (a side-effect turn that executed once)."""
    return led["witness"].iloc[0]


def retried_side_effect_attempt(led: Ledger) -> pd.Series:
    """A failed first attempt of a side-effect turn that was then retried."""
    a = led["attempts"]
    rows = a[(a["outcome"] == "failed") & a["side_effect"]]
    assert len(rows), "the synthetic ledger must contain a retried side-effect turn"
    return rows.iloc[0]


def add_row(df: pd.DataFrame, **values: object) -> pd.DataFrame:
    """``df`` with one more row (a copy of its first row with ``values`` changed)."""
    row = df.iloc[[0]].copy()
    for k, v in values.items():
        row[k] = [v]
    return pd.concat([df, row], ignore_index=True)


# ------------------------------------------------------------------------------ clean


def test_clean_ledger_passes_every_rule(tmp_path: Path, led: Ledger) -> None:
    v = judge(tmp_path, led)
    assert v.ok
    names = [r.name for r in v.rules]
    assert names == [*RULE_NAMES, "transport-equivalence", "ledger-gathered",
                     "server-ledger-agree", "witness-ledger-agree", "auth", "availability"]
    status = {r.name: r.status for r in v.rules}
    assert {status[n] for n in RULE_NAMES} == {"pass"}
    assert status["transport-equivalence"] == "not-checked"  # one binding
    # a bare ledger folder: no gather.json / counts.json to check integrity against
    assert {status[n] for n in names[len(RULE_NAMES) + 1:len(RULE_NAMES) + 4]} == {
        "not-checked"}
    assert status["auth"] == status["availability"] == "pass"
    assert v.stats["turns"] == N_TURNS
    assert v.stats["client_injected_copies"] > 0
    assert 0 < v.stats["duplicates_absorbed"] == v.stats["duplicates_of_side_effect_requests"]
    written = json.loads((tmp_path / "verdict.json").read_text())
    assert written["ok"] is True and len(written["rules"]) == len(names)
    assert written["verdict"] == "PASS"
    # the coverage section: the synthetic ledger copies completed side-effect requests
    # (same requestGuid) 1 ms after the original, while it runs; no restart, proxy, resend
    # after the answer, per-call turnIds or continuation
    cover = {c["name"]: (c["status"], c["count"]) for c in written["coverage"]}
    assert list(cover) == ["duplicate-while-running", "duplicate-before-original",
                           "resend-after-completion",
                           "resend-across-restart", "turn-id-reused", "continuation-twice",
                           "reordering", "outage", "restart", "non-retryable", "rate-limited"]
    assert cover["duplicate-while-running"][0] == "exercised"
    for name in ("duplicate-before-original", "resend-after-completion",
                 "resend-across-restart", "turn-id-reused", "continuation-twice", "outage",
                 "restart"):
        assert cover[name] == ("not exercised", 0), name
    assert "verdict: PASS" in (tmp_path / "verdict.txt").read_text()


# ------------------------------------------------------------------------------ one plant per rule


def plant_lost(led: Ledger) -> None:
    led["witness"] = led["witness"].iloc[1:]


def plant_duplicated(led: Ledger) -> None:
    w = led["witness"]
    led["witness"] = add_row(w, id=int(w["id"].max()) + 1)


def plant_unexpected(led: Ledger) -> None:
    w = led["witness"]
    led["witness"] = add_row(w, id=int(w["id"].max()) + 1, requestGuid="g-never-sent",
                             interactionId="i-never-sent", turnId="t-never-sent")


def plant_incomplete(led: Ledger) -> None:
    led["turns"].loc[5, "outcome"] = "unfinished"


def plant_ordering(led: Ledger) -> None:
    e = led["events"]
    chunks = e.index[(e["kind"] == "artifact") & (e["attempt_key"] == e.loc[
        e["kind"] == "artifact", "attempt_key"].iloc[0])]
    a, b = chunks[0], chunks[1]
    e.loc[a, "played_index"], e.loc[b, "played_index"] = e.loc[b, "played_index"], e.loc[
        a, "played_index"]


def plant_non_retryable(led: Ledger) -> None:
    a = led["attempts"]
    i = a.index[a["outcome"] == "failed"][0]
    a.loc[i, "error_code"] = "schema-validation"


def plant_retry_limit(led: Ledger) -> None:
    first = retried_side_effect_attempt(led)
    extra = []
    for k, dt in ((3, 0.2), (4, 0.3)):
        row = first.copy()
        row["request_guid"] = f"{first['request_guid']}-x{k}"
        row["send_s"] = first["send_s"] + dt
        row["events"] = 0
        extra.append(row)
    led["attempts"] = pd.concat([led["attempts"], pd.DataFrame(extra)], ignore_index=True)


def plant_echo(led: Ledger) -> None:
    led["attempts"].loc[7, "echo"] = False


def plant_sequence_id(led: Ledger) -> None:
    e = led["events"]
    e.loc[e.index[e["kind"] == "artifact"][3], "sequence_id"] = np.nan


def plant_retry_after(led: Ledger) -> None:
    a = led["attempts"]
    i = a.index[a["outcome"] == "failed"][0]  # its retry follows 0.5 s later
    a.loc[i, ["error_code", "retry_after_ms"]] = ["rate-limited", 800.0]


def plant_continuation_twice(led: Ledger) -> None:
    """A continuation and its ``continuation-dup`` copy (own requestGuid) both executed."""
    a, w = led["attempts"], led["witness"]
    guid = side_effect_turn(led)["requestGuid"]
    i = a.index[(a["request_guid"] == guid) & (a["injected"] == "")][0]
    a.loc[i, "phase"] = "continuation"
    copy = a.loc[[i]].assign(request_guid=f"{guid}-cdup", injected="continuation-dup",
                             task_id="task-paused")
    a["task_id"] = a["task_id"].astype(object) if "task_id" in a else None
    a.loc[i, "task_id"] = "task-paused"
    led["attempts"] = pd.concat([a, copy], ignore_index=True)
    run = w.loc[w["requestGuid"] == guid].assign(id=int(w["id"].max()) + 1,
                                                 requestGuid=f"{guid}-cdup")
    led["witness"] = pd.concat([w, run], ignore_index=True)
def plant_task_id_dropped(led: Ledger) -> None:
    a = led["attempts"]
    i = a.index[a["outcome"] == "failed"][0]  # retried once, 0.5 s later, in the same phase
    a.loc[i, ["outcome", "error_code", "task_id_learned"]] = ["timeout", "upstream-timeout",
                                                               "task-known"]


def plant_cross_session(led: Ledger) -> None:
    """An attempt answered with another call's session (its events carry that contextId)."""
    a = led["attempts"]
    a.loc[9, "context_id_learned"] = a.loc[a["call_id"] != a.loc[9, "call_id"],
                                           "context_id"].iloc[0]


def plant_foreign_task(led: Ledger) -> None:
    """An attempt answered with another call's stored turn, its contextId rewritten to the
    caller's own (cross-session-answer cannot see it) and no side effect anywhere."""
    a = led["attempts"]
    victim = a.index[(a["call_id"] == "c5") & (a["injected"] == "")][0]
    donor = a.index[(a["call_id"] == "c2") & (a["injected"] == "")][0]
    a.loc[victim, "task_id_answered"] = a.loc[donor, "task_id_answered"]
    a.loc[victim, "send_s"] = a.loc[donor, "end_s"] + 1.0  # the donor's turn ran first
    a["side_effect"] = False
    led["turns"]["side_effect"] = False
    led["witness"] = led["witness"].iloc[0:0]


PLANTS: dict[str, Callable[[Ledger], None]] = {
    "lost": plant_lost, "duplicated": plant_duplicated, "unexpected": plant_unexpected,
    "incomplete": plant_incomplete, "ordering": plant_ordering,
    "retried-non-retryable": plant_non_retryable, "retry-limit": plant_retry_limit,
    "retry-after": plant_retry_after,
    "extension-echo": plant_echo, "sequence-id": plant_sequence_id,
    "continuation-answered-twice": plant_continuation_twice,
    "cross-session-answer": plant_cross_session,
    "task-id-kept": plant_task_id_dropped,
    "foreign-task-answer": plant_foreign_task,
}


@pytest.mark.parametrize("rule", list(PLANTS))
def test_violation_fails_exactly_its_rule(tmp_path: Path, led: Ledger, rule: str) -> None:
    PLANTS[rule](led)
    v = judge(tmp_path, led)
    assert failed(v) == {rule}
    r = v.rule(rule)
    assert r.count >= 1 and r.examples and r.kind == "violation"
    assert not v.ok


def test_every_violation_rule_has_a_plant() -> None:
    assert set(PLANTS) | set(HAZARDS) == set(RULE_NAMES)


# ------------------------------------------------------------------------------ hazards


def plant_ghost(led: Ledger) -> None:
    w = side_effect_turn(led)
    t = led["turns"]
    i = t.index[t["interaction_id"] == w["interactionId"]][0]
    t.loc[i, ["told_caller", "outcome"]] = ["failure", "failed"]


def plant_reexecuted(led: Ledger) -> None:
    first = retried_side_effect_attempt(led)
    w = led["witness"]
    led["witness"] = add_row(w, id=int(w["id"].max()) + 1, requestGuid=first["request_guid"],
                             interactionId=first["interaction_id"])


def plant_session(led: Ledger) -> None:
    """A first message sent without contextId (server-minted sessions) opened a second one.
    (With a client-minted contextId an answer in another session is cross-session-answer.)"""
    a = led["attempts"]
    i = a.index[a["call_id"] == "c3"][0]
    a.loc[i, ["context_id", "context_id_learned"]] = [None, "ctx-second-session"]


HAZARD_PLANTS = {"ghost-success": plant_ghost, "turn-re-executed": plant_reexecuted,
                 "duplicate-session": plant_session}


@pytest.mark.parametrize("rule", list(HAZARD_PLANTS))
def test_hazard_is_a_rate_and_fails_only_above_its_limit(tmp_path: Path, led: Ledger,
                                                          rule: str) -> None:
    HAZARD_PLANTS[rule](led)
    v = judge(tmp_path, led)
    r = v.rule(rule)
    assert v.ok and r.status == "pass" and r.kind == "hazard"
    assert r.count == 1 and r.rate_per_1k_turns == pytest.approx(1000 / N_TURNS)
    assert failed(judge(tmp_path, led, hazard_limits={rule: 2.4})) == {rule}  # 2.5 > 2.4
    assert judge(tmp_path, led, hazard_limits={rule: 2.5}).ok                 # 2.5 is not above


# ------------------------------------------------------------------------------ arithmetic


def test_per_1k_arithmetic() -> None:
    assert per_1k(3, 1500) == pytest.approx(2.0)
    assert per_1k(0, 10) == 0.0
    assert per_1k(1, 0) is None
    assert per_1k(5, float("nan")) is None


def test_duplicated_counts_extra_executions_and_rate(tmp_path: Path, led: Ledger) -> None:
    w = led["witness"]
    top = int(w["id"].max())
    led["witness"] = pd.concat([w, w.iloc[[0, 0, 1]].assign(id=[top + 1, top + 2, top + 3])],
                               ignore_index=True)
    r = judge(tmp_path, led).rule("duplicated")
    assert r.count == 3  # guid 0 ran 3 times (2 extra), guid 1 twice (1 extra)
    assert r.rate_per_1k_turns == pytest.approx(3 * 1000 / N_TURNS)
    assert set(r.examples) == {w.iloc[0]["requestGuid"], w.iloc[1]["requestGuid"]}


# ------------------------------------------------------------------------------ wire variants


@pytest.mark.parametrize("seq_start", [0, 1])
@pytest.mark.parametrize("as_float", [False, True])
def test_sequence_id_start_and_number_type_accepted(tmp_path: Path, seq_start: int,
                                                    as_float: bool) -> None:
    led = clean_ledger(N_TURNS, seed=4, seq_start=seq_start)
    write_ledger(tmp_path, led)
    path = tmp_path / "ledger" / "events.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        if r["sequence_id"] is not None:
            r["sequence_id"] = float(r["sequence_id"]) if as_float else int(r["sequence_id"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    v = check_run(tmp_path)
    assert v.ok and v.rule("sequence-id").status == "pass"


def test_ids_written_as_numbers_and_extra_fields_are_accepted(tmp_path: Path, led: Ledger) -> None:
    write_ledger(tmp_path, led)
    path = tmp_path / "ledger" / "attempts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        r["call_id"] = int(r["call_id"][1:])  # a number where the contract says string
        r["directive_payload"] = {"directiveType": "progress", "phase": "x"}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = tmp_path / "ledger" / "turns.jsonl"
    trows = [json.loads(line) for line in t.read_text().splitlines()]
    for r in trows:
        r["call_id"] = int(r["call_id"][1:])
    t.write_text("".join(json.dumps(r) + "\n" for r in trows))
    v = check_run(tmp_path)
    assert v.ok, v.to_text()
    assert v.stats["turns"] == N_TURNS


# ------------------------------------------------------------------------------ missing inputs


def test_missing_witness_means_not_checked_never_pass(tmp_path: Path, led: Ledger) -> None:
    del led["witness"]
    v = judge(tmp_path, led)
    side_effect_rules = {"lost", "duplicated", "ghost-success", "turn-re-executed", "unexpected"}
    for name in side_effect_rules:
        assert v.rule(name).status == "not-checked", name
        assert "witness" in v.rule(name).detail
    assert v.ok  # not-checked is not a failure
    assert "NOT-CHECKED" in v.to_text()


def test_missing_scenario_leaves_retry_limit_not_checked(tmp_path: Path, led: Ledger) -> None:
    write_ledger(tmp_path, led, scenario=None)
    assert check_run(tmp_path).rule("retry-limit").status == "not-checked"


def test_retry_limit_follows_the_scenario_policy(tmp_path: Path, led: Ledger) -> None:
    write_ledger(tmp_path, led, scenario="[live.retry]\nmax_attempts = 1\n")
    r = check_run(tmp_path).rule("retry-limit")
    assert r.status == "fail" and r.count == int((led["attempts"]["outcome"] == "failed").sum())


def test_turns_ledger_optional(tmp_path: Path, led: Ledger) -> None:
    del led["turns"]
    v = judge(tmp_path, led)
    assert v.ok and v.stats["turns"] == N_TURNS
    plant_lost(led)
    assert failed(judge(tmp_path, led)) == {"lost"}


def test_retry_after_respected_passes(tmp_path: Path, led: Ledger) -> None:
    a = led["attempts"]
    failed = a.index[a["outcome"] == "failed"]
    a.loc[failed, "error_code"] = "rate-limited"
    a.loc[failed, "retry_after_ms"] = 150.0  # the retry came 0.5 s - 0.3 s = 0.2 s after the end
    v = judge(tmp_path, led)
    assert v.ok and v.rule("retry-after").status == "pass"
    assert "0 of " + str(len(failed)) in v.rule("retry-after").detail
    write_ledger(tmp_path, led, scenario="[live.retry]\nhonour_retry_after = false\n")
    assert check_run(tmp_path).rule("retry-after").status == "not-checked"


def test_turns_cut_by_the_end_of_the_run_are_indeterminate(tmp_path: Path, led: Ledger) -> None:
    t = led["turns"]
    t.loc[[3, 4], ["outcome", "end_reason", "told_caller"]] = ["unfinished", "end-of-run", "none"]
    r = judge(tmp_path, led).rule("incomplete")
    assert r.status == "pass" and "2 in flight when the run stopped" in r.detail
    t.loc[5, ["outcome", "end_reason"]] = ["unfinished", "stream-hung"]
    assert judge(tmp_path, led).rule("incomplete").count == 1


def test_a_turn_missing_from_the_turns_ledger_is_incomplete(tmp_path: Path, led: Ledger) -> None:
    led["turns"] = led["turns"].drop(index=[10])  # e.g. a Locust process lost its last rows
    v = judge(tmp_path, led)
    assert "incomplete" in v.failed and v.rule("incomplete").count == 1


def test_error_frames_need_no_sequence_id(tmp_path: Path, led: Ledger) -> None:
    e = led["events"]
    err = e.iloc[[0]].assign(kind="error", sequence_id=np.nan, state=None)
    led["events"] = pd.concat([e, err], ignore_index=True)
    assert judge(tmp_path, led).rule("sequence-id").status == "pass"


def test_policy_read_from_the_live_table_only(tmp_path: Path, led: Ledger) -> None:
    write_ledger(tmp_path, led, scenario="[load]\nprocesses = 2\n[live.retry]\nmax_attempts = 1\n")
    assert check_run(tmp_path).rule("retry-limit").status == "fail"  # [load] does not hide it
    write_ledger(tmp_path, led, scenario="[live.retry]\nmax_attempts = 0\n")
    r = check_run(tmp_path).rule("retry-limit")
    assert r.status == "not-checked" and "live.retry.max_attempts" in r.detail


def test_several_values_matches_pandas_nunique() -> None:
    from rtalab.loadtests.check.rules import _several_values

    rng = np.random.default_rng(3)
    keys = np.array(["a", "b", "c", "d", None, "é"], dtype=object)
    vals = np.array(["x", "y", None, "z"], dtype=object)
    for n in (0, 1, 5, 40, 200):
        k = pd.Series(rng.choice(keys, n), dtype=object)
        v = pd.Series(rng.choice(vals, n), dtype=object)
        nu = pd.DataFrame({"k": k, "v": v}).dropna().groupby("k")["v"].nunique()
        assert list(_several_values(k, v)) == list(nu.index[nu.to_numpy() > 1])


@pytest.mark.parametrize("degraded", [True, False])
def test_a_degraded_call_is_neither_lost_nor_unexpected(tmp_path: Path, led: Ledger,
                                                        degraded: bool) -> None:
    """A call that fell back to core A2A sends no rta/* ids: its tool call reaches the witness
    without requestGuid/interactionId.  Not judged when the call was degraded (every
    attempt ``active: false``); the same rows from an active call fail lost and unexpected."""
    w, a = led["witness"], led["attempts"]
    row = side_effect_turn(led)
    turn = a["interaction_id"] == row["interactionId"]
    if degraded:
        a.loc[turn, "active"] = False
    i = w.index[w["requestGuid"] == row["requestGuid"]][0]
    w.loc[i, ["requestGuid", "interactionId", "turnId"]] = [None, None, None]
    v = judge(tmp_path, led)
    assert failed(v) == (set() if degraded else {"lost", "unexpected"})


# ------------------------------------------------------------------------------ foreign task


def test_foreign_task_answer_names_the_given_attempt(tmp_path: Path, led: Ledger) -> None:
    plant_foreign_task(led)
    victim = led["attempts"][(led["attempts"]["call_id"] == "c5")
                             & (led["attempts"]["injected"] == "")].iloc[0]
    r = judge(tmp_path, led).rule("foreign-task-answer")
    assert r.status == "fail" and r.count == 1
    assert r.examples == (victim["request_guid"],)  # the turn given the task, not its owner
    assert "1 of another call" in r.detail


def test_one_turns_retries_and_copies_share_its_task(tmp_path: Path, led: Ledger) -> None:
    """The must-not: every attempt, retry and resend copy of one turn answered with the same
    taskId (a retry keeps the task, errors.md §3) is not a foreign answer."""
    a = led["attempts"]
    a["task_id_answered"] = ("task-" + a["call_id"].astype(str) + "."
                             + a["turn_index"].astype(str))
    assert a.duplicated(["task_id_answered"]).sum() > 10  # retries and copies share one
    v = judge(tmp_path, led)
    assert v.ok and v.rule("foreign-task-answer").status == "pass", v.to_text()


def test_foreign_task_answer_not_checked_without_the_column(tmp_path: Path,
                                                            led: Ledger) -> None:
    del led["attempts"]["task_id_answered"]
    r = judge(tmp_path, led).rule("foreign-task-answer")
    assert r.status == "not-checked" and "task_id_answered" in r.detail


def test_a_ghost_the_server_owned_up_to_is_not_counted(tmp_path: Path, led: Ledger) -> None:
    """The planted ghost (executed, told failed), but the server's answer said
    ``rta/sideEffect: unknown`` ("may have run"): the caller was told, not a ghost."""
    plant_ghost(led)
    w, a = side_effect_turn(led), led["attempts"]
    a.loc[a["interaction_id"] == w["interactionId"], "side_effect_reported"] = "unknown"
    r = judge(tmp_path, led).rule("ghost-success")
    assert r.count == 0, r.detail
    assert "1 more were told by rta/sideEffect" in r.detail


def test_a_resend_in_a_new_session_is_not_an_unmodified_retry(tmp_path: Path,
                                                              led: Ledger) -> None:
    """A ``session-not-found`` failure (non-retryable) followed by its resend: in the same
    session it is a retry of a non-retryable failure; in a new session (a new contextId,
    errors.md: "start a new session") it is a modified request, allowed."""
    a = led["attempts"]
    i = a.index[a["outcome"] == "failed"][0]
    a.loc[i, "error_code"] = "session-not-found"
    assert judge(tmp_path, led).rule("retried-non-retryable").count == 1
    later = a.index[(a["interaction_id"] == a.loc[i, "interaction_id"])
                    & (a["send_s"] > a.loc[i, "send_s"]) & (a["injected"] == "")]
    a.loc[later, ["context_id", "context_id_learned"]] = "ctx-new-session"
    r = judge(tmp_path, led).rule("retried-non-retryable")
    assert (r.status, r.count) == ("pass", 0), r.detail


def test_a_websocket_answer_without_the_echo_fails(tmp_path: Path, led: Ledger) -> None:
    """An attempt answered over an accepted WebSocket upgrade (HTTP 101) with events but
    without the A2A-Extensions echo is judged like any accepted answer."""
    a = led["attempts"]
    a.loc[7, ["http_status", "echo"]] = [101, False]
    v = judge(tmp_path, led)
    assert failed(v) == {"extension-echo"} and v.rule("extension-echo").count == 1


def test_an_attempt_without_any_event_is_not_judged_for_the_echo(tmp_path: Path,
                                                                 led: Ledger) -> None:
    """No event came (the connection failed before the answer): nothing to carry an echo."""
    a = led["attempts"]
    a.loc[7, ["events", "echo"]] = [0, False]
    assert judge(tmp_path, led).rule("extension-echo").count == 0


def test_a_continuation_copy_without_a_task_is_a_new_request(tmp_path: Path,
                                                             led: Ledger) -> None:
    """The planted continuation-twice, but the copy carries no taskId (the continuation was
    retried after a FAILED answer: a new task): not a second continuation of the pause."""
    plant_continuation_twice(led)
    a = led["attempts"]
    a.loc[a["injected"] == "continuation-dup", "task_id"] = None
    assert judge(tmp_path, led).rule("continuation-answered-twice").count == 0


def test_a_foreign_task_belongs_to_the_turn_answered_with_it_first(tmp_path: Path,
                                                                   led: Ledger) -> None:
    """The planted foreign task with the ledger rows in reverse order: the donor turn, the
    first answered with the task, owns it whatever the row order; the victim is named."""
    plant_foreign_task(led)
    a = led["attempts"]
    victim = a.loc[(a["call_id"] == "c5") & (a["injected"] == ""), "request_guid"].iloc[0]
    led["attempts"] = a.iloc[::-1].reset_index(drop=True)
    r = judge(tmp_path, led).rule("foreign-task-answer")
    assert r.count == 1 and r.examples == (victim,), r
