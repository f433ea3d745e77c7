"""The chaos proxy's gRPC side (loadtests/chaos/grpc_proxy.py) between real gRPC clients and
the real reference Reasoner (its gRPC binding), as a real process.

- pass-through: the Live users' gRPC channel reads through the proxy exactly what it reads
  from the Reasoner itself (initial metadata echo, worker, sequenceIds, statuses with their
  ``google.rpc.ErrorInfo``, GetTask, CancelTask, the message bound), in plaintext and with
  mutual TLS on both legs;
- duplication: the same RPC (bytes and metadata) reaches the Reasoner twice, the copy first
  when asked; the witness counts one execution per requestGuid with dedup, two without;
- reordering holds stream messages back (sequenceIds out of order, the end state last);
  a cut ends the caller's stream with ``UNAVAILABLE`` and the proxy goes on;
- a black-hole outage holds calls; a reset outage resets the HTTP/2 connection;
- every fault is a ``chaos.jsonl`` line with ``binding: "grpc"``; bad flags are one line,
  exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf.json_format import ParseDict

from rtalab.loadtests.chaos.procs import start_chaos
from rtalab.loadtests.common.certs import make_pki
from rtalab.loadtests.common.procs import free_port
from rtalab.loadtests.common.tls import ClientTls, ServerTls
from rtalab.loadtests.wireclient import grpc_request
from tests.chaos import test_proxy as base
from tests.chaos.test_proxy import QUIET, Proxy, executions, side_effect_msg
from tests.load import test_grpc_live as live
from tests.serve.conftest import Reasoner, headers, k, stream, uid

# the HTTP proxy's fixtures: Reasoners (SQLite dedup / none) serving gRPC too, proxies
sqlite_reasoner, none_reasoner, proxy_factory = (base.sqlite_reasoner, base.none_reasoner,
                                                 base.proxy_factory)


def grpc_proxy(make: Callable[..., Proxy], reasoner: Reasoner, *flags: str) -> tuple[Proxy, str]:
    """A proxy whose gRPC side fronts ``reasoner``'s gRPC binding; (proxy, its gRPC address)."""
    address = f"127.0.0.1:{free_port()}"
    px = make(reasoner.url, "--grpc-listen", address, "--grpc-upstream",
              f"grpc://{reasoner.grpc_address()}", *flags)
    return px, address


def _events_state(turn: object) -> list[str]:
    return [e.get("statusUpdate", {}).get("status", {}).get("state", "")
            for e in turn.events]  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ pass-through


def test_the_live_grpc_channel_reads_through_the_proxy_what_the_reasoner_sent(
        tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    with live._reasoner(tmp_path / "r") as r:
        up = live._grpc_address(r)
        address = f"127.0.0.1:{free_port()}"
        with start_chaos(r.url, ledger=tmp_path / "chaos.jsonl", log_path=tmp_path / "c.log",
                         extra_args=[*QUIET, "--grpc-listen", address,
                                     "--grpc-upstream", f"grpc://{up}"]) as px:
            live._check_answers(live._probe(address, False, "tok", ClientTls()))
            # the trailers come back as sent: the google.rpc.ErrorInfo of a refusal
            bad = grpc_request(address, stream(side_effect_msg(uid("ctx"), uid("g"))),
                               headers("wrong-token"))
            assert bad.errors[0]["grpcStatus"] == "UNAUTHENTICATED", bad
            assert bad.errors[0]["reason"] == "AUTH", bad
            assert "Traceback" not in px.log_text()


def test_mutual_tls_on_both_legs(tmp_path: Path) -> None:
    """The proxy serves gRPC over TLS requiring a client certificate, and verifies the
    Reasoner's (``grpcs://``) presenting its own."""
    pki = make_pki(tmp_path / "pki")
    server = ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca))
    client = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    (tmp_path / "r").mkdir()
    with live._reasoner(tmp_path / "r", server, client) as r:
        up = live._grpc_address(r, client)
        address = f"127.0.0.1:{free_port()}"
        with start_chaos(r.url, ledger=tmp_path / "chaos.jsonl", log_path=tmp_path / "c.log",
                         server_tls=server, client_tls=client,
                         extra_args=[*QUIET, "--grpc-listen", address,
                                     "--grpc-upstream", f"grpcs://{up}"]):
            live._check_answers(live._probe(address, True, "tok", client))
            # no client certificate: refused by the proxy's TLS, one line naming it
            out = live._probe(address, True, "tok", ClientTls(str(pki.ca)))
            assert "broken" in out["turn"] and "\n" not in out["turn"]["broken"], out


# ------------------------------------------------------------------------------ duplication


@pytest.mark.parametrize("dedup", ["sqlite", "none"])
def test_duplication_reaches_the_reasoner_over_grpc(request: pytest.FixtureRequest,
                                                    witness: str, proxy_factory, dedup: str
                                                    ) -> None:
    """Every call duplicated: two executions per requestGuid without dedup, one with."""
    reasoner: Reasoner = request.getfixturevalue(f"{dedup}_reasoner")
    px, address = grpc_proxy(proxy_factory, reasoner, *QUIET, "--duplicate", "1",
                             "--seed", "7")
    ctx = uid("ctx")
    guids = [uid("g") for _ in range(3)]
    for g in guids:
        turn = grpc_request(address, stream(side_effect_msg(ctx, g)), headers())
        assert turn.status == 200 and turn.headers.get("a2a-extensions"), turn
    dups = px.wait_lines("duplicate", 3, lambda r: r["copy_status"] == "OK")
    assert sorted(d["request_guid"] for d in dups) == sorted(guids)
    assert {d["binding"] for d in dups} == {"grpc"}
    expected = 2 if dedup == "none" else 1
    assert executions(witness, ctx) == {g: expected for g in guids}


def test_the_copy_can_reach_the_reasoner_first_over_grpc(none_reasoner: Reasoner, witness: str,
                                                         proxy_factory) -> None:
    px, address = grpc_proxy(proxy_factory, none_reasoner, *QUIET, "--duplicate", "1",
                             "--duplicate-first", "1", "--set",
                             "network.uplink.duplicate_delay_s=0.3", "--seed", "7")
    ctx, g = uid("ctx"), uid("g")
    turn = grpc_request(address, stream(side_effect_msg(ctx, g)), headers())
    task = turn.events[0]["task"]["id"]
    (dup,) = px.wait_lines("duplicate", 1, lambda r: r["copy_status"] == "OK")
    assert dup["first"] is True and dup["delay_s"] < 0 and dup["binding"] == "grpc"
    import httpx

    rows = httpx.get(f"{witness}/ledger", params={"contextId": ctx}, timeout=10).json()["rows"]
    mine = [r for r in rows if r["taskId"] == task]
    other = [r for r in rows if r["taskId"] != task]
    assert len(mine) == 1 and len(other) == 1, rows
    assert other[0]["tStart"] < mine[0]["tStart"]  # the copy ran first


# ------------------------------------------------------------------------------ stream faults


def test_reordering_holds_messages_back_and_keeps_the_end_last(sqlite_reasoner: Reasoner,
                                                               proxy_factory) -> None:
    px, address = grpc_proxy(proxy_factory, sqlite_reasoner, *QUIET, "--reorder", "0.5",
                             "--reorder-delay-s", "0.05", "--seed", "3")
    out_of_order = 0
    for _ in range(4):
        turn = grpc_request(address, stream(side_effect_msg(uid("ctx"), uid("g"))), headers())
        seqs = [(e.get("statusUpdate") or e.get("artifactUpdate") or {}).get(
            "metadata", {}).get(k("sequenceId")) for e in turn.events[1:]]
        assert None not in seqs and sorted(seqs) == list(range(len(seqs))), seqs
        out_of_order += seqs != sorted(seqs)
        assert _events_state(turn)[-1] == "TASK_STATE_COMPLETED"  # never overtaken
    lines = px.wait_lines("reorder", 4)
    assert {r["binding"] for r in lines} == {"grpc"}
    assert out_of_order > 0 and any(r["out_of_order"] for r in lines)


def test_a_cut_ends_the_stream_unavailable_and_the_proxy_goes_on(sqlite_reasoner: Reasoner,
                                                                 proxy_factory) -> None:
    px, address = grpc_proxy(proxy_factory, sqlite_reasoner, *QUIET, "--drop", "1")
    turn = grpc_request(address, stream(side_effect_msg(uid("ctx"), uid("g"))), headers())
    assert turn.status == 503 and turn.errors[0]["grpcStatus"] == "UNAVAILABLE", turn
    assert "chaos: stream cut" in turn.errors[0]["message"]
    (drop,) = px.wait_lines("drop", 1)
    assert drop["binding"] == "grpc" and drop["events"] == 0
    # the unary RPCs pass (no stream to cut) and the proxy still serves
    ch = grpc.insecure_channel(address)
    with pytest.raises(grpc.RpcError) as e:
        a2a_pb2_grpc.A2AServiceStub(ch).GetTask(
            a2a_pb2.GetTaskRequest(id=uid("nope")),
            metadata=[(key.lower(), v) for key, v in headers().items()
                      if key.lower() in ("authorization", "a2a-version")], timeout=10)
    ch.close()
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_blackhole_outage_holds_grpc_calls(sqlite_reasoner: Reasoner, proxy_factory) -> None:
    px, address = grpc_proxy(proxy_factory, sqlite_reasoner, "--delay-s", "0",
                             "--no-scenario-outages", "--outage", "0:600:uplink")
    ch = grpc.insecure_channel(address)
    request = ParseDict(stream(side_effect_msg(uid("ctx"), uid("g")))["params"],
                        a2a_pb2.SendMessageRequest())
    with pytest.raises(grpc.RpcError) as e:
        list(a2a_pb2_grpc.A2AServiceStub(ch).SendStreamingMessage(request, timeout=1.0))
    ch.close()
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # the call's connection is held at the gRPC side's gate (the HTTP side's readiness check
    # makes a "tcp" line of its own)
    held = px.wait_lines("blackhole", 1, lambda r: r["binding"] == "grpc")
    assert held and held[0]["what"] == "connection", px.lines()


def test_a_reset_outage_resets_the_grpc_connection(sqlite_reasoner: Reasoner,
                                                   proxy_factory) -> None:
    px, address = grpc_proxy(proxy_factory, sqlite_reasoner, "--delay-s", "0", "--set",
                             'network.outages=[{start_s=0,duration_s=600,kind="reset"}]')
    px.wait_lines("outage-start", 1)
    turn = grpc_request(address, stream(side_effect_msg(uid("ctx"), uid("g"))), headers())
    assert turn.errors and turn.errors[0]["grpcStatus"] == "UNAVAILABLE", turn
    resets = px.wait_lines("reset", 1, lambda r: r["binding"] == "grpc"
                           and r.get("what") == "connection")
    assert resets, px.lines()


# ------------------------------------------------------------------------------ flags


@pytest.mark.parametrize("flags, says", [
    (["--grpc-listen", "127.0.0.1:0"], "--grpc-listen and --grpc-upstream go together"),
    (["--grpc-listen", "127.0.0.1:0", "--grpc-upstream", "http://127.0.0.1:1"],
     "expected grpc://HOST:PORT or grpcs://HOST:PORT"),
    (["--grpc-listen", "127.0.0.1:0", "--grpc-upstream", "grpc://127.0.0.1"],
     "expected grpc://HOST:PORT"),
])
def test_bad_grpc_flags_are_one_line_exit_2(flags: list[str], says: str) -> None:
    p = subprocess.run([sys.executable, "-m", "rtalab.loadtests.chaos", "--listen", "127.0.0.1:0",
                        "--upstream", "http://127.0.0.1:1", "--ledger", "", *flags],
                       capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr

