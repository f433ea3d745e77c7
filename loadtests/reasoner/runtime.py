"""Per-worker state of the Reasoner, built from :class:`ServerSettings` and the scenario."""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx
import numpy as np

from rtalab.loadtests.dedup import open_store
from rtalab.loadtests.reasoner import unsafe
from rtalab.loadtests.reasoner.capacity import Capacity, RemoteCapacity
from rtalab.loadtests.reasoner.idempotency import Idempotency
from rtalab.loadtests.reasoner.intake import Bounds
from rtalab.loadtests.reasoner.ratelimit import KeyedTokenBucket
from rtalab.loadtests.reasoner.sessions import SessionRegistry
from rtalab.loadtests.reasoner.settings import ServerSettings
from rtalab.loadtests.reasoner.storeguard import GuardedStore
from rtalab.loadtests.reasoner.tools import Tool
from rtalab.loadtests.reasoner.wire import Keys
from rtalab.sim.scenario import ReasonerConfig, Scenario, WorkloadConfig, load_scenario


def load_config(settings: ServerSettings) -> Scenario:
    """The scenario with the CLI's overrides applied (raises ConfigError)."""
    overrides = list(settings.overrides)
    if settings.dedup_mode is not None:
        overrides.append(f'reasoner.dedup="{settings.dedup_mode}"')
    if settings.dedup_window_s is not None:
        overrides.append(f"reasoner.dedup_window_s={settings.dedup_window_s!r}")
    if settings.scenario is None:
        return Scenario().with_overrides(overrides) if overrides else Scenario()
    return load_scenario(settings.scenario, overrides or None)


@dataclass
class Runtime:
    """Everything a request needs; one instance per worker process."""

    settings: ServerSettings
    cfg: ReasonerConfig
    workload: WorkloadConfig
    keys: Keys
    bounds: Bounds
    rng: np.random.Generator
    store: GuardedStore
    idem: Idempotency
    sessions: SessionRegistry
    rate: KeyedTokenBucket | None
    capacity: Capacity | RemoteCapacity
    tool: Tool
    http: httpx.AsyncClient | None
    in_flight: int = 0
    dedup_skipped: frozenset[str] = frozenset()  # TEST ONLY: bindings whose dedup is skipped

    async def start(self) -> None:
        """Open the dedup store (app lifespan)."""
        await self.store.start()

    async def close(self) -> None:
        """Close the store, the HTTP client and the broker connection."""
        if isinstance(self.capacity, RemoteCapacity):
            await self.capacity.close()
        if self.http is not None:
            await self.http.aclose()
        await self.store.close()


def build_runtime(settings: ServerSettings, scenario: Scenario | None = None) -> Runtime:
    """Assemble the per-worker runtime (the store is opened later by :meth:`Runtime.start`)."""
    scenario = scenario or load_config(settings)
    cfg = scenario.reasoner
    rng = np.random.default_rng(np.random.SeedSequence([scenario.run.seed, os.getpid()]))
    store = GuardedStore(open_store(unsafe.store_url(settings.store_url, settings.unsafe_bugs),
                                    cfg.dedup_window_s))
    http = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=512),
                             verify=settings.client_tls.context()) if settings.witness else None
    rate = (KeyedTokenBucket(cfg.context_rate_per_s, cfg.context_burst)
            if cfg.context_rate_per_s > 0 else None)
    return Runtime(
        settings=settings, cfg=cfg, workload=scenario.workload, keys=Keys(settings.ext_uri),
        bounds=Bounds(), rng=rng, store=store,
        idem=unsafe.idempotency_class(settings.unsafe_bugs)(store, cfg.dedup,
                                                            wait_s=settings.dedup_wait_s),
        sessions=SessionRegistry(store, ttl_s=settings.session_ttl_s),
        rate=rate, capacity=(RemoteCapacity(settings.capacity_socket, cfg.workers)
                             if settings.capacity_socket else
                             Capacity(cfg.workers, cfg.queue_limit, cfg.queue_discipline,
                                      cfg.queue_timeout_s)),
        tool=Tool(settings.witness, cfg.upstream_timeout_s, cfg.tool_latency_s, rng, http),
        http=http, dedup_skipped=unsafe.dedup_skipped(settings.unsafe_bugs),
    )

