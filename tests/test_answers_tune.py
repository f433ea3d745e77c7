"""Tuning (issue 9, acceptance 2): TPE with <= 30 % of an exhaustive grid's budget."""

from __future__ import annotations

import math

import pytest

from rtalab.sim.answers.slo import parse_slo
from rtalab.sim.answers.tune import (
    SpaceError,
    default_space,
    objective,
    parse_space,
    read_space,
    trial_overrides,
    tune,
    validate_space,
)
from rtalab.sim.config import ConfigError
from rtalab.sim.scenario import Scenario, load_scenario
from rtalab.sim.sweep import expand_grid, make_executor, run_points

# One-turn calls over an uplink losing 10 % of requests, no progress directive: a short
# turn-response timeout retries lost requests sooner but also times out slow reasoning
# (spurious retries); the backoff base delays every retry.  p95 completion is U-shaped
# in the timeout, so the optimum is inside the grid.
SC = Scenario(name="lossy_one_turn").with_overrides({
    "workload.calls_per_s": 2.0, "workload.turns_per_call": 1,
    "workload.side_effect_share": 0.0, "workload.handoff_share": 0.0,
    "reasoner.reasoning_time_s": {"dist": "exp", "mean": 0.5}, "reasoner.workers": 4,
    "reasoner.progress_directive": False, "network.uplink.loss": 0.1,
    "live.retry.max_attempts": 4, "live.backoff.cap_s": 2.0,
    "run.duration_s": 200.0, "run.warmup_s": 20.0, "run.drain_s": 60.0,
})
TIMEOUTS = [0.75, 1.0, 1.25, 1.5, 2.0, 2.5]
BASES = [0.01, 0.03, 0.1, 0.3, 0.6, 1.0]
SPACE = {"tune": {"live.timeouts.turn_response_s": {"choices": TIMEOUTS},
                  "live.backoff.base_s": {"choices": BASES}}}
REPS = 3
OBJ = "completion_s.p95"
CONSTRAINT = "success_rate>=0.99"


@pytest.fixture(scope="module")
def ex():
    with make_executor(2) as executor:
        yield executor


@pytest.fixture(scope="module")
def exhaustive(ex):
    grid = expand_grid({"live.timeouts.turn_response_s": TIMEOUTS,
                        "live.backoff.base_s": BASES})
    summaries = run_points(SC, grid, replications=REPS, root_seed=7, executor=ex,
                           progress=False, plots=False)
    return grid, summaries


def _key(point):
    return (point["live.timeouts.turn_response_s"], point["live.backoff.base_s"])


@pytest.mark.parametrize("root_seed", [7, 8])
def test_tune_finds_what_exhaustive_search_finds(tmp_path, ex, exhaustive, root_seed):
    grid, summaries = exhaustive
    con = parse_slo(CONSTRAINT)
    table = {_key(p): s["metrics"] for p, s in zip(grid, summaries, strict=True)}
    feasible = {k: m for k, m in table.items()
                if con.violation(m[con.metric]["mean"]) <= 0 and m[OBJ]["mean"] is not None}
    best_key = min(feasible, key=lambda k: feasible[k][OBJ]["mean"])
    best = feasible[best_key][OBJ]

    trials = 10  # 10 x 3 replications = 30 runs vs 36 x 3 = 108 exhaustive (28 %)
    space = parse_space(SPACE["tune"])
    res = tune(SC, tmp_path / "t", objectives=[objective(OBJ)], constraints=[con],
               space=space, trials=trials, replications=REPS, root_seed=root_seed,
               executor=ex, batch=2, top=3)
    search_runs = res.evaluations * REPS
    print(f"tune: {search_runs} search runs vs exhaustive {len(grid) * REPS} "
          f"({search_runs / (len(grid) * REPS):.0%}); best {best_key} "
          f"{best['mean']:.3f} [{best['ci_low']:.3f}, {best['ci_high']:.3f}]")
    assert search_runs <= 0.30 * len(grid) * REPS
    if not res.recommended:
        # completed-only p95 rewards failing slow turns: every candidate that cuts it
        # lowers success significantly, or is not significantly better (issue 16)
        c = res.candidates[res.candidates["candidate"] != "current"]
        assert (c["success_lower"] | ~c["significantly_better"]
                | ~c["constraints_hold"]).all(), res.candidates.to_string()
        assert res.sentence().startswith("Keep the current settings")
        return
    rec = trial_overrides(res.space, res.recommended[0])
    got = table[_key(rec)]
    print(f"tune returned {_key(rec)}: exhaustive-table {OBJ} {got[OBJ]['mean']:.3f}")
    # the point tune returns is within the CI of the exhaustive best (same seeds: the
    # exhaustive table's own value for that point) and feasible there too
    assert got[OBJ]["mean"] <= best["ci_high"]
    assert con.violation(got[con.metric]["mean"]) <= 0
    # its constraint holds with confidence on the confirmation's fresh seeds ...
    row = res.candidates[res.candidates["recommended"]].iloc[0]
    assert row["constraints_hold"] and row[f"{con.metric}.ci_low"] >= con.target
    # ... and again on another fresh seed set
    [again] = run_points(SC, [rec], replications=REPS, root_seed=root_seed + 99,
                         executor=ex, progress=False, plots=False)
    assert con.violation(again["metrics"][con.metric]["mean"]) <= 0
    # today's settings are in the table, with the change against them
    cur = res.candidates[res.candidates["candidate"] == "current"].iloc[0]
    assert math.isclose(row[f"{OBJ}.change"], row[OBJ] - cur[OBJ])
    assert "Recommended:" in res.sentence()


def test_study_is_stored_and_resumed(tmp_path, ex):
    space = parse_space(SPACE["tune"])
    sc = SC.with_overrides({"run.duration_s": 60.0})
    kw = dict(objectives=[objective(OBJ)], constraints=[], space=space, replications=2,
              root_seed=3, batch=2, top=1, executor=ex)
    first = tune(sc, tmp_path, trials=4, **kw)
    assert first.evaluations == 4 and (tmp_path / "study.db").exists()
    again = tune(sc, tmp_path, trials=6, **kw)  # resumes: only the 2 missing trials run
    assert again.evaluations == 2 and len(again.trials) == 6
    import optuna

    study = optuna.load_study(study_name="tune-lossy_one_turn",
                              storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len(study.trials) == 6
    # same seed, fresh folder: same trials, bit for bit
    rerun = tune(sc, tmp_path / "b", trials=6, **kw)
    assert rerun.trials[["trial", OBJ]].equals(again.trials[["trial", OBJ]])


def test_multi_objective_pareto(tmp_path, ex):
    space = parse_space(SPACE["tune"])
    sc = SC.with_overrides({"run.duration_s": 60.0})
    res = tune(sc, tmp_path, objectives=[objective(OBJ), objective("load_amplification")],
               space=space, trials=6, replications=2, root_seed=1, top=3, executor=ex)
    from rtalab.sim.answers.tune import plot_pareto

    assert plot_pareto(res, tmp_path / "pareto.png").stat().st_size > 1000
    rec = res.candidates[res.candidates["recommended"]]
    # no recommended candidate is beaten on both objectives by another recommended one
    for i, a in rec.iterrows():
        for j, b in rec.iterrows():
            if i != j:
                assert not (b[OBJ] < a[OBJ] and b["load_amplification"] < a["load_amplification"])


def test_space_validation(tmp_path):
    with pytest.raises(SpaceError, match="low < high"):
        parse_space({"live.timeouts.turn_response_s": {"low": 3, "high": 1}})
    with pytest.raises(SpaceError, match="give low and high"):
        parse_space({"live.timeouts.turn_response_s": {"low": 1}})
    with pytest.raises(ConfigError):  # the upper end is out of the key's range
        validate_space(SC, parse_space({"network.uplink.loss": {"low": 0.0, "high": 2.0}}))
    with pytest.raises(ConfigError, match="unknown key"):
        validate_space(SC, parse_space({"live.no_such": {"choices": [1, 2]}}))
    _, skipped = validate_space(SC, parse_space({"live.no_such": {"choices": [1, 2]},
                                                 "live.retry.max_attempts": {"low": 1,
                                                                             "high": 3}}),
                                skip_unknown=True)
    assert list(skipped) == ["live.no_such"]
    # the default space applies in full to a shipped preset (all its keys exist)
    space, skipped = default_space(load_scenario("baseline"))
    assert not skipped and {"budget", "live.cancel_on_timeout"} <= set(space)
    f = tmp_path / "space.toml"
    f.write_text('[tune]\n"live.backoff.base_s" = { low = 0.01, high = 1.0, log = true }\n')
    assert read_space(f)["live.backoff.base_s"].log


def test_indistinguishable_ranges_overlap_across_sampler_seeds(tmp_path, ex):
    """Two studies with different sampler seeds (same scenario) give, for each knob, ranges
    of values indistinguishable from their best that overlap; a range that were only the
    best trial's value would not (the two seeds' best values differ)."""
    space = parse_space({"live.timeouts.turn_response_s": {"low": 0.6, "high": 3.0},
                         "live.backoff.base_s": {"low": 0.01, "high": 1.0, "log": True}})
    sc = SC.with_overrides({"run.duration_s": 80.0})
    ranges = []
    for seed in (11, 12):
        res = tune(sc, tmp_path / str(seed), objectives=[objective("turn_completion_p95_s")],
                   space=space, trials=8, replications=2, root_seed=seed, executor=ex,
                   batch=4, top=1, confirm_replications=3)
        assert set(res.ranges) == set(space)
        ranges.append(res.ranges)
        lines = res.range_lines()
        assert len(lines) == 2 and all(" to " in line for line in lines)
    for k in space:
        (lo1, hi1), (lo2, hi2) = ranges[0][k], ranges[1][k]
        assert lo1 <= hi1 and lo2 <= hi2
        assert max(lo1, lo2) <= min(hi1, hi2), (k, ranges)


def test_keep_current_settings_when_nothing_is_significantly_better(tmp_path, ex):
    """A space whose only alternative is today's setting's twin (turn_response_s 2.0 vs
    2.0000001): nothing can be significantly better, so the answer is to keep."""
    space = parse_space({"live.timeouts.turn_response_s": {"choices": [2.0, 2.0000001]}})
    sc = SC.with_overrides({"run.duration_s": 60.0})
    res = tune(sc, tmp_path, objectives=[objective("turn_completion_p95_s")], space=space,
               trials=2, replications=2, root_seed=5, executor=ex, batch=2, top=2,
               confirm_replications=3)
    assert not res.recommended
    assert res.sentence().startswith("Keep the current settings")
    assert not res.candidates["significantly_better"].any()
