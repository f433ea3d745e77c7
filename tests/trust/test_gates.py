"""Every gate both ways: a case where it must fire and one where it must not (null SLO
values, what counts against availability, ledger gathered, coverage classes, JUnit's
skipped).  Synthetic ledgers (rtalab.loadtests.check.synth), expected values written out."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from rtalab.loadtests.check import Verdict, check_run
from rtalab.loadtests.check.integrity import RunFiles, rule_ledger_gathered, slo_rules
from rtalab.loadtests.check.synth import EXT_SCENARIO, clean_ledger, write_ledger
from rtalab.loadtests.live.ledger import Gatherer
from rtalab.sim.shared.junit import to_xml, verdict_cases
from tests.check.test_coverage import _attempt, _counts

N_TURNS = 200


def _judge(run: Path, led: dict[str, pd.DataFrame], **files: object) -> Verdict:
    write_ledger(run, led, EXT_SCENARIO)
    for name, data in files.items():
        path = run / "summary.json" if name == "summary" else run / "ledger" / f"{name}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
    return check_run(run, write=False)


# ------------------------------------------------------------------------ SLO gates


def _slo(summary: dict | None, *texts: str) -> dict[str, str]:
    f = RunFiles(run_dir=Path("."), gates={"slo": list(texts)}, summary=summary)
    return {r.name: r.status for r in slo_rules(f)}


def test_a_null_slo_value_fails_the_gate() -> None:
    summary = {"metrics": {"caller_completion_s.p99": {"mean": None},
                           "success_rate": {"mean": 0.999}}}
    got = _slo(summary, "turn_completion_p99_s<=4", "success_rate>=0.99")
    assert got == {"slo turn_completion_p99_s<=4": "fail", "slo success_rate>=0.99": "pass"}
    assert _slo({"metrics": {}}, "success_rate>=0.99") == {"slo success_rate>=0.99": "fail"}


def test_a_met_slo_passes_and_a_missed_one_fails_at_its_edge() -> None:
    summary = {"metrics": {"success_rate": {"mean": 0.99}}}
    assert _slo(summary, "success_rate>=0.99")["slo success_rate>=0.99"] == "pass"
    assert _slo(summary, "success_rate>0.99")["slo success_rate>0.99"] == "fail"
    assert _slo(None, "success_rate>=0.99")["slo success_rate>=0.99"] == "not-checked"


# ------------------------------------------------------------------------ availability


def test_barge_in_turns_do_not_count_against_availability(tmp_path: Path) -> None:
    """10 failed and 60 cancelled (barge-in) of 200: 130 of 140 judged completed (92.9 %)
    passes; counted against it, 130 of 200 (65 %) would fail."""
    led = clean_ledger(N_TURNS, seed=7)
    t = led["turns"]
    plain = t.index[~t["side_effect"]]
    t.loc[plain[:10], ["outcome", "told_caller"]] = ["failed", "failure"]
    t.loc[plain[10:70], ["outcome", "end_reason", "told_caller"]] = ["cancelled", "barge-in",
                                                                     "none"]
    r = _judge(tmp_path, led).rule("availability")
    assert r.status == "pass" and r.detail.startswith("130 of 140 judged turns completed")
    t.loc[plain[10:70], ["outcome", "end_reason", "told_caller"]] = ["failed", "failed",
                                                                     "failure"]
    assert _judge(tmp_path, led).rule("availability").status == "fail"


def test_turns_cut_by_the_stop_do_not_count_against_availability(tmp_path: Path) -> None:
    led = clean_ledger(N_TURNS, seed=7)
    t = led["turns"]
    last = t.index[(t["turn_index"] == 3) & ~t["side_effect"]][:25]
    t.loc[last, ["outcome", "end_reason", "told_caller"]] = ["unfinished", "end-of-run", "none"]
    r = _judge(tmp_path, led).rule("availability")
    assert r.status == "pass" and r.detail.startswith(f"{N_TURNS - 25} of {N_TURNS - 25} ")
    # the same turns ended as failures (not cut by the stop) count: 175 of 200 < 90 %
    t.loc[last, ["outcome", "end_reason", "told_caller"]] = ["failed", "failed", "failure"]
    assert _judge(tmp_path, led).rule("availability").status == "fail"


# ------------------------------------------------------------------------ ledger gathered


def _gathered(tmp_path: Path, deliver: dict[str, int], expected: int) -> str:
    g = Gatherer(tmp_path / "g")
    try:
        for p, batches in deliver.items():
            for b in range(batches):
                g.on_batch({"process": p, "batch": b})
            g.on_done({"process": p, "batches": batches,
                       "rows": dict.fromkeys(("attempts", "events", "turns", "calls"), 0)})
        report = g.report(expected)
    finally:
        g.close()
    return rule_ledger_gathered(RunFiles(run_dir=tmp_path, gather=report)).status


def test_a_locust_process_that_never_delivered_its_ledger_fails(tmp_path: Path) -> None:
    assert _gathered(tmp_path, {"w0": 2, "w1": 3}, expected=2) == "pass"
    assert _gathered(tmp_path, {"w0": 2}, expected=2) == "fail"  # w1 sent nothing at all


def test_ledger_gathered_fails_on_a_short_process_even_if_marked_complete() -> None:
    gather = {"expected_processes": 2, "complete": True,
              "processes": {"w0": {"announced": {"batches": 3}, "batches_received": 3}}}
    r = rule_ledger_gathered(RunFiles(run_dir=Path("."), gather=gather))
    assert r.status == "fail" and r.count == 1
    gather["processes"]["w1"] = {"announced": {"batches": 2}, "batches_received": 1}
    r = rule_ledger_gathered(RunFiles(run_dir=Path("."), gather=gather))
    assert r.status == "fail" and r.examples == ("w1",)
    gather["processes"]["w1"]["batches_received"] = 2
    assert rule_ledger_gathered(RunFiles(run_dir=Path("."), gather=gather)).status == "pass"


# ------------------------------------------------------------------------ coverage


def test_coverage_counts_only_what_exercised_a_class() -> None:
    rows = [
        # resend of a refused original (503, never executed): nothing to deduplicate
        _attempt("g1", 10.0, 10.1, "failed", code="rate-limited"),
        _attempt("g1", 12.0, 12.1, injected="resend"),
        # copy sent while the server was down, of an original refused before the restart
        _attempt("g2", 99.0, 99.2, "failed", call="c2", turn_id="t-2", code="internal"),
        _attempt("g2", 101.0, 101.2, "failed", injected="resend", call="c2", turn_id="t-2"),
        # retryable-only failures: not non-retryable handling
        _attempt("g3", 30.0, 30.1, "failed", call="c3", turn_id="t-3", code="upstream-timeout"),
    ]
    c = _counts(rows)
    assert c["resend-after-completion"] == ("not exercised", 0)
    assert c["resend-across-restart"] == ("not exercised", 0)
    assert c["non-retryable"] == ("not exercised", 0)
    assert c["rate-limited"] == ("exercised", 1)
    # a copy of an executed original sent while the server was down (restart 100-102):
    # the server never saw it, so it exercised no dedup class
    down = [_attempt("g4", 99.0, 99.2, call="c4", turn_id="t-4"),
            _attempt("g4", 101.0, 101.2, "failed", injected="resend", call="c4", turn_id="t-4")]
    c_down = _counts(down)
    for name in ("resend-after-completion", "resend-across-restart", "duplicate-while-running"):
        assert c_down[name] == ("not exercised", 0), name
    # the same shapes with executed originals and a non-retryable code: each counted
    rows[0] = _attempt("g1", 10.0, 10.1)
    rows[2] = _attempt("g2", 99.0, 99.2, call="c2", turn_id="t-2")
    rows[3] = _attempt("g2", 103.0, 103.2, injected="resend", call="c2", turn_id="t-2")
    rows[4] = _attempt("g3", 30.0, 30.1, "failed", call="c3", turn_id="t-3",
                       code="schema-validation")
    c = _counts(rows)
    assert c["resend-after-completion"] == ("exercised", 1)
    assert c["resend-across-restart"] == ("exercised", 1)
    assert c["non-retryable"] == ("exercised", 1)


def test_without_a_witness_dedup_classes_are_not_observable() -> None:
    rows = [_attempt("g1", 10.0, 11.0), _attempt("g1", 10.5, 11.2, injected="concurrent")]
    assert _counts(rows)["duplicate-while-running"] == ("exercised", 1)
    assert _counts(rows, witness=False)["duplicate-while-running"] == ("not observable", 0)


# ------------------------------------------------------------------------ JUnit


@pytest.mark.parametrize(("status", "child"), [("pass", None), ("fail", "failure"),
                                               ("not-checked", "skipped"),
                                               ("interrupted", "skipped")])
def test_junit_shows_an_unchecked_rule_as_skipped(status: str, child: str | None) -> None:
    verdict = {"rules": [{"name": "r", "status": status, "kind": "gate", "count": 1,
                          "detail": "why"}]}
    root = ET.fromstring(to_xml("s", verdict_cases(verdict)))
    case = root.find("testcase")
    assert case is not None
    kids = [k.tag for k in case if k.tag != "system-out"]
    assert kids == ([] if child is None else [child])
    assert root.get("skipped") == str(int(child == "skipped"))
    assert root.get("failures") == str(int(child == "failure"))


def test_the_witness_rows_read_must_be_the_rows_saved() -> None:
    from rtalab.loadtests.check.integrity import rule_witness_agrees

    rows = pd.DataFrame({"request_guid": ["a", "b", "c"]})
    for saved, status in ((3, "PASS"), (5, "FAIL"), (2, "FAIL")):
        r = rule_witness_agrees(RunFiles(run_dir=Path("."), counts={"witness_rows": saved}),
                                rows)
        assert str(r.status).upper().endswith(status), (saved, r.status)


def test_a_turn_paused_for_input_counts_as_executed_for_a_reused_turn_id() -> None:
    """Two calls sending the same turnId with a side effect, one completed, one paused for
    input (INPUT_REQUIRED: it executed): both turns shared the id."""
    from rtalab.sim.vocab import AttemptOutcome

    rows = [_attempt("g1", 10.0, 11.0, call="c1", turn_id="t-9"),
            _attempt("g2", 12.0, 13.0, AttemptOutcome.INPUT_REQUIRED.value, call="c2",
                     turn_id="t-9")]
    assert _counts(rows)["turn-id-reused"] == ("exercised", 2)


def test_the_auth_gate_counts_only_the_clients_real_requests() -> None:
    """A copy the harness injected (with a planted bad token, or refused as a duplicate) is
    not the run's credentials: only real requests refused with auth fail the gate."""
    from rtalab.loadtests.check.integrity import rule_auth

    a = pd.DataFrame({"request_guid": ["g1", "g2", "g3"], "injected": ["", "concurrent", None],
                      "error_code": [None, "auth", None]})
    assert str(rule_auth(a).status).upper().endswith("PASS")
    a.loc[2, "error_code"] = "auth"
    r = rule_auth(a)
    assert str(r.status).upper().endswith("FAIL") and r.count == 1


def test_the_runs_own_availability_limit_is_the_one_judged() -> None:
    """6 of 10 judged turns completed: below the default limit, above a run's 0.5."""
    import numpy as np

    from rtalab.loadtests.check.integrity import AVAILABILITY_MIN, rule_availability

    out = pd.Series(["completed"] * 6 + ["failed"] * 4)
    none = np.zeros(10, dtype=bool)
    assert AVAILABILITY_MIN > 0.6
    default = rule_availability(RunFiles(run_dir=Path("."), gates={}), out, none)
    lenient = rule_availability(RunFiles(run_dir=Path("."), gates={"availability_min": 0.5}),
                                out, none)
    assert str(default.status).upper().endswith("FAIL")
    assert str(lenient.status).upper().endswith("PASS")


def test_refused_answers_are_the_real_requests_without_a_stream() -> None:
    """What the availability rule says the server answered instead: non-2xx statuses and
    requests with none -- not an open WebSocket (101), not a copy the client injected."""
    from rtalab.loadtests.check.integrity import refused_statuses

    a = pd.DataFrame({"http_status": [200, 101, 503, None, 503],
                      "injected": ["", "", "", "", "proxy-dup"]})
    text = refused_statuses(a)
    assert text.startswith("; 2 of 4 requests answered: ") and "101" not in text
    assert "HTTP 503 x1" in text and "no connection x1" in text
    assert refused_statuses(a.iloc[:2]) == ""  # 200 and an open WebSocket: nothing refused
