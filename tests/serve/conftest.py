"""Wire-test fixtures: the Reasoner as a real subprocess, driven by the project's wire client.

Every test talks to the server over real sockets through
:mod:`rtalab.loadtests.wireclient` (httpx for HTTP/SSE, ``websockets.sync`` for
``/ws``), re-exported here for the test modules.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rtalab.loadtests.common.procs import ManagedProcess, start_reasoner
from rtalab.loadtests.wireclient import (  # noqa: F401 - re-exported to the test modules
    ALICE,
    BOB,
    END_STATES,
    EXT,
    FAST_HANDOFF_S,
    FAST_SCENARIO,
    TIMEOUT_S,
    TOKENS,
    WORKER_HEADER,
    Client,
    Turn,
    WsSession,
    frame_ends,
    headers,
    k,
    kind,
    message,
    meta,
    rpc,
    state,
    status_message,
    stream,
    uid,
)


class Reasoner(Client):
    """A running Reasoner subprocess and a client of it."""

    def __init__(self, proc: ManagedProcess):
        super().__init__(proc.url)
        self.proc = proc

    def __repr__(self) -> str:
        """Names the process."""
        return f"Reasoner(proc={self.proc!r})"

    @staticmethod
    def fixture(folder: str, doc: str, *, witness: bool = True, dedup_server: str | None = None,
                **start: Any) -> Any:
        """A module-scoped fixture yielding a Reasoner of :func:`start_test_reasoner` with
        ``start``, in its own temporary ``folder``: attached to the session's witness unless
        ``witness`` is false; its dedup store the ``url`` of the fixture named ``dedup_server``
        if given.  Assign it to the fixture's name: ``two = Reasoner.fixture("two", ...)``."""

        def fixture(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reasoner]:
            kw = dict(start)
            if witness:
                kw["witness"] = request.getfixturevalue("witness_server").url
            if dedup_server:
                kw["dedup"] = request.getfixturevalue(dedup_server).url
            with start_test_reasoner(tmp_path_factory.mktemp(folder), **kw) as proc:
                yield Reasoner(proc)

        fixture.__doc__ = doc
        return pytest.fixture(scope="module")(fixture)


# ---------------------------------------------------------------------------- fixtures


def start_test_reasoner(base: Path, *, witness: str | None = None, scenario: str = FAST_SCENARIO,
                        extra: list[str] | None = None, workers: int = 1,
                        dedup: str | None = None) -> ManagedProcess:
    """A Reasoner with the test tokens, test hooks, a fast scenario and its own SQLite store."""
    base.mkdir(parents=True, exist_ok=True)
    scenario_file = base / "scenario.toml"
    scenario_file.write_text(scenario, encoding="utf-8")
    args = ["--test-hooks", "--log-level", "warning", "--grpc-port", "0"]
    for token, principal in TOKENS.items():
        args += ["--token", f"{token}={principal}"]
    return start_reasoner(workers=workers, dedup=dedup or f"sqlite:///{base / 'dedup.sqlite'}",
                          scenario=scenario_file, witness=witness,
                          extra_args=args + (extra or []), log_path=base / "reasoner.log")


reasoner = Reasoner.fixture("reasoner", "The module's Reasoner (test hooks on, witness attached).")


@pytest.fixture(params=["sse", "ws", "grpc"])
def binding(request: pytest.FixtureRequest) -> str:
    """Every binding the Live users speak (JSON-RPC over SSE, WebSocket, gRPC)."""
    return str(request.param)


def ledger_summary(witness_url: str, context_id: str) -> dict[str, Any]:
    """The witness ledger summary of one context."""
    r = httpx.get(f"{witness_url}/ledger/summary", params={"contextId": context_id},
                  timeout=TIMEOUT_S)
    return dict(r.json())


def set_faults(witness_url: str, **faults: Any) -> None:
    """Change the witness faults (camelCase names)."""
    httpx.post(f"{witness_url}/faults", json=faults, timeout=TIMEOUT_S).raise_for_status()
