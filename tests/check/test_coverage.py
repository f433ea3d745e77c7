"""The coverage section on a hand-written ledger: every count written out, one case per row."""

from __future__ import annotations

import pandas as pd

from rtalab.loadtests.check.coverage import coverage


def _attempt(guid: str, send: float, end: float, outcome: str = "completed", injected: str = "",
             call: str = "c1", turn: int = 0, turn_id: str = "t-1", side: bool = True,
             phase: str = "initial", attempt: int = 1, task: str | None = None,
             code: str | None = None) -> dict:
    return {"request_guid": guid, "send_s": send, "end_s": end, "outcome": outcome,
            "injected": injected, "inj": injected != "", "call_id": call, "turn_index": turn,
            "turn_id": turn_id, "side_effect": side, "phase": phase, "attempt": attempt,
            "task_id": task, "error_code": code}


RESTART = pd.DataFrame({"start_unix": [100.0], "end_unix": [102.0]})


def _counts(rows: list[dict], chaos: pd.DataFrame | None = None, witness: bool = True,
            restarts: pd.DataFrame = RESTART, reordered: int = 0) -> dict[str, tuple[str, int]]:
    got = coverage(pd.DataFrame(rows), chaos, witness, restarts, reordered)
    return {e.name: (e.status, e.count) for e in got}


def test_each_copy_counts_in_exactly_its_class():
    rows = [
        _attempt("g1", 10.0, 11.0), _attempt("g1", 10.5, 11.2, injected="concurrent"),
        _attempt("g2", 20.0, 21.0, call="c2"), _attempt("g2", 23.0, 23.5, "completed",
                                                        injected="resend", call="c2"),
        _attempt("g3", 99.0, 99.5, call="c3"), _attempt("g3", 103.0, 103.2,
                                                        injected="resend", call="c3"),
        # cut off by the restart, resent after it: across
        _attempt("g4", 99.8, 100.5, "response-lost", call="c4", turn_id="t-2"),
        _attempt("g4", 104.0, 104.1, injected="resend", call="c4", turn_id="t-2"),
        # refused (never executed): no class counts its copy
        _attempt("g5", 30.0, 30.1, "failed", call="c5", turn_id="t-3", code="auth"),
        _attempt("g5", 30.05, 30.2, "failed", injected="concurrent", call="c5",
                 turn_id="t-3", code="auth"),
        # a copy without a side effect: invisible to the witness, not counted
        _attempt("g6", 40.0, 41.0, call="c6", turn_id="t-4", side=False),
        _attempt("g6", 40.1, 41.0, injected="concurrent", call="c6", turn_id="t-4",
                 side=False),
    ]
    c = _counts(rows)
    assert c["duplicate-while-running"] == ("exercised", 1)        # g1
    assert c["resend-after-completion"] == ("exercised", 1)        # g2
    assert c["resend-across-restart"] == ("exercised", 2)          # g3, g4
    assert c["restart"] == ("exercised", 1)
    assert c["non-retryable"] == ("exercised", 1)                  # g5 (its copy is injected)
    # t-1 completed in calls c1, c2 and c3 (side effect): three turns share it
    assert c["turn-id-reused"] == ("exercised", 3)
    for name in ("continuation-twice", "reordering", "outage", "rate-limited"):
        assert c[name] == ("not exercised", 0), name


def test_proxy_duplicates_continuations_outages_and_no_witness():
    rows = [
        _attempt("g1", 10.0, 11.0), _attempt("g2", 20.0, 20.2, call="c2", turn_id="t-9"),
        _attempt("k1", 30.0, 30.5, phase="continuation", task="task-1", call="c3",
                 turn_id="t-5"),
        _attempt("k2", 30.0, 30.6, "completed", injected="continuation-dup", phase="continuation",
                 task="task-1", call="c3", turn_id="t-5"),
        # a continuation copy without a taskId (a new task after FAILED) is no continuation
        _attempt("k3", 40.0, 40.5, phase="continuation", call="c4", turn_id="t-6"),
        _attempt("k4", 40.0, 40.5, injected="continuation-dup", phase="continuation",
                 call="c4", turn_id="t-6"),
        _attempt("r1", 50.0, 50.3, "failed", call="c5", turn_id="t-7", code="rate-limited"),
    ]
    chaos = pd.DataFrame({"kind": ["duplicate", "duplicate", "blackhole", "swallowed",
                                   "outage-start", "reorder"],
                          "request_guid": ["g1", "g2", "", "", "", "g1"],
                          "delay_s": [0.05, 0.5, None, None, None, None]})
    c = _counts(rows, chaos, reordered=2, restarts=RESTART.iloc[0:0])
    assert c["duplicate-while-running"] == ("exercised", 1)   # g1: 0.05 s into a 1-s request
    assert c["resend-after-completion"] == ("exercised", 1)   # g2: 0.5 s after a 0.2-s one
    assert c["continuation-twice"] == ("exercised", 1)        # k2 only
    assert c["outage"] == ("exercised", 2)
    assert c["reordering"] == ("exercised", 2)
    assert c["rate-limited"] == ("exercised", 1)
    assert c["restart"] == ("not exercised", 0)
    blind = _counts(rows, chaos, witness=False, reordered=2, restarts=RESTART.iloc[0:0])
    for name in ("duplicate-while-running", "resend-after-completion", "resend-across-restart",
                 "turn-id-reused", "continuation-twice"):
        assert blind[name] == ("not observable", 0), name
    assert blind["outage"] == ("exercised", 2)


def test_turns_in_flight_during_a_restart_are_not_judged_for_availability():
    from rtalab.loadtests.check.coverage import turns_across_restarts

    rows = [_attempt("a", 95.0, 99.0), _attempt("b", 99.0, 100.5),      # before / into it
            _attempt("c", 101.0, 101.2), _attempt("d", 102.5, 103.0),   # during / after
            _attempt("e", 90.0, 99.5, injected="resend")]              # a copy: not its turn's
    a = pd.DataFrame(rows).assign(tkey=[0, 1, 2, 3, 4])
    assert turns_across_restarts(a, 5, RESTART).tolist() == [False, True, True, False, False]
    assert turns_across_restarts(a, 5, RESTART.iloc[0:0]).tolist() == [False] * 5


def test_a_copy_that_reached_the_server_first_counts_before_its_original():
    rows = [
        # the concurrent copy was sent first (the original waited for it): before-original
        _attempt("g1", 10.02, 11.0), _attempt("g1", 10.0, 10.9, injected="concurrent"),
        # sent after its original started: while running, not before
        _attempt("g2", 20.0, 21.0, call="c2"),
        _attempt("g2", 20.01, 21.0, injected="concurrent", call="c2"),
        # a copy first of a refused original: nothing to deduplicate, not counted
        _attempt("g3", 30.02, 30.1, "failed", call="c3", code="auth"),
        _attempt("g3", 30.0, 30.1, "failed", injected="concurrent", call="c3", code="auth"),
    ]
    c = _counts(rows, restarts=RESTART.iloc[0:0])
    assert c["duplicate-before-original"] == ("exercised", 1)  # g1
    assert c["duplicate-while-running"] == ("exercised", 1)    # g2
    chaos = pd.DataFrame({"kind": ["duplicate", "duplicate"], "request_guid": ["g2", "g1"],
                          "delay_s": [-0.05, 0.05], "first": [True, False]})
    c = _counts(rows, chaos, restarts=RESTART.iloc[0:0])
    assert c["duplicate-before-original"] == ("exercised", 2)  # + the proxy's copy of g2
    assert c["duplicate-while-running"] == ("exercised", 2)    # + the proxy's later copy of g1
    later = _counts(rows[2:], restarts=RESTART.iloc[0:0])      # the must-not: none sent first
    assert later["duplicate-before-original"] == ("not exercised", 0)


def test_resends_after_completion_state_the_dedup_window_they_demand():
    rows = [_attempt("g1", 10.0, 11.0), _attempt("g1", 14.0, 14.1, injected="resend"),
            _attempt("g2", 20.0, 20.5, call="c2"),
            _attempt("g2", 27.5, 27.6, injected="resend", call="c2")]
    chaos = pd.DataFrame({"kind": ["duplicate"], "request_guid": ["g1"], "delay_s": [2.0],
                          "first": [False]})  # 2 s after a 1-s request: 1 s after its end
    got = {e.name: e for e in coverage(pd.DataFrame(rows), chaos, True, RESTART.iloc[0:0], 0)}
    after = got["resend-after-completion"]
    assert after.count == 3
    assert after.min_dedup_window_s == 7.0  # g2: resent 7 s after its answer ended
    assert "dedup window >= 7 s" in after.detail
    assert after.to_dict()["min_dedup_window_s"] == 7.0
    assert "min_dedup_window_s" not in got["duplicate-while-running"].to_dict()
    none = {e.name: e for e in coverage(pd.DataFrame(rows[:1]), None, True,
                                        RESTART.iloc[0:0], 0)}
    assert none["resend-after-completion"].min_dedup_window_s is None
    assert "dedup window" not in none["resend-after-completion"].detail


def test_a_proxy_copy_delayed_exactly_the_originals_time_counts_after_it():
    """The proxy's copy of a 1-s request (sent at 10.0, ended at 11.0) delayed exactly 1 s
    reaches the server as the original's answer ends: after completion, never also "while
    running" (each copy counts in exactly one class)."""
    rows = [_attempt("g1", 10.0, 11.0)]
    chaos = pd.DataFrame({"kind": ["duplicate"], "request_guid": ["g1"], "delay_s": [1.0],
                          "first": [False]})
    c = _counts(rows, chaos, restarts=RESTART.iloc[0:0])
    assert c["duplicate-while-running"] == ("not exercised", 0)
    assert c["resend-after-completion"] == ("exercised", 1)


def test_a_reused_turn_id_counts_only_with_a_side_effect():
    """Two calls both send turnId t-1 and complete: a dedup-by-turnId bug can only show if
    the turn has a side effect (a witness execution), so only then is the class exercised."""
    plain = [_attempt("g1", 10.0, 11.0, call="c1", side=False),
             _attempt("g2", 20.0, 21.0, call="c2", side=False)]
    assert _counts(plain)["turn-id-reused"] == ("not exercised", 0)
    paid = [_attempt("g1", 10.0, 11.0, call="c1"), _attempt("g2", 20.0, 21.0, call="c2")]
    assert _counts(paid)["turn-id-reused"] == ("exercised", 2)


def test_a_continuation_copy_counts_only_when_the_pause_was_answered():
    """A continuation and its continuation-dup copy (same task) that both timed out gave the
    Reasoner nothing to claim twice; when the continuation completed, the pair counts."""
    def pair(outcome: str) -> list[dict]:
        return [_attempt("g1", 10.0, 11.0, outcome=outcome, phase="continuation", task="T"),
                _attempt("g1-c", 10.0, 11.0, outcome="timeout", injected="continuation-dup",
                         phase="continuation", task="T")]
    assert _counts(pair("timeout"))["continuation-twice"] == ("not exercised", 0)
    assert _counts(pair("completed"))["continuation-twice"] == ("exercised", 1)


def test_non_retryable_handling_counts_failed_answers_only():
    """A FAILED schema-validation answer exercises non-retryable handling; the same code on
    an attempt that did not end FAILED (a timeout recorded with it) does not."""
    rows = [_attempt("g1", 10.0, 11.0, outcome="failed", code="schema-validation"),
            _attempt("g2", 12.0, 13.0, outcome="timeout", code="schema-validation", call="c2")]
    assert _counts(rows)["non-retryable"] == ("exercised", 1)
