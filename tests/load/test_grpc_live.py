"""The Live users' gRPC channel (loadtests/live/grpc_channel.py) under gevent, on a real server.

Each check runs in a subprocess that patches gevent and turns on grpcio's gevent mode
first, as a Locust process does (importing Locust in this process would patch it), and
talks to a real Reasoner serving gRPC on 127.0.0.1 (plaintext, then mutual TLS):

- a turn's events read back as the Live layer's :class:`~rtalab.loadtests.live.wire.Event` s:
  sequenceIds, the echo from initial metadata, the worker, the end state;
- answers refused with a gRPC status carry the profile code of A2A §5.4 read backwards
  (UNAUTHENTICATED = auth, NOT_FOUND = session-not-found, RESOURCE_EXHAUSTED =
  rate-limited, INVALID_ARGUMENT = schema-validation) and the HTTP equivalent status;
- a dead address is a broken stream (``connection failed``), never a hang or a traceback;
- a Live-layer timer (a greenlet exception thrown while the call waits) ends the call at
  once and the process goes on (gevent mode: a blocked call never stalls the hub);
- ``CancelTask`` and ``GetTask`` over gRPC;
- over mutual TLS, the channel verifies the server and presents its client certificate;
  without it, a one-line cause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rtalab.loadtests.common.certs import Pki, make_pki
from rtalab.loadtests.common.procs import ManagedProcess, free_port, start_reasoner
from rtalab.loadtests.common.tls import ClientTls, ServerTls

SCENARIO = """
[workload]
side_effect_share = 0.0
[reasoner]
reasoning_time_s = 0.02
chunks = 3
chunk_interval_s = 0.01
"""

PROBE = r"""
import json, sys, time
import gevent, gevent.monkey
gevent.monkey.patch_all()
from rtalab.loadtests.live.grpc_channel import GrpcChannel, init_gevent, grpc_address
init_gevent()
from locust.event import Events
from rtalab.loadtests.common.tls import ClientTls
from rtalab.loadtests.live.call import StreamBroken
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI as EXT, Ids, parse_event, streaming_request

address, secure, token, tls_json = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
tls = ClientTls(**json.loads(tls_json))
events = Events()
stats = []
events.request.add_listener(lambda **kw: stats.append((kw["request_type"], kw["name"],
                                                       kw["exception"] is None)))
out = {}

def body(active, text="hi", task=None, ctx=None, n=[0]):
    n[0] += 1
    ids = Ids(f"m{n[0]}-{time.time()}", f"g{n[0]}-{time.time()}", "t", "i", ctx, task)
    return streaming_request(f"r{n[0]}", ids, EXT, active, text=text, side_effect=False,
                             handoff=False)

def turn(ch, active=True, **kw):
    try:
        ex = ch.send("r", body(active, **kw), active)
    except StreamBroken as e:
        return {"broken": str(e)}
    evs = []
    while (f := ex.next_frame()) is not None:
        ev = parse_event(f, EXT)
        evs.append({"kind": ev.kind, "state": ev.state, "seq": ev.sequence_id,
                    "code": ev.error_code, "task": ev.task_id})
        if ev.ends_stream:
            break
    ex.close()
    return {"http": ex.http_status, "echo": ex.echo, "worker": ex.worker, "events": evs}

ch = GrpcChannel(address, secure, EXT, token, events, tls)
out["turn"] = turn(ch)
if "broken" in out["turn"]:
    print(json.dumps(out))
    sys.exit(0)
out["plain"] = turn(ch, active=False)
out["bad_token"] = turn(GrpcChannel(address, secure, EXT, "wrong", events, tls))
out["too_big"] = turn(ch, text="x" * 2_000_000)
task = out["turn"]["events"][0]["task"]
out["get_known"] = ch.get_task(task, True)["result"]["task"]["status"]["state"]
g = ch.get_task("no-such-task", True)
out["get_unknown"] = [g["error"]["code"], g["error"]["data"][EXT + "/errorCode"]]
out["cancel_unknown"] = ch.cancel("c", "no-such-task", True)
out["dead"] = turn(GrpcChannel("127.0.0.1:" + sys.argv[5], False, EXT, token, events, tls))
# a Live-layer timer fires while the call waits for its next event (a slow turn)
slow = GrpcChannel(address, secure, EXT, token, events, tls)
t0 = time.time()
ex = slow.send("s", body(True), True)
beat = gevent.spawn(lambda: [gevent.sleep(0.01) for _ in range(20)])  # the hub keeps going
try:
    with gevent.Timeout(0.05):
        while ex.next_frame() is not None:
            pass
    out["timer"] = "no timeout"
except gevent.Timeout:
    ex.close("timeout")
    out["timer"] = "fired"
out["timer_s"] = time.time() - t0
beat.join(timeout=5)
out["hub_ran"] = beat.dead
out["after_timer"] = turn(slow)["events"][-1]["state"]
out["stats"] = sorted(set(map(tuple, stats)))
print(json.dumps(out))
"""


def _probe(address: str, secure: bool, token: str, tls: ClientTls) -> dict[str, Any]:
    tls_json = json.dumps({"ca": tls.ca, "client_cert": tls.client_cert,
                           "client_key": tls.client_key})
    p = subprocess.run([sys.executable, "-c", PROBE, address, "1" if secure else "0", token,
                        tls_json, str(free_port())], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def _grpc_address(proc: ManagedProcess, tls: ClientTls | None = None) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{proc.url}/.well-known/agent-card.json", timeout=20,
                                context=(tls or ClientTls()).context_for(proc.url)) as r:
        card = json.loads(r.read())
    return next(i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _reasoner(base: Path, server: ServerTls = ServerTls(),
              client: ClientTls | None = None) -> ManagedProcess:
    sc = base / "sc.toml"
    sc.write_text(SCENARIO, encoding="utf-8")
    return start_reasoner(dedup="memory", scenario=sc, server_tls=server, client_tls=client,
                          extra_args=["--grpc-port", "0", "--token", "tok=alice",
                                      "--test-hooks", "--log-level", "warning",
                                      "--set", "reasoner.reasoning_time_s=0.3"],
                          log_path=base / "reasoner.log")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    with _reasoner(tmp_path_factory.mktemp("plain")) as proc:
        yield proc


def _check_answers(out: dict[str, Any]) -> None:
    turn = out["turn"]
    assert turn["http"] == 200 and turn["echo"] is True and turn["worker"].isdigit(), turn
    kinds = [e["kind"] for e in turn["events"]]
    assert kinds[0] == "task" and kinds.count("artifact") == 3, kinds
    seqs = [e["seq"] for e in turn["events"][1:]]
    assert seqs == sorted(seqs) and None not in seqs, seqs
    assert turn["events"][-1]["state"] == "TASK_STATE_COMPLETED"
    assert out["plain"]["echo"] is False
    assert [e["seq"] for e in out["plain"]["events"]] == [None] * len(out["plain"]["events"])
    assert out["plain"]["events"][-1]["state"] == "TASK_STATE_COMPLETED"
    # refused with a status: the profile's code, the HTTP equivalent
    bad = out["bad_token"]
    assert bad["http"] == 401 and [e["code"] for e in bad["events"]] == ["auth"], bad
    big = out["too_big"]
    assert big["http"] == 429 and [e["code"] for e in big["events"]] == ["rate-limited"], big
    assert out["get_known"] == "TASK_STATE_COMPLETED"
    assert out["get_unknown"] == [404, "session-not-found"]
    assert out["cancel_unknown"] is None
    assert out["dead"]["broken"].startswith("connection failed: gRPC UNAVAILABLE"), out["dead"]
    assert "\n" not in out["dead"]["broken"]
    assert out["timer"] == "fired" and out["timer_s"] < 0.3 + 5.0 and out["hub_ran"], out
    assert out["after_timer"] == "TASK_STATE_COMPLETED"
    assert ("gRPC", "SendStreamingMessage", True) in {tuple(s) for s in out["stats"]}
    assert ("gRPC", "CancelTask", False) in {tuple(s) for s in out["stats"]}


def test_the_live_grpc_channel_on_a_real_server(plain: ManagedProcess) -> None:
    _check_answers(_probe(_grpc_address(plain), False, "tok", ClientTls()))


def test_the_live_grpc_channel_over_mutual_tls(pki: Pki,
                                               tmp_path_factory: pytest.TempPathFactory
                                               ) -> None:
    server = ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca))
    client = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    with _reasoner(tmp_path_factory.mktemp("mtls"), server, client) as proc:
        address = _grpc_address(proc, client)
        _check_answers(_probe(address, True, "tok", client))
        # no client certificate: every request is a broken stream naming the TLS failure
        out = _probe(address, True, "tok", ClientTls(str(pki.ca)))
        broken = out["turn"]["broken"]
        assert broken.startswith("connection failed: client certificate required"), out
        assert broken.endswith("(gRPC UNAVAILABLE)") and "\n" not in broken
        # a CA that did not sign the server's certificate: named too
        out = _probe(address, True, "tok", ClientTls(None, str(pki.client.cert),
                                                     str(pki.client.key)))
        assert out["turn"]["broken"].startswith("connection failed: unknown CA"), out
