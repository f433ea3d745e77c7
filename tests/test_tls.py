"""TLS settings, contexts and the one-line certificate errors (loadtests/common/tls.py).

Every check runs a real TLS server on 127.0.0.1 with certificates made at run time
(loadtests/common/certs.py): the client verifies by default, trusts ``--ca``, presents its
client certificate, and each certificate problem is named in one line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.server
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from rtalab.loadtests.common import tls
from rtalab.loadtests.common.certs import Pki, make_ca, make_pki
from rtalab.loadtests.common.tls import ClientTls, ServerTls, TlsError


class _Ok(http.server.BaseHTTPRequestHandler):
    body = b"ok"

    def do_GET(self) -> None:
        body = self.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server:
    """An HTTP(S) server in a thread on 127.0.0.1 (``server`` None: plain HTTP)."""

    def __init__(self, server: ServerTls | None, handler: type = _Ok):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        if server is not None:
            self.httpd.socket = server.context().wrap_socket(self.httpd.socket,
                                                             server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, scheme: str = "https", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}/"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _serve(server: ServerTls | None) -> Iterator[_Server]:
    s = _Server(server)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def https(pki: Pki) -> Iterator[_Server]:
    yield from _serve(ServerTls(str(pki.server.cert), str(pki.server.key)))


@pytest.fixture(scope="module")
def mtls(pki: Pki) -> Iterator[_Server]:
    yield from _serve(ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca)))


def _get(url: str, client: ClientTls) -> str:
    with urllib.request.urlopen(url, timeout=10, context=client.context_for(url)) as r:
        return r.read().decode()


def _fails_with(url: str, client: ClientTls) -> str | None:
    """The one-line problem of a GET with urllib and with httpx (the two must agree)."""
    found = []
    with pytest.raises(Exception) as e:
        _get(url, client)
    found.append(tls.reason(e.value, url, client))
    with pytest.raises(Exception) as e:
        httpx.get(url, verify=client.httpx_verify(), timeout=10).raise_for_status()
    found.append(tls.reason(e.value, url, client))
    assert found[0] == found[1], found
    prefix = f"TLS error talking to {url}: "
    assert found[0].startswith(prefix), found[0]
    return found[0].removeprefix(prefix)


def test_ca_given_connects(https: _Server, pki: Pki) -> None:
    client = ClientTls(ca=str(pki.ca))
    assert _get(https.url(), client) == "ok"
    assert _get(https.url(host="localhost"), client) == "ok"
    assert httpx.get(https.url(), verify=client.httpx_verify(), timeout=10).text == "ok"


def test_verifies_by_default(https: _Server) -> None:
    """No --ca: the system's CAs, which do not sign the throwaway CA (no SSL_CERT_FILE
    trick makes it pass)."""
    assert _fails_with(https.url(), ClientTls()) == tls.UNKNOWN_CA
    line = tls.describe(Exception("wrapped"), "x")
    assert line is None


def test_other_ca_is_unknown(https: _Server, tmp_path: Path) -> None:
    other = make_ca("another CA").write(tmp_path / "other.pem")
    assert _fails_with(https.url(), ClientTls(ca=str(other))) == tls.UNKNOWN_CA


def test_insecure_skips_verification(https: _Server) -> None:
    assert _get(https.url(), ClientTls(insecure=True)) == "ok"
    assert "NOT verified" in ClientTls(insecure=True).describe()


def test_hostname_mismatch(pki: Pki, tmp_path: Path) -> None:
    ca = make_ca()
    wrong = ca.issue(tmp_path, "wrong", ("other.example",))
    for s in _serve(ServerTls(str(wrong.cert), str(wrong.key))):
        client = ClientTls(ca=str(ca.write(tmp_path / "ca.pem")))
        assert _fails_with(s.url(), client) == tls.HOSTNAME


def test_expired(tmp_path: Path) -> None:
    ca = make_ca()
    now = dt.datetime.now(dt.UTC)
    old = ca.issue(tmp_path, "old", not_before=now - dt.timedelta(days=10),
                   not_after=now - dt.timedelta(days=1))
    for s in _serve(ServerTls(str(old.cert), str(old.key))):
        client = ClientTls(ca=str(ca.write(tmp_path / "ca.pem")))
        assert _fails_with(s.url(), client) == tls.EXPIRED


def test_mutual_tls(mtls: _Server, pki: Pki, tmp_path: Path) -> None:
    good = ClientTls(ca=str(pki.ca), client_cert=str(pki.client.cert),
                     client_key=str(pki.client.key))
    assert _get(mtls.url(), good) == "ok"
    assert _fails_with(mtls.url(), ClientTls(ca=str(pki.ca))) == tls.CLIENT_REQUIRED
    stranger = make_ca("stranger").issue(tmp_path, "stranger", ("me",), client=True)
    bad = ClientTls(ca=str(pki.ca), client_cert=str(stranger.cert),
                    client_key=str(stranger.key))
    assert _fails_with(mtls.url(), bad) == tls.CLIENT_REJECTED


def test_https_to_plain_http(pki: Pki) -> None:
    for s in _serve(None):
        assert _fails_with(s.url("https"), ClientTls(ca=str(pki.ca))) == tls.NOT_TLS
        assert _get(s.url("http"), ClientTls()) == "ok"  # plain http needs no context


def test_refused_is_not_tls() -> None:
    from rtalab.loadtests.common.procs import free_port

    url = f"https://127.0.0.1:{free_port()}/"
    with pytest.raises(OSError) as e:
        _get(url, ClientTls())
    assert tls.describe(e.value, url) is None
    assert "refused" in tls.reason(e.value, url).lower()


def _parse(argv: list[str], server: bool = False) -> argparse.Namespace:
    from rtalab.sim.shared.argtypes import OneLineParser

    p = OneLineParser(prog="t")
    tls.add_client_tls(p)
    if server:
        tls.add_server_tls(p)
    return p.parse_args(argv)


def test_options_round_trip(pki: Pki) -> None:
    args = _parse(["--ca", str(pki.ca), "--client-cert", str(pki.client.cert),
                   "--client-key", str(pki.client.key), "--tls-cert", str(pki.server.cert),
                   "--tls-key", str(pki.server.key), "--tls-client-ca", str(pki.ca)],
                  server=True)
    client = tls.client_tls_from_args(args)
    assert client.mutual and not client.insecure
    assert ClientTls.from_env(client.to_env()) == client
    assert ClientTls.from_env({}) == ClientTls()
    again = tls.client_tls_from_args(_parse(client.to_args()))
    assert again == client
    server = tls.server_tls_from_args(args)
    assert server.scheme == "https" and server.context().verify_mode == ssl.CERT_REQUIRED
    assert server.uvicorn_kwargs()["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert ServerTls().uvicorn_kwargs() == {} and ServerTls().scheme == "http"


def test_bad_settings_are_one_line(pki: Pki, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        _parse(["--ca", str(tmp_path / "missing.pem")])
    assert e.value.code == 2
    assert "no such file" in capsys.readouterr().err
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        (["--ca", str(junk)], "--ca"),
        (["--client-key", str(pki.client.key)], "--client-key needs --client-cert"),
        (["--ca", str(pki.ca), "--insecure"], "exclude each other"),
        (["--client-cert", str(pki.client.cert), "--client-key", str(pki.server.key)],
         "cannot load the client certificate"),
    ]
    for argv, says in cases:
        with pytest.raises(TlsError) as err:
            tls.client_tls_from_args(_parse(argv))
        assert says in str(err.value) and "\n" not in str(err.value), argv
    with pytest.raises(TlsError, match="--tls-key needs --tls-cert"):
        tls.server_tls_from_args(_parse(["--tls-key", str(pki.server.key)], server=True))
    with pytest.raises(TlsError, match="cannot load the server certificate"):
        tls.server_tls_from_args(_parse(["--tls-cert", str(junk)], server=True))


def test_grpc_credentials(pki: Pki) -> None:
    """A real gRPC server over mTLS (a generic bytes method, no protos): the credentials
    connect; without a client certificate or with another CA the failure is named."""
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    def echo(request: bytes, context: object) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler(
        "t.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    server_tls = ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca))
    port = server.add_secure_port("127.0.0.1:0", server_tls.grpc_credentials())
    server.start()
    try:
        def call(client: ClientTls) -> bytes:
            creds = tls.client_grpc_credentials(client)
            with grpc.secure_channel(f"127.0.0.1:{port}", creds) as ch:
                return bytes(ch.unary_unary("/t.Echo/Echo")(b"hi", timeout=10))

        good = ClientTls(ca=str(pki.ca), client_cert=str(pki.client.cert),
                         client_key=str(pki.client.key))
        assert call(good) == b"hi"
        with pytest.raises(grpc.RpcError) as e:
            call(ClientTls(client_cert=str(pki.client.cert), client_key=str(pki.client.key)))
        assert tls.problem(e.value) is not None
        with pytest.raises(TlsError, match="not available on gRPC"):
            tls.client_grpc_credentials(ClientTls(insecure=True))
    finally:
        server.stop(None)



@dataclass
class _Grpc:
    """gRPC servers on 127.0.0.1 (no methods: any call is UNIMPLEMENTED), one per
    certificate problem ({kind: port}), with the CA and client certificate to reach them."""

    ports: dict[str, int]
    ca: str
    client: tuple[str, str]
    stranger: tuple[str, str]


@pytest.fixture(scope="module")
def grpc_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Grpc]:
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    d = tmp_path_factory.mktemp("grpc-certs")
    ca, other = make_ca("grpc CA"), make_ca("another CA")
    now = dt.datetime.now(dt.UTC)

    def leaf(issuer: Any, stem: str, **kw: Any) -> tuple[str, str]:
        got = issuer.issue(d, stem, **kw)
        return str(got.cert), str(got.key)

    good = leaf(ca, "server")
    kinds = {"ok": ServerTls(*good), "mutual": ServerTls(*good, str(ca.write(d / "ca.pem"))),
             "expired": ServerTls(*leaf(ca, "old", not_before=now - dt.timedelta(days=10),
                                        not_after=now - dt.timedelta(days=1))),
             "hostname": ServerTls(*leaf(ca, "wrong", names=("other.example",))),
             "unknown": ServerTls(*leaf(other, "foreign"))}
    servers, ports = [], {}
    for kind, server_tls in [*kinds.items(), ("plain", None)]:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        ports[kind] = (server.add_secure_port("127.0.0.1:0", server_tls.grpc_credentials())
                       if server_tls else server.add_insecure_port("127.0.0.1:0"))
        server.start()
        servers.append(server)
    try:
        yield _Grpc(ports, str(d / "ca.pem"), leaf(ca, "client", names=("c",), client=True),
                    leaf(other, "stranger", names=("s",), client=True))
    finally:
        for server in servers:
            server.stop(None)


@pytest.mark.parametrize(("kind", "client", "says"), [
    ("ok", "ca", None),
    ("plain", "none", None),
    ("mutual", "mtls", None),
    ("ok", "default", tls.UNKNOWN_CA),
    ("unknown", "ca", tls.UNKNOWN_CA),
    ("hostname", "ca", tls.HOSTNAME),
    ("expired", "ca", tls.EXPIRED),
    ("mutual", "ca", tls.CLIENT_REQUIRED_LIKELY),
    ("mutual", "stranger", tls.CLIENT_REJECTED_LIKELY),
    ("ok", "insecure", "--insecure is not available on gRPC"),
])
def test_grpc_problems_are_one_line_naming_them(grpc_servers: _Grpc, kind: str, client: str,
                                                says: str | None) -> None:
    """The gRPC check a load run makes before it starts
    (rtalab.loadtests.common.procs.grpc_problem): each certificate problem named on one line, a
    working server None; gRPC itself says only "Socket closed" when the server wants a client
    certificate."""
    from rtalab.loadtests.common.procs import grpc_problem

    g = grpc_servers
    clients = {"ca": ClientTls(g.ca), "none": ClientTls(), "default": ClientTls(),
               "mtls": ClientTls(g.ca, *g.client), "stranger": ClientTls(g.ca, *g.stranger),
               "insecure": ClientTls(insecure=True)}
    got = grpc_problem(f"127.0.0.1:{g.ports[kind]}", kind != "plain", clients[client])
    if says is None:
        assert got is None
    else:
        assert got is not None and says in got and "\n" not in got, got


def test_grpc_refused_is_does_not_answer() -> None:
    pytest.importorskip("grpc")
    from rtalab.loadtests.common.procs import free_port, grpc_problem

    got = grpc_problem(f"127.0.0.1:{free_port()}", True, ClientTls())
    assert got is not None and "does not answer" in got and "refused" in got.lower(), got
    assert "TLS" not in got and "\n" not in got


def test_the_handshake_of_our_own_speaks_h2_to_grpc(grpc_servers: _Grpc) -> None:
    """The live gRPC channel's diagnosis of an UNAVAILABLE call (a restarted server, a cut
    stream) on a server that accepts the client: no problem (without ALPN h2 a gRPC server
    closes at once, which would read as a refused client certificate)."""
    g = grpc_servers
    good = ClientTls(g.ca, *g.client)
    assert tls.diagnose(f"grpcs://127.0.0.1:{g.ports['mutual']}", good) is None
    assert tls.diagnose(f"grpcs://127.0.0.1:{g.ports['mutual']}", ClientTls(g.ca)) == \
        tls.CLIENT_REQUIRED_LIKELY



class _Metrics(_Ok):
    body = b"# TYPE up gauge\nup 1\n"  # exposition without the Reasoner's histograms


def _calibrate(url: str, tmp_path: Path, *tls_args: str) -> tuple[int, list[str]]:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", "calibrate", "--from",
                        f"prometheus:{url}metrics", "--window", "0.2", "--every", "0.1",
                        "--out", str(tmp_path / "c.toml"), "--quiet", *tls_args],
                       capture_output=True, text=True, timeout=60)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stderr.strip().splitlines()


def test_calibrate_scrapes_verify_certificates(pki: Pki, tmp_path: Path) -> None:
    """``rtalab calibrate --from prometheus:https://...`` verifies the server (the system's
    CAs by default, --ca, a client certificate for mutual TLS, --insecure said loudly) and
    names a certificate problem in one line, exit 2.  A scrape that got through fails on the
    exposition (no Reasoner histograms here), which is how a test sees it got through."""
    s = _Server(ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca)), _Metrics)
    try:
        url = s.url()
        rc, lines = _calibrate(url, tmp_path)
        assert rc == 2 and len(lines) == 1 and tls.UNKNOWN_CA in lines[0], lines
        rc, lines = _calibrate(url, tmp_path, "--ca", str(pki.ca))
        assert rc == 2 and len(lines) == 1 and "client certificate required" in lines[0], lines
        mutual = ["--client-cert", str(pki.client.cert), "--client-key", str(pki.client.key)]
        rc, lines = _calibrate(url, tmp_path, "--ca", str(pki.ca), *mutual)
        assert rc == 2 and len(lines) == 1 and "no service-time histogram" in lines[0], lines
        rc, lines = _calibrate(url, tmp_path, "--insecure", *mutual)
        assert rc == 2 and "NOT verified" in lines[0], lines
        assert "no service-time histogram" in lines[-1], lines
    finally:
        s.close()
