"""Start-up settings of the Reasoner server, passed to every uvicorn worker through one env var."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtests.reasoner.wire import DEFAULT_EXT_URI

SETTINGS_ENV = "RTALAB_REASONER_SETTINGS"


def default_dedup_url(port: int) -> str:
    """The embedded default store: a SQLite file per port in the temp directory."""
    return f"sqlite:///{Path(tempfile.gettempdir()) / f'rtalab-reasoner-{port}.sqlite'}"


@dataclass(frozen=True)
class ServerSettings:
    """Everything the CLI decides; the ``[reasoner]`` behaviour comes from ``scenario``."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    dedup_url: str = ""  # "" -> default_dedup_url(port)
    dedup_mode: str | None = None  # override of [reasoner].dedup
    dedup_window_s: float | None = None  # override of [reasoner].dedup_window_s
    dedup_wait_s: float = 30.0  # how long a duplicate waits for the in-flight original
    scenario: str | None = None  # file or preset; None = defaults
    overrides: tuple[str, ...] = ()  # "reasoner.chunks=5"
    witness: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)  # bearer token -> principal
    ext_uri: str = DEFAULT_EXT_URI
    test_hooks: bool = False
    max_tasks: int = 10_000  # taskstore.DEFAULT_MAX_TASKS
    session_ttl_s: float = 3600.0
    capacity_socket: str = ""  # set by server.run with workers > 1: the shared pool's broker
    log_level: str = "info"
    access_log: bool = False

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
        return cls(**data)
