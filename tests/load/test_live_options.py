"""Options as data: one typed object from ``rtalab load run``'s command line to the Live users.

The Live users' options default to the scenario's ``[live]`` keys (the simulator's and the
load run's Live layers cannot drift apart), the test-only switches sit in their own
sub-object (and every flag of the "test-only switches" group lands there), and
``ledger/settings.json`` reads back as the very object that was written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from rtalab.loadtests.live.config import SCENARIO_KEYS, LiveOptions, LoadSettings, TestSwitches
from rtalab.loadtests.loadrun.cli import add_run_arguments, run_options
from rtalab.sim.policy.config import LivePolicyConfig
from rtalab.sim.scenario import load_scenario

# the Live options with no [live] key, and why
LOAD_SIDE = {
    "ext_uri": "the wire's extension URI (the simulator has no wire)",
    "hard_timeout_s": "a safety net of the real client (a simulated attempt always ends)",
    "test": "the test-only switches",
}
TEST_GROUP = "test-only switches (negative controls and conformance)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    return p


def test_every_live_option_is_a_live_key_with_its_default_or_says_why_not() -> None:
    names = {f.name for f in dataclasses.fields(LiveOptions)}
    assert names == set(SCENARIO_KEYS) | set(LOAD_SIDE), "classify the new Live option"
    live, opts = LivePolicyConfig(), LiveOptions()
    for opt, key in SCENARIO_KEYS.items():
        assert getattr(opts, opt) == getattr(live, key), f"LiveOptions.{opt} != live.{key}"


def test_the_live_options_of_a_run_come_from_its_scenario() -> None:
    sc = load_scenario("baseline", ["live.reorder_gap_s=0.8"])
    opts = run_options(_parser().parse_args(["baseline"]), sc)
    assert opts.live == LiveOptions(hold_s=0.8)
    assert opts.live.reorder and opts.test == TestSwitches()


def test_every_test_only_flag_lands_in_the_test_switches_and_nowhere_else() -> None:
    p = _parser()
    group = next(g for g in p._action_groups if g.title == TEST_GROUP)
    dests = {a.dest for a in group._group_actions}
    sc = load_scenario("baseline")
    plain = run_options(p.parse_args(["baseline"]), sc)
    argv = ["baseline", "--no-reorder", "--unsafe-test-retry-code", "schema-validation",
            "--test-force-error", "upstream-timeout", "--unsafe-bug", "volatile"]
    args = p.parse_args(argv)
    assert {d for d in dests if getattr(args, d) != p.get_default(d)} == dests  # all set
    opts = run_options(args, sc)
    assert opts.test == TestSwitches(no_reorder=True,
                                     unsafe_test_retry_codes=("schema-validation",),
                                     force_error_codes=("upstream-timeout",),
                                     unsafe_bugs=("volatile",))
    assert not opts.live.reorder
    # nothing but the switches differs from the run without them
    assert dataclasses.replace(opts, live=plain.live, argv=plain.argv) == plain


@pytest.mark.parametrize("test", [TestSwitches(), TestSwitches(
    no_reorder=True, unsafe_test_retry_codes=("schema-validation", "auth"),
    force_error_codes=("upstream-timeout",), unsafe_bugs=("turn-key",))])
def test_settings_json_reads_back_as_the_object_written(tmp_path: Path,
                                                        test: TestSwitches) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text("", encoding="utf-8")
    s = LoadSettings(run_dir=str(tmp_path), run_id="r1", scenario_path=str(scenario),
                     binding="sse,ws", duration_s=5.0, drain_s=2.0, processes=2, seed=7,
                     token="t", tokens=("t", "t2"), grpc_target="127.0.0.1:1",
                     live=LiveOptions(hold_s=0.3, hard_timeout_s=9.0, test=test))
    s.write(tmp_path / "settings.json")
    back = LoadSettings.read(tmp_path / "settings.json")
    assert back == s and type(back.live.test) is TestSwitches
    assert type(back.tokens) is tuple and type(back.live.test.unsafe_bugs) is tuple
    worker = tmp_path / "worker"
    remote = LoadSettings.from_remote(s.for_remote_workers(), worker)
    assert remote == dataclasses.replace(s, run_dir=str(worker),
                                         scenario_path=str(worker / "scenario.toml"))


def test_a_settings_json_of_the_earlier_flat_layout_still_reads(tmp_path: Path) -> None:
    old = {"run_dir": ".", "run_id": "r", "scenario_path": "s.toml", "binding": "sse",
           "duration_s": 5.0, "drain_s": 1.0, "processes": 1, "seed": 3,
           "ext_uri": "urn:x", "token": None, "tokens": [], "reorder": False, "hold_s": 0.25,
           "unsafe_test_retry_codes": ["auth"], "force_error_codes": [],
           "hard_timeout_s": 60.0, "grpc_target": "", "grpc_secure": False}
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    s = LoadSettings.read(path)
    assert s.live == LiveOptions(ext_uri="urn:x", hold_s=0.25, hard_timeout_s=60.0,
                                 test=TestSwitches(no_reorder=True,
                                                   unsafe_test_retry_codes=("auth",)))
    assert (s.seed, s.duration_s, s.tokens) == (3, 5.0, ())


def test_a_remote_worker_writes_the_settings_it_was_sent(tmp_path: Path) -> None:
    """The worker's locustfile reads ``<its run dir>/ledger/settings.json``: it must be
    there, and be what the master sent (with the worker's own folder)."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text("", encoding="utf-8")
    s = LoadSettings(run_dir=str(tmp_path), run_id="r2", scenario_path=str(scenario),
                     live=LiveOptions(hold_s=0.4))
    worker = tmp_path / "worker"
    remote = LoadSettings.from_remote(s.for_remote_workers(), worker)
    assert LoadSettings.read(worker / "ledger" / "settings.json") == remote


def test_remote_workers_are_the_runs_processes_and_the_first_token_its_own() -> None:
    """``--workers-expected N``: the run has N Locust processes (the users are split over
    them); several ``--token``: calls alternate, the first is the run's own ``token``."""
    sc = load_scenario("baseline")
    opts = run_options(_parser().parse_args(
        ["baseline", "--workers-expected", "3", "--token", "first", "--token", "second"]), sc)
    assert opts.processes == 3 and opts.master_bind is not None
    assert opts.token == "first" and opts.tokens == ("first", "second")
    assert run_options(_parser().parse_args(["baseline", "--processes", "2"]), sc).processes == 2
