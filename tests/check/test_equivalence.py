"""``transport-equivalence``: the same verdict on every binding (A2A §5.1).

Synthetic ledgers (rtalab.loadtests.check.synth) with calls spread over four bindings: the clean
ledger passes on every seed; a bug planted on one binding only (duplicate executions, a
success drop, slow first chunks) fails the rule naming that binding; the same bug on every
binding alike fails its own rule, not this one; differences inside the margins pass.  The
comparisons' false-alarm rate is measured over replications against the ALPHA it claims.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rtalab.loadtests.check import check_run
from rtalab.loadtests.check import equivalence as E
from rtalab.loadtests.check.synth import clean_ledger, write_ledger
from rtalab.sim.shared.stats import holm

BINDINGS = ("sse", "rest", "grpc", "ws")
Ledger = dict[str, pd.DataFrame]


def spread(led: Ledger, names: tuple[str, ...] = BINDINGS, seed: int = 1) -> Ledger:
    """Calls alternate over ``names`` (as --binding does); turn latencies drawn per call."""
    rng = np.random.default_rng(seed)
    calls = pd.unique(led["turns"]["call_id"])
    of = {c: names[i % len(names)] for i, c in enumerate(calls)}
    for k in ("attempts", "turns"):
        led[k]["binding"] = led[k]["call_id"].map(of)
    t = led["turns"]
    call_effect = dict(zip(calls, rng.normal(0.0, 0.15, len(calls)), strict=True))
    base = np.log(0.3) + t["call_id"].map(call_effect).to_numpy()
    ok = t["outcome"].eq("completed").to_numpy()
    ttfc = np.exp(base + rng.normal(0.0, 0.3, len(t)))
    t["ttfc_s"] = np.where(ok, ttfc, np.nan)
    t["completion_s"] = np.where(ok, ttfc + np.exp(np.log(0.2) + rng.normal(0, 0.3, len(t))),
                                 np.nan)
    return led


def judge(tmp_path: Path, led: Ledger):
    write_ledger(tmp_path, led)
    v = check_run(tmp_path)
    return v, v.rule("transport-equivalence")


def duplicate_side_effects(led: Ledger, binding: str, n: int) -> None:
    """``n`` side-effect requests of ``binding`` executed twice (a second witness row)."""
    a, w = led["attempts"], led["witness"]
    guids = set(a.loc[a["binding"].eq(binding), "request_guid"])
    rows = w[w["requestGuid"].isin(guids)].head(n).copy()
    assert len(rows) == n
    rows["id"] = rows["id"] + 10_000_000
    led["witness"] = pd.concat([w, rows], ignore_index=True)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_clean_ledger_passes_on_every_seed(tmp_path: Path, seed: int) -> None:
    v, r = judge(tmp_path, spread(clean_ledger(600, seed=seed), seed=seed))
    assert v.ok and r.status == "pass", r.detail
    assert "4 bindings" in r.detail and "the same on every binding" in r.detail
    by = v.stats["by_binding"]
    assert list(by) == list(BINDINGS) and sum(by[b]["turns"] for b in BINDINGS) == 600
    assert all(140 <= by[b]["turns"] <= 160 for b in BINDINGS)


def test_one_binding_is_not_checked(tmp_path: Path) -> None:
    _, r = judge(tmp_path, spread(clean_ledger(200), names=("sse",)))
    assert r.status == "not-checked" and "one binding" in r.detail


def test_duplicates_on_one_binding_fail_it_and_name_it(tmp_path: Path) -> None:
    led = spread(clean_ledger(600))
    duplicate_side_effects(led, "rest", 8)
    v, r = judge(tmp_path, led)
    assert set(v.failed) == {"duplicated", "transport-equivalence"}
    assert r.examples == ("rest: delivery:duplicated",), r
    assert "binding(s) rest differ" in r.detail and "duplicated fails on rest (8)" in r.detail
    assert v.stats["by_binding"]["rest"]["failed_rules"] == ["duplicated"]
    assert v.stats["by_binding"]["sse"]["failed_rules"] == []
    text = v.summary_text()  # the end of the run, split by binding
    assert "    rest: " in text and "failed: duplicated" in text
    assert "    sse: " in text and "delivery rules pass" in text
    assert "by binding" in (tmp_path / "verdict.txt").read_text()


def test_a_bug_on_every_binding_alike_is_its_rules_failure_only(tmp_path: Path) -> None:
    led = spread(clean_ledger(600))
    for b in BINDINGS:
        duplicate_side_effects(led, b, 3)
    v, r = judge(tmp_path, led)
    assert "duplicated" in v.failed and r.status == "pass", r.detail
    assert "(every binding)" in r.detail


def test_a_few_violations_on_one_binding_are_not_a_confident_difference(tmp_path: Path) -> None:
    led = spread(clean_ledger(600))
    duplicate_side_effects(led, "ws", 2)  # P(2 of 2 on ws | even) = 1/16: not below ALPHA
    v, r = judge(tmp_path, led)
    assert "duplicated" in v.failed and r.status == "pass", r.detail


def slow(led: Ledger, binding: str, factor: float) -> None:
    t = led["turns"]
    mine = t["binding"].eq(binding)
    t.loc[mine, ["ttfc_s", "completion_s"]] *= factor


@pytest.mark.parametrize(("factor", "fails"), [(2.0, True), (1.1, False)])
def test_slow_first_chunks_on_one_binding(tmp_path: Path, factor: float, fails: bool) -> None:
    led = spread(clean_ledger(600))
    slow(led, "grpc", factor)
    _, r = judge(tmp_path, led)
    assert (r.status == "fail") is fails, r.detail
    if fails:
        assert set(r.examples) == {"grpc: ttfc", "grpc: completion"}


def test_a_success_drop_on_one_binding_fails(tmp_path: Path) -> None:
    led = spread(clean_ledger(800))
    t = led["turns"]
    rng = np.random.default_rng(5)
    hit = t["binding"].eq("sse").to_numpy() & (rng.random(len(t)) < 0.4)
    t.loc[hit, ["outcome", "told_caller", "end_reason"]] = ["failed", "failure",
                                                           "attempts-exhausted"]
    t.loc[hit, ["ttfc_s", "completion_s"]] = np.nan
    _, r = judge(tmp_path, led)
    assert r.status == "fail" and "sse: success" in r.examples, r.detail


# ------------------------------------------------------------------- calibration


def _frame(rng: np.random.Generator, calls: int, turns: int, shift: dict[str, float]
           ) -> pd.DataFrame:
    """Judged turns of ``calls`` calls per binding: call effects, lognormal latencies,
    success 0.95; ``shift`` multiplies a binding's latencies."""
    n = len(BINDINGS) * calls * turns
    binding = np.repeat(np.array(BINDINGS, dtype=object), calls * turns)
    call = np.repeat(np.arange(len(BINDINGS) * calls), turns)
    eff = rng.normal(0.0, 0.2, len(BINDINGS) * calls)[call]
    factor = np.array([shift.get(b, 1.0) for b in binding])
    lat = np.exp(np.log(0.3) + eff + rng.normal(0, 0.3, n)) * factor
    return pd.DataFrame({"binding": binding, "call_id": call, "ok": rng.random(n) < 0.95,
                         "ttfc_s": lat, "completion_s": lat * 1.5})


def _rejects(frame: pd.DataFrame) -> bool:
    tests, _ = E.metric_comparisons(frame, list(BINDINGS))
    return any(holm([t.p_value for t in tests], E.ALPHA))


def test_false_alarms_at_most_alpha_without_margins(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the margins at 0 the comparisons are plain tests of equality: over 400 runs of
    a correct server their family-wise false-alarm rate is about ALPHA (binomial 99.9 %
    bound), so a pass means what it claims; with the margins it can only be lower."""
    monkeypatch.setattr(E, "SUCCESS_MARGIN", 0.0)
    monkeypatch.setattr(E, "LATENCY_MARGIN", 1.0)
    rng = np.random.default_rng(2026)
    n = 400
    alarms = sum(_rejects(_frame(rng, 15, 4, {})) for _ in range(n))
    assert alarms <= n * E.ALPHA + 3.1 * np.sqrt(n * E.ALPHA * (1 - E.ALPHA)) + 1, alarms
    assert alarms >= 0
    # and the test has power: a binding 1.6x slower is found in (nearly) every run
    hits = sum(_rejects(_frame(rng, 15, 4, {"ws": 1.6})) for _ in range(20))
    assert hits >= 18, hits


def test_a_difference_at_the_margin_alarms_at_most_alpha() -> None:
    """The minimum-effect test: a binding exactly LATENCY_MARGIN slower is not 'beyond the
    margin', so it alarms in at most ALPHA of runs (here: 200 runs)."""
    rng = np.random.default_rng(7)
    n = 200
    alarms = sum(_rejects(_frame(rng, 15, 4, {"rest": E.LATENCY_MARGIN})) for _ in range(n))
    assert alarms <= n * E.ALPHA + 3.1 * np.sqrt(n * E.ALPHA) + 1, alarms


# ------------------------------------------------------------------- the pieces, written out


def test_the_cluster_robust_variance_written_out() -> None:
    """Calls a (values 1, 0), b (1, 1), c (0): ratio 3/5; residuals per call -0.2, 0.8,
    -0.6; variance m/(m-1) x sum(resid^2) / W^2 = 1.5 x 1.04 / 25 = 0.0624."""
    est, var, m = E._cluster_ratio(np.array([1.0, 0.0, 1.0, 1.0, 0.0]), np.ones(5),
                                   np.array(["a", "a", "b", "b", "c"], dtype=object))
    assert (est, m) == (pytest.approx(0.6), 3)
    assert var == pytest.approx(0.0624)


def test_too_few_calls_give_no_confident_difference() -> None:
    """A large difference with a small variance: with MIN_CALLS calls on the smaller side it
    is tested, with one fewer it never is (p = 1)."""
    assert E._min_effect_p(0.5, 0.0001, 0.05, E.MIN_CALLS) < 1e-6
    assert E._min_effect_p(0.5, 0.0001, 0.05, E.MIN_CALLS - 1) == 1.0


def test_latency_is_compared_on_completed_turns_only() -> None:
    """ws fails 30 % of its turns (a success difference) and those failed turns carry 20x
    latencies (a timeout's): the latency comparisons see completed turns only, so ws differs
    in success and not in latency (with the failed turns, ws would read ~2.5x slower)."""
    rng = np.random.default_rng(11)
    frame = _frame(rng, 30, 4, {})
    ws = frame["binding"].eq("ws").to_numpy() & (rng.random(len(frame)) < 0.3)
    frame.loc[ws, "ok"] = False
    frame.loc[ws, ["ttfc_s", "completion_s"]] *= 20.0
    tests, _ = E.metric_comparisons(frame, list(BINDINGS))
    rejected = {(t.binding, t.what) for t, r in zip(tests, holm([t.p_value for t in tests],
                                                                E.ALPHA), strict=True) if r}
    assert ("ws", "success") in rejected
    assert not {w for b, w in rejected if w in ("ttfc", "completion")}, rejected


def test_a_rule_failing_on_every_binding_is_no_difference_even_when_uneven(
        tmp_path: Path) -> None:
    """Duplicates on every binding, 10 on sse and 1 on each other: the bug is everywhere
    (duplicated fails); which binding shows more of it is not a transport difference."""
    led = spread(clean_ledger(600))
    for b, n in (("sse", 10), ("rest", 1), ("grpc", 1), ("ws", 1)):
        duplicate_side_effects(led, b, n)
    v, r = judge(tmp_path, led)
    assert "duplicated" in v.failed and r.status == "pass", r.detail
    assert "(every binding)" in r.detail


def test_barge_in_turns_are_not_judged_for_success(tmp_path: Path) -> None:
    """40 % of sse's turns withdrawn by the caller (cancelled: a barge-in) are not judged,
    as in availability: sse's success equals the others'."""
    led = spread(clean_ledger(800))
    t = led["turns"]
    rng = np.random.default_rng(5)
    hit = t["binding"].eq("sse").to_numpy() & (rng.random(len(t)) < 0.4) \
        & t["outcome"].eq("completed").to_numpy()
    t.loc[hit, "outcome"] = "cancelled"
    t.loc[hit, ["ttfc_s", "completion_s"]] = np.nan
    v, r = judge(tmp_path, led)
    assert r.status == "pass", r.detail
    by = v.stats["by_binding"]
    assert by["sse"]["judged_turns"] < 0.75 * by["rest"]["judged_turns"]
    assert by["sse"]["success"] == pytest.approx(1.0, abs=0.05)


def test_the_comparisons_are_one_family_under_holm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three comparisons at p = 0.003, 0.006, 0.5: the first two below ALPHA = 0.01 alone,
    but Holm over the family rejects 0.003 (<= 0.01 / 3) and stops at 0.006 (> 0.01 / 2)."""
    comps = [E.Comparison("sse", "ttfc", 0.003, "a"), E.Comparison("rest", "ttfc", 0.006, "b"),
             E.Comparison("ws", "ttfc", 0.5, "c")]
    monkeypatch.setattr(E, "metric_comparisons", lambda frame, names: (comps, {}))
    r, _ = E.rule(None, ["sse", "rest", "ws"], {}, {"sse": 10, "rest": 10, "ws": 10},
                  pd.DataFrame())  # type: ignore[arg-type]
    assert r.status == "fail" and r.examples == ("sse: ttfc",), r
