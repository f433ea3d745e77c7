"""The Reasoner's A2A gRPC binding: card, auth, echo, error statuses (A2A §5.4), bounds, TLS.

A real Reasoner subprocess serving gRPC (``--grpc-port 0``: the card says where), called
with grpcio's blocking client.  The turn, dedup and security behaviour over gRPC is the
wire suite's (the ``binding`` fixture includes ``grpc``); this file covers what only gRPC
has: statuses, metadata, ``google.rpc.ErrorInfo`` details, the message bound and TLS.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from rtalab.loadtests.common.certs import Pki, make_pki
from rtalab.loadtests.common.procs import start_reasoner
from rtalab.loadtests.common.tls import ClientTls, ServerTls, client_grpc_credentials

from .conftest import ALICE, EXT, Reasoner, k, message, stream, uid

reasoner = Reasoner.fixture("grpc", "A Reasoner serving gRPC (test tokens, no witness).",
                            witness=False)


def _stub(r: Reasoner, credentials: grpc.ChannelCredentials | None = None
          ) -> tuple[grpc.Channel, a2a_pb2_grpc.A2AServiceStub]:
    address = r.grpc_address()
    ch = (grpc.secure_channel(address, credentials) if credentials
          else grpc.insecure_channel(address))
    return ch, a2a_pb2_grpc.A2AServiceStub(ch)


def _md(token: str | None = ALICE, ext: bool = True) -> list[tuple[str, str]]:
    md = [("a2a-version", "1.0")]
    if ext:
        md.append(("a2a-extensions", EXT))
    if token:
        md.append(("authorization", f"Bearer {token}"))
    return md


def _send(text: str = "hi", **kw: object) -> a2a_pb2.SendMessageRequest:
    from google.protobuf.json_format import ParseDict

    return ParseDict(stream(message(text, **kw))["params"], a2a_pb2.SendMessageRequest())


def _error_info(e: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(value)
            for d in status.details:
                if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    d.Unpack(info)
                    return info
    return None


def test_the_card_advertises_grpc_beside_jsonrpc_and_rest(reasoner: Reasoner) -> None:
    card = reasoner.get_json("/.well-known/agent-card.json")
    by_binding = {i["protocolBinding"]: i for i in card["supportedInterfaces"]}
    assert set(by_binding) == {"JSONRPC", "HTTP+JSON", "GRPC"}
    host, _, port = by_binding["GRPC"]["url"].rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0 and by_binding["GRPC"]["protocolVersion"]


def test_a_turn_echoes_the_extension_in_initial_metadata(reasoner: Reasoner) -> None:
    ch, stub = _stub(reasoner)
    with ch:
        call = stub.SendStreamingMessage(_send(), metadata=_md(), timeout=20)
        events = list(call)
        md = dict(call.initial_metadata())
        assert md["a2a-extensions"] == EXT and md["x-rta-worker"].isdigit()
        assert events[0].WhichOneof("payload") == "task"
        assert events[-1].status_update.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
        seqs = [e.status_update.metadata["" + k("sequenceId")] if e.HasField("status_update")
                else e.artifact_update.metadata[k("sequenceId")] for e in events[1:]]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # not asked for: no echo, no profile metadata on the events
        call = stub.SendStreamingMessage(_send(profile=False), metadata=_md(ext=False),
                                         timeout=20)
        events = list(call)
        assert "a2a-extensions" not in dict(call.initial_metadata())
        assert not any(e.status_update.metadata.fields for e in events
                       if e.HasField("status_update"))


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_a_missing_or_unknown_token_is_unauthenticated_with_error_info(
        reasoner: Reasoner, token: str | None) -> None:
    ch, stub = _stub(reasoner)
    with ch:
        for call in (lambda: list(stub.SendStreamingMessage(_send(), metadata=_md(token))),
                     lambda: stub.GetTask(a2a_pb2.GetTaskRequest(id="x"), metadata=_md(token))):
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            info = _error_info(e.value)
            assert info is not None and info.reason == "AUTH"
            assert info.metadata["errorCode"] == "auth"
    assert 'rta_reasoner_auth_failures_total{binding="grpc"}' in reasoner.metrics()


def test_a2a_errors_have_their_canonical_grpc_status(reasoner: Reasoner) -> None:
    """A2A §5.4: TaskNotFound = NOT_FOUND, TaskNotCancelable = FAILED_PRECONDITION, invalid
    params = INVALID_ARGUMENT, each with the A2A ErrorInfo (domain a2a-protocol.org)."""
    ch, stub = _stub(reasoner)
    with ch:
        done = list(stub.SendStreamingMessage(_send(), metadata=_md(), timeout=20))
        task_id = done[0].task.id
        cases = [
            (lambda: stub.GetTask(a2a_pb2.GetTaskRequest(id=uid("nope")), metadata=_md()),
             grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
            (lambda: stub.CancelTask(a2a_pb2.CancelTaskRequest(id=uid("nope")), metadata=_md()),
             grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
            (lambda: stub.CancelTask(a2a_pb2.CancelTaskRequest(id=task_id), metadata=_md()),
             grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_CANCELABLE"),
            (lambda: list(stub.SendStreamingMessage(a2a_pb2.SendMessageRequest(),
                                                    metadata=_md())),
             grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS"),
        ]
        for call, code, reason in cases:
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == code, (reason, e.value.details())
            info = _error_info(e.value)
            assert info is not None and (info.domain, info.reason) == ("a2a-protocol.org",
                                                                      reason)
        # GetTask of the principal's own finished task answers it; another principal's is
        # not found (the same tenancy as every binding)
        assert stub.GetTask(a2a_pb2.GetTaskRequest(id=task_id), metadata=_md()).id == task_id


def test_a_message_above_the_body_bound_is_resource_exhausted(reasoner: Reasoner) -> None:
    ch, stub = _stub(reasoner)
    with ch:
        with pytest.raises(grpc.RpcError) as e:
            list(stub.SendStreamingMessage(_send("x" * 2_000_000), metadata=_md(), timeout=20))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # the server is unharmed
        assert list(stub.SendStreamingMessage(_send(), metadata=_md(), timeout=20))


def test_an_a2a_version_other_than_1_x_is_unimplemented(reasoner: Reasoner) -> None:
    """A2A §5.4: ``VersionNotSupportedError`` is ``UNIMPLEMENTED`` on gRPC (the SDK's table says
    FAILED_PRECONDITION), with the A2A ErrorInfo; any 1.x version is served."""
    ch, stub = _stub(reasoner)
    with ch:
        md = [kv for kv in _md() if kv[0] != "a2a-version"]
        with pytest.raises(grpc.RpcError) as e:
            list(stub.SendStreamingMessage(_send(), metadata=[("a2a-version", "2.0"), *md],
                                           timeout=20))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED, e.value.details()
        info = _error_info(e.value)
        assert info is not None and info.reason == "VERSION_NOT_SUPPORTED"
        done = list(stub.SendStreamingMessage(_send(), metadata=[("a2a-version", "1.3"), *md],
                                              timeout=20))
        assert done[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED


def test_the_bearer_scheme_is_case_insensitive(reasoner: Reasoner) -> None:
    """RFC 7235 §2.1: the auth scheme is case-insensitive (as on the HTTP bindings)."""
    ch, stub = _stub(reasoner)
    with ch:
        md = [kv for kv in _md() if kv[0] != "authorization"]
        for scheme in ("bearer", "BEARER"):
            done = list(stub.SendStreamingMessage(
                _send(), metadata=[*md, ("authorization", f"{scheme} {ALICE}")], timeout=20))
            assert done[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED


# ---------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls_reasoner(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reasoner]:
    """A Reasoner serving gRPC (and HTTP) over TLS, requiring client certificates."""
    base: Path = tmp_path_factory.mktemp("mtls")
    server = ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca))
    client = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    with start_reasoner(dedup="memory", server_tls=server, client_tls=client,
                        extra_args=["--grpc-port", "0", "--token", f"{ALICE}=alice",
                                    "--log-level", "warning"],
                        log_path=base / "reasoner.log") as proc:
        yield _TlsReasoner(proc, client)


class _TlsReasoner(Reasoner):
    def __init__(self, proc, client: ClientTls) -> None:
        super().__init__(proc)
        self.client = client

    def get_json(self, path: str):  # the card over https, verified
        import json
        import urllib.request

        with urllib.request.urlopen(self.url + path, timeout=20,
                                    context=self.client.context()) as r:
            return json.loads(r.read())


def test_grpc_over_mutual_tls(mtls_reasoner: _TlsReasoner, pki: Pki) -> None:
    good = client_grpc_credentials(mtls_reasoner.client)
    ch, stub = _stub(mtls_reasoner, good)
    with ch:
        events = list(stub.SendStreamingMessage(_send(), metadata=_md(), timeout=20))
        assert events[-1].status_update.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
    refused = {
        "no client certificate": client_grpc_credentials(ClientTls(str(pki.ca))),
        "unknown CA": client_grpc_credentials(ClientTls(None, str(pki.client.cert),
                                                         str(pki.client.key))),
    }
    for why, creds in refused.items():
        ch, stub = _stub(mtls_reasoner, creds)
        with ch, pytest.raises(grpc.RpcError) as e:
            list(stub.SendStreamingMessage(_send(), metadata=_md(), timeout=20))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, (why, e.value.details())
    ch, stub = _stub(mtls_reasoner)  # plaintext against TLS
    with ch, pytest.raises(grpc.RpcError) as e:
        list(stub.SendStreamingMessage(_send(), metadata=_md(), timeout=20))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(Exception, match="--insecure is not available on gRPC"):
        client_grpc_credentials(ClientTls(insecure=True))
