"""Closed forms the simulator is validated against (queueing theory and retry arithmetic)."""

from __future__ import annotations

import math


def erlang_c(servers: int, offered_load: float) -> float:
    """P(wait) in an M/M/c queue with ``servers`` servers and offered load a = λ/μ (< c)."""
    c, a = servers, offered_load
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {c}")
    if not 0.0 <= a < c:
        raise ValueError(f"offered load must be in [0, servers), got {a}")
    # Erlang B by the stable recursion, then C = B / (1 - ρ(1 - B))
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    rho = a / c
    return b / (1.0 - rho * (1.0 - b))


def mmc_mean_wait(servers: int, arrival_rate: float, mean_service_s: float) -> float:
    """Mean time in queue W_q of an M/M/c queue: C(c, a) / (cμ - λ)."""
    mu = 1.0 / mean_service_s
    a = arrival_rate / mu
    return erlang_c(servers, a) / (servers * mu - arrival_rate)


def mmc_mean_queue_length(servers: int, arrival_rate: float, mean_service_s: float) -> float:
    """Mean number waiting L_q = λ W_q (Little)."""
    return arrival_rate * mmc_mean_wait(servers, arrival_rate, mean_service_s)


def retry_success(p_fail: float, attempts: int) -> float:
    """Success probability with independent failures ``p_fail`` and ``attempts`` tries: 1 - x^n."""
    return 1.0 - p_fail**attempts


def retry_mean_attempts(p_fail: float, attempts: int) -> float:
    """Mean attempts with independent failures and at most ``attempts`` tries: Σ_{i<n} x^i."""
    return math.fsum(p_fail**i for i in range(attempts))
