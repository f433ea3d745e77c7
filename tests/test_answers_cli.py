"""``rtalab sim capacity | tune | storm``: end to end on tiny settings, and one-line errors."""

from __future__ import annotations

import csv

import pytest

from rtalab.sim.cli import main

MMC = ["--set", "workload.turns_per_call=1", "workload.side_effect_share=0.0",
       "workload.handoff_share=0.0", "reasoner.errors={}", "live.retry.max_attempts=1",
       "live.timeouts.turn_response_s=0.0", "reasoner.reasoning_time_s=1.0",
       "run.duration_s=300", "run.warmup_s=30"]


def _readable(text: str, *full: str) -> None:
    """Issue 16 §3: every line fits 80 columns and names appear in full (never cut); lines
    naming a file (the run folder) are left out: a path is as long as it is."""
    lines = [line for line in text.splitlines() if "/" not in line]
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "…" not in text
    for name in full:
        assert name in text, (name, text)


def test_sweep_table_is_readable_at_80_columns(tmp_path, capsys):
    rc = main(["sim", "sweep", "baseline", "--set", "run.duration_s=30", "run.warmup_s=5",
               "--grid", "live.timeouts.turn_response_s=1,2", "--replications", "2",
               "--processes", "1", "--out", str(tmp_path / "sw")])
    assert rc == 0
    _readable(capsys.readouterr().out, "live.timeouts.turn_response_s",
              "caller_completion_s.p99 (s)", "success_rate (share)")


def test_capacity_command(tmp_path, capsys):
    out = tmp_path / "cap"
    rc = main(["sim", "capacity", "baseline", *MMC, "--load", "workload.calls_per_s=0.5,1",
               "--knob", "reasoner.workers", "--range", "1:16", "--slo", "p_wait<=0.5",
               "--replications", "2", "--processes", "1", "--out", str(out), "-q"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "smallest reasoner.workers" in text and "full sweep" in text
    _readable(text, "workload.calls_per_s = 0.5", "queue.p_wait (probability)")
    rows = list(csv.DictReader((out / "capacity.csv").open()))
    assert [float(r["load"]) for r in rows] == [0.5, 1.0]
    assert all(int(r["required"]) >= 1 for r in rows)
    assert (out / "capacity.png").stat().st_size > 1000
    assert (out / "answer.txt").read_text().startswith("Scenario 'baseline'")


def test_storm_command(tmp_path, capsys):
    out = tmp_path / "storm"
    rc = main(["sim", "storm", "retry_storm", "--strategies", "exponential,breaker",
               "--replications", "1", "--processes", "1", "--out", str(out), "-q"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "recovered: breaker" in text
    _readable(text, "peak_amplification", "exponential: metastable")
    rows = {r["strategy"]: r for r in csv.DictReader((out / "storm.csv").open())}
    assert rows["exponential"]["verdict"] == "metastable"
    assert (out / "storm.png").exists()


def test_tune_command(tmp_path, capsys):
    space = tmp_path / "space.toml"
    space.write_text('[tune]\n"live.timeouts.turn_response_s" = { low = 1.0, high = 3.0 }\n')
    out = tmp_path / "tune"
    rc = main(["sim", "tune", "baseline", "--set", "run.duration_s=60", "run.warmup_s=10",
               "--minimize", "turn_completion_p99_s", "--constraint", "success_rate>=0.9",
               "--trials", "3", "--space", str(space), "--replications", "2",
               "--top", "1", "--processes", "1", "--out", str(out), "-q"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    # one objective: a convergence plot (a Pareto front needs two)
    assert (out / "study.db").exists() and (out / "convergence.png").exists()
    assert not (out / "pareto.png").exists()
    _readable(captured.out, "live.timeouts.turn_response_s", "caller_completion_s.p99 (s)")
    cands = list(csv.DictReader((out / "candidates.csv").open()))
    assert cands[-1]["candidate"] == "current"


@pytest.mark.parametrize("argv, message", [
    (["capacity", "baseline", "--load", "workload.calls_per_s=1", "--knob", "reasoner.workers",
      "--slo", "nonsense<=3"], "unknown metric"),
    (["capacity", "baseline", "--load", "workload.calls_per_s=1", "--knob", "reasoner.workers",
      "--slo", "success_rate=>3"], "bad SLO"),
    (["capacity", "baseline", "--load", "workload.calls_per_s=1", "--knob", "reasoner.nope",
      "--slo", "success_rate>=0.9"], "reasoner.nope"),
    (["capacity", "baseline", "--load", "workload.calls_per_s=-1", "--knob",
      "reasoner.workers", "--slo", "success_rate>=0.9"], "calls_per_s"),
    (["capacity", "baseline", "--load", "workload.calls_per_s=1", "--knob",
      "reasoner.workers", "--range", "8:2", "--slo", "success_rate>=0.9"], "lo < hi"),
    (["tune", "baseline", "--minimize", "nonsense"], "unknown metric"),
    (["tune", "baseline"], "at least one --minimize"),
    (["storm", "retry_storm", "--strategies", "nope"], "unknown strategy"),
    (["storm", "baseline"], "no trigger"),
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(["sim", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rtalab: ") and message in err and err.count("\n") == 1, err
