"""Start the chaos proxy as a managed subprocess (tests, ``rtalab load run``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from rtalab.loadtests.common.procs import LOCALHOST, ManagedProcess, _start_on_port, start_process
from rtalab.loadtests.common.tls import ClientTls, ServerTls


def chaos_command(*, port: int, upstream: str | Sequence[str],
                  ledger: str | Path | None = None, scenario: str | Path | None = None,
                  host: str = LOCALHOST, extra_args: Sequence[str] = ()) -> list[str]:
    """The command line of ``python -m rtalab.loadtests.chaos`` for these options (several
    ``upstream``: the replicas the proxy balances)."""
    ups = [upstream] if isinstance(upstream, str) else list(upstream)
    cmd = [sys.executable, "-m", "rtalab.loadtests.chaos", "--listen", f"{host}:{port}",
           *(a for u in ups for a in ("--upstream", u)),
           "--ledger", "" if ledger is None else str(ledger)]
    if scenario is not None:
        cmd += ["--scenario", str(scenario)]
    return cmd + [str(a) for a in extra_args]


def start_chaos(upstream: str | Sequence[str], *, port: int | None = None,
                ledger: str | Path | None = None,
                scenario: str | Path | None = None, extra_args: Sequence[str] = (),
                log_path: str | Path | None = None, timeout_s: float = 30.0,
                server_tls: ServerTls = ServerTls(),
                client_tls: ClientTls | None = None) -> ManagedProcess:
    """The proxy in front of ``upstream`` (several: a balancer over them); ready when its
    port accepts connections.  It serves TLS with ``server_tls`` and verifies the upstream
    with ``client_tls``."""

    def start(p: int) -> ManagedProcess:
        cmd = chaos_command(port=p, upstream=upstream, ledger=ledger, scenario=scenario,
                            extra_args=[*server_tls.to_args(),
                                        *(client_tls.to_args() if client_tls else ()),
                                        *extra_args])
        return start_process(cmd, ready_port=p, port=p, timeout_s=timeout_s, name="chaos",
                             log_path=log_path, url=f"{server_tls.scheme}://{LOCALHOST}:{p}")

    return _start_on_port(port, start)
