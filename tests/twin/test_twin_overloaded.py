"""Twin test of an overloaded scenario (utilisation ~0.88, ``overloaded.toml``).

WebSocket with one Reasoner process, SSE with two (one shared pool of 8 workers;
that the pool is shared is proven exactly by tests/serve/test_capacity.py).  See
tests/twin/conftest.py for the statistics (false failure <= 1/301 per run) and
their power.
"""

from __future__ import annotations

import pytest

from rtalab.sim.runner import run_replications
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared.summary import summarize
from tests.twin.conftest import OVERLOADED, simulate, twin

DURATION_S, WARMUP_S, DRAIN_S = 30.0, 5.0, 10.0


@pytest.fixture(scope="module")
def sim() -> list[dict[str, float | None]]:
    return simulate(OVERLOADED, DURATION_S, WARMUP_S, DRAIN_S)


def test_the_overloaded_scenario_is_overloaded():
    """Steady state (300 s, 30 s warm-up, 12 replications): utilisation 0.88 by hand
    (overloaded.toml), >= 0.85 as the issue asks."""
    sc = load_scenario(OVERLOADED)
    m = summarize(run_replications(sc, replications=12),
                  sc.run.warmup_s)["metrics"]["worker_utilisation"]
    assert m["ci_low"] >= 0.85 and m["mean"] < 0.95, m


def test_overloaded_ws_one_process_is_the_simulators_twin(tmp_path, sim):
    check = twin(tmp_path, OVERLOADED, sim, binding="ws", processes=1,
                 duration_s=DURATION_S, warmup_s=WARMUP_S, drain_s=DRAIN_S)
    assert check.ok, [r for r in check.rows if not r.inside]


def test_overloaded_sse_two_processes_is_the_simulators_twin(tmp_path, sim):
    check = twin(tmp_path, OVERLOADED, sim, binding="sse", processes=2,
                 duration_s=DURATION_S, warmup_s=WARMUP_S, drain_s=DRAIN_S)
    assert check.ok, [r for r in check.rows if not r.inside]
