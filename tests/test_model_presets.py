"""Every preset runs (short), gives a sane JSON summary, and shows what it is meant to show."""

from __future__ import annotations

import json

import pytest

from rtalab.sim.runner import run_replications
from rtalab.sim.scenario import load_scenario, preset_names
from rtalab.sim.shared.summary import metric, summarize

SHORT = {"run.duration_s": 240.0, "run.warmup_s": 30.0, "run.drain_s": 60.0,
         "run.replications": 2}


@pytest.fixture(scope="module", params=preset_names())
def preset_summary(request: pytest.FixtureRequest) -> tuple[str, dict]:
    """(preset name, summary of 2 short replications)."""
    sc = load_scenario(request.param, SHORT)
    outs = run_replications(sc)
    assert [o.replication for o in outs] == [0, 1]
    return request.param, summarize(outs, sc.run.warmup_s)


def test_preset_summary_is_plain_json(preset_summary: tuple[str, dict]) -> None:
    _, s = preset_summary
    text = json.dumps(s, allow_nan=False)
    assert json.loads(text) == s
    assert s["replications"] == 2
    for name, m in s["metrics"].items():
        assert set(m) == {"mean", "ci_low", "ci_high", "values"}, name
        assert len(m["values"]) == 2


def test_preset_basic_sanity(preset_summary: tuple[str, dict]) -> None:
    name, s = preset_summary
    assert metric(s, "turns")["mean"] > 500
    assert 0.0 <= metric(s, "success_rate")["mean"] <= 1.0
    assert metric(s, "attempts_per_turn")["mean"] >= 1.0
    shares = sum(metric(s, k)["mean"] for k in
                 ("success_rate", "failed_share", "abandoned_share", "unfinished_share",
                  "cancelled_share"))
    assert shares == pytest.approx(1.0)
    if name == "baseline":
        assert metric(s, "success_rate")["mean"] > 0.98
        # executions per offered turn: 1, +1 for the 5 % of handoff turns (two phases)
        assert metric(s, "load_amplification")["mean"] < 1.08
        assert metric(s, "hazard.duplicate_request_executions_per_1k_turns")["mean"] == 0.0
        assert 0.4 < metric(s, "worker_utilisation")["mean"] < 0.85
    if name == "lossy_network":
        assert metric(s, "hazard.duplicate_request_executions_per_1k_turns")["mean"] == 0.0
        assert metric(s, "hazard.reexecuted_turns_per_1k_turns")["mean"] > 0.0
        assert metric(s, "retries_per_turn")["mean"] > 0.02
    if name == "retry_storm":
        assert metric(s, "load_amplification")["mean"] > 1.5  # retries amplify the load
        assert metric(s, "server_rejections_per_turn")["mean"] > 0.5
