"""Issue 25 point 7b: the Live users' concurrent copies can reach the server first.

With ``load.concurrent_first_share = 1`` every concurrent copy is sent before its
original (the original waits until the copy's request is out: SSE, the copy's
answer has started; WebSocket, its frame is on the socket), on both bindings, and
coverage counts ``duplicate-before-original``; the correct Reasoner still passes
(the original joins or replays the copy). The must-not: share 0, nothing counted.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.load.conftest import jsonl, load_run

ARGS = ["--binding", "both", "--duration", "3", "--set", "load.concurrent_duplicate_share=1.0",
        "--set", "workload.side_effect_share=1.0", "--set", "workload.handoff_share=0.0"]


def test_concurrent_copies_sent_first_are_counted_before_their_original(tmp_path: Path,
                                                                        read_json) -> None:
    variants = {"first": ["--set", "load.concurrent_first_share=1.0"],
                "after": ["--set", "load.concurrent_first_share=0.0"]}
    for name in variants:
        (tmp_path / name).mkdir()
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(load_run, tmp_path / name, *ARGS, *extra)
                   for name, extra in variants.items()}
        done = {name: f.result() for name, f in futures.items()}
    for name, (p, run) in done.items():
        assert p.returncode == 0, (name, p.stderr)
        verdict = read_json(run / "verdict.json")
        assert verdict["ok"], (name, verdict["failed"])
        cover = {c["name"]: c for c in verdict["coverage"]}
        before = cover["duplicate-before-original"]
        attempts = jsonl(run / "ledger" / "attempts.jsonl")
        originals = {a["request_guid"]: a for a in attempts if not a["injected"]}
        copies = [a for a in attempts if a["injected"] == "concurrent"
                  and a["request_guid"] in originals]
        assert copies, name
        first = [c for c in copies if c["send_s"] < originals[c["request_guid"]]["send_s"]]
        if name == "first":
            assert len(first) == len(copies)  # every copy went out first
            assert {c["binding"] for c in first} == {"sse", "ws"}
            assert before["status"] == "exercised" and before["count"] > 0, before
        else:
            assert first == []
            assert before["status"] == "not exercised", before
