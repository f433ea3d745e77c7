"""The load test's negative controls, as synthetic ledgers, each fail with the right named rule;
``rtalab check`` exit codes and one-line errors; the benchmark's arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rtalab.benchmarks.check import count_lines, format_bench, run_bench
from rtalab.loadtests.check import check_run
from rtalab.loadtests.check.synth import clean_ledger, write_ledger
from rtalab.sim.cli import main

N_TURNS = 300


def _led() -> dict[str, pd.DataFrame]:
    return clean_ledger(N_TURNS, seed=5)


def _execute_again(led: dict[str, pd.DataFrame], guid: str) -> None:
    """The server ran the side effect of ``guid`` a second time."""
    w = led["witness"]
    row = w[w["requestGuid"] == guid].iloc[[0]].assign(id=int(w["id"].max()) + 1)
    led["witness"] = pd.concat([w, row], ignore_index=True)


def _side_effect_resend(led: dict[str, pd.DataFrame]) -> str:
    """The requestGuid of a client-injected resend of a side-effect request."""
    a = led["attempts"]
    return str(a[(a["injected"] == "resend") & a["side_effect"]]["request_guid"].iloc[0])


@pytest.mark.parametrize("control", ["dedup-none", "memory-2-workers", "memory-crash-restart"])
def test_dedup_controls_fail_duplicated(tmp_path: Path, control: str) -> None:
    """dedup none / per-worker memory / memory lost in a crash: a duplicate re-executes."""
    led = _led()
    guid = _side_effect_resend(led)
    if control == "dedup-none":  # a proxy duplicate executed as well as the original
        led["chaos"] = pd.DataFrame({"t": [1.0], "kind": ["duplicate"], "binding": ["sse"],
                                     "request_guid": [guid], "rpc_id": ["r1"], "detail": [""]})
    elif control == "memory-2-workers":  # the resend reached the other worker
        a = led["attempts"]
        a.loc[(a["request_guid"] == guid) & (a["injected"] == "resend"), "server_worker"] = "2"
    _execute_again(led, guid)  # memory-crash-restart: the replay after the restart ran again
    write_ledger(tmp_path, led)
    v = check_run(tmp_path)
    assert v.failed == ["duplicated"]
    assert guid in v.rule("duplicated").examples


@pytest.mark.parametrize("live_reorders", [True, False])
def test_proxy_reordering_fails_only_without_live_reordering(tmp_path: Path,
                                                             live_reorders: bool) -> None:
    """Chunks arrive out of sequenceId order; played in order only if the Live layer reorders."""
    led = _led()
    e = led["events"]
    chunk = e[e["kind"] == "artifact"]
    streams = chunk["attempt_key"].unique()[:10]
    for key in streams:  # the proxy swapped the first two chunks of these streams
        i, j = chunk.index[chunk["attempt_key"] == key][:2]
        e.loc[i, "recv_s"], e.loc[j, "recv_s"] = e.loc[j, "recv_s"], e.loc[i, "recv_s"]
        if not live_reorders:  # played in arrival order
            e.loc[i, "played_index"], e.loc[j, "played_index"] = (e.loc[j, "played_index"],
                                                                  e.loc[i, "played_index"])
    write_ledger(tmp_path, led)
    v = check_run(tmp_path)
    assert v.stats["streams_received_out_of_order"] == len(streams)
    if live_reorders:
        assert v.ok
    else:
        assert v.failed == ["ordering"] and v.rule("ordering").count == len(streams)


def test_retrying_a_non_retryable_code_fails_its_rule_only(tmp_path: Path) -> None:
    """A Live policy overridden to retry ``schema-validation``: the retry is caught."""
    led = _led()
    a = led["attempts"]
    a.loc[a["outcome"] == "failed", "error_code"] = "schema-validation"
    write_ledger(tmp_path, led)
    v = check_run(tmp_path)
    assert v.failed == ["retried-non-retryable"]
    assert v.rule("retried-non-retryable").count == int((a["outcome"] == "failed").sum())


def test_resend_in_a_new_session_is_a_modified_request(tmp_path: Path) -> None:
    """session-not-found, then the turn is sent again in a new session: allowed (errors.md §3)."""
    led = _led()
    a = led["attempts"]
    failed = a.index[a["outcome"] == "failed"]
    a.loc[failed, "error_code"] = "session-not-found"
    a.loc[failed, "decision"] = "not-retryable"
    for i in failed:  # the next attempt of the same turn goes to a new session
        nxt = a.index[(a["call_id"] == a.loc[i, "call_id"]) & (a["turn_index"] == a.loc[
            i, "turn_index"]) & (a["attempt"] == 2)]
        a.loc[nxt, ["context_id", "context_id_learned"]] = "ctx-new-session"
    write_ledger(tmp_path, led)
    v = check_run(tmp_path)
    assert v.rule("retried-non-retryable").status == "pass"
    assert v.rule("duplicate-session").count > 0  # the new session is visible as a hazard


# ------------------------------------------------------------------------------ CLI


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    led = _led()
    clean = write_ledger(tmp_path / "clean", led)
    assert main(["check", str(clean), "--quiet"]) == 0
    assert json.loads((clean / "verdict.json").read_text())["ok"] is True
    led["witness"] = led["witness"].iloc[1:]
    lost = write_ledger(tmp_path / "lost", led)
    assert main(["check", str(lost)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "lost" in out
    assert json.loads((lost / "verdict.json").read_text())["failed"] == ["lost"]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_cli_unusable_input_exits_2_with_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "missing")]) == 2
    assert "no such run folder" in _one_line_error(capsys)
    (tmp_path / "empty").mkdir()
    assert main(["check", str(tmp_path / "empty")]) == 2
    assert "attempts.jsonl" in _one_line_error(capsys)
    run = write_ledger(tmp_path / "bad", _led())
    with (run / "ledger" / "attempts.jsonl").open("a") as f:
        f.write('{"call_id": "c1", "turn_index": \n')
    assert main(["check", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "attempts.jsonl" in err and "line" in err
    (run / "ledger" / "attempts.jsonl").write_text("")
    assert main(["check", str(run)]) == 2
    assert "no attempts recorded" in _one_line_error(capsys)
    (run / "ledger" / "attempts.jsonl").write_text('["not", "an object"]\n')
    assert main(["check", str(run)]) == 2
    assert "not a JSON object" in _one_line_error(capsys)
    assert main(["check"]) == 2
    _one_line_error(capsys)
    assert main(["check", str(run), "--hazard-limit", "lost=1"]) == 2
    _one_line_error(capsys)


def test_cli_bad_events_ledger_exits_2_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The events ledger is parsed while the other rules run: its error still ends the run."""
    run = write_ledger(tmp_path / "bad-events", _led())
    events = run / "ledger" / "events.jsonl"
    n = count_lines(run / "ledger") - sum(
        1 for p in (run / "ledger").glob("*.jsonl") if p != events for _ in p.open("rb"))
    with events.open("a") as f:
        f.write('{"request_guid": "g", "kind": \n')
    assert main(["check", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "events.jsonl" in err and f"line {n + 1} is not valid JSON" in err
    assert not (run / "verdict.json").exists()


def test_bench_arithmetic() -> None:
    r = run_bench(rows=4000, repeat=1)
    assert r["verdict_ok"]
    assert r["rows"] == r["lines"] and abs(r["rows"] - 4000) < 400
    assert r["rows_per_s"] == pytest.approx(r["rows"] / r["seconds"])
    assert r["seconds"] == pytest.approx(r["read_s"] + r["rules_s"])
    assert r["cpu_s"] > 0 and r["rows_per_cpu_s"] == pytest.approx(r["rows"] / r["cpu_s"])
    text = format_bench(r)
    assert f"{r['rows']:,} ledger rows" in text and "rows/s" in text
    assert f"{r['rows_per_cpu_s']:,.0f} rows per CPU-second" in text


def test_count_lines(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n\n{"x": 2}\n')
    (tmp_path / "b.jsonl").write_text('{"x": 3}\n')
    assert count_lines(tmp_path) == 3
