"""Random streams of one replication: one numpy Generator per random quantity, drawn in blocks.

Replication ``i`` of seed ``s`` starts from ``SeedSequence(s).spawn(i + 1)[i]``
(the same child ``SeedSequence(s).spawn(R)[i]`` gives for any ``R > i``); each
named quantity below gets its own child of that, so switching one knob on or off
(e.g. uplink loss) never shifts the draws of another (e.g. reasoning times).
New names must be appended to :data:`STREAMS`, never inserted, to keep old
results reproducible.

Scalar numpy draws cost ~0.3-0.5 µs each; a block of 1,024 turned into a Python
list and consumed through ``itertools.chain`` costs ~25 ns per draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import chain

import numpy as np

from rtalab.sim.dist import Const, Dist, Empirical, Exp, Gamma, LogNormal, Uniform

BLOCK = 1024

STREAMS: tuple[str, ...] = (
    "arrivals", "turns_per_call", "think_time", "side_effect", "handoff", "caller_response",
    "reasoning", "errors", "tool", "first_chunk",
    "uplink.latency", "uplink.loss", "uplink.duplication", "uplink.duplicate_delay",
    "uplink.reorder", "uplink.reorder_delay",
    "downlink.latency", "downlink.loss", "downlink.duplication", "downlink.duplicate_delay",
    "downlink.reorder", "downlink.reorder_delay",
    "policy",
    # extension negotiation at the start of a call (upgrade request up, A2A-Extensions echo down)
    "negotiation.uplink.latency", "negotiation.uplink.loss", "negotiation.uplink.duplication",
    "negotiation.uplink.duplicate_delay", "negotiation.uplink.reorder",
    "negotiation.uplink.reorder_delay",
    "negotiation.downlink.latency", "negotiation.downlink.loss",
    "negotiation.downlink.duplication", "negotiation.downlink.duplicate_delay",
    "negotiation.downlink.reorder", "negotiation.downlink.reorder_delay",
    # barge-in: which turns the caller interrupts, and when
    "barge_in", "barge_in_after",
    # a fleet's load balancer (appended last: the streams above stay what they were)
    "balancer",
    # a 'loss' outage's own draws (appended: the streams above stay what they were)
    "uplink.outage_loss", "downlink.outage_loss", "negotiation.uplink.outage_loss",
    "negotiation.downlink.outage_loss",
)

Draw = Callable[[], float]


def replication_seed(seed: int, replication: int) -> np.random.SeedSequence:
    """The SeedSequence of replication ``replication`` of a run seeded with ``seed``."""
    return np.random.SeedSequence(seed).spawn(replication + 1)[replication]


class Streams:
    """Named, independent Generators of one replication."""

    def __init__(self, seed: int, replication: int) -> None:
        children = replication_seed(seed, replication).spawn(len(STREAMS))
        self._rngs = {name: np.random.Generator(np.random.PCG64(ss))
                      for name, ss in zip(STREAMS, children, strict=True)}

    def rng(self, name: str) -> np.random.Generator:
        """The Generator of stream ``name``."""
        return self._rngs[name]

    def uniform(self, name: str) -> Draw:
        """Fast U[0, 1) draws from stream ``name``."""
        rng = self._rngs[name]
        return _blocks(lambda: rng.random(BLOCK).tolist())

    def sampler(self, name: str, dist: Dist) -> Draw:
        """Fast draws of ``dist`` from stream ``name``."""
        return sampler(dist, self._rngs[name])


def _blocks(fill: Callable[[], list[float]]) -> Draw:
    """An endless draw function refilled ``BLOCK`` values at a time by ``fill``."""
    return chain.from_iterable(iter(fill, None)).__next__


def sampler(dist: Dist, rng: np.random.Generator) -> Draw:
    """A zero-argument function drawing from ``dist`` (same law as ``dist.sample``)."""
    if isinstance(dist, Const):
        v = float(dist.value)
        return lambda: v
    if isinstance(dist, Exp):
        if dist.mean_ <= 0:
            return lambda: 0.0
        m = dist.mean_
        return _blocks(lambda: rng.exponential(m, BLOCK).tolist())
    if isinstance(dist, LogNormal):
        if dist.mean_ <= 0:
            return lambda: 0.0
        s2 = math.log1p(dist.cv**2)
        mu, sigma = math.log(dist.mean_) - s2 / 2, math.sqrt(s2)
        return _blocks(lambda: rng.lognormal(mu, sigma, BLOCK).tolist())
    if isinstance(dist, Gamma):
        if dist.mean_ <= 0:
            return lambda: 0.0
        if dist.cv == 0:
            v = float(dist.mean_)
            return lambda: v
        shape = 1.0 / dist.cv**2
        scale = dist.mean_ / shape
        return _blocks(lambda: rng.gamma(shape, scale, BLOCK).tolist())
    if isinstance(dist, Uniform):
        lo, hi = dist.low, dist.high
        return _blocks(lambda: rng.uniform(lo, hi, BLOCK).tolist())
    if isinstance(dist, Empirical):
        values = np.asarray(dist.values, dtype=float)
        return _blocks(lambda: values[rng.integers(len(values), size=BLOCK)].tolist())
    sample_n = getattr(dist, "sample_n", None)  # Weibull, Histogram: vectorised draws
    if sample_n is not None:
        return _blocks(lambda: sample_n(rng, BLOCK).tolist())
    return lambda: float(dist.sample(rng))  # a Dist subclass unknown here: scalar draws


def sample_key(seed: int, replication: int) -> int:
    """The key of the seeded call sample of ``[run] records = "sample:P"`` (a 63-bit integer
    from the replication's own SeedSequence: a draw no model stream makes)."""
    words = replication_seed(seed, replication).generate_state(2, np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])
