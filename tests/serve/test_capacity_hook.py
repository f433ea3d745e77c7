"""A capacity drop of the real Reasoner (``POST /test/capacity``, only with ``--test-hooks``):
the pool's ``set_workers`` in one process and through the broker of several, the wire hook,
and the load run's schedule of the scenario's ``reasoner.capacity_drops``."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from rtalab.loadtests.common.procs import ManagedProcess
from rtalab.loadtests.reasoner.capacity import Capacity, RemoteCapacity, start_broker
from tests.serve.conftest import ALICE, FAST_SCENARIO, Reasoner, headers, message, stream, uid


def test_set_workers_holds_new_turns_and_releases_them() -> None:
    async def run() -> None:
        cap = Capacity(2, 10)
        await cap.acquire()
        await cap.acquire()
        cap.set_workers(0)  # both in service finish; nobody new starts
        waiting = asyncio.create_task(cap.acquire())
        await asyncio.sleep(0)
        cap.release()
        cap.release()
        await asyncio.sleep(0)
        assert not waiting.done() and cap.busy == 0 and cap.waiting == 1
        cap.set_workers(2)  # the end of the drop: the waiting turn starts at once
        await asyncio.wait_for(waiting, 1.0)
        assert cap.busy == 1 and cap.waiting == 0

    asyncio.run(run())


def test_set_workers_through_the_broker(tmp_path: Path) -> None:
    cap = Capacity(1, 10)
    start_broker(cap, str(tmp_path / "cap.sock"))

    async def run() -> None:
        a, b = RemoteCapacity(str(tmp_path / "cap.sock"), 1), \
            RemoteCapacity(str(tmp_path / "cap.sock"), 1)
        await a.set_workers(0)
        held = asyncio.create_task(b.admit())
        for _ in range(200):  # until the broker has it in line (bounded)
            if cap.waiting:
                break
            await asyncio.sleep(0.01)
        assert cap.waiting == 1 and not held.done()
        await a.set_workers(1)
        await asyncio.wait_for(held, 5.0)
        b.release()
        await a.close()
        await b.close()

    asyncio.run(run())
    assert cap.workers == 1


def test_the_wire_hook_drops_and_restores_capacity(tmp_path: Path,
                                                   witness_server: ManagedProcess) -> None:
    from tests.serve.conftest import start_test_reasoner

    with start_test_reasoner(tmp_path, witness=witness_server.url,
                             scenario=FAST_SCENARIO + "workers = 2\n") as proc:
        r = Reasoner(proc)
        hook = f"{r.url}/test/capacity"
        auth = headers(ALICE, sse=False)
        for bad in ({"workers": -1}, {"workers": "2"}, {"nope": 1}, {"workers": True}):
            resp = httpx.post(hook, json=bad, headers=auth, timeout=10)
            assert resp.status_code == 400 and "workers" in resp.json()["error"]
        assert httpx.post(hook, content=b"{", headers=auth, timeout=10).status_code == 400
        assert httpx.post(hook, json={"workers": 0}, timeout=10).status_code == 401
        assert httpx.post(hook, json={"workers": 0}, headers=auth,
                          timeout=10).json() == {"workers": 0}
        with ThreadPoolExecutor(1) as pool:
            turn = pool.submit(r.send, "sse", stream(message(ctx=uid("c"))))
            for _ in range(500):  # until the turn is in the Reasoner (bounded)
                if r.get_json("/healthz")["inFlight"]:
                    break
            assert r.get_json("/healthz")["inFlight"] == 1
            assert not turn.done()  # no worker: it cannot complete
            assert httpx.post(hook, json={"workers": 2}, headers=auth,
                              timeout=10).status_code == 200
            assert turn.result(timeout=30).final_state == "TASK_STATE_COMPLETED"


def test_no_hook_without_test_hooks(tmp_path: Path) -> None:
    from rtalab.loadtests.common.procs import start_reasoner

    (tmp_path / "s.toml").write_text(FAST_SCENARIO, encoding="utf-8")
    with start_reasoner(workers=1, dedup=f"sqlite:///{tmp_path / 'd.sqlite'}",
                        scenario=tmp_path / "s.toml", log_path=tmp_path / "r.log",
                        extra_args=["--token", "t=alice"]) as proc:
        resp = httpx.post(f"{proc.url}/test/capacity", json={"workers": 0},
                          headers={"Authorization": "Bearer t"}, timeout=10)
        assert resp.status_code == 404


def test_load_run_schedule_and_trigger(tmp_path: Path) -> None:
    from rtalab.loadtests.loadrun.orchestrate import (
        CAPACITY_LEDGER,
        capacity_schedule,
        load_trigger,
    )
    from rtalab.sim.scenario import load_scenario

    sc = load_scenario("retry_storm")  # 8 workers, 2 from 120 s for 40 s
    assert capacity_schedule(sc) == [(120, 2), (160, 8)]
    two = sc.with_overrides({"reasoner.capacity_drops": [
        {"start_s": 10, "duration_s": 20, "workers": 4},
        {"start_s": 15, "duration_s": 5, "workers": 1}]})
    assert capacity_schedule(two) == [(10, 4), (15, 1), (20, 4), (30, 8)]
    assert load_trigger(sc, tmp_path) is None  # nothing enacted: no trigger
    (tmp_path / "ledger").mkdir()
    rows = [{"at_s": 120, "start_s": 120.2, "workers": 2, "status": 200},
            {"at_s": 160, "start_s": 160.1, "workers": 8, "status": 200}]
    (tmp_path / "ledger" / CAPACITY_LEDGER).write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert load_trigger(sc, tmp_path) == (120.2, 160.1)
