"""The HTTP+JSON (REST) Live users: request bodies, event and error mapping, and the channel
against the real reference Reasoner over mutual TLS (``POST /message:stream``,
``GET /tasks/{id}``, ``POST /tasks/{id}:cancel``), then whole load runs on ``rest``.

The channel runs in a subprocess (Locust's FastHttpSession under gevent, as under
``rtalab load run``); the Reasoner and the witness are real servers on 127.0.0.1 with
certificates made at run time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rtalab.loadtests.common.certs import Pki, make_pki
from rtalab.loadtests.common.procs import ManagedProcess, start_reasoner
from rtalab.loadtests.common.tls import ClientTls, ServerTls
from rtalab.loadtests.live.rest import rest_body, task_path
from rtalab.loadtests.live.wire import (
    DEFAULT_EXT_URI,
    Ids,
    http_error_frame,
    parse_event,
    rest_frame,
    streaming_request,
)

from .conftest import FAST, jsonl, load_run

P = DEFAULT_EXT_URI + "/"
IDS = Ids("m-1", "g-1", "t-1", "i-1", "ctx-1", None)


@pytest.mark.parametrize("extra", [None, {"test.forceError": "internal"}])
def test_rest_body_is_the_jsonrpc_params(extra: dict[str, Any] | None) -> None:
    body = streaming_request("r-1", IDS, DEFAULT_EXT_URI, True, text="hi \u00e9", side_effect=True,
                             handoff=False, extra_meta=extra)
    assert json.loads(rest_body(body)) == json.loads(body)["params"]
    other = json.dumps({"params": {"message": {"messageId": "x"}}, "jsonrpc": "2.0"}).encode()
    assert json.loads(rest_body(other)) == {"message": {"messageId": "x"}}  # not last: decoded


def test_task_path_encodes_the_id() -> None:
    assert task_path("a/b c") == "/tasks/a%2Fb%20c"
    assert task_path("t-1", ":cancel") == "/tasks/t-1:cancel"


def test_stream_responses_read_as_on_jsonrpc() -> None:
    obj = {"statusUpdate": {"taskId": "t", "contextId": "c", "status": {
        "state": "TASK_STATE_FAILED", "message": {"metadata": {P + "errorCode": "rate-limited",
                                                                P + "retryAfterMs": 300}}},
        "metadata": {P + "sequenceId": 4}}}
    ev = parse_event(rest_frame(obj, DEFAULT_EXT_URI), DEFAULT_EXT_URI)
    assert (ev.kind, ev.state, ev.task_id, ev.sequence_id, ev.error_code, ev.retry_after_ms) == (
        "status", "TASK_STATE_FAILED", "t", 4.0, "rate-limited", 300.0)
    assert parse_event(rest_frame({"task": {"id": "t"}}, DEFAULT_EXT_URI),
                       DEFAULT_EXT_URI).task_id == "t"


def _google(code: int, status: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "status": status, "message": "m"}
    if meta is not None:
        err["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                           "reason": "R", "domain": "d", "metadata": meta}]
    return {"error": err}


# a google.rpc-style body (A2A HTTP+JSON errors) -> the profile's code and retryAfterMs
GOOGLE_CASES = [
    (401, _google(401, "UNAUTHENTICATED", {"errorCode": "auth"}), ("auth", None)),
    (400, _google(400, "FAILED_PRECONDITION", {P + "errorCode": "extension-inactive"}),
     ("extension-inactive", None)),
    (429, _google(429, "RESOURCE_EXHAUSTED", {P + "errorCode": "rate-limited",
                                              P + "retryAfterMs": "250"}), ("rate-limited", 250.0)),
    (404, _google(404, "NOT_FOUND", {}), ("session-not-found", None)),  # TaskNotFound: status
    (400, _google(400, "INVALID_ARGUMENT"), ("schema-validation", None)),
    (503, _google(503, "UNAVAILABLE", {"retryAfterMs": 1000}), ("internal", 1000.0)),
]


@pytest.mark.parametrize(("status", "body", "want"), GOOGLE_CASES)
def test_google_rpc_errors_map_to_profile_codes(status: int, body: dict[str, Any],
                                                want: tuple[str, float | None]) -> None:
    for answer in (json.dumps(body).encode(), body):  # refused before the stream, or during it
        ev = parse_event(http_error_frame(status, answer, {}, DEFAULT_EXT_URI), DEFAULT_EXT_URI)
        assert ev.kind == "error" and (ev.error_code, ev.retry_after_ms) == want
    ev = parse_event(rest_frame(body, DEFAULT_EXT_URI), DEFAULT_EXT_URI)  # an `event: error`
    assert (ev.error_code, ev.retry_after_ms) == want


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def reasoner(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """The reference Reasoner requiring client certificates, one bearer token."""
    base = tmp_path_factory.mktemp("rest")
    scenario = base / "fast.toml"
    scenario.write_text(FAST, encoding="utf-8")
    with start_reasoner(scenario=scenario, dedup="memory",
                        server_tls=ServerTls(str(pki.server.cert), str(pki.server.key),
                                             str(pki.ca)),
                        client_tls=ClientTls(str(pki.ca), str(pki.client.cert),
                                             str(pki.client.key)),
                        extra_args=["--token", "tok=alice", "--log-level", "warning"],
                        log_path=base / "reasoner.log") as r:
        yield r


CLIENT = """
import json, sys
from locust.env import Environment
from locust.contrib.fasthttp import FastHttpSession
from rtalab.loadtests.common.tls import ClientTls
from rtalab.loadtests.live.rest import RestChannel
from rtalab.loadtests.live.call import StreamBroken
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI as EXT, Ids, parse_event, streaming_request
url, ca, cert, key, token = sys.argv[1:6]
tls = ClientTls(ca or None, cert or None, key or None)
env = Environment()
rows = []
env.events.request.add_listener(lambda request_type, name, exception, **kw: rows.append(
    [request_type, name, exception is None]))
session = FastHttpSession(url, env.events.request, None, insecure=False,
                          ssl_context_factory=tls.new_context)
ch = RestChannel(session, EXT, token)
out = {}

def turn(label, active, task_id=None, guid="g-1"):
    body = streaming_request("r", Ids("m-" + label, guid, "t-" + label, "i-" + label, None,
                                      task_id), EXT, active, text="hi", side_effect=False,
                             handoff=False)
    try:
        ex = ch.send("r", body, active)
    except StreamBroken as e:
        out[label] = {"broken": str(e)}
        return
    evs = []
    while (f := ex.next_frame()) is not None:
        evs.append(parse_event(f, EXT))
    ex.close()
    out[label] = {"status": ex.http_status, "echo": ex.echo, "worker": ex.worker is not None,
                  "kinds": [e.kind for e in evs], "end": evs[-1].state or evs[-1].error_code,
                  "task": evs[0].task_id, "seq": [e.sequence_id for e in evs]}

turn("active", True)
turn("replay", True)  # the same requestGuid in the same (minted) context: a new session here
turn("degraded", False, guid="g-2")
if out["active"].get("task"):
    got = ch.get_task(out["active"]["task"], True)
    ev = parse_event(got, EXT)
    out["get"] = [ev.kind, got["result"]["task"]["status"]["state"], ev.task_id]
    ev = parse_event(ch.get_task("no-such-task", True), EXT)
    out["get_unknown"] = [ev.kind, ev.error_code]
    out["cancel_done"] = ch.cancel("c", out["active"]["task"], True)
out["stats"] = rows
print(json.dumps(out))
"""


def _client(url: str, pki: Pki | None, token: str, client_cert: bool = True
            ) -> subprocess.CompletedProcess[str]:
    args = [str(pki.ca), str(pki.client.cert) if client_cert else "",
            str(pki.client.key) if client_cert else ""] if pki else ["", "", ""]
    return subprocess.run([sys.executable, "-c", CLIENT, url, *args, token],
                          capture_output=True, text=True, timeout=90)


def test_channel_against_the_reasoner_over_mutual_tls(reasoner: ManagedProcess, pki: Pki) -> None:
    p = _client(reasoner.url, pki, "tok")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    a = out["active"]
    assert (a["status"], a["echo"], a["worker"], a["end"]) == (
        200, True, True, "TASK_STATE_COMPLETED")
    assert a["kinds"][0] == "task" and "artifact" in a["kinds"] and a["kinds"][-1] == "status"
    assert a["seq"][1:] == sorted(a["seq"][1:]) and None not in a["seq"][1:]
    d = out["degraded"]  # no A2A-Extensions asked: no echo, core A2A
    assert (d["status"], d["echo"], d["end"]) == (200, False, "TASK_STATE_COMPLETED")
    assert out["get"] == ["task", "TASK_STATE_COMPLETED", a["task"]]
    assert out["get_unknown"] == ["error", "session-not-found"]  # 404 TaskNotFound
    assert out["cancel_done"] is None  # a finished task: not cancelable, advisory, no raise
    names = {(t, n) for t, n, _ in out["stats"]}
    assert {("POST", "message:stream"), ("GET", "tasks:get"), ("POST", "tasks:cancel")} <= names


def test_refusals_are_read_with_their_codes(reasoner: ManagedProcess, pki: Pki) -> None:
    p = _client(reasoner.url, pki, "wrong-token")
    assert p.returncode == 0, p.stderr[-3000:]
    a = json.loads(p.stdout.strip().splitlines()[-1])["active"]
    assert (a["status"], a["kinds"], a["end"]) == (401, ["error"], "auth")


def test_certificates_are_verified(reasoner: ManagedProcess, pki: Pki, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other")  # a CA the server's certificate is not from
    for args, says in (((other, "tok"), "certificate"),
                       ((None, "tok"), "certificate")):
        p = _client(reasoner.url, *args)
        assert p.returncode == 0, p.stderr[-3000:]
        a = json.loads(p.stdout.strip().splitlines()[-1])["active"]
        assert "broken" in a and says in a["broken"].lower(), a
    p = _client(reasoner.url, pki, "tok", client_cert=False)  # mTLS: no client certificate
    a = json.loads(p.stdout.strip().splitlines()[-1])["active"]
    assert "broken" in a, a


def test_rest_load_run_ledger_matches_server_and_witness(tmp_path: Path, read_json) -> None:
    p, run = load_run(tmp_path, "--binding", "rest", "--no-chaos")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert attempts and {a["binding"] for a in attempts} == {"rest"}
    assert all(a["active"] for a in attempts)
    counts = read_json(run / "ledger" / "counts.json")
    assert counts["server_turns_answered"] == counts["attempts"] == len(attempts)
    assert counts["witness_rows"] == counts["completed_side_effect_request_guids"] > 0


CHAOS = FAST.replace("[live.timeouts]\nturn_response_s = 2.0", """[live.timeouts]
turn_response_s = 1.0
[network.uplink]
duplication = 0.2
duplicate_delay_s = 0.05
loss = 0.05
[network.downlink]
reorder = 0.3
reorder_delay_s = 0.1
loss = 0.03""")


def test_chaos_proxy_faults_rest_streams(tmp_path: Path, read_json) -> None:
    """The chaos proxy duplicates, loses, reorders and cuts POST /message:stream like JSON-RPC
    (chaos.jsonl names the binding), and the correct Reasoner still passes."""
    assert "duplication = 0.2" in CHAOS
    p, run = load_run(tmp_path, "--binding", "rest", "--chaos", scenario=CHAOS)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    kinds = {(r["kind"], r["binding"]) for r in jsonl(run / "ledger" / "chaos.jsonl")}
    assert {("duplicate", "rest"), ("lost", "rest"), ("reorder", "rest"),
            ("drop", "rest")} <= kinds, kinds
    outcomes = {a["outcome"] for a in jsonl(run / "ledger" / "attempts.jsonl")}
    assert {"completed", "response-lost"} <= outcomes
    assert read_json(run / "verdict.json")["ok"] is True


DEDUP_CLIENT = """
import json, sys
from locust.env import Environment
from locust.contrib.fasthttp import FastHttpSession
from rtalab.loadtests.common.tls import ClientTls
from rtalab.loadtests.live.rest import RestChannel
from rtalab.loadtests.live.sse import SseChannel
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI as EXT, Ids, parse_event, streaming_request
url, ca, cert, key = sys.argv[1:5]
tls = ClientTls(ca, cert, key)
env = Environment()
session = FastHttpSession(url, env.events.request, None, insecure=False,
                          ssl_context_factory=tls.new_context)
rest, sse = RestChannel(session, EXT, "tok"), SseChannel(session, EXT, "tok")
body = streaming_request("r", Ids("m-d", "g-dedup", "t-d", "i-d", "ctx-dedup", None), EXT, True,
                         text="hi", side_effect=True, handoff=False)
out = []
for ch in (rest, rest, sse):  # the original, a resend on REST, a resend on JSON-RPC
    ex = ch.send("r", body, True)
    evs = []
    while (f := ex.next_frame()) is not None:
        evs.append(parse_event(f, EXT))
    ex.close()
    out.append([ch.binding, evs[-1].state])
print(json.dumps(out))
"""


def _metric(url: str, tls: ClientTls, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", context=tls.context_for(url),
                                timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


def test_a_resend_is_deduplicated_on_rest_and_across_bindings(reasoner: ManagedProcess,
                                                               pki: Pki) -> None:
    """The REST routes go through the same dedup as JSON-RPC: a byte-identical resend (same
    requestGuid, context and principal) replays, on REST and on JSON-RPC alike."""
    tls = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    before = {k: _metric(reasoner.url, tls, f'rta_reasoner_dedup_total{{result="{k}"}}')
              for k in ("new", "replay")}
    p = subprocess.run([sys.executable, "-c", DEDUP_CLIENT, reasoner.url, str(pki.ca),
                        str(pki.client.cert), str(pki.client.key)], capture_output=True,
                       text=True, timeout=90)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [
        ["rest", "TASK_STATE_COMPLETED"], ["rest", "TASK_STATE_COMPLETED"],
        ["sse", "TASK_STATE_COMPLETED"]]
    after = {k: _metric(reasoner.url, tls, f'rta_reasoner_dedup_total{{result="{k}"}}')
             for k in ("new", "replay")}
    assert (after["new"] - before["new"], after["replay"] - before["replay"]) == (1, 2)
