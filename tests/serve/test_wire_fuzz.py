"""The fuzzer reaches the handler on every binding, and its oracle catches a planted crash.

:mod:`rtalab.loadtests.fuzz.engine` sends mostly valid profile requests with mutated
metadata, parts, identifiers, headers and sizes over JSON-RPC/SSE, REST and
WebSocket.  Each run must: get a stable answer to every request (no 5xx, no
-32603, no cut stream, no lost socket, FAILED only with stable codes), leave
the server's unhandled-exception counter at 0, have at least half of its
requests reach turn parsing (counted by the server), and a normal turn must
complete afterwards.  The negative control plants an exception in turn
parsing (``rta/test.raise``) and the same oracle must fail.  Seeds are fixed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rtalab.loadtests.fuzz.engine import BINDINGS, MIN_REACHED, fuzz_binding
from tests.serve.conftest import Reasoner

REQUESTS = 240  # per binding


@pytest.mark.parametrize("binding", BINDINGS)
def test_fuzz_reaches_the_handler_and_finds_nothing(reasoner: Reasoner, binding: str) -> None:
    report = fuzz_binding(reasoner, binding, REQUESTS, seed=7)
    assert report.requests == REQUESTS
    assert report.failures() == [], report.as_dict()
    assert report.reached_share >= MIN_REACHED
    assert report.http_5xx == report.unanswered == report.sockets_lost == 0
    assert report.completed >= REQUESTS // 10  # turns really executed, not only refused


@pytest.mark.parametrize("binding", BINDINGS)
def test_fuzz_oracle_catches_a_planted_exception_in_parse_turn(reasoner: Reasoner,
                                                               binding: str) -> None:
    report = fuzz_binding(reasoner, binding, 60, seed=11, plant_share=0.3)
    failures = report.failures()
    assert report.unhandled > 0, report.as_dict()  # counted by the server ...
    assert any("unhandled exception" in f for f in failures)
    assert any("-32603" in p or "HTTP 500" in p for p in report.problems)  # ... seen by clients


def test_serve_fuzz_of_a_running_reasoner_over_mutual_tls(tmp_path: Path) -> None:
    """``rtalab serve fuzz --url https://...`` with ``--ca``, ``--client-cert`` and
    ``--client-key``: every binding's requests (JSON-RPC, REST, WebSocket over wss) go over
    mutual TLS to a Reasoner that requires client certificates, and the run passes; without
    the CA the certificate problem is one line, exit 2, and nothing is fuzzed."""
    from rtalab.loadtests.common.certs import make_pki
    from rtalab.loadtests.common.procs import start_reasoner
    from rtalab.loadtests.common.tls import ClientTls, ServerTls
    from rtalab.loadtests.wireclient import FAST_SCENARIO, TOKENS

    pki = make_pki(tmp_path / "pki")
    (tmp_path / "scenario.toml").write_text(FAST_SCENARIO, encoding="utf-8")
    extra = ["--test-hooks", "--log-level", "warning"]
    for token, principal in TOKENS.items():
        extra += ["--token", f"{token}={principal}"]
    client = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    rtalab = [sys.executable, "-m", "rtalab.sim.cli", "serve", "fuzz", "--requests", "30",
              "--threads", "2", "--quiet", "--results", str(tmp_path / "results")]
    with start_reasoner(dedup=f"sqlite:///{tmp_path / 'd.sqlite'}",
                        scenario=tmp_path / "scenario.toml", extra_args=extra,
                        log_path=tmp_path / "reasoner.log",
                        server_tls=ServerTls(str(pki.server.cert), str(pki.server.key),
                                             str(pki.ca)), client_tls=client) as proc:
        assert proc.url.startswith("https://")
        p = subprocess.run([*rtalab, "--url", proc.url, *client.to_args()],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        for binding in ("jsonrpc", "rest", "ws"):
            assert any(line.startswith(binding) and line.rstrip().endswith("ok")
                       for line in p.stdout.splitlines()), p.stdout
        bad = subprocess.run([*rtalab, "--url", proc.url], capture_output=True, text=True,
                             timeout=60)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown CA" in lines[0] and "Traceback" not in bad.stderr
    # the fuzzed run wrote its summary; the refused one wrote nothing
    assert len(list((tmp_path / "results").rglob("summary.json"))) == 1
