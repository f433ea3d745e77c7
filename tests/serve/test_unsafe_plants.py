"""The planted dedup bugs do what the release gate's negative controls say they do.

The gate tests (tests/load/test_release_gate_all_tls.py) fail a run for each ``--unsafe-bug``;
if a plant stopped planting anything, those runs would PASS and only a long load test
would notice.  Here, directly on the wire: concurrent answers to one INPUT_REQUIRED task
run its side effect once on the correct Reasoner and more than once with
``continuation-twice``.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.serve.conftest import (
    Reasoner,
    k,
    ledger_summary,
    message,
    start_test_reasoner,
    stream,
    uid,
)

ANSWERS = 3
TASKS = 3


@pytest.fixture(scope="module")
def twice(witness_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reasoner]:
    with start_test_reasoner(tmp_path_factory.mktemp("twice"), witness=witness_server.url,
                             extra=["--unsafe-bug", "continuation-twice"]) as proc:
        yield Reasoner(proc)


def _executions_of_concurrent_answers(r: Reasoner, witness: str) -> list[int]:
    """Per paused task: the witness's executions after ANSWERS simultaneous answers."""
    out = []
    for _ in range(TASKS):
        ctx = uid("c")
        first = r.send("sse", stream(message(ctx=ctx, meta={k("handoff"): True})))
        assert first.final_state == "TASK_STATE_INPUT_REQUIRED"
        msgs = [message("my answer", ctx=ctx, task=first.task_id,
                        meta={k("sideEffect"): True, k("test.delayS"): 0.2})
                for _ in range(ANSWERS)]
        with ThreadPoolExecutor(ANSWERS) as pool:
            answers = list(pool.map(lambda m: r.send("sse", stream(m)), msgs))
        assert all(a.final_state == "TASK_STATE_COMPLETED" for a in answers)
        out.append(int(ledger_summary(witness, ctx)["executions"]))
    return out


def test_the_correct_reasoner_runs_one_continuation(reasoner: Reasoner, witness: str) -> None:
    assert _executions_of_concurrent_answers(reasoner, witness) == [1] * TASKS


def test_continuation_twice_runs_concurrent_continuations_again(twice: Reasoner,
                                                                witness: str) -> None:
    runs = _executions_of_concurrent_answers(twice, witness)
    assert all(n > 1 for n in runs), runs
