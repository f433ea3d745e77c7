"""The balancer's safeguards one by one (issue 31: each planted bug of tests/oneoff/mutate.py's
"balancer" area fails one of these): pure, no processes, no sleeps."""

from __future__ import annotations

import collections

import pytest

from rtalab.loadtests.chaos.balancer import PROBE_S, Balancer, stable_hash

UPS = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]


def test_least_outstanding_breaks_ties_by_turn() -> None:
    """All idle: the next replica after the last pick, not always the first."""
    b = Balancer(UPS, "least_outstanding")
    assert [b.pick() for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_sticky_routing_is_the_same_in_every_process() -> None:
    """Pinned picks: Python's ``hash`` of a str is salted per process, ``stable_hash`` not."""
    assert stable_hash("ctx-0") == 14624507196982200824
    b = Balancer(UPS, "sticky")
    assert [b.pick(f"ctx-{i}") for i in range(12)] == [2, 2, 2, 2, 2, 2, 0, 1, 0, 1, 2, 2]


def test_with_every_replica_out_it_still_tries_them_all() -> None:
    b = Balancer(UPS, "round_robin", health_check_s=0.0)
    for r in range(3):
        b.failed(r)
    assert b.routable == []
    assert collections.Counter(b.pick() for _ in range(6)) == {0: 2, 1: 2, 2: 2}


def test_a_replica_back_in_rotation_stays_there() -> None:
    """healthy() resets the failing clock: the next pick does not take it out again."""
    b = Balancer(UPS, "round_robin", health_check_s=0.0)
    b.failed(1)
    assert b.routable == [0, 2]
    b.healthy(1)
    picks = [b.pick() for _ in range(6)]
    assert b.routable == [0, 1, 2] and picks.count(1) == 2


def test_probes_are_at_least_as_frequent_as_the_health_check() -> None:
    assert Balancer(UPS, health_check_s=0.1).probe_s == 0.1
    assert Balancer(UPS, health_check_s=30.0).probe_s == PROBE_S
    assert Balancer(UPS, health_check_s=0.0).probe_s == PROBE_S


def test_the_snapshot_counts_every_request_routed() -> None:
    b = Balancer(UPS, "round_robin")
    for _ in range(7):
        b.pick()
    assert b.snapshot() == {"routed": [3, 2, 2], "outstanding": [0, 0, 0],
                            "routable": [0, 1, 2]}


def test_a_replica_failing_for_exactly_the_health_check_is_taken_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of rotation once it has failed for ``health_check_s`` (not only after more)."""
    from types import SimpleNamespace

    from rtalab.loadtests.chaos import balancer

    clock = [100.0]
    monkeypatch.setattr(balancer, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    b = Balancer(UPS, "round_robin", health_check_s=2.0)
    b.failed(1)
    clock[0] = 101.5
    b.failed(1)
    assert b.routable == [0, 1, 2]  # failing for 1.5 s: still in
    clock[0] = 102.0
    b.failed(1)
    assert b.routable == [0, 2]
