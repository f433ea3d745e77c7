"""The verdict object, JUnit output and sim-vs-load agreement rows, expected values written
out: a not-checked rule never fails nor passes a run, an interrupted run never passes,
JUnit counts failures and skips exactly, agreement's difference is load − simulation."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from rtalab.loadtests.check.verdict import FAIL, NOT_CHECKED, PASS, RuleResult, Verdict
from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.shared.agreement import AGREES, DIFFERS, agreement_rows
from rtalab.sim.shared.junit import Case, capacity_cases, to_xml, tune_cases


def _rule(name: str, status: str) -> RuleResult:
    return RuleResult(name=name, section="s", kind="violation", status=status)  # type: ignore[arg-type]


def test_verdict_ok_headline_and_round_trip() -> None:
    v = Verdict(rules=[_rule("a", PASS), _rule("b", NOT_CHECKED)])
    assert v.ok and v.headline == "PASS" and v.failed == []
    v = Verdict(rules=[_rule("a", PASS), _rule("b", FAIL), _rule("c", FAIL)])
    assert not v.ok and v.failed == ["b", "c"] and v.verdict_line() == "verdict: FAIL (b, c)"
    i = Verdict(rules=[_rule("a", PASS)], run_status="interrupted")
    assert not i.ok and i.headline == "INTERRUPTED"
    back = Verdict.from_dict(v.to_dict())
    assert [(r.name, r.status) for r in back.rules] == [("a", PASS), ("b", FAIL), ("c", FAIL)]
    assert back.ok is False


def test_junit_counts_failures_and_skips_exactly() -> None:
    cases = [Case("p", "c", "pass"), Case("f1", "c", "fail", "m"), Case("f2", "c", "fail"),
             Case("s", "c", "skipped")]
    root = ET.fromstring(to_xml("suite", cases))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("4", "2", "1")
    kinds = {c.get("name"): [k.tag for k in c] for c in root.iter("testcase")}
    assert kinds == {"p": [], "f1": ["failure"], "f2": ["failure"], "s": ["skipped"]}


def test_capacity_and_tune_cases_skip_what_was_not_met() -> None:
    slo = parse_slo("success_rate>=0.99")
    res = SimpleNamespace(required={1.0: 2, 4.0: None}, load_key="workload.calls_per_s",
                          knob=SimpleNamespace(key="reasoner.workers", lo=1, hi=8))
    got = [(c.name, c.status) for c in capacity_cases(res, [slo])]
    assert got == [("workload.calls_per_s=1: success_rate >= 0.99", "pass"),
                   ("workload.calls_per_s=4: success_rate >= 0.99", "skipped")]
    none = pd.DataFrame({"candidate": ["a", "current"], "recommended": [False, False]})
    assert [c.status for c in tune_cases(none, [slo])] == ["skipped"]
    one = pd.DataFrame({"candidate": ["a", "current"], "recommended": [True, False],
                        "success_rate": [0.995, 0.99]})
    assert [c.status for c in tune_cases(one, [slo])] == ["pass"]


def test_agreement_difference_is_load_minus_sim_and_counts_are_not_compared() -> None:
    sims = [1.0, 1.2, 0.8, 1.1, 0.9]  # mean 1.0, sd 0.158
    sim = {"metrics": {"x": {"values": sims}, "turns": {"values": [100, 101, 99, 100, 100]}}}
    load = {"kind": "load", "metrics": {"x": {"mean": 3.0, "se": 0.05},
                                        "turns": {"mean": 500.0, "se": 1.0}}}
    rows = agreement_rows(sim, load)
    assert [r.metric for r in rows] == ["x"]  # turns: a count, depends on the run's length
    r = rows[0]
    assert r.diff == 2.0 and r.diff_ci_low > 0 and r.verdict == DIFFERS
    assert r.diff_ci_low <= r.diff <= r.diff_ci_high
    load["metrics"]["x"]["mean"] = float(np.mean(sims))
    assert agreement_rows(sim, load)[0].verdict == AGREES


def test_hazards_are_per_1000_turns() -> None:
    from rtalab.loadtests.check.verdict import per_1k

    assert per_1k(3, 600) == pytest.approx(5.0)
    assert per_1k(1, 0) is None


def test_a_count_not_comparable_is_skipped_not_passed(tmp_path) -> None:
    from rtalab.sim.shared.junit import load_run_cases

    cases = {c.name: c.status for c in load_run_cases(
        tmp_path, None, {"ledger_complete": True, "server_matches": None,
                         "witness_matches": False})}
    assert cases == {"ledger-complete": "pass", "server-count-matches": "skipped",
                     "witness-count-matches": "fail"}


def test_the_agreement_test_uses_the_sample_variance_of_the_replications() -> None:
    """Replications 1, 2, 3 (mean 2, sample variance 1) and a load value 2 without its own
    se: the spread of one more run is sqrt(1 x (1 + 1/3)) = 1.1547, the interval
    +- t(0.975, 2) x 1.1547 = +- 4.9683 (with the ddof-0 variance, 4.0566)."""
    from rtalab.sim.shared.agreement import _test

    d, lo, hi, p = _test("x", [1.0, 2.0, 3.0], 2.0, None)
    assert d == 0.0 and p == pytest.approx(1.0)
    assert hi == pytest.approx(4.9683, abs=1e-3) and lo == pytest.approx(-4.9683, abs=1e-3)


def test_agreement_uses_the_load_runs_own_standard_error() -> None:
    """Replications 1, 2, 3 against a load value 2.5 whose own se is 10: the difference's
    interval is +- t x sqrt(1/3 + 100) ~ +-20, not the prediction spread's +-5."""
    from rtalab.sim.shared.agreement import agreement_rows

    sim = {"metrics": {"x": {"values": [1.0, 2.0, 3.0]}}}
    (row,) = agreement_rows(sim, {"metrics": {"x": {"mean": 2.5, "se": 10.0}}})
    assert row.load_se == 10.0
    assert row.diff_ci_high - row.diff > 19.0
    (plain,) = agreement_rows(sim, {"metrics": {"x": {"mean": 2.5}}})
    assert plain.load_se is None and plain.diff_ci_high - plain.diff < 6.0


# ------------------------------------------------------------------- more, written out


def test_agreement_degrees_of_freedom_are_welchs() -> None:
    """Three replications (1.0, 1.1, 0.9: s^2 = 0.01) against a load run of 1.5 with its
    bootstrap se 0.2: var = 0.01/3 + 0.04; the load part is known (bootstrap), so the
    Welch-Satterthwaite df = var^2 / ((0.01/3)^2 / 2) = 338 -- nearly normal, p = 0.017;
    with the replications' 2 df alone it would read p = 0.14 ("agrees")."""
    from scipy import stats

    from rtalab.sim.shared.agreement import _test

    d, lo, hi, p = _test("m", [1.0, 1.1, 0.9], 1.5, 0.2)
    var = 0.01 / 3 + 0.04
    df = var * var / ((0.01 / 3) ** 2 / 2)
    assert df == pytest.approx(338.0, rel=1e-3)
    assert d == pytest.approx(0.5)
    assert p == pytest.approx(2 * stats.t.sf(0.5 / var ** 0.5, df), rel=1e-6)
    assert hi - d == pytest.approx(stats.t.ppf(0.975, df) * var ** 0.5, rel=1e-6)
    assert d - lo == pytest.approx(hi - d)


def test_identical_replications_differ_from_another_value() -> None:
    """Replications that all read 1.0 (no spread) and no load se: a load value of 2.0 is a
    certain difference (p = 0), 1.0 a certain agreement (p = 1)."""
    from rtalab.sim.shared.agreement import _test

    assert _test("m", [1.0, 1.0, 1.0], 2.0, None)[3] == 0.0
    assert _test("m", [1.0, 1.0, 1.0], 1.0, None)[3] == 1.0


def test_twin_check_ties_pass_and_a_missing_metric_never_narrows_it() -> None:
    from rtalab.sim.shared.agreement import TwinCheck, simultaneous_prediction

    assert TwinCheck((), 2.0, 2.0, 19).ok  # as extreme as the most extreme replication
    assert not TwinCheck((), 2.0000001, 2.0, 19).ok
    reps = [{"x": 1.0 + 0.1 * i} for i in range(5)]
    run = {"x": 100.0}
    assert not simultaneous_prediction(reps, run, ["x"]).ok  # far out: fails
    reps[2] = {"x": None}  # one replication without the metric: its score is infinite
    check = simultaneous_prediction(reps, run, ["x"])
    assert check.t_star == float("inf") and check.ok
    assert (check.rows[0].low, check.rows[0].high) == (float("-inf"), float("inf"))


def test_one_run_interval_resolution_edges_and_undefined_percentiles() -> None:
    from rtalab.sim.shared.agreement import RunInterval, one_run_intervals, run_interval

    # every replication succeeded completely: the interval still admits a run one turn off
    iv = run_interval([1.0] * 10, 0.9, "success_rate", resolution=0.01, bounds=(0.0, 1.0))
    assert iv is not None and (iv.low, iv.high) == (pytest.approx(0.99), 1.0)
    edge = RunInterval(1.0, 2.0, 1.5, 10, 0.9, "t")
    assert edge.contains(1.0) and edge.contains(2.0) and not edge.contains(2.0000001)
    # a caller-perceived percentile infinite (None) in one replication has no interval
    s = {"metrics": {"caller_ttfc_s.p99": {"values": [1.0, None, 1.2]},
                     "ttfc_s.p99": {"values": [1.0, 1.1, 1.2]}}}
    assert set(one_run_intervals(s)) == {"ttfc_s.p99"}


def test_junit_load_run_without_a_verdict_shows_an_incomplete_ledger_failed() -> None:
    from pathlib import Path

    from rtalab.sim.shared.junit import load_run_cases

    cases = load_run_cases(Path("run"), None, {"ledger_complete": False,
                                               "server_matches": True,
                                               "witness_matches": None})
    assert [(c.name, c.status) for c in cases] == [
        ("ledger-complete", "fail"), ("server-count-matches", "pass"),
        ("witness-count-matches", "skipped")]
    ok = load_run_cases(Path("run"), None, {"ledger_complete": True})
    assert ok[0].status == "pass"
