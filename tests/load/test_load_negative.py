"""Negative controls of issue 10: each broken deployment or Live user fails the right rule.

They need both halves of the load test: these Live users and the checker
(``rtalab.loadtests.check``) / chaos proxy (``rtalab.loadtests.chaos``) of the "chaos" branch;
without them the tests are skipped (they run once both are merged).  The
unsafe-retry control is in test_load_faults.py.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.load.conftest import load_run

HAVE_CHECK = importlib.util.find_spec("rtalab.loadtests.check") is not None
HAVE_CHAOS = importlib.util.find_spec("rtalab.loadtests.chaos") is not None
needs_check = pytest.mark.skipif(not HAVE_CHECK,
                                 reason="needs rtalab.loadtests.check (chaos branch)")

DUPS = """
name = "negative"
[workload]
calls_per_s = 4.0
turns_per_call = 3
think_time_s = 0.1
side_effect_share = 0.8
handoff_share = 0.0
[reasoner]
reasoning_time_s = 0.05
chunks = 3
chunk_interval_s = 0.02
tool_latency_s = 0.02
[load]
resend_share = 0.3
concurrent_duplicate_share = 0.5
[run]
duration_s = 3
warmup_s = 0.5
drain_s = 10
seed = 11
"""


def _rule(read_json, run, name):
    rules = {r["name"]: r for r in read_json(run / "verdict.json")["rules"]}
    return rules[name]


@needs_check
def test_dedup_none_duplicates_side_effects(tmp_path, read_json):
    p, run = load_run(tmp_path, "--dedup-mode", "none", scenario=DUPS)
    assert p.returncode == 1, p.stderr
    r = _rule(read_json, run, "duplicated")
    assert r["status"] == "fail" and r["count"] > 0


@needs_check
def test_memory_dedup_with_two_workers_duplicates(tmp_path, read_json):
    p, run = load_run(tmp_path, "--dedup", "memory", "--workers", "2", scenario=DUPS.replace(
        "concurrent_duplicate_share = 0.5", "concurrent_duplicate_share = 1.0"))
    assert p.returncode == 1, p.stderr
    r = _rule(read_json, run, "duplicated")
    assert r["status"] == "fail" and r["count"] > 0


CRASH = """
name = "negative-crash"
[workload]
calls_per_s = 6.0
turns_per_call = 2
think_time_s = 0.1
side_effect_share = 1.0
[reasoner]
reasoning_time_s = 0.02
chunks = 2
chunk_interval_s = 0.02
tool_latency_s = 0.01
[load]
resend_share = 1.0
resend_delay_s = 8.0
[run]
duration_s = 2.5
warmup_s = 0.5
drain_s = 20
seed = 13
"""


@needs_check
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_crash_restart_memory_dedup_reexecutes_sqlite_does_not(tmp_path, read_json, store):
    args = ["--crash-at", "2.4"] + (["--dedup", "memory"] if store == "memory" else [])
    p, run = load_run(tmp_path, *args, scenario=CRASH)
    r = _rule(read_json, run, "duplicated")
    if store == "memory":  # retries with the same requestGuid reach an empty store
        assert p.returncode == 1 and r["status"] == "fail" and r["count"] > 0
    else:  # the durable store remembers: the same copies are replays
        assert r["status"] == "pass", p.stderr


REORDER = DUPS.replace("[load]", "[network.downlink]\nreorder = 0.6\n[load]")


@needs_check
@pytest.mark.skipif(not HAVE_CHAOS, reason="needs rtalab.loadtests.chaos (chaos branch)")
def test_proxy_reordering_without_the_live_reorder_buffer_fails_ordering(tmp_path, read_json):
    """With the buffer on, the same proxy reordering passes: the positive control
    (test_load_faults.py) runs with downlink reordering and the checker's ordering rule."""
    p, run = load_run(tmp_path, "--chaos", "--binding", "both", "--no-reorder",
                      scenario=REORDER)
    r = _rule(read_json, run, "ordering")
    assert r["status"] == "fail" and r["count"] > 0 and p.returncode == 1
