"""Start-up settings of the Reasoner server, passed to every uvicorn worker through one env var."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rtalab.loadtests.common.tls import ClientTls, ServerTls
from rtalab.loadtests.reasoner.wire import DEFAULT_EXT_URI

SETTINGS_ENV = "RTALAB_REASONER_SETTINGS"


def default_dedup_url(port: int) -> str:
    """The embedded default store: a SQLite file per port in the temp directory."""
    return f"sqlite:///{Path(tempfile.gettempdir()) / f'rtalab-reasoner-{port}.sqlite'}"


@dataclass(frozen=True)
class ServerSettings:
    """Everything the CLI decides; the ``[reasoner]`` behaviour comes from ``scenario``."""

    host: str = "127.0.0.1"
    port: int = 8000
    grpc_port: int | None = None  # the A2A gRPC binding's port (None: off; 0: a free one)
    workers: int = 1
    dedup_url: str = ""  # "" -> default_dedup_url(port)
    dedup_mode: str | None = None  # override of [reasoner].dedup
    dedup_window_s: float | None = None  # override of [reasoner].dedup_window_s
    dedup_wait_s: float = 30.0  # how long a duplicate waits for the in-flight original
    scenario: str | None = None  # file or preset; None = defaults
    overrides: tuple[str, ...] = ()  # "reasoner.chunks=5"
    witness: str | None = None
    instance: str | None = None  # --instance: its name in the witness ledger (a replica)
    tokens: dict[str, str] = field(default_factory=dict)  # bearer token -> principal
    ext_uri: str = DEFAULT_EXT_URI
    test_hooks: bool = False
    max_tasks: int = 10_000  # taskstore.DEFAULT_MAX_TASKS
    session_ttl_s: float = 3600.0
    capacity_socket: str = ""  # set by server.run with workers > 1: the shared pool's broker
    log_level: str = "info"
    access_log: bool = False
    # slow and idle clients (rtalab.loadtests.reasoner.conns); connection limits 0 = from the file
    # limit
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    max_connections: int = 0
    max_connections_per_client: int = 0
    max_pending_connections: int = 0  # 0 = half of max_connections (conns: the share kept)
    otlp_file: str | None = None  # OTLP/JSON export of metrics and spans (reasoner.otel)
    otlp_interval_s: float = 5.0
    unsafe_bugs: tuple[str, ...] = ()  # TEST ONLY: planted bugs (loadtests/reasoner/unsafe.py)
    # TLS (loadtests/common/tls.py): what the server presents and requires ...
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # ... and what its client of the witness trusts and presents
    ca: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure: bool = False

    @property
    def server_tls(self) -> ServerTls:
        """The server's TLS settings (``enabled`` False: plain HTTP)."""
        return ServerTls(self.tls_cert, self.tls_key, self.tls_client_ca)

    @property
    def client_tls(self) -> ClientTls:
        """The TLS settings of the Reasoner's calls to the witness."""
        return ClientTls(self.ca, self.client_cert, self.client_key, self.insecure)

    @property
    def store_url(self) -> str:
        """The dedup store URL in force."""
        return self.dedup_url or default_dedup_url(self.port)

    def to_env(self) -> str:
        """JSON for :data:`SETTINGS_ENV`."""
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServerSettings:
        """Read :data:`SETTINGS_ENV` (defaults if unset)."""
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            return cls()
        data = json.loads(raw)
        data["overrides"] = tuple(data.get("overrides", ()))
        data["unsafe_bugs"] = tuple(data.get("unsafe_bugs", ()))
        return cls(**data)
