"""The Reasoner's own dependency fails: a real redis-server killed (SIGKILL) or frozen
(SIGSTOP/SIGCONT) mid-turn, a real small filesystem under the SQLite store filling mid-turn.

Every answer is checked against the witness (the tool's own ledger): an answer that says
"nothing of it ran" must have no execution behind it, COMPLETED must have one; no guid runs
twice; store failures are FAILED ``internal`` (retryable, ``retryAfterMs`` when transient)
with a safe text on every binding (JSON-RPC SSE, JSON-RPC SendMessage, REST, WebSocket),
counted per cause in /metrics, never a traceback (unhandled-exceptions counter 0), and
/readyz reports the store unhealthy while it is (docs/reasoner.md "When the dedup store
fails").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from rtalab.loadtests.common.procs import ManagedProcess, free_port, start_redis
from tests.serve.conftest import (
    FAST_SCENARIO,
    TIMEOUT_S,
    Reasoner,
    headers,
    k,
    ledger_summary,
    message,
    set_faults,
    start_test_reasoner,
    stream,
    uid,
)

BINDINGS = ("sse", "send", "rest", "ws", "grpc")
SCENARIO = FAST_SCENARIO.replace("upstream_timeout_s = 0.5", "upstream_timeout_s = 10")
NOT_RUN = "nothing of it ran"


# ---------------------------------------------------------------------------- helpers


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """Poll ``cond`` (a fact of another process) until true."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def _pay(ctx: str, guid: str, delay_s: float = 0.0) -> dict[str, Any]:
    """A side-effect turn (reasoning ``delay_s`` first)."""
    meta: dict[str, Any] = {k("sideEffect"): True}
    if delay_s:
        meta[k("test.delayS")] = delay_s
    return message("pay 10 to Bob", ctx=ctx, guid=guid, meta=meta)


def _status_of_rest(r: Reasoner, msg: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    """POST /message:stream; (HTTP status, final status, raw body)."""
    last: dict[str, Any] = {}
    raw = []
    with httpx.Client(timeout=TIMEOUT_S) as c, c.stream(
            "POST", r.url + "/message:stream", headers=headers(),
            json={"message": msg}) as resp:
        for line in resp.iter_lines():
            raw.append(line)
            if line.startswith("data:"):
                ev = json.loads(line[5:])
                if "statusUpdate" in ev:
                    last = ev["statusUpdate"]["status"]
                elif "task" in ev:
                    last = ev["task"]["status"]
        return resp.status_code, last, "\n".join(raw)


def answer(r: Reasoner, binding: str, msg: dict[str, Any]) -> dict[str, Any]:
    """One request over ``binding``; its final status, summarised (state, code, retry,
    sideEffect, text, raw answer).  Every answer must be a well-formed A2A answer (HTTP 200,
    no JSON-RPC error)."""
    if binding == "rest":
        code, status, raw = _status_of_rest(r, msg)
        assert code == 200, raw
    elif binding == "send":
        resp = r.call("SendMessage", {"message": msg})
        raw = json.dumps(resp)
        assert "error" not in resp, raw
        result = resp["result"]
        status = (result.get("task") or result)["status"]
    else:
        turn = r.send(binding, stream(msg))
        raw = json.dumps(turn.frames)
        assert turn.status == 200 and not turn.errors, raw
        ev = turn.final
        status = (ev.get("statusUpdate") or ev.get("task"))["status"]
    md = status.get("message", {}).get("metadata", {})
    return {"state": status["state"], "code": md.get(k("errorCode")),
            "retry": md.get(k("retryAfterMs")), "sideEffect": md.get(k("sideEffect")),
            "text": "".join(p.get("text", "") for p in status.get("message", {})
                            .get("parts", [])), "raw": raw}


def executions(witness: str, ctx: str) -> int:
    """Executions of ``ctx`` in the witness ledger."""
    return int(ledger_summary(witness, ctx)["executions"])


def metric(r: Reasoner, name: str, **labels: str) -> float:
    """The sum of a metric's samples matching ``labels``."""
    total = 0.0
    for line in r.metrics().splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r"[^{ ]+(?:\{(.*)\})? (\S+)$", line)
        assert m is not None, line
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(got.get(key) == v for key, v in labels.items()):
            total += float(m.group(2))
    return total


def ready(r: Reasoner) -> int:
    """The /readyz status code."""
    return httpx.get(r.url + "/readyz", timeout=TIMEOUT_S).status_code


def check_truthful(a: dict[str, Any], ran: int) -> None:
    """An answer is never contradicted by the witness (``ran`` executions of its guid)."""
    if a["state"] == "TASK_STATE_COMPLETED":
        assert ran == 1, a
    if NOT_RUN in a["text"]:
        assert ran == 0, a
    assert ran <= 1, a


def check_safe(a: dict[str, Any], port: int | None = None) -> None:
    """A store failure: FAILED internal, retryable, nothing about the store's address."""
    assert (a["state"], a["code"]) == ("TASK_STATE_FAILED", "internal"), a
    leaks = ["127.0.0.1", "Error ", "Traceback", "redis", "sqlite", "dedup.sqlite"]
    for leak in leaks + ([f":{port}"] if port else []):
        assert leak not in a["raw"], (leak, a["raw"])


def check_quiet(r: Reasoner) -> None:
    """No traceback was logged (the unhandled-exceptions counter stays 0)."""
    assert metric(r, "rta_reasoner_unhandled_exceptions_total") == 0, r.proc.log_tail()
    assert "Traceback" not in r.proc.log_text()


def in_background(fn: Callable[[], dict[str, Any]]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a thread; its result lands in the list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # reported by the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def joined(t: threading.Thread, out: list[Any]) -> dict[str, Any]:
    """The background request's answer."""
    t.join(TIMEOUT_S + 10)
    assert out, "the request never answered"
    if isinstance(out[0], BaseException):
        raise out[0]
    return dict(out[0])


class RedisBox:
    """A redis-server on a fixed port that the test may kill, freeze and restart."""

    def __init__(self, base: Path, aof: bool):
        self.base = base
        self.port = free_port()
        self.args = ["--appendonly", "yes", "--appendfsync", "always"] if aof else []
        self.proc: ManagedProcess | None = None
        self.start()

    @property
    def url(self) -> str:
        """The store URL (commands time out after 0.5 s: a frozen server is noticed soon)."""
        return f"redis://127.0.0.1:{self.port}/0?timeout_s=0.5"

    def start(self) -> None:
        """(Re)start on the same port and directory (the AOF, if any, is reloaded)."""
        self.proc = start_redis(port=self.port, dir=self.base, extra_args=self.args,
                                log_path=self.base / "redis.log")

    def kill(self) -> None:
        """SIGKILL."""
        assert self.proc is not None
        self.proc.kill(signal.SIGKILL)
        self.proc.wait(10)

    def signal(self, sig: int) -> None:
        """SIGSTOP / SIGCONT."""
        assert self.proc is not None
        self.proc.signal_group(sig)

    def entries(self, ctx: str) -> int:
        """Dedup entries of ``ctx`` (the Reasoner percent-encodes ':' in scopes)."""
        c = redis.Redis(port=self.port, socket_timeout=2)
        try:
            return len(list(c.scan_iter(match=f"rta:dedup:*{ctx}*")))
        finally:
            c.close()

    def stop(self) -> None:
        """Stop it (resumed first if frozen)."""
        if self.proc is not None:
            self.proc.signal_group(signal.SIGCONT)
            self.proc.stop(5)


@pytest.fixture
def redis_box(tmp_path: Path) -> Iterator[RedisBox]:
    """A redis-server without persistence, on a port of its own."""
    box = RedisBox(tmp_path / "redis", aof=False)
    yield box
    box.stop()


@pytest.fixture
def aof_box(tmp_path: Path) -> Iterator[RedisBox]:
    """A redis-server with AOF persistence (fsync every write)."""
    (tmp_path / "aof").mkdir()
    box = RedisBox(tmp_path / "aof", aof=True)
    yield box
    box.stop()


@contextlib.contextmanager
def reasoner_on(tmp_path: Path, witness_server: ManagedProcess, dedup: str) -> Iterator[Reasoner]:
    """A Reasoner on ``dedup`` attached to the session witness."""
    with start_test_reasoner(tmp_path / "reasoner", witness=witness_server.url, dedup=dedup,
                             scenario=SCENARIO) as proc:
        yield Reasoner(proc)


# ---------------------------------------------------------------------------- Redis


@pytest.mark.parametrize("binding", BINDINGS)
def test_redis_killed_between_claim_and_side_effect_fails_closed(
        tmp_path: Path, witness_server: ManagedProcess, witness: str, redis_box: RedisBox,
        binding: str) -> None:
    """SIGKILL of Redis after the claim, before the tool call: the side effect is never
    started (its start cannot be recorded); the answer is FAILED internal with
    retryAfterMs, a safe text; a new request meanwhile too; /readyz says 503; once Redis is
    back (empty: no persistence) the same guid runs once and is then replayed."""
    ctx, guid = uid("c"), uid("g")
    with reasoner_on(tmp_path, witness_server, redis_box.url) as r:
        assert ready(r) == 200
        t, out = in_background(lambda: answer(r, binding, _pay(ctx, guid, delay_s=1.0)))
        _until(lambda: redis_box.entries(ctx) > 0, "the claim is in Redis")
        redis_box.kill()
        first = joined(t, out)
        check_safe(first, redis_box.port)
        assert first["retry"] == 1000 and NOT_RUN in first["text"], first
        meanwhile = answer(r, binding, _pay(uid("c"), uid("g")))  # the claim itself fails
        check_safe(meanwhile, redis_box.port)
        assert meanwhile["retry"] == 1000
        assert meanwhile["sideEffect"] == "unknown"  # an earlier copy may have run
        assert NOT_RUN not in meanwhile["text"]
        assert ready(r) == 503
        assert r.get_json("/healthz")["store"]["healthy"] is False
        assert executions(witness, ctx) == 0
        check_truthful(first, executions(witness, ctx))
        redis_box.start()
        _until(lambda: ready(r) == 200, "/readyz after Redis is back")
        again = answer(r, binding, _pay(ctx, guid))
        assert again["state"] == "TASK_STATE_COMPLETED", again
        replay = answer(r, binding, _pay(ctx, guid))
        assert replay["state"] == "TASK_STATE_COMPLETED", replay
        assert executions(witness, ctx) == 1
        assert metric(r, "rta_reasoner_store_failures_total", cause="down") >= 2
        assert metric(r, "rta_reasoner_side_effects_total", result="unrecorded") == 1
        check_quiet(r)


@pytest.mark.parametrize("binding", BINDINGS)
def test_redis_frozen_during_the_tool_call_then_retries_get_the_outcome(
        tmp_path: Path, witness_server: ManagedProcess, witness: str, redis_box: RedisBox,
        binding: str) -> None:
    """SIGSTOP of Redis while the tool runs: the turn's answer is the truth (COMPLETED, it
    ran); a retry while frozen gets that outcome from the worker that holds it (not 30 s of
    "in progress"), another request FAILED internal with sideEffect unknown at once; after
    SIGCONT the owner's deferred outcome lands and a retry gets it within seconds; the
    witness saw exactly one execution."""
    ctx, guid = uid("c"), uid("g")
    set_faults(witness, latencyS=1.0)
    with reasoner_on(tmp_path, witness_server, redis_box.url) as r:
        t, out = in_background(lambda: answer(r, binding, _pay(ctx, guid)))
        _until(lambda: int(ledger_summary(witness, ctx)["executingInContext"]) == 1,
               "the tool call under way")
        redis_box.signal(signal.SIGSTOP)
        try:
            first = joined(t, out)
            assert first["state"] == "TASK_STATE_COMPLETED", first
            t0 = time.monotonic()
            frozen = answer(r, binding, _pay(ctx, guid))  # answered from the owner's memory
            assert frozen["state"] == "TASK_STATE_COMPLETED", frozen
            other = answer(r, binding, _pay(uid("c"), uid("g")))  # unknown to this worker
            assert time.monotonic() - t0 < 5.0
            check_safe(other, redis_box.port)
            assert other["retry"] == 1000 and other["sideEffect"] == "unknown", other
            assert ready(r) == 503
        finally:
            redis_box.signal(signal.SIGCONT)
        _until(lambda: ready(r) == 200, "/readyz after SIGCONT")
        t0 = time.monotonic()
        again = answer(r, binding, _pay(ctx, guid))
        assert time.monotonic() - t0 < 10.0
        assert again["state"] == "TASK_STATE_COMPLETED", again
        ran = executions(witness, ctx)
        assert ran == 1
        for a in (first, frozen, other, again):
            check_truthful(a, ran)
        assert metric(r, "rta_reasoner_store_failures_total", cause="timeout") >= 1
        check_quiet(r)


def test_redis_with_aof_killed_during_the_tool_call_answers_the_truth(
        tmp_path: Path, witness_server: ManagedProcess, witness: str, aof_box: RedisBox) -> None:
    """Redis with AOF (fsync always) SIGKILLed while the tool runs, restarted from its AOF:
    the owner's deferred outcome is stored once Redis is back, so retries get COMPLETED (it
    ran), never "nothing ran"; one execution."""
    set_faults(witness, latencyS=1.0)
    ctx = uid("c")
    guids = [uid("g") for _ in range(3)]
    with reasoner_on(tmp_path, witness_server, aof_box.url) as r:
        threads = [in_background(lambda g=g: answer(r, "sse", _pay(ctx, g))) for g in guids]
        _until(lambda: int(ledger_summary(witness, ctx)["executingInContext"]) == 3,
               "three tool calls under way")
        aof_box.kill()
        firsts = [joined(t, out) for t, out in threads]
        aof_box.start()
        _until(lambda: ready(r) == 200, "/readyz after the restart")
        agains = [answer(r, "ws", _pay(ctx, g)) for g in guids]
        ran = executions(witness, ctx)
        assert ran == 3
        for a in firsts + agains:
            check_truthful(a, 1)
        assert all(a["state"] == "TASK_STATE_COMPLETED" for a in agains), agains
        check_quiet(r)


def test_volatile_redis_killed_during_the_tool_call_never_runs_twice(
        tmp_path: Path, witness_server: ManagedProcess, witness: str, redis_box: RedisBox) -> None:
    """Redis WITHOUT persistence SIGKILLed while the tool runs and restarted empty: the worker
    that holds the unstored outcome answers retries with it and writes it into the new Redis,
    so the side effect never runs twice (a retry on ANOTHER worker would run it again: the
    documented limit of a volatile store).  The retry by ``SendMessage`` has another
    fingerprint (the method is part of it): refused ``schema-validation`` whether it comes
    while the outcome is held or after it was written -- never claimed in the empty Redis
    (the clean-clone CI once saw it claim there, race the held write and be told "nothing
    ran")."""
    set_faults(witness, latencyS=1.0)
    ctx, guid = uid("c"), uid("g")
    with reasoner_on(tmp_path, witness_server, redis_box.url) as r:
        t, out = in_background(lambda: answer(r, "sse", _pay(ctx, guid)))
        _until(lambda: int(ledger_summary(witness, ctx)["executingInContext"]) == 1,
               "the tool call under way")
        redis_box.kill()
        first = joined(t, out)
        redis_box.start()
        _until(lambda: ready(r) == 200, "/readyz after the restart")
        agains = [answer(r, b, _pay(ctx, guid)) for b in BINDINGS]
        _until(lambda: redis_box.entries(ctx) > 0, "the outcome written into the new Redis")
        assert executions(witness, ctx) == 1
        late = answer(r, "send", _pay(ctx, guid))  # after the write: the same refusal
        assert executions(witness, ctx) == 1
        for who, a in zip(("first", *BINDINGS, "send-late"), (first, *agains, late),
                         strict=True):
            if who.startswith("send"):
                assert (a["state"], a["code"]) == ("TASK_STATE_FAILED", "schema-validation"), \
                    (who, a)
            else:
                assert a["state"] == "TASK_STATE_COMPLETED", (who, a)
        check_quiet(r)


def test_a_held_outcome_refuses_a_reuse_of_its_key_by_another_request(
        redis_box: RedisBox) -> None:
    """The store guard over a real Redis that is down: the outcome it could not store is held
    and answers the key meanwhile -- its own retry (same fingerprint, or none) replayed, a
    request reusing the key with another fingerprint refused as a conflict (the store's
    rule), never sent to a store that may have lost the entry; once Redis is back (empty)
    the deferred write lands with the fingerprint, and the same answers hold."""
    from rtalab.loadtests.dedup import open_store
    from rtalab.loadtests.dedup.base import StoreUnavailable
    from rtalab.loadtests.reasoner.storeguard import GuardedStore

    async def main() -> list[str]:
        store = GuardedStore(open_store(redis_box.url, 60.0, lease_s=30.0))
        await store.start()
        try:
            now = time.time()
            assert (await store.claim("c", "g:1", "A", now, fingerprint="x")).state == "new"
            redis_box.kill()
            with pytest.raises(StoreUnavailable):
                await store.complete("c", "g:1", {"paid": 10}, now, owner="A")
            store.defer_write("complete", "c", "g:1", "A", {"paid": 10}, "x")
            got = [(await store.claim("c", "g:1", o, now, fingerprint=f)).state
                   for o, f in (("B", "y"), ("D", "x"), ("E", ""))]
            redis_box.start()
            deadline = time.monotonic() + 15.0
            while store._unstored and time.monotonic() < deadline:  # the deferred write
                await asyncio.sleep(0.05)
            assert not store._unstored, "the held outcome was never written"
            got += [(await store.claim("c", "g:1", o, time.time(), fingerprint=f)).state
                    for o, f in (("F", "y"), ("G", "x"))]
            return got
        finally:
            await store.close()

    assert asyncio.run(main()) == ["conflict", "done", "done", "conflict", "done"]


# ---------------------------------------------------------------------------- SQLite


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (skipped where this runner may not mount one)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _fill(fs: Path) -> Path:
    """Fill ``fs`` to the last byte; the filler file."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 10, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def _in_flight(db: Path, ctxs: list[str]) -> int:
    """In-flight claims of ``ctxs`` in the SQLite file (read-only)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as c:
        return sum(c.execute("SELECT count(*) FROM dedup WHERE state = 'in_flight' AND "
                             "context_id LIKE ?", (f"%{ctx}",)).fetchone()[0] for ctx in ctxs)


@pytest.mark.parametrize("binding", BINDINGS)
def test_sqlite_disk_full_mid_turn_fails_closed_then_recovers(
        tmp_path: Path, witness_server: ManagedProcess, witness: str, small_fs: Path,
        binding: str) -> None:
    """The filesystem under the SQLite store fills while a turn reasons: whatever the store
    can still write, no answer is contradicted by the witness and no guid runs twice; the
    failures are FAILED internal (no retryAfterMs: an operator must free space) with a safe
    text, counted as cause "full"; after space is freed the same guids are answered right."""
    ctxs = [uid("c") for _ in range(3)]
    guids = [uid("g") for _ in ctxs]
    with reasoner_on(tmp_path, witness_server, f"sqlite:///{small_fs / 'dedup.sqlite'}") as r:
        assert answer(r, binding, _pay(uid("c"), uid("g")))["state"] == "TASK_STATE_COMPLETED"
        threads = [in_background(lambda c=c, g=g: answer(r, binding, _pay(c, g, delay_s=1.0)))
                   for c, g in zip(ctxs, guids, strict=True)]
        _until(lambda: _in_flight(small_fs / "dedup.sqlite", ctxs) == len(ctxs),
               "every claim is in the store")
        filler = _fill(small_fs)
        firsts = [joined(t, out) for t, out in threads]
        assert any(NOT_RUN in a["text"] for a in firsts), firsts  # the fault was exercised
        during = answer(r, binding, _pay(uid("c"), uid("g")))
        check_safe(during)
        assert during["retry"] is None
        assert ready(r) == 503
        assert metric(r, "rta_reasoner_store_failures_total", cause="full") >= 1
        for ctx, a in zip(ctxs, firsts, strict=True):
            check_truthful(a, executions(witness, ctx))
            if a["state"] != "TASK_STATE_COMPLETED":
                check_safe(a)
        filler.unlink()
        agains = [answer(r, binding, _pay(c, g)) for c, g in zip(ctxs, guids, strict=True)]
        for ctx, a in zip(ctxs, agains, strict=True):
            ran = executions(witness, ctx)
            check_truthful(a, ran)
            assert ran == 1 and a["state"] == "TASK_STATE_COMPLETED", a
        _until(lambda: ready(r) == 200, "/readyz after space is freed")
        check_quiet(r)


def test_a_dead_redis_at_start_is_one_line_exit_2() -> None:
    """Started on a Redis that does not answer: one line naming it, exit 2, no traceback."""
    port = free_port()
    r = subprocess.run([sys.executable, "-m", "rtalab.loadtests.reasoner", "--port",
                        str(free_port()), "--dedup", f"redis://127.0.0.1:{port}/0"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and f"redis://127.0.0.1:{port}/0 does not answer" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
