"""The chaos proxy as a load balancer: ``[fleet] balancer`` over several upstream replicas.

With more than one ``--upstream`` the proxy forwards each request (and each duplicate copy it
injects, as a request of its own) to one replica, picked by the policy
(:data:`rtalab.sim.scenario.BALANCERS`, the simulator's ``rtalab.sim.model.fleet``):

- ``random``: uniform over the replicas in rotation, from a stream seeded by the run's seed;
- ``round_robin``: the next replica in rotation;
- ``least_outstanding``: fewest requests in flight through the proxy (ties: the next after
  the last pick);
- ``power_of_two``: two distinct random replicas, the one with fewer in flight;
- ``sticky``: by the request's contextId (``params.message.contextId`` of a JSON-RPC body,
  ``message.contextId`` of an HTTP+JSON one), else by the key the proxy sees (the
  requestGuid, else method and id): a stable hash, modulo the replicas in rotation.

WebSocket connections are balanced at the upgrade (every frame of a socket goes to its
replica; sticky: by the caller's address and port).  The gRPC side balances each call
(:mod:`rtalab.loadtests.chaos.grpc_proxy`; sticky: by ``message.context_id``) with this balancer.

Health: a connect the proxy could not make marks the replica failing; a probe (a TCP
connect every ``probe_s``) marks it failing or healthy again.  A replica failing for
``health_check_s`` leaves the rotation (requests still sent to it meanwhile fail with 502,
as the simulator's are lost); once a probe succeeds it rejoins at once.  Each change is a
``replica-out`` / ``replica-in`` line of ``chaos.jsonl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from rtalab.sim.scenario import BALANCERS

from .ledger import ChaosLedger

PROBE_S = 0.25  # the longest between two health probes of a replica
PROBE_TIMEOUT_S = 0.5


def context_id(body: Any) -> str:
    """The contextId of a decoded request body (JSON-RPC or HTTP+JSON), or ``""``."""
    if not isinstance(body, dict):
        return ""
    params = body.get("params")
    msg = params.get("message") if isinstance(params, dict) else body.get("message")
    ctx = msg.get("contextId") if isinstance(msg, dict) else None
    return ctx if isinstance(ctx, str) else ""


def stable_hash(key: str) -> int:
    """A hash of ``key`` that is the same in every process (not Python's salted ``hash``)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "replace"),
                                          digest_size=8).digest(), "little")


class Balancer:
    """Picks a replica per request; counts what is in flight; keeps the rotation."""

    def __init__(self, upstreams: list[str] | tuple[str, ...], policy: str = "random",
                 seed: int = 1, health_check_s: float = 1.0,
                 ledger: ChaosLedger | None = None, probe_s: float = PROBE_S) -> None:
        if policy not in BALANCERS:
            raise ValueError(f"balancer must be one of {', '.join(BALANCERS)}, got {policy!r}")
        if not upstreams:
            raise ValueError("a balancer needs at least one upstream")
        self.upstreams = [u.rstrip("/") for u in upstreams]
        self.policy, self.health_check_s = policy, health_check_s
        self.probe_s = min(probe_s, health_check_s) if health_check_s > 0 else probe_s
        self.ledger = ledger
        self.rng = np.random.default_rng([seed, 27])  # the simulator's "balancer" stream idea
        n = len(self.upstreams)
        self.outstanding = [0] * n
        self.routed = [0] * n
        self.failing_since: list[float | None] = [None] * n
        self.routable = list(range(n))
        self._rr = -1

    def __len__(self) -> int:
        return len(self.upstreams)

    # ------------------------------------------------------------------ picking

    def pick(self, key: str = "") -> int:
        """The replica for a request with sticky ``key`` (ignored by the other policies)."""
        self._expire()
        pool = self.routable or list(range(len(self.upstreams)))  # none left: try them all
        k = len(pool)
        p = self.policy
        if k == 1:
            r = pool[0]
        elif p == "random":
            r = pool[int(self.rng.integers(k))]
        elif p == "round_robin":
            self._rr = (self._rr + 1) % k
            r = pool[self._rr]
        elif p == "least_outstanding":
            self._rr = (self._rr + 1) % k
            order = pool[self._rr:] + pool[:self._rr]
            r = min(order, key=lambda i: self.outstanding[i])
        elif p == "power_of_two":
            a, b = self.rng.choice(k, size=2, replace=False)
            ra, rb = pool[int(a)], pool[int(b)]
            r = ra if self.outstanding[ra] <= self.outstanding[rb] else rb
        else:  # sticky
            r = pool[stable_hash(key) % k]
        self.routed[r] += 1
        return r

    def key_of(self, body: Any, fallback: str) -> str:
        """The sticky key of a decoded request body: its contextId, else ``fallback``."""
        return context_id(body) or fallback

    @contextlib.contextmanager
    def using(self, r: int) -> Iterator[None]:
        """Count one request in flight on replica ``r`` for the block."""
        self.outstanding[r] += 1
        try:
            yield
        finally:
            self.outstanding[r] -= 1

    # ------------------------------------------------------------------ health

    def failed(self, r: int) -> None:
        """A connect to replica ``r`` failed (it starts failing, if it was not)."""
        if self.failing_since[r] is None:
            self.failing_since[r] = time.monotonic()
        self._expire()

    def healthy(self, r: int) -> None:
        """Replica ``r`` accepted a connection: it is in rotation again."""
        self.failing_since[r] = None
        if r not in self.routable:
            self.routable = sorted([*self.routable, r])
            self._line("replica-in", r)

    def _expire(self) -> None:
        """Take out of rotation the replicas failing for ``health_check_s``."""
        now = time.monotonic()
        for r, since in enumerate(self.failing_since):
            if since is not None and now - since >= self.health_check_s and r in self.routable:
                self.routable = [x for x in self.routable if x != r]
                self._line("replica-out", r)

    def _line(self, kind: str, r: int) -> None:
        if self.ledger is not None:
            self.ledger.record(kind, binding="tcp", replica=r, upstream=self.upstreams[r])

    async def probe(self, r: int) -> bool:
        """One TCP connect to replica ``r`` (True: it accepts)."""
        u = urlsplit(self.upstreams[r])
        port = u.port or (443 if u.scheme in ("https", "wss") else 80)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                _, writer = await asyncio.open_connection(u.hostname, port)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    async def watch(self) -> None:
        """Probe every replica every ``probe_s`` until cancelled."""
        while True:
            results = await asyncio.gather(*(self.probe(r) for r in range(len(self))))
            for r, ok in enumerate(results):
                if ok:
                    self.healthy(r)
                else:
                    self.failed(r)
            await asyncio.sleep(self.probe_s)

    def snapshot(self) -> dict[str, Any]:
        """Requests routed and in flight per replica, and the rotation (for logs and tests)."""
        return {"routed": list(self.routed), "outstanding": list(self.outstanding),
                "routable": list(self.routable)}

    def describe(self) -> str:
        """One line for the proxy's start banner."""
        return (f"{self.policy} over {len(self)} replicas ({', '.join(self.upstreams)}; "
                f"health check {self.health_check_s:g} s)")

