"""``transport-equivalence`` on real runs: ``--binding all`` against the embedded Reasoner
passes on several seeds (client copies and proxy duplicates on every binding), and a
Reasoner that skips dedup on one binding only
(``--unsafe-bug rest-skips-dedup``) fails it, naming that binding (real servers on
127.0.0.1, short runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtalab.loadtests.live.bindings import parse_bindings

from .conftest import FAST, jsonl
from .parallel import load_runs

COPIES = FAST.replace("side_effect_share = 0.5", "side_effect_share = 0.8").replace(
    "duration_s = 4", "duration_s = 7") + """
[load]
concurrent_duplicate_share = 0.5
resend_share = 0.3
resend_delay_s = 0.3
[network.uplink]
duplication = 0.1
duplicate_delay_s = 0.05
"""


def _rule(read_json, run: Path) -> dict:
    verdict = read_json(run / "verdict.json")
    return {r["name"]: r for r in verdict["rules"]}["transport-equivalence"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """The module's three runs at once: the correct server on two seeds, and the Reasoner
    that skips dedup on REST only."""
    every = ("--binding", "all", "--chaos")
    return load_runs(tmp_path_factory.mktemp("equivalence"), {
        "seed-3": (*every, "--set", "run.seed=3"), "seed-4": (*every, "--set", "run.seed=4"),
        "rest-bug": (*every, "--unsafe-bug", "rest-skips-dedup")},
        scenarios=dict.fromkeys(("seed-3", "seed-4", "rest-bug"), COPIES))


@pytest.mark.parametrize("seed", [3, 4])
def test_all_bindings_pass_against_the_correct_server(runs, read_json, seed: int) -> None:
    p, run = runs[f"seed-{seed}"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    used = {a["binding"] for a in jsonl(run / "ledger" / "attempts.jsonl")}
    assert used == set(parse_bindings("all")) and len(used) >= 3
    rule = _rule(read_json, run)
    assert rule["status"] == "pass", rule
    by = read_json(run / "verdict.json")["stats"]["by_binding"]
    assert set(by) == used and all(by[b]["turns"] > 0 for b in used)
    # the summary, split by binding: each binding's calls summarised alike
    split = read_json(run / "summary_by_binding.json")
    whole = read_json(run / "summary.json")["metrics"]
    assert set(split) == used
    assert sum(s["metrics"]["calls"]["mean"] for s in split.values()) == whole["calls"]["mean"]
    assert all(s["metrics"]["success_rate"]["mean"] is not None for s in split.values())


def test_dedup_skipped_on_rest_only_fails_naming_rest(runs, read_json) -> None:
    p, run = runs["rest-bug"]
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    rule = _rule(read_json, run)
    assert rule["status"] == "fail", rule
    assert {e.split(":")[0] for e in rule["examples"]} == {"rest"}, rule
    assert "binding(s) rest differ" in rule["detail"]
    by = read_json(run / "verdict.json")["stats"]["by_binding"]
    assert "duplicated" in by["rest"]["failed_rules"]
    assert all("duplicated" not in by[b]["failed_rules"] for b in by if b != "rest")
