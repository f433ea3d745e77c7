"""The chaos proxy's uplink decisions: independent draws per fault, only message-sending
requests duplicated, copy-first only among duplicates, outages on the right direction.
10,000 seeded requests per case; the bands are >= 4.5 binomial sd wide."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rtalab.loadtests.chaos.config import ChaosConfig, rng_for, uplink_faults
from rtalab.sim.dist import Const
from rtalab.sim.scenario import LinkConfig, OutageConfig

N = 10_000


def _draws(link: LinkConfig, duplicable: bool = True, first: float = 0.0) -> list:
    return [uplink_faults(link, rng_for(3, f"r{i}"), duplicable, first) for i in range(N)]


def test_loss_reorder_and_duplication_are_independent() -> None:
    link = replace(LinkConfig(), loss=0.5, reorder=0.5, duplication=0.5,
                   reorder_delay_s=Const(1.0))
    d = _draws(link)
    lost = np.array([f.lost for f in d])
    held = np.array([f.delay_s >= 1.0 for f in d])
    dup = np.array([f.duplicate for f in d])
    for x in (lost, held, dup):
        assert abs(x.mean() - 0.5) < 0.02
    # independent: each pair together a quarter of the time (the same draw would give 1/2)
    for a, b in ((lost, held), (lost, dup), (held, dup)):
        assert abs((a & b).mean() - 0.25) < 0.02


def test_only_message_sending_requests_are_duplicated() -> None:
    link = replace(LinkConfig(), duplication=1.0)
    assert not any(f.duplicate for f in _draws(link, duplicable=False))
    assert all(f.duplicate for f in _draws(link, duplicable=True)[:100])


def test_copy_first_is_a_share_of_the_duplicates_only() -> None:
    link = replace(LinkConfig(), duplication=0.4)
    d = _draws(link, first=0.5)
    dup = np.array([f.duplicate for f in d])
    first = np.array([f.duplicate_first for f in d])
    assert not (first & ~dup).any()
    assert abs(first[dup].mean() - 0.5) < 0.04
    assert not any(f.duplicate_first for f in _draws(link, first=0.0))


def test_an_outage_on_both_directions_covers_each() -> None:
    cfg = ChaosConfig(extra_outages=(OutageConfig(start_s=5, duration_s=2, direction="both"),))
    assert cfg.outage_at(6, "uplink") is not None and cfg.outage_at(6, "downlink") is not None
    assert cfg.outage_at(5, "uplink") is not None and cfg.outage_at(7, "uplink") is None
    one = ChaosConfig(extra_outages=(OutageConfig(start_s=5, duration_s=2,
                                                  direction="downlink"),))
    assert one.outage_at(6, "uplink") is None and one.outage_at(6, "downlink") is not None


def test_delays_add_up_and_never_go_negative() -> None:
    """A reordered request waits its latency *plus* the reorder delay (0.2 + 1.0 s); a
    duplicate's copy waits the duplicate delay (0.7 s); a law with values below 0 (an
    empirical one measured with clock skew) gives delays clipped at 0, never negative."""
    from rtalab.sim.dist import Empirical, Uniform

    link = replace(LinkConfig(), latency_s=Const(0.2), reorder=1.0, reorder_delay_s=Const(1.0),
                   duplication=1.0, duplicate_delay_s=Const(0.7))
    d = _draws(link)[:200]
    assert {round(f.delay_s, 9) for f in d} == {1.2}
    assert {f.duplicate_delay_s for f in d} == {0.7}
    skewed = replace(LinkConfig(), latency_s=Empirical((-0.05, 0.01)),
                     reorder=0.0, duplication=1.0, duplicate_delay_s=Uniform(-1.0, 1.0))
    d = _draws(skewed)[:400]
    assert min(f.delay_s for f in d) == 0.0 and max(f.delay_s for f in d) == 0.01
    assert min(f.duplicate_delay_s for f in d) == 0.0
