"""The settings of one load run, shared by every Locust process through a JSON file.

``rtalab load run`` writes ``<run dir>/ledger/settings.json`` and points the
``RTALAB_LOAD_SETTINGS`` environment variable at it; the locustfile of every
process (master, workers, or the single local process) reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtests.live.bindings import REGISTRY, binding_list
from loadtests.live.wire import DEFAULT_EXT_URI

ENV = "RTALAB_LOAD_SETTINGS"
WORKER_DIR_ENV = "RTALAB_LOAD_WORKER_DIR"  # a remote worker's own run folder (rtalab load worker)
# the Live users' defaults, once (LoadSettings and loadtests.live.call.LiveOptions)
HARD_TIMEOUT_S = 60.0  # safety bound of one attempt when no Live timer applies
HOLD_S = 0.25  # reorder buffer: how long a gap is waited for


@dataclass(frozen=True)
class LoadSettings:
    """Everything a Locust process needs besides the scenario file."""

    run_dir: str
    run_id: str
    scenario_path: str
    binding: str = "sse"  # the canonical comma list (bindings.parse_bindings); calls alternate
    duration_s: float = 30.0
    drain_s: float = 10.0
    processes: int = 1
    seed: int = 1
    ext_uri: str = DEFAULT_EXT_URI
    token: str | None = None
    tokens: tuple[str, ...] = field(default_factory=tuple)  # >1: calls alternate principals
    reorder: bool = True
    hold_s: float = HOLD_S
    unsafe_test_retry_codes: tuple[str, ...] = field(default_factory=tuple)
    force_error_codes: tuple[str, ...] = field(default_factory=tuple)
    hard_timeout_s: float = HARD_TIMEOUT_S
    grpc_target: str = ""  # the gRPC address the target's agent card advertises (host:port)
    grpc_secure: bool = False  # TLS on it (the run's target is https)

    def __post_init__(self) -> None:
        names = self.bindings
        if not names or any(n not in REGISTRY for n in names):
            raise ValueError(f"binding must be a comma list of {', '.join(REGISTRY)}, "
                             f"got {self.binding!r}")

    @property
    def bindings(self) -> tuple[str, ...]:
        """The bindings calls alternate over (call ``n`` uses ``bindings[n % len]``)."""
        return binding_list(self.binding)

    @property
    def uses_grpc(self) -> bool:
        """Some calls of the run go over gRPC."""
        return "grpc" in self.binding.split(",")

    def write(self, path: Path) -> None:
        """Write as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: str | Path) -> LoadSettings:
        """Read the JSON written by :meth:`write`."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for k in ("unsafe_test_retry_codes", "force_error_codes", "tokens"):
            data[k] = tuple(data.get(k) or ())
        return cls(**data)

    def for_remote_workers(self) -> str:
        """JSON for workers on other hosts (``rtalab load worker``): these settings plus the
        scenario's text, so a worker needs neither the settings file nor the scenario file."""
        data = asdict(self)
        data["scenario_toml"] = Path(self.scenario_path).read_text(encoding="utf-8")
        return json.dumps(data)

    @classmethod
    def from_remote(cls, text: str, run_dir: str | Path) -> LoadSettings:
        """The settings a master sent (:meth:`for_remote_workers`), with this worker's own run
        folder: the scenario is written there, and the settings next to it."""
        data = json.loads(text)
        run = Path(run_dir)
        (run / "ledger").mkdir(parents=True, exist_ok=True)
        scenario = run / "scenario.toml"
        scenario.write_text(data.pop("scenario_toml"), encoding="utf-8")
        for k in ("unsafe_test_retry_codes", "force_error_codes", "tokens"):
            data[k] = tuple(data.get(k) or ())
        settings = cls(**{**data, "run_dir": str(run), "scenario_path": str(scenario)})
        settings.write(run / "ledger" / "settings.json")
        return settings

    @classmethod
    def from_env(cls) -> LoadSettings:
        """The settings named by ``$RTALAB_LOAD_SETTINGS``."""
        path = os.environ.get(ENV)
        if not path:
            raise RuntimeError(f"{ENV} is not set: start Locust through 'rtalab load run'")
        return cls.read(path)
