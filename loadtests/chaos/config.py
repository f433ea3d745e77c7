"""What the chaos proxy injects: the scenario's ``[network]`` section mapped onto L7 faults.

Mapping (docs/chaos.md has the table):

==========================  ==================================================================
``uplink.latency_s``        delay before each request (or WebSocket request frame) is forwarded
``uplink.duplication``      P(a message-sending request is sent upstream twice); the copy goes
                            ``uplink.duplicate_delay_s`` later and its answer is discarded
``uplink.loss``             P(a request is black-holed: never forwarded, never answered)
``uplink.reorder``          P(a request is held an extra ``uplink.reorder_delay_s``)
``downlink.latency_s``      delay of each stream event (FIFO kept)
``downlink.reorder``        P(a stream event is held an extra ``downlink.reorder_delay_s`` so
                            later events overtake it; the terminal event is never overtaken
                            unless ``reorder_terminal``)
``downlink.loss``           P(the connection is dropped at this stream event: mid-stream cut)
``downlink.duplication``    not applied (a transport never duplicates a stream event)
``outages``                 windows on the run's clock (``--start-file``; else since the proxy's
                            start), by ``kind``: ``blackhole`` (connections held, requests never
                            forwarded, stream events swallowed, on ``direction``),
                            ``reasoner-down`` (listener closed: ECONNREFUSED; open connections
                            reset), ``reset`` (open connections reset at the start, new ones
                            reset at once), ``loss`` (each request black-holed and each stream
                            event lost with the outage's ``loss``)
==========================  ==================================================================
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from rtalab.sim.dist import Const, Dist
from rtalab.sim.scenario import LinkConfig, NetworkConfig, OutageConfig

OutageMode = Literal["refuse", "blackhole"]  # --outage-mode: refuse = reasoner-down
DupMode = Literal["discard", "race"]


@dataclass(frozen=True)
class ChaosConfig:
    """Everything the proxy decides; built from a scenario's ``[network]`` plus flags."""

    network: NetworkConfig = NetworkConfig()
    outage_mode: OutageMode = "blackhole"
    reorder_terminal: bool = False
    seed: int = 1
    methods: tuple[str, ...] = ("SendStreamingMessage", "SendMessage")
    max_hold_s: float = 300.0  # a black-holed request is answered 504 after this (safety net)
    extra_outages: tuple[OutageConfig, ...] = field(default=())
    # of the duplicated requests, the share whose copy is sent FIRST and the original
    # ``uplink.duplicate_delay_s`` after the server started answering the copy: the server
    # sees the duplicate before its original (as any real network may deliver them)
    duplicate_first: float = 0.5

    @property
    def outages(self) -> tuple[OutageConfig, ...]:
        """All outage windows, sorted by start."""
        return tuple(sorted(self.network.outages + self.extra_outages, key=lambda o: o.start_s))

    def kind_of(self, o: OutageConfig) -> str:
        """The outage's kind (``--outage-mode refuse`` makes a blackhole one reasoner-down)."""
        return "reasoner-down" if o.kind == "blackhole" and self.outage_mode == "refuse" \
            else o.kind

    def outage_at(self, t_s: float, direction: str, kind: str | None = None
                  ) -> OutageConfig | None:
        """The outage covering ``t_s`` (seconds since start) on ``direction`` (of ``kind``,
        when given), if any."""
        for o in self.outages:
            if o.start_s <= t_s < o.start_s + o.duration_s and o.direction in (direction, "both") \
                    and (kind is None or self.kind_of(o) == kind):
                return o
        return None


def with_overrides(cfg: ChaosConfig, *, duplicate: float | None = None,
                   reorder: float | None = None, drop: float | None = None,
                   delay_s: float | None = None, reorder_delay_s: float | None = None
                   ) -> ChaosConfig:
    """``cfg`` with the flag overrides (``None`` keeps the scenario's value)."""
    up, down = cfg.network.uplink, cfg.network.downlink
    if duplicate is not None:
        up = replace(up, duplication=duplicate)
    if reorder is not None:
        down = replace(down, reorder=reorder)
    if reorder_delay_s is not None:
        down = replace(down, reorder_delay_s=Const(reorder_delay_s))
    if drop is not None:
        down = replace(down, loss=drop)
    if delay_s is not None:
        up, down = replace(up, latency_s=Const(delay_s)), replace(down, latency_s=Const(delay_s))
    return replace(cfg, network=replace(cfg.network, uplink=up, downlink=down))


def rng_for(seed: int, key: str) -> np.random.Generator:
    """The random stream of one request: a function of (seed, key) only, not of arrival order."""
    digest = hashlib.blake2b(key.encode("utf-8", "replace"), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def sample(dist: Dist, rng: np.random.Generator) -> float:
    """A non-negative draw (0 for a zero constant, without touching the stream)."""
    if isinstance(dist, Const):
        return max(0.0, float(dist.value))
    return max(0.0, float(dist.sample(rng)))


@dataclass
class RequestFaults:
    """The uplink decisions for one request, drawn once from its own stream."""

    delay_s: float
    lost: bool
    duplicate: bool
    duplicate_delay_s: float
    duplicate_first: bool = False  # the copy goes first, the original after the delay


def uplink_faults(link: LinkConfig, rng: np.random.Generator, duplicable: bool,
                  first_share: float = 0.0) -> RequestFaults:
    """Draw the uplink faults of one request (fixed draw order: reproducible per request;
    the copy-first draw comes last, only for a duplicate)."""
    u = rng.random(3)
    delay = sample(link.latency_s, rng)
    if u[0] < link.reorder:
        delay += sample(link.reorder_delay_s, rng)
    dup = duplicable and u[2] < link.duplication
    dup_delay = sample(link.duplicate_delay_s, rng) if dup else 0.0
    first = bool(dup and first_share > 0 and rng.random() < first_share)
    return RequestFaults(delay_s=delay, lost=bool(u[1] < link.loss), duplicate=bool(dup),
                         duplicate_delay_s=dup_delay, duplicate_first=first)
