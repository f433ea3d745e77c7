"""The Locust Live user drives its retry budget exactly as the simulator's Live layer does.

A simulator run (every budget but the random SRE throttle, errors of every kind,
timeouts, lost responses, barge-in) is recorded call by call at its budget: each
``allow_first`` / ``on_attempt`` / ``allow_retry`` / ``end_attempt`` with its
arguments and the budget state after it.  The same sequence is then played
through a Locust :class:`rtalab.loadtests.live.call.Call`'s own budget: the attempt
ends through the user's ``_attempt_ended`` (fed the simulator's attempt rows:
outcome, code, attempt number), the after-timeout flag through its
``_retry_granted``, dropped retries through ``_retry_dropped``.  Every grant
and the full budget state must agree after every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rtalab.sim.model.world import World
from rtalab.sim.policy import Decision, Ending
from rtalab.sim.policy.turn import _BACKOFF, _SENT, TurnRules
from rtalab.sim.scenario import Scenario

EXT = "https://example.org/ext/rta/v1"


def _scenario() -> Scenario:
    return Scenario().with_overrides({
        "workload.calls_per_s": 5.0,
        "workload.turns_per_call": 3,
        "workload.think_time_s": 0.3,
        "workload.handoff_share": 0.2,
        "workload.caller_response_time_s": 0.3,
        "workload.barge_in_share": 0.3,
        "workload.barge_in_after_s": {"dist": "exp", "mean": 1.0},
        "live.instances": 1,
        "live.escalation.end_session_after_failed_turns": 0,
        "live.timeouts.turn_response_s": 0.5,
        "live.backoff.base_s": 1.0,
        "network.downlink.loss": 0.05,
        "reasoner.workers": 32,
        "reasoner.reasoning_time_s": {"dist": "exp", "mean": 0.3},
        "reasoner.errors": {"internal": 0.1, "auth": 0.03, "rate-limited": 0.03,
                            "upstream-timeout": 0.03},
        "network.outages": [{"start_s": 15.0, "duration_s": 6.0, "direction": "both"}],
        "live.budget.circuit_breaker": {"enabled": True, "failure_threshold": 4, "open_s": 1.0},
        "live.budget.token_bucket": {"enabled": True, "token_ratio": 0.5},
        "live.budget.aws_quota": {"enabled": True, "initial_tokens": 60},
        "live.budget.envoy": {"enabled": True, "min_retry_concurrency": 2},
        "live.budget.finagle": {"enabled": True, "min_retries_per_s": 1.0},
        "live.budget.call_bucket.enabled": True,
        "live.budget.retry_breaker": {"enabled": True, "max_failure_ratio": 0.6},
        "run.duration_s": 40.0,
        "run.warmup_s": 0.0,
        "run.drain_s": 10.0,
    })


def _record(budget: Any, log: list[tuple[str, tuple[Any, ...], Any, dict[str, Any]]]) -> None:
    """Log every budget call the simulator makes, with the state after it."""
    for name in ("allow_first", "allow_retry", "on_attempt", "end_attempt"):
        orig = getattr(budget, name)

        def wrapper(*args: Any, _orig: Any = orig, _name: str = name) -> Any:
            result = _orig(*args)
            log.append((_name, args, result, budget.state(args[0])))
            return result

        setattr(budget, name, wrapper)


class _Replayed:
    """A retry policy that answers the simulator's logged decision about the replayed row."""

    decision = "retry"

    def decide(self, *args: Any) -> Decision:
        return Decision(self.decision == "retry", 0.0, self.decision)  # type: ignore[arg-type]


def test_locust_user_drives_the_budget_like_the_simulator() -> None:
    from rtalab.loadtests.live.call import Call, Instance, LiveOptions, _Turn

    sc = _scenario()
    world = World(sc, 11, 0)
    log: list[tuple[str, tuple[Any, ...], Any, dict[str, Any]]] = []
    _record(world.live.instances[0].budget, log)
    attempts = world.run().attempts.frame(0)  # in the order the Live layer recorded them
    rows = attempts[attempts["outcome"] != "unfinished"]
    rows = list(rows[["call_id", "turn_index", "outcome", "error_code", "attempt", "end_s",
                      "decision"]].itertuples(index=False))

    opts = LiveOptions(ext_uri=EXT)

    class Channel:  # what a call reads of its channel before its first request
        binding = "sse"

    call = Call("c", sc, Instance(0, sc, opts, 0.0), Channel(), None, opts,  # type: ignore[arg-type]
                np.random.default_rng(0), "p", "r")
    mine = call.inst.budget
    assert mine is not None and mine is not world.live.instances[0].budget
    # the shared turn machine of the Locust user, its retry decisions replayed from the
    # simulator's rows: the budget must see the same end_attempt calls
    replayed = _Replayed()
    rules = TurnRules(sc.live, replayed, mine, np.random.default_rng(0),  # type: ignore[arg-type]
                      str, str, 0.0)
    turns: dict[tuple[int, int], _Turn] = {}  # the user keeps one _Turn per turn
    kinds = {name: 0 for name in ("allow_first", "allow_retry", "on_attempt")}
    endings: dict[Ending, int] = {}
    rows_used = 0
    for name, args, result, state in log:
        now = args[0]
        if name == "end_attempt":
            ending = args[1]
            endings[ending] = endings.get(ending, 0) + 1
            if ending is Ending.DROPPED:  # the flags do not matter: no outcome
                t = _Turn(rules, 0, "i", "t", False, False, 0.0, None)
                t.state = _BACKOFF
                t.stop(now)
            else:
                row = rows[rows_used]
                rows_used += 1
                code = row.error_code if isinstance(row.error_code, str) else None
                key = (int(row.call_id), int(row.turn_index))
                t = turns.setdefault(key, _Turn(rules, key[1], "i", "t", False, False, 0.0,
                                                None))
                t.phase_attempts, t.state = int(row.attempt), _SENT
                replayed.decision = row.decision if isinstance(row.decision, str) else "retry"
                if row.outcome == "cancelled":  # a barge-in of the open attempt
                    t.barge_in(now)
                else:
                    t.attempt_ended(now, row.outcome, code)
        else:
            kinds[name] += 1
            assert getattr(mine, name)(*args) == result, (name, args)
        assert mine.state(now) == state, (name, args)
    assert rows_used == len(rows)
    # the run exercised every ending and every kind of call
    assert set(endings) == set(Ending), endings
    assert min(kinds.values()) > 0
    assert state["vetoes_circuit_breaker"] > 0 and state["vetoes_envoy"] + state[
        "vetoes_aws_quota"] + state["vetoes_token_bucket"] > 0


def test_load_run_with_a_budget_enabled(tmp_path) -> None:
    """A real load run (reference Reasoner, SSE) with a circuit breaker that opens on the
    first failure and stays open for the whole run; every turn is forced to fail with
    ``internal``.  The Locust user's budget must refuse the retries of the attempts already
    sent and the first sends of every later turn: the turns end ``budget`` and only the
    turns started before the first failure came back ever sent anything."""
    from tests.load.conftest import FAST, jsonl, load_run

    scenario = FAST + """
[live.budget.circuit_breaker]
enabled = true
failure_threshold = 1
open_s = 600
"""
    p, run = load_run(tmp_path, "--test-force-error", "internal", scenario=scenario)
    assert run is not None, p.stderr
    turns = jsonl(run / "ledger" / "turns.jsonl")
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert len(turns) >= 8, p.stderr
    assert {t["end_reason"] for t in turns} == {"budget"}
    assert attempts and {a["decision"] for a in attempts} == {"budget"}
    assert {a["error_code"] for a in attempts} == {"internal"}
    assert len(attempts) < len(turns) / 2
    assert all(a["attempt"] == 1 for a in attempts)
