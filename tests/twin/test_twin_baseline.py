"""Twin test of ``baseline``: the embedded deployment inside the simulator's prediction.

Both bindings and both process counts: SSE with one Reasoner process, WebSocket
with two (one shared pool of ``[reasoner].workers``).  See tests/twin/conftest.py
for the statistics (false failure <= 1/301 per run).
"""

from __future__ import annotations

import pytest

from tests.twin.conftest import simulate, twin

DURATION_S, WARMUP_S, DRAIN_S = 30.0, 5.0, 20.0


@pytest.fixture(scope="module")
def sim() -> list[dict[str, float | None]]:
    return simulate("baseline", DURATION_S, WARMUP_S, DRAIN_S)


@pytest.mark.parametrize(("binding", "processes"), [("sse", 1), ("ws", 2)])
def test_baseline_load_run_is_the_simulators_twin(tmp_path, sim, binding, processes):
    check = twin(tmp_path, "baseline", sim, binding=binding, processes=processes,
                 duration_s=DURATION_S, warmup_s=WARMUP_S, drain_s=DRAIN_S)
    assert check.ok, [r for r in check.rows if not r.inside]
