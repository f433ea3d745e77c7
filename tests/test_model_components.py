"""Unit tests of the model's parts: random streams, network links, arrivals, dedup store, timing."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from rtalab.sim.dist import Const, Empirical, Exp, Gamma, LogNormal, Uniform
from rtalab.sim.model.clock import run
from rtalab.sim.model.dedup import DedupStore
from rtalab.sim.model.messages import Request
from rtalab.sim.model.network import Link
from rtalab.sim.model.rand import STREAMS, Streams, replication_seed, sampler
from rtalab.sim.model.workload import Arrivals
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import LinkConfig, OutageConfig, Scenario, WorkloadConfig, from_dict
from tests.scenarios import one_turn

# --------------------------------------------------------------------------- random streams


@pytest.mark.parametrize("dist", [Const(0.7), Exp(0.5), LogNormal(0.6, 0.6), Gamma(0.8, 0.5),
                                  Gamma(0.8, 0.0), Uniform(0.2, 1.0), Empirical((0.1, 0.5, 2.0))])
def test_sampler_has_the_distribution_mean(dist: object) -> None:
    draw = sampler(dist, np.random.default_rng(1))  # type: ignore[arg-type]
    x = np.array([draw() for _ in range(60_000)])
    assert x.mean() == pytest.approx(dist.mean, rel=0.02, abs=1e-12)  # type: ignore[attr-defined]
    assert x.var() == pytest.approx(dist.variance, rel=0.08, abs=1e-12)  # type: ignore[attr-defined]
    assert (x >= 0).all()


def test_replication_seed_is_the_spawned_child() -> None:
    for r in (1, 3, 20):
        child = np.random.SeedSequence(5).spawn(r)[r - 1]
        assert replication_seed(5, r - 1).generate_state(4).tolist() == \
            child.generate_state(4).tolist()


def test_streams_are_named_independent_and_reproducible() -> None:
    a, b = Streams(1, 0), Streams(1, 0)
    ua, ub = a.uniform("reasoning"), b.uniform("reasoning")
    assert [ua() for _ in range(5)] == [ub() for _ in range(5)]
    c = Streams(1, 1)
    assert a.rng("policy").random() != c.rng("policy").random()
    assert len(set(STREAMS)) == len(STREAMS)


# --------------------------------------------------------------------------- network


def _link(cfg: LinkConfig, outages: tuple[OutageConfig, ...] = (), name: str = "uplink") -> Link:
    return Link(simpy.Environment(), name, cfg, outages, Streams(3, 0))


def test_clean_link_with_constant_latency_is_the_fast_path() -> None:
    link = _link(LinkConfig(latency_s=Const(0.02)))
    assert link.fast
    assert link.transit(5.0) == 0.02
    assert link.chunks(1.0, 0.2, 3) == pytest.approx([1.02, 1.22, 1.42])
    assert link.terminal(2.0) == (2.02, False)


def test_link_loss_duplication_and_reorder_rates() -> None:
    env = simpy.Environment()
    link = Link(env, "uplink", LinkConfig(latency_s=Const(0.01), loss=0.1, duplication=0.2,
                                          duplicate_delay_s=Const(0.5), reorder=0.3,
                                          reorder_delay_s=Const(1.0)), (), Streams(3, 0))
    got: list[tuple[str, float]] = []
    n = 20_000
    for i in range(n):
        link.send(i, lambda msg: got.append(("orig", env.now)),
                  lambda msg: got.append(("dup", env.now)))
    run(env)
    orig = [t for k, t in got if k == "orig"]
    dups = [t for k, t in got if k == "dup"]
    assert len(orig) / n == pytest.approx(0.9, abs=0.01)
    assert len(dups) / len(orig) == pytest.approx(0.2, abs=0.015)
    assert np.mean(np.isclose(orig, 1.01)) == pytest.approx(0.3, abs=0.015)  # reordered ones
    assert set(np.round(dups, 6)) <= {0.51, 1.51}
    assert link.dropped + len(orig) == link.sent == n


def test_outage_drops_messages_sent_inside_the_window_on_its_direction() -> None:
    outage = (OutageConfig(start_s=10.0, duration_s=5.0, direction="downlink"),)
    down = _link(LinkConfig(), outage, name="downlink")
    up = _link(LinkConfig(), outage, name="uplink")
    assert not down.fast and up.fast
    assert down.arrival(9.99) == pytest.approx(10.01)
    assert down.arrival(10.0) == float("inf") and down.arrival(14.99) == float("inf")
    assert down.arrival(15.0) == pytest.approx(15.02)
    arrival, lost = down.terminal(12.0)
    assert lost and arrival == float("inf")  # a partition: not even the end of the stream
    noisy = _link(LinkConfig(loss=1.0), name="downlink")
    arrival, lost = noisy.terminal(12.0)
    assert lost and arrival == pytest.approx(12.02)  # random loss: the stream end is noticed
    inf = float("inf")
    assert down.chunks(14.5, 0.2, 4) == [inf, inf, inf, pytest.approx(15.12)]


# --------------------------------------------------------------------------- arrivals


def _arrivals(cfg: WorkloadConfig, duration_s: float) -> list[float]:
    env = simpy.Environment()
    times: list[float] = []
    arr = Arrivals(env, cfg, duration_s, Streams(1, 0), lambda i: times.append(env.now))
    arr.start()
    run(env)
    return times


def test_schedule_arrivals_follow_the_phases() -> None:
    cfg = from_dict({"workload": {"arrival": "schedule", "schedule": [
        {"start_s": 0, "calls_per_s": 5.0}, {"start_s": 100, "calls_per_s": 0.0},
        {"start_s": 200, "calls_per_s": 20.0}]}}).workload
    t = np.array(_arrivals(cfg, 300.0))
    assert ((t >= 100) & (t < 200)).sum() == 0
    assert (t < 100).sum() == pytest.approx(500, rel=0.15)
    assert (t >= 200).sum() == pytest.approx(2000, rel=0.08)
    assert t.max() < 300.0 and (np.diff(t) > 0).all()


def test_poisson_arrivals_rate_and_max_calls() -> None:
    t = np.array(_arrivals(WorkloadConfig(calls_per_s=4.0), 2000.0))
    assert len(t) / 2000.0 == pytest.approx(4.0, rel=0.05)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps
    assert len(_arrivals(WorkloadConfig(calls_per_s=4.0, max_calls=7), 2000.0)) == 7
    assert _arrivals(WorkloadConfig(calls_per_s=0.0), 100.0) == []


# --------------------------------------------------------------------------- dedup store


def _req(guid: int, task: int = 0, ctx: int = 1, phase: int = 0) -> Request:
    return Request(None, 0, 0, guid, task, ctx, phase, False, False, 1, 0.0, 0.0)


def test_dedup_store_window_purge_and_peak() -> None:
    store = DedupStore("request-guid", window_s=10.0, entry_bytes=100, peak_from_s=0.0)
    keys = [store.key(_req(g)) for g in range(3)]
    entries = [store.open(k, 0.0, 1) for k in keys]
    assert store.size(0.0) == 3 and store.peak_entries == 3
    assert store.lookup(keys[0], 1.0) is entries[0] and not entries[0].done
    store.close(keys[0], entries[0], 2.0, 0, None, 1)
    assert store.lookup(keys[0], 11.9) is entries[0]  # stored until 2 + 10
    assert store.lookup(keys[0], 12.0) is entries[0]  # closed window: still at 2 + 10 (D4)
    assert store.lookup(keys[0], 12.000001) is None  # window over
    store.close(keys[1], entries[1], 3.0, 2, "internal", 1)
    assert store.size(13.0) == 2  # keys[1] still replayed at 3 + 10 ...
    assert store.size(13.000001) == 1  # ... purged after; keys[2] still in flight
    assert store.state() == {"dedup_peak_entries": 3, "dedup_peak_bytes": 300}
    assert store.key(_req(5, ctx=1)) != store.key(_req(5, ctx=2))  # scoped by contextId


def test_request_guid_keys_are_one_int_per_context_and_guid() -> None:
    """request-guid mode's key is one int, distinct for every (contextId, requestGuid) pair
    and ordered by requestGuid (GenerationStore's filter); a contextId outside the bits the
    int gives it is refused, never folded onto another key."""
    from rtalab.sim.model.dedup import CONTEXT_BITS

    store = DedupStore("request-guid", window_s=1.0, entry_bytes=1, peak_from_s=0.0)
    ctxs = (0, 1, 2, 2**CONTEXT_BITS - 1)
    keys = [store.key(_req(g), c) for g in (0, 1, 2, 2**CONTEXT_BITS, 2**70) for c in ctxs]
    assert len(set(keys)) == len(keys) and keys == sorted(keys)
    assert all(type(k) is int for k in keys)
    for bad in (-1, 2**CONTEXT_BITS, 2**CONTEXT_BITS + 1):
        with pytest.raises(OverflowError):
            store.key(_req(3), bad)


def test_dedup_peak_counts_live_entries_only_between_purges() -> None:
    """Expired entries are purged lazily (only when a new peak is possible): the peak must
    still be the live count, never inflated by expired entries awaiting their purge."""
    store = DedupStore("request-guid", window_s=1.0, entry_bytes=1, peak_from_s=0.0)
    for g in range(10):  # one execution a second, each stored for 1 s after it ends
        t = float(g)
        e = store.open(store.key(_req(g)), t, 1)
        store.close(store.key(_req(g)), e, t, 0, None, 1)
    # at t = g the previous entry (ended g - 1, replayed until g) is still live: 2 at most
    assert store.peak_entries == 2
    assert store.size(9.5) == 1 and store.size(10.5) == 0


def test_turn_mode_keys_on_task_and_phase_not_guid() -> None:
    store = DedupStore("turn", window_s=0.0, entry_bytes=1, peak_from_s=0.0)
    assert store.key(_req(1, task=7)) == store.key(_req(2, task=7))
    assert store.key(_req(1, task=7, phase=0)) != store.key(_req(1, task=7, phase=1))
    k = store.key(_req(1))
    e = store.open(k, 0.0, 1)
    store.close(k, e, 1.0, 0, None, 1)
    assert store.lookup(k, 1.0) is None and store.size(1.0) == 0  # window 0: gone at once


# --------------------------------------------------------------------------- exact timing


def _one_turn(**overrides: object) -> Scenario:
    return one_turn(**{"run.drain_s": 10.0, **overrides})


def test_exact_timing_of_one_turn() -> None:
    out = run_once(_one_turn(), seed=1)
    a = out.attempts.iloc[0]
    t0 = a["send_s"]
    assert a["first_response_s"] - t0 == pytest.approx(0.02)  # progress: up + down latency
    assert a["first_chunk_s"] - t0 == pytest.approx(0.01 + 0.5 + 0.1 + 0.01)
    assert a["end_s"] - t0 == pytest.approx(0.62 + 2 * 0.2)  # terminal right after chunk 3
    turn = out.turns.iloc[0]
    assert turn["ttfc_s"] == pytest.approx(0.62) and turn["completion_s"] == pytest.approx(1.02)
    ex = out.executions.iloc[0]
    assert ex["service_end_s"] - ex["service_start_s"] == pytest.approx(0.5)


def test_exact_timing_of_a_timeout_and_its_retry() -> None:
    out = run_once(_one_turn(**{
        "reasoner.reasoning_time_s": 3.0, "reasoner.progress_directive": False,
        "live.timeouts.turn_response_s": 1.0, "live.retry.max_attempts": 2,
        "live.backoff.strategy": "exponential", "live.backoff.base_s": 0.25,
        "reasoner.known_task": "execute"}), seed=1)
    a = out.attempts
    assert a["outcome"].astype(str).tolist() == ["timeout", "timeout"]
    assert a["end_s"].iloc[0] - a["send_s"].iloc[0] == pytest.approx(1.0)
    assert a["send_s"].iloc[1] - a["end_s"].iloc[0] == pytest.approx(0.25)
    assert a["delay_before_s"].tolist() == [0.0, 0.25]
    assert a["decision"].astype(str).tolist() == ["retry", "attempts-exhausted"]
    t = out.turns.iloc[0]
    assert t["outcome"] == "failed" and t["error_code"] == "upstream-timeout"
    # the Reasoner still ran both (no cancel, known taskId re-run): load without goodput
    assert (out.executions["disposition"] == "executed").sum() == 2
    # errors.md §4 (D2, the default): the retry names the same taskId, so it joins the
    # running execution instead
    joined = run_once(_one_turn(**{
        "reasoner.reasoning_time_s": 3.0, "reasoner.progress_directive": False,
        "live.timeouts.turn_response_s": 1.0, "live.retry.max_attempts": 2}), seed=1)
    assert joined.executions["disposition"].astype(str).tolist() == ["executed", "joined"]


def test_total_timeout_needs_the_terminal_state() -> None:
    out = run_once(_one_turn(**{
        "reasoner.reasoning_time_s": 3.0, "live.timeouts.turn_response_s": 1.0,
        "live.timeouts.turn_total_s": 2.0, "live.retry.max_attempts": 1}), seed=1)
    a = out.attempts.iloc[0]
    assert a["outcome"] == "total-timeout"  # progress arrived in time, the answer did not
    assert a["end_s"] - a["send_s"] == pytest.approx(2.0)
    assert a["first_response_s"] - a["send_s"] == pytest.approx(0.02)


def test_capacity_drop_shows_in_the_time_series() -> None:
    sc = Scenario().with_overrides({
        "reasoner.workers": 6, "run.duration_s": 60.0, "run.warmup_s": 1.0,
        "reasoner.capacity_drops": [{"start_s": 20.0, "duration_s": 10.0, "workers": 2}]})
    ts = run_once(sc, seed=1).timeseries.set_index("t_s")["worker_capacity"]
    assert (ts.loc[20:28] == 2).all() and (ts.loc[:18] == 6).all() and (ts.loc[30:] == 6).all()


def test_live_instances_take_calls_round_robin() -> None:
    sc = Scenario().with_overrides({"live.instances": 3, "run.duration_s": 30.0,
                                    "run.warmup_s": 1.0})
    calls = run_once(sc, seed=1).calls
    assert (calls["live_instance"] == calls["call_id"] % 3).all()


def test_injected_errors_per_execution_by_code() -> None:
    sc = Scenario().with_overrides({
        "reasoner.errors": {"internal": 0.1, "auth": 0.05}, "workload.calls_per_s": 4.0,
        "live.retry.max_attempts": 1, "run.duration_s": 600.0, "run.warmup_s": 1.0})
    ex = run_once(sc, seed=2).executions
    ran = ex[ex["disposition"] == "executed"]
    share = ran["error_code"].value_counts(normalize=False) / len(ran)
    assert share["internal"] == pytest.approx(0.10, abs=0.01)
    assert share["auth"] == pytest.approx(0.05, abs=0.008)
    assert (ran.loc[ran["error_code"].notna(), "status"] == "failed").all()


def test_service_time_grows_with_busy_workers() -> None:
    sc = Scenario().with_overrides({
        "reasoner.reasoning_time_s": 0.0, "reasoner.load_latency_base_s": 0.5,
        "reasoner.load_latency_k_s": 0.1, "workload.side_effect_share": 0.0,
        "workload.calls_per_s": 3.0, "run.duration_s": 200.0, "run.warmup_s": 1.0})
    ex = run_once(sc, seed=2).executions
    ran = ex[ex["disposition"] == "executed"].sort_values("service_start_s")
    svc = (ran["service_end_s"] - ran["service_start_s"]).to_numpy()
    # 0.5 + 0.1 * (busy workers including this one): 0.6, 0.7, ...
    steps = np.round((svc - 0.5) / 0.1, 9)
    assert (steps >= 1).all() and np.allclose(steps, np.round(steps)) and steps.max() >= 3


def test_private_simpy_access_is_confined_to_clock() -> None:
    """SimPy's private attributes (``_now``, ``_queue``, ``_eid``, ``_value``) and its
    ``events`` internals are used in sim/model/clock.py only: a SimPy upgrade touches one
    module.  (Plant ``self.env._now`` anywhere in sim/ and this fails.)"""
    import re
    from pathlib import Path

    from rtalab import sim

    root = Path(sim.__file__).parent
    private = re.compile(r"\._(now|queue|eid|value)\b|simpy\.events|\benv\.now\b")
    offenders = [f"{p.relative_to(root)}:{i}" for p in sorted(root.rglob("*.py"))
                 if p.name != "clock.py" or p.parent.name != "model"
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if private.search(line)]
    assert offenders == []
    assert private.search((root / "model" / "clock.py").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- hot-path builders


def _slots(obj: object) -> dict[str, object]:
    return {k: getattr(obj, k) for k in type(obj).__slots__}  # type: ignore[attr-defined]


def test_sent_requests_are_the_ones_request_init_builds() -> None:
    """LiveLayer._send builds each attempt's Request without ``Request.__init__`` (a class call
    costs more): every slot as ``Request(...)`` would set it, then the session's degraded flag
    and a continuation's ``resumes_task``.  Checked at the Reasoner's door, on handoff turns
    (two phases), degraded sessions (negotiation lost) and retries."""
    from rtalab.sim.model.world import World

    sc = one_turn(**{"workload.max_calls": 40, "workload.calls_per_s": 4.0,
                     "workload.turns_per_call": 3, "workload.handoff_share": 0.5,
                     "workload.side_effect_share": 0.5, "workload.caller_response_time_s": 0.3,
                     "live.timeouts.negotiation_s": 0.05, "network.uplink.latency_s": 0.03,
                     "network.downlink.latency_s": {"dist": "exp", "mean": 0.02},
                     "reasoner.errors": {"internal": 0.3}})
    w = World(sc, 2)
    assert w.live._up_latency is not None  # the fast uplink: the inlined send
    seen: list[tuple[dict[str, object], dict[str, object]]] = []
    arrive = w.reasoner.arrive

    def door(req: Request, dup: bool = False) -> None:
        t = req.turn
        want = Request(t, t.session.call_id, t.uid, t.guid, t.turn_id, t.session.context_id,
                       t.phase, t.side_effect and not (t.handoff and t.phase == 0),
                       t.handoff and t.phase == 0, t.phase_attempts, req.send_s, t.delay_s)
        if t.session.degraded:
            want.degraded = True
        if t.phase:
            want.resumes_task = t.turn_id == t.input_turn_id
        seen.append((_slots(req), _slots(want)))
        arrive(req, dup)

    w.live._on_request = door
    w.run()
    assert len(seen) > 100
    assert all(got == want for got, want in seen), next((g, w_) for g, w_ in seen if g != w_)
    kinds = {(g["phase"], g["degraded"], g["resumes_task"], g["attempt"] > 1) for g, _ in seen}  # type: ignore[operator]
    assert {(0, False, False, False), (1, False, True, False), (0, True, False, False)} <= kinds
    assert any(k[3] for k in kinds)  # retries among them


def test_store_entries_are_the_ones_entry_init_builds() -> None:
    """DedupStore.open builds its Entry without ``Entry.__init__``: the same slots."""
    from rtalab.sim.model.dedup import Entry

    store = DedupStore("request-guid", window_s=10.0, entry_bytes=100, peak_from_s=0.0)
    got = store.open(store.key(_req(7)), 0.0, 3, ("fp", 1))
    assert _slots(got) == _slots(Entry(3, ("fp", 1)))
