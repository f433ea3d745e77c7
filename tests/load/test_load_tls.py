"""``rtalab load run`` over TLS and mutual TLS, and answers read as sent.

Real servers on 127.0.0.1 with certificates made at run time: ``--tls`` serves the embedded
witness, Reasoner and chaos proxy over mutual TLS; a ``--target`` over mutual TLS needs
``--ca`` and a client certificate, and each certificate problem is one line, exit 2; a
target answering 503 is reported with its 503 (before the run, or in the availability
rule when only its requests get it); a bad ``--witness`` is one line, exit 2.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from rtalab.loadtests.common.certs import Pki, make_pki
from rtalab.loadtests.common.procs import ManagedProcess, free_port, start_reasoner, start_witness
from rtalab.loadtests.common.tls import ClientTls, ServerTls
from rtalab.loadtests.live.bindings import parse_bindings

from .conftest import FAST, jsonl, load_run
from .parallel import load_runs


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _client_args(pki: Pki) -> list[str]:
    return ["--ca", str(pki.ca), "--client-cert", str(pki.client.cert), "--client-key",
            str(pki.client.key)]


@pytest.fixture(scope="module")
def mtls_target(pki: Pki, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    """A witness and a Reasoner that both require client certificates."""
    base = tmp_path_factory.mktemp("target")
    server = ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca))
    client = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    scenario = base / "fast.toml"
    scenario.write_text(FAST, encoding="utf-8")
    with start_witness(base / "w.sqlite", server_tls=server, client_tls=client,
                       log_path=base / "witness.log") as witness, \
            start_reasoner(witness=witness.url, scenario=scenario, server_tls=server,
                           client_tls=client, dedup=f"sqlite:///{base / 'd.sqlite'}",
                           extra_args=["--token", "tok=alice", "--log-level", "warning"],
                           log_path=base / "reasoner.log") as reasoner:
        yield reasoner, witness


def _one_line_exit_2(p, says: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert len(lines) == 1 and says in lines[0], lines


@pytest.fixture(scope="module")
def embedded_tls_runs(tmp_path_factory: pytest.TempPathFactory):
    """--tls on the embedded stack, at once: the correct Reasoner on --binding all, and one
    that does not deduplicate (the negative control)."""
    copies = FAST.replace("[live.timeouts]", "[load]\nresend_share = 0.5\n"
                          "concurrent_duplicate_share = 0.5\n[live.timeouts]")
    return load_runs(tmp_path_factory.mktemp("tls-runs"), {
        "all": ["--tls", "--binding", "all", "--duration", "3"],
        "no-dedup": ["--tls", "--dedup-mode", "none", "--duration", "3"],
    }, scenarios={"no-dedup": copies})


def test_tls_embedded_run_passes_on_every_binding(embedded_tls_runs, read_json) -> None:
    """--tls: witness, Reasoner and chaos proxy over mutual TLS; the gate passes on
    --binding all (every binding this install has)."""
    p, run = embedded_tls_runs["all"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert run is not None and (run / "tls" / "ca.pem").is_file()
    meta = read_json(run / "meta.json")
    assert meta["tls"].startswith("mutual TLS") and meta["tls_insecure"] is False
    attempts = jsonl(run / "ledger" / "attempts.jsonl")
    assert {a["binding"] for a in attempts} == set(parse_bindings("all")) >= {"sse", "rest",
                                                                              "ws"}
    verdict = read_json(run / "verdict.json")
    rules = {r["name"]: r for r in verdict["rules"]}
    assert rules["witness-ledger-agree"]["status"] == "pass", rules["witness-ledger-agree"]
    assert rules["server-ledger-agree"]["status"] == "pass"
    assert read_json(run / "ledger" / "counts.json")["witness_rows"] > 0
    assert read_json(run / "ledger" / "counts.json").get("server_turns_answered", 0) > 0


def test_tls_embedded_negative_control_still_fails(embedded_tls_runs) -> None:
    p, _ = embedded_tls_runs["no-dedup"]
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "duplicated" in p.stdout


def test_target_over_mutual_tls(tmp_path: Path, pki: Pki,
                                mtls_target: tuple[ManagedProcess, ManagedProcess]) -> None:
    reasoner, witness = mtls_target
    target = ["--target", reasoner.url, "--token", "tok", "--witness", witness.url]
    p, _ = load_run(tmp_path, *target, "--duration", "1")
    _one_line_exit_2(p, "unknown CA")
    p, _ = load_run(tmp_path, *target, "--ca", str(pki.ca), "--duration", "1")
    _one_line_exit_2(p, "client certificate required")
    p, run = load_run(tmp_path, *target, *_client_args(pki), "--duration", "2")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert run is not None and "warning: TLS NOT VERIFIED" not in p.stdout
    # --insecure: passes (nothing verified), said in the terminal and in the verdict (not at
    # once with the run above: one target and witness, the runs would count each other's)
    p, run = load_run(tmp_path, *target, "--insecure", "--client-cert", str(pki.client.cert),
                      "--client-key", str(pki.client.key), "--duration", "2")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "NOT verified" in p.stderr and "TLS NOT VERIFIED" in p.stdout
    assert run is not None
    verdict = json.loads((run / "verdict.json").read_text(encoding="utf-8"))
    assert any("TLS NOT VERIFIED" in w for w in verdict["warnings"])
    p, _ = load_run(tmp_path, "--tls", *target, "--duration", "1")
    _one_line_exit_2(p, "--tls makes certificates for the embedded servers")


class _Stub(http.server.BaseHTTPRequestHandler):
    """A foreign target: ``card_ok`` serves an agent card and answers 503 to everything
    else; otherwise 503 to everything."""

    card_ok = False
    card: ClassVar[dict[str, object]] = {"name": "stub", "supportedInterfaces": []}
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.card_ok and self.path == "/.well-known/agent-card.json":
            self._send(200, json.dumps(self.card).encode())
        else:
            self._send(503, b'{"error": "unavailable"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(503, b'{"error": "unavailable"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[tuple[str, type[_Stub]]]:
    handler = type("Handler", (_Stub,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_target_answering_503_is_reported_with_503(tmp_path: Path, stub) -> None:
    url, _handler = stub
    p, _ = load_run(tmp_path, "--target", url, "--duration", "1")
    _one_line_exit_2(p, "answers HTTP 503")
    assert "does not answer" not in p.stderr


def test_requests_all_503_fail_availability_saying_503(tmp_path: Path, stub) -> None:
    url, handler = stub
    handler.card_ok = True
    p, run = load_run(tmp_path, "--target", url, "--duration", "1.5", "--drain", "5")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert run is not None
    verdict = json.loads((run / "verdict.json").read_text(encoding="utf-8"))
    rule = {r["name"]: r for r in verdict["rules"]}["availability"]
    assert rule["status"] == "fail" and "HTTP 503" in rule["detail"], rule
    assert "HTTP 503" in p.stdout


def test_a_bad_witness_is_one_line(tmp_path: Path, stub,
                                   mtls_target: tuple[ManagedProcess, ManagedProcess],
                                   pki: Pki) -> None:
    reasoner, _ = mtls_target
    url, handler = stub
    target = ["--target", reasoner.url, "--token", "tok", *_client_args(pki), "--duration", "1"]
    p, _ = load_run(tmp_path, *target, "--witness", f"http://127.0.0.1:{free_port()}")
    _one_line_exit_2(p, "refused")
    p, _ = load_run(tmp_path, *target, "--witness", url)
    _one_line_exit_2(p, "answers HTTP 503")
    handler.card_ok = True
    p, _ = load_run(tmp_path, *target, "--witness", url + "/.well-known/agent-card.json#")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.fixture(scope="module")
def grpc_tls_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """gRPC servers on 127.0.0.1 behind a working HTTP side: one with an expired
    certificate, one requiring client certificates ({kind: port})."""
    import datetime as dt
    from concurrent import futures

    import grpc

    from rtalab.loadtests.common.certs import make_ca

    d = tmp_path_factory.mktemp("grpc-tls")
    ca = make_ca("grpc CA")
    now = dt.datetime.now(dt.UTC)
    old = ca.issue(d, "old", not_before=now - dt.timedelta(days=3),
                   not_after=now - dt.timedelta(days=1))
    good = ca.issue(d, "server")
    kinds = {"expired": ServerTls(str(old.cert), str(old.key)),
             "mutual": ServerTls(str(good.cert), str(good.key), str(ca.write(d / "ca.pem")))}
    servers, ports = [], {}
    for kind, server_tls in kinds.items():
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        ports[kind] = server.add_secure_port("127.0.0.1:0", server_tls.grpc_credentials())
        server.start()
        servers.append(server)
    (tmp_path_factory.getbasetemp() / "grpc-ca.pem").write_bytes((d / "ca.pem").read_bytes())
    try:
        yield ports
    finally:
        for server in servers:
            server.stop(None)


@pytest.mark.parametrize(("kind", "trusted", "says"), [
    ("expired", True, "certificate expired"),
    ("mutual", True, "client certificate required"),
    ("mutual", False, "unknown CA"),
])
def test_a_grpc_interface_with_a_certificate_problem_is_one_line(
        tmp_path: Path, stub, grpc_tls_servers: dict[str, int], kind: str, trusted: bool,
        says: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The agent card (plain HTTP here) answers; the gRPC interface it advertises has the
    certificate problem: named before the run, one line, exit 2 (the Live users never
    start)."""
    url, handler = stub
    handler.card_ok = True
    handler.card = {"name": "stub", "supportedInterfaces": [
        {"protocolBinding": "GRPC", "url": f"grpcs://127.0.0.1:{grpc_tls_servers[kind]}"}]}
    ca = ["--ca", str(tmp_path_factory.getbasetemp() / "grpc-ca.pem")] if trusted else []
    p, run = load_run(tmp_path, "--target", url, "--binding", "grpc", *ca, "--duration", "1")
    _one_line_exit_2(p, says)
    assert "gRPC interface" in p.stderr and run is None
