"""Per-key token buckets (the per-context turn rate limit), bounded in memory."""

from __future__ import annotations

import math
from collections import OrderedDict


class KeyedTokenBucket:
    """One token bucket per key; least recently used keys are dropped beyond ``max_keys``."""

    def __init__(self, rate_per_s: float, burst: int, max_keys: int = 100_000):
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = float(burst)
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at_s

    def take(self, key: str, now_s: float) -> int:
        """Take one token: 0 if allowed, else the milliseconds until a token is available."""
        tokens, at_s = self._buckets.pop(key, (self.burst, now_s))
        tokens = min(self.burst, tokens + max(0.0, now_s - at_s) * self.rate_per_s)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now_s)
            wait_ms = 0
        else:
            self._buckets[key] = (tokens, now_s)
            wait_ms = max(1, math.ceil((1.0 - tokens) / self.rate_per_s * 1000.0))
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return wait_ms

    def __len__(self) -> int:
        """Number of keys tracked."""
        return len(self._buckets)
