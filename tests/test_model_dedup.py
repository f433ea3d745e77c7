"""Acceptance 7 and the three hazards: dedup by requestGuid, by turn, none, and its window."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rtalab.sim.runner import run_once, run_replications
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared.summary import metric, replication_metrics, summarize
from tests.stats import assert_close, assert_rejects, seed

P_DUP = 0.2
REPS = 10
DUP_GUID = "hazard.duplicate_request_executions_per_1k_turns"
REEXEC = "hazard.reexecuted_turns_per_1k_turns"
DUP_SESSION = "hazard.duplicated_sessions_per_1k_turns"


def side_effect_turns(**overrides: Any) -> Scenario:
    """Every turn has a side effect; one attempt per turn unless a test adds faults."""
    base: dict[str, Any] = {
        "workload.calls_per_s": 1.0,
        "workload.turns_per_call": 4,
        "workload.think_time_s": {"dist": "exp", "mean": 1.0},
        "workload.side_effect_share": 1.0,
        "workload.handoff_share": 0.0,
        "live.timeouts.turn_response_s": 0.0,
        "live.escalation.end_session_after_failed_turns": 0,
        "reasoner.workers": 8,
        "reasoner.reasoning_time_s": {"dist": "exp", "mean": 0.3},
        "reasoner.tool_latency_s": {"dist": "exp", "mean": 0.2},
        "reasoner.upstream_timeout_s": 0.0,
        "network.uplink.duplication": P_DUP,
        "run.duration_s": 300.0,
        "run.warmup_s": 20.0,
        "run.replications": REPS,
        # isolate the dedup store: the taskId rule (docs/decisions.md D2) would make a copy or a
        # retry of a known task join/replay whatever the store holds; it has its own tests
        # (tests/test_model_task_rules.py)
        "reasoner.known_task": "execute",
        "live.retry.new_turn_id": False,
    }
    base.update(overrides)
    return Scenario().with_overrides(base)


def _summary(sc: Scenario, base_seed: int = 1) -> dict[str, Any]:
    return summarize(run_replications(sc, seed=seed(base_seed)), sc.run.warmup_s)


def test_request_guid_dedup_with_long_window_never_duplicates() -> None:
    sc = side_effect_turns(**{"reasoner.dedup": "request-guid", "reasoner.dedup_window_s": 300.0})
    outs = run_replications(sc, seed=seed(1))
    s = summarize(outs, sc.run.warmup_s)
    assert metric(s, DUP_GUID)["values"] == [0.0] * REPS
    assert metric(s, REEXEC)["values"] == [0.0] * REPS
    # the duplicates did reach the server: they were joined to the execution or replayed
    disp = outs[0].executions["disposition"].astype(str)
    copies = outs[0].executions["network_duplicate"].sum()
    assert disp.isin(["joined", "replayed"]).sum() == copies > 0


def test_no_dedup_duplicates_match_expectation() -> None:
    """Dedup none: each delivered request is duplicated with probability p and the copy executes
    its side effect, so extra executions per 1,000 turns = 1000 · p · requests per turn."""
    s = _summary(side_effect_turns(**{"reasoner.dedup": "none"}))
    attempts = metric(s, "attempts_per_turn")
    assert attempts["values"] == [1.0] * REPS
    dup = metric(s, DUP_GUID)
    assert_close(dup["values"], 1000.0 * P_DUP, DUP_GUID)
    assert_rejects(dup["values"], 1000.0 * P_DUP, 1000.0 * P_DUP * 1.25, DUP_GUID)  # has teeth
    assert metric(s, REEXEC)["values"] == [0.0] * REPS  # one requestGuid per turn


@pytest.mark.parametrize("window_s, expect_duplicates", [(0.0, True), (2.0, True), (300.0, False)])
def test_window_shorter_than_duplicate_delay_shows_duplicates(window_s: float,
                                                              expect_duplicates: bool) -> None:
    """Copies arriving 5 s late find the entry purged unless the window covers that span."""
    sc = side_effect_turns(**{"reasoner.dedup": "request-guid", "reasoner.dedup_window_s": window_s,
                              "network.uplink.duplicate_delay_s": 5.0,
                              "run.replications": 4, "run.duration_s": 200.0})
    outs = run_replications(sc, seed=seed(2))
    s = summarize(outs, sc.run.warmup_s)
    dup = metric(s, DUP_GUID)
    if expect_duplicates:
        assert dup["mean"] > 0.8 * 1000.0 * P_DUP  # nearly every late copy re-executes
    else:
        assert dup["values"] == [0.0] * 4
        assert (outs[0].executions["disposition"] == "replayed").sum() > 0
    peak = metric(s, "dedup.peak_bytes")["mean"]
    assert (peak > 100 * 512) if window_s == 300.0 else (peak < 40 * 512)


@pytest.mark.parametrize("window_s, expect_duplicates", [(0.0, True), (300.0, False)])
def test_same_guid_retry_after_window_reexecutes(window_s: float, expect_duplicates: bool) -> None:
    """Retries that keep their requestGuid are safe only while the window covers the retry span."""
    sc = side_effect_turns(**{
        "network.uplink.duplication": 0.0, "network.downlink.loss": 0.2,
        "live.retry.new_request_guid": False, "live.retry.max_attempts": 4,
        "reasoner.dedup": "request-guid", "reasoner.dedup_window_s": window_s,
        "run.replications": 4, "run.duration_s": 200.0})
    outs = run_replications(sc, seed=seed(3))
    s = summarize(outs, sc.run.warmup_s)
    lost = outs[0].attempts["outcome"].eq("response-lost").sum()
    assert lost > 0
    if expect_duplicates:
        assert metric(s, DUP_GUID)["mean"] > 0
    else:
        assert metric(s, DUP_GUID)["values"] == [0.0] * 4
    assert metric(s, REEXEC)["values"] == [0.0] * 4  # one requestGuid per turn either way


def test_slow_success_reexecutes_turn_under_new_guid() -> None:
    """Tool slower than upstream_timeout: FAILED upstream-timeout, but the side effect happened;
    the retry (new requestGuid) runs it again.  P(first tool call > timeout) = e^-1 for an
    exponential tool latency with mean = timeout, so ≈ 368 re-executed turns per 1,000."""
    sc = side_effect_turns(**{
        "network.uplink.duplication": 0.0, "reasoner.tool_latency_s": {"dist": "exp", "mean": 0.5},
        "reasoner.upstream_timeout_s": 0.5, "live.retry.max_attempts": 5,
        "reasoner.dedup": "request-guid", "reasoner.dedup_window_s": 300.0})
    s = _summary(sc)
    assert metric(s, DUP_GUID)["values"] == [0.0] * REPS  # the MUST holds...
    reexec = metric(s, REEXEC)
    assert_close(reexec["values"], 1000.0 * math.exp(-1.0), REEXEC)


def test_turn_dedup_prevents_reexecution_and_lets_retries_succeed() -> None:
    """Dedup by turn (retries keep their taskId): a retryable failure releases the turn's key
    (errors.md §3: a repeat attempt must be able to succeed) and the side effect is guarded
    per turn, so the retry after a slow success skips the tool and completes."""
    sc = side_effect_turns(**{
        "network.uplink.duplication": 0.0, "reasoner.tool_latency_s": {"dist": "exp", "mean": 0.5},
        "reasoner.upstream_timeout_s": 0.5, "live.retry.max_attempts": 3,
        "reasoner.dedup": "turn", "reasoner.dedup_window_s": 300.0})
    outs = run_replications(sc, seed=seed(4))
    s = summarize(outs, sc.run.warmup_s)
    assert metric(s, REEXEC)["values"] == [0.0] * REPS
    assert metric(s, DUP_GUID)["values"] == [0.0] * REPS
    assert metric(s, "success_rate")["values"] == [1.0] * REPS
    assert metric(s, "side_effect_executions_per_side_effect_turn")["values"] == [1.0] * REPS
    # P(first tool call > timeout) = e^-1: that share of turns needed exactly one retry
    assert_close(metric(s, "retries_per_turn")["values"], math.exp(-1.0), "retries per turn")
    assert not outs[0].attempts["replayed"].any()
    # a new taskId per retry after FAILED (errors.md §4) defeats the guard: re-executions
    s2 = _summary(sc.with_overrides({"live.retry.new_turn_id": True}), 4)
    assert metric(s2, REEXEC)["mean"] > 200.0
    assert_close(metric(s2, "success_rate")["values"], 1.0 - math.exp(-3.0), "1 - x^3, x = e^-1")


@pytest.mark.parametrize("client_context_id", [True, False])
def test_duplicated_sessions_need_a_server_minted_context(client_context_id: bool) -> None:
    """A first message retried before any answer arrived opens a second server session."""
    sc = side_effect_turns(**{
        "network.uplink.duplication": 0.0, "live.client_context_id": client_context_id,
        "live.timeouts.turn_response_s": 0.4, "reasoner.progress_directive": False,
        "reasoner.workers": 2, "run.duration_s": 200.0})
    out = run_once(sc, seed=seed(5))
    s = summarize([out], sc.run.warmup_s)
    dup = metric(s, DUP_SESSION)["mean"]
    if client_context_id:
        assert dup == 0.0 and (out.calls["sessions_opened"] == 1).all()
    else:
        assert dup > 0.0 and (out.calls["sessions_opened"] > 1).any()
    assert out.attempts["outcome"].eq("timeout").any()


def test_a_generation_store_holds_what_the_plain_store_holds_in_small_tables() -> None:
    """~100 k live entries constantly replaced: the plain store's one dict grows to 2**19
    slots (CPython rebuilds it at 3x live); the generation store's biggest table is one
    generation's (2**17), the sum of its tables below the plain one's, and at every second
    both hold the same keys and entries, answer every lookup alike and count the same."""
    import sys

    from rtalab.sim.model.dedup import GENERATION_OPENS, DedupStore, GenerationStore

    plain = DedupStore("request-guid", 50.0, 1, 0.0)
    gen = plain.bounded()
    assert isinstance(gen, GenerationStore)
    biggest = {id(plain): 0, id(gen): 0}
    total = {id(plain): 0, id(gen): 0}
    guid = 0
    for t in range(1, 200):
        for store in (plain, gen):
            for g in range(guid, guid + 2000):
                e = store.open(_key(g % 7, g), float(t), g % 7)
                store.close(_key(g % 7, g), e, float(t), 1, None, g % 7)
            assert store.size(float(t)) == min(51, t) * 2000 == store.held()
            tables = [sys.getsizeof(d) for d in getattr(store, "gens", [store.entries])]
            biggest[id(store)] = max(biggest[id(store)], *tables)
            total[id(store)] = max(total[id(store)], sum(tables))
        guid += 2000
        if t % 10 == 0:
            held = _held(gen)
            assert held.keys() == plain.entries.keys()
            assert all(e.expires_s == plain.entries[k].expires_s for k, e in held.items())
    assert biggest[id(plain)] > 2**19 * 16  # the one table: 2**19 slots
    assert biggest[id(gen)] < 2**18 * 16 and len(gen.gens) <= 2 + 102_000 // GENERATION_OPENS
    assert total[id(gen)] < 0.8 * total[id(plain)]
    assert gen.peak_entries == plain.peak_entries
    now = 199.0
    for g in range(guid - 120_000, guid + 10, 997):
        a, b = plain.lookup(_key(g % 7, g), now), gen.lookup(_key(g % 7, g), now)
        assert (a is None) == (b is None) and (a is None or a.expires_s == b.expires_s)


def _key(ctx: int, guid: int) -> int:
    """The request-guid mode's key of ``guid`` in ``ctx`` (DedupStore.key's int)."""
    from rtalab.sim.model.dedup import CONTEXT_BITS

    return guid << CONTEXT_BITS | ctx


def _held(store: Any) -> dict[Any, Any]:
    """A generation store's keys and entries, checking that no key is in two generations."""
    out: dict[Any, Any] = {}
    for d in store.gens:
        assert not out.keys() & d.keys()
        out.update(d)
    assert len(out) == store.held()
    return out


@pytest.mark.parametrize("mode", ["request-guid", "turn"])
@pytest.mark.parametrize("window_s", [0.0, 3.0])
def test_a_generation_store_answers_every_operation_as_the_plain_store(
        mode: str, window_s: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random opens (of held keys too), closes, releases, lookups and samples on few keys and
    tiny generations (many rotations, moves of the last entries, generations let go): after
    every step both stores hold the same keys and entries and answer and count the same."""
    import random

    from rtalab.sim.model import dedup

    monkeypatch.setattr(dedup, "GENERATION_OPENS", 64)
    plain = dedup.DedupStore(mode, window_s, 1, 5.0)
    gen = plain.bounded()
    rng = random.Random(7)
    open_: dict[Any, tuple[Any, Any]] = {}  # key -> (plain's entry, generation store's)
    now = 0.0
    rotated = moved = 0
    newest = gen.gens[0]
    for _ in range(20_000):
        now += rng.random() * 0.05
        ctx, guid = rng.randrange(3), rng.randrange(120)
        key = (ctx, guid, 0) if mode == "turn" else _key(ctx, guid)
        op = rng.random()
        if op < 0.35:
            a, b = plain.lookup(key, now), gen.lookup(key, now)
            assert (a is None) == (b is None)
            if a is None or rng.random() < 0.1:  # a lookup's miss, or a key held: replaced
                open_[key] = (plain.open(key, now, ctx), gen.open(key, now, ctx))
        elif op < 0.7 and open_:
            k = rng.choice(list(open_))
            a, b = open_.pop(k)
            c = k[0] if mode == "turn" else k & 7
            if rng.random() < 0.2:
                plain.release(k, a)
                gen.release(k, b)
            else:
                plain.close(k, a, now, 1, None, c)
                gen.close(k, b, now, 1, None, c)
        elif op < 0.75:
            last = gen.gens[-1]
            assert plain.size(now) == gen.size(now)
            moved += bool(last) and not any(d is last for d in gen.gens)  # let go, not empty
        rotated += gen.gens[0] is not newest
        newest = gen.gens[0]
        held = _held(gen)
        assert held.keys() == plain.entries.keys()
        assert all((e.expires_s, e.done) == (plain.entries[k].expires_s, plain.entries[k].done)
                   for k, e in held.items())
        assert gen.peak_entries == plain.peak_entries
    assert rotated > 20 and moved > 0 and plain.peak_entries > 0


@pytest.mark.parametrize("dedup_kind", ["request-guid", "turn"])
def test_a_bounded_run_finds_an_original_in_an_older_generation(
        dedup_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Reasoner's lookup of a held key sees every generation, not only the newest: with
    generations of 16 opens nearly every duplicate's original has been rotated out of the
    newest one when its copy arrives, and a bounded run (``records = "none"``) must still
    deduplicate exactly as the one dict does (the same metrics, no duplicate execution)."""
    from rtalab.sim.model import dedup

    monkeypatch.setattr(dedup, "GENERATION_OPENS", 16)
    sc = side_effect_turns(**{"reasoner.dedup": dedup_kind, "reasoner.dedup_window_s": 300.0,
                              "run.duration_s": 200.0, "run.replications": 1})
    exact = replication_metrics(run_once(sc, 5), sc.run.warmup_s)
    bounded = run_once(sc.with_overrides({"run.records": "none"}), 5).metrics
    assert exact[DUP_GUID] == 0.0 and exact[REEXEC] == 0.0
    for k in (DUP_GUID, REEXEC, DUP_SESSION):
        assert bounded[k] == exact[k], (k, bounded[k], exact[k])
