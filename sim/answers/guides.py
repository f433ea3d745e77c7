"""Rules of thumb the notebooks teach, as functions: a timeout from a latency percentile,
a retry budget from the load amplification one can tolerate.

- :func:`response_times` measures what the turn-response timer would see: for each
  first attempt, the time from send to the first response (a ``progress`` directive or
  the first chunk), with that timeout switched off and no retries, so the sample is not
  cut short by the timeout being chosen.
- :func:`timeout_from_percentile`: a timeout = the ``q``-th percentile × ``margin``;
  :func:`spurious_timeout_share` is the share of attempts that would time out although
  they were going to answer (each becomes a retry: extra load and a later answer).
- :func:`retry_ratio_for_amplification`: a ratio budget (Finagle ``percent_can_retry``,
  Envoy ``budget_percent``/100, Brooker's ``fill_per_call``) caps retries at that share of
  requests, so in a full outage the worst-case load amplification is ``1 + ratio`` (plus
  the budget's fixed allowance, which the ratio cannot see: set it to 0 or count it).
"""

from __future__ import annotations

import numpy as np

from rtalab.sim.runner import run_once
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared import schema as S


def response_times(scenario: Scenario, *, replications: int = 2, seed: int = 1) -> np.ndarray:
    """First-attempt response times (s) of ``scenario`` with the turn-response timeout off
    and retries off, turns started after warm-up; NaN-free, unsorted."""
    sc = scenario.with_overrides({"live.timeouts.turn_response_s": 0.0,
                                  "live.retry.max_attempts": 1})
    out = []
    for r in range(replications):
        a = run_once(sc, seed, r).attempts
        first = a[(a[S.ATTEMPT] == 1) & (a[S.SEND_S] >= sc.run.warmup_s)]
        dt = (first[S.FIRST_RESPONSE_S] - first[S.SEND_S]).to_numpy(dtype=float)
        out.append(dt[np.isfinite(dt)])
    return np.concatenate(out) if out else np.empty(0)


def timeout_from_percentile(samples: np.ndarray, q: float = 99.9, margin: float = 1.2) -> float:
    """``margin`` × the ``q``-th percentile of ``samples`` (seconds)."""
    if len(samples) == 0:
        raise ValueError("no response times to choose a timeout from")
    if not 0 < q <= 100 or margin < 1:
        raise ValueError(f"need 0 < q <= 100 and margin >= 1, got q={q}, margin={margin}")
    return float(np.percentile(samples, q)) * margin


def spurious_timeout_share(samples: np.ndarray, timeout_s: float) -> float:
    """Share of responses slower than ``timeout_s`` (each would be a spurious timeout)."""
    return float((np.asarray(samples) > timeout_s).mean()) if len(samples) else float("nan")


def retry_ratio_for_amplification(max_amplification: float) -> float:
    """The retry ratio whose worst case (every request failing) is ``max_amplification``
    server requests per offered request: ``max_amplification - 1``."""
    if max_amplification < 1:
        raise ValueError(f"amplification is at least 1, got {max_amplification}")
    return max_amplification - 1.0
