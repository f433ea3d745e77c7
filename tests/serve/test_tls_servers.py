"""The reference Reasoner and the witness serve (mutual) TLS, and every rtalab client verifies.

Real servers on 127.0.0.1 with certificates made at run time: the Reasoner requires client
certificates and calls the witness over mutual TLS; the readiness check, the agent card
and the Live users (the SSE FastHttpUser and the WebSocket channel, run in a subprocess:
importing Locust monkey-patches this process) verify certificates by default, and name
the problem in one line when one is wrong; so do the chaos proxy's upstream legs (HTTP
and gRPC) and the Reasoner's calls to the witness.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rtalab.loadtests.common.certs import Pki, make_ca, make_pki
from rtalab.loadtests.common.procs import ManagedProcess, start_reasoner, start_witness, url_problem
from rtalab.loadtests.common.tls import ClientTls, ServerTls

CARD = "/.well-known/agent-card.json"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _client(pki: Pki) -> ClientTls:
    return ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))


def _server(pki: Pki) -> ServerTls:
    return ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca))


@pytest.fixture(scope="module")
def stack(pki: Pki, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    base = tmp_path_factory.mktemp("tls-stack")
    with start_witness(base / "w.sqlite", log_path=base / "witness.log",
                       server_tls=_server(pki), client_tls=_client(pki)) as witness, \
            start_reasoner(witness=witness.url, log_path=base / "reasoner.log",
                           dedup=f"sqlite:///{base / 'd.sqlite'}",
                           extra_args=["--token", "tok=alice", "--log-level", "warning",
                                       "--grpc-port", "0"],
                           server_tls=_server(pki), client_tls=_client(pki)) as reasoner:
        yield reasoner, witness


def test_servers_speak_mutual_tls(stack: tuple[ManagedProcess, ManagedProcess], pki: Pki,
                                  tmp_path: Path) -> None:
    reasoner, witness = stack
    assert reasoner.url.startswith("https://") and witness.url.startswith("https://")
    card = httpx.get(reasoner.url + CARD, verify=_client(pki).context(), timeout=10).json()
    # gRPC's is host:port (docs/reasoner.md): its TLS is the card's scheme
    urls = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] != "GRPC"]
    assert urls and all(u.startswith("https://") for u in urls), urls
    for proc in (reasoner, witness):
        url = f"{proc.url}/healthz"
        assert url_problem(url, _client(pki)) is None
        assert "unknown CA" in str(url_problem(url, ClientTls()))
        assert "client certificate required" in str(url_problem(url, ClientTls(str(pki.ca))))
        stranger = make_ca("stranger").issue(tmp_path, "s", ("me",), client=True)
        rejected = url_problem(url, ClientTls(str(pki.ca), str(stranger.cert),
                                              str(stranger.key)))
        assert "client certificate rejected" in str(rejected)
        plain = url_problem(url.replace("https://", "http://"), _client(pki))
        assert plain is not None and "\n" not in plain


def test_metrics_scrapes_verify_the_server_and_present_the_client_certificate(
        stack: tuple[ManagedProcess, ManagedProcess], pki: Pki, tmp_path: Path) -> None:
    """The two /metrics clients -- a load run's scrape (``save_server_metrics``) and
    ``calibrate --from prometheus:https://`` (``scrape_url``) -- verify the Reasoner's
    certificate and present the client's: with the run's CA and client pair they read the
    metrics; with the system's CAs, or without a client certificate, they read nothing and
    say why (the scrape of a load run: None, calibrate: one line naming the problem)."""
    from rtalab.loadtests.loadrun.orchestrate import save_server_metrics
    from rtalab.sim.calibrate.observations import ObservationError
    from rtalab.sim.calibrate.telemetry import scrape_url

    reasoner, _ = stack
    good = save_server_metrics(reasoner.url, tmp_path / "m.json", _client(pki))
    assert good and any(k.startswith("rta_reasoner_") for k in good)
    assert save_server_metrics(reasoner.url, tmp_path / "x.json", ClientTls()) is None
    assert save_server_metrics(reasoner.url, tmp_path / "y.json", ClientTls(str(pki.ca))) is None
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "y.json").exists()
    url = f"{reasoner.url}/metrics"
    scrapes, _ = scrape_url(url, 0.0, 0.0, _client(pki))
    assert len(scrapes) == 2
    for tls, words in ((ClientTls(), "unknown CA"),
                       (ClientTls(str(pki.ca)), "client certificate required")):
        with pytest.raises(ObservationError) as e:
            scrape_url(url, 0.0, 0.0, tls)
        assert words in str(e.value) and "\n" not in str(e.value)


LIVE_USERS = r"""
import json, sys
import gevent.monkey
gevent.monkey.patch_all()
from locust.contrib.fasthttp import FastHttpSession
from locust.event import Events
from rtalab.loadtests.live.locustfile import LiveCalls, CLIENT_TLS
from rtalab.loadtests.live.ws import WsChannel
from rtalab.loadtests.live.call import StreamBroken

url = sys.argv[1]
out = {}
events = Events()
session = FastHttpSession(url, events.request, None, insecure=LiveCalls.insecure,
                          ssl_context_factory=LiveCalls.ssl_context_factory)
r = session.get("/healthz")
err = getattr(r, "error", None)
out["sse"] = r.status_code if err is None else f"error: {err}"
ch = WsChannel(url, "urn:x", "tok", events, CLIENT_TLS)
try:
    ch._connect(False)
    out["ws"] = "open"
    ch.close()
except StreamBroken as e:
    out["ws"] = f"error: {e}"
print(json.dumps(out))
"""


def _live_users(url: str, tls: ClientTls) -> dict[str, object]:
    """The Live users' HTTP session and WebSocket channel, as the locustfile builds them
    from ``$RTALAB_CLIENT_TLS``, against ``url``."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RTALAB_LOAD_SETTINGS",)}
    env.update(tls.to_env())
    p = subprocess.run([sys.executable, "-c", LIVE_USERS, url], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def test_live_users_verify_certificates(stack: tuple[ManagedProcess, ManagedProcess],
                                        pki: Pki) -> None:
    """Locust's FastHttpUser verifies nothing by default; the Live users do."""
    reasoner, _ = stack
    ok = _live_users(reasoner.url, _client(pki))
    assert ok == {"sse": 200, "ws": "open"}
    default = _live_users(reasoner.url, ClientTls())
    for binding in ("sse", "ws"):
        text = str(default[binding]).lower()
        assert ("certificate" in text and "verify" in text) or "unknown ca" in text, default
    insecure = _live_users(reasoner.url, ClientTls(client_cert=str(pki.client.cert),
                                                   client_key=str(pki.client.key),
                                                   insecure=True))
    assert insecure == {"sse": 200, "ws": "open"}


def test_bad_server_certificate_files_are_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("junk\n")
    for cmd in (["serve", "reasoner", "--tls-cert", str(junk)],
                ["serve", "witness", "--tls-cert", str(junk)],
                ["chaos", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9",
                 "--tls-cert", str(junk)],
                ["serve", "reasoner", "--tls-client-ca", str(junk)]):
        p = subprocess.run([sys.executable, "-m", "rtalab.sim.cli", *cmd], capture_output=True,
                           text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (cmd, p.stderr)
        assert "--tls-" in lines[0], lines


def _card_via(proxy_url: str) -> int:
    return httpx.get(proxy_url + CARD, timeout=20).status_code


def test_the_chaos_proxy_verifies_its_upstream(stack: tuple[ManagedProcess, ManagedProcess],
                                              pki: Pki, tmp_path: Path) -> None:
    """The proxy's HTTP and gRPC legs to an HTTPS Reasoner: verified against the system's
    CAs unless given --ca (the throwaway CA is not one of them), so a proxy without it
    answers 502 / UNAVAILABLE and never reads what the Reasoner sends."""
    pytest.importorskip("grpc")
    from rtalab.loadtests.chaos.procs import start_chaos
    from rtalab.loadtests.common.procs import free_port
    from rtalab.loadtests.wireclient import grpc_request, headers, message, state, stream

    reasoner, _ = stack
    card = httpx.get(reasoner.url + CARD, verify=_client(pki).context(), timeout=10).json()
    up = next(i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC")
    up = up.split("://")[-1]
    untrusted = ClientTls(None, str(pki.client.cert), str(pki.client.key))
    for name, client, card_status in (("trusted", _client(pki), 200), ("default", untrusted, 502)):
        address = f"127.0.0.1:{free_port()}"
        with start_chaos(reasoner.url, ledger=tmp_path / f"{name}.jsonl",
                         log_path=tmp_path / f"{name}.log", client_tls=client,
                         extra_args=["--log-level", "warning", "--grpc-listen", address,
                                     "--grpc-upstream", f"grpcs://{up}"]) as proxy:
            assert _card_via(proxy.url) == card_status, name
            turn = grpc_request(address, stream(message(ctx="c-" + name)), headers("tok"))
            if name == "trusted":
                assert state(turn.final) == "TASK_STATE_COMPLETED", turn.final
            else:  # the proxy's upstream channel failed its handshake: UNAVAILABLE (503)
                assert turn.status == 503, (turn.status, turn.final)


def test_the_reasoner_verifies_the_witness(stack: tuple[ManagedProcess, ManagedProcess],
                                           pki: Pki, tmp_path: Path) -> None:
    """A Reasoner given no --ca calls the HTTPS witness with the system's CAs: the
    side-effect tool call fails (and the witness records nothing) instead of talking to a
    server it could not verify."""
    from rtalab.loadtests.wireclient import Client, k, message, state, stream

    _, witness = stack
    for name, client in (("default", ClientTls(None, str(pki.client.cert),
                                               str(pki.client.key))), ("trusted", _client(pki))):
        with start_reasoner(witness=witness.url, log_path=tmp_path / f"{name}.log",
                            dedup="memory", client_tls=client,
                            extra_args=["--token", "token-alice=alice", "--log-level",
                                        "warning"]) as r:
            turn = Client(r.url).send("sse", stream(message(ctx=f"c-{name}",
                                                            meta={k("sideEffect"): True})))
        if name == "trusted":
            assert state(turn.final) == "TASK_STATE_COMPLETED", (name, turn.final)
        else:
            assert state(turn.final) == "TASK_STATE_FAILED" and turn.error_code, turn.final
