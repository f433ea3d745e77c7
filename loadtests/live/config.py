"""The settings of one load run, shared by every Locust process through a JSON file.

One typed object goes from the command line to the Live users: ``rtalab load run``
builds :class:`LiveOptions` once from its flags and the scenario
(:meth:`LiveOptions.of_scenario`), the run's :class:`LoadSettings` carry it unchanged,
``<run dir>/ledger/settings.json`` is that object serialised once
(:func:`rtalab.sim.config.to_plain`), and the locustfile of every process (master, workers, or the
single local process), pointed at the file by the ``RTALAB_LOAD_SETTINGS`` environment
variable, reads it back as the same types (:func:`rtalab.sim.config.build`).  The test-only
switches (negative controls and conformance hooks) are kept apart, in
:class:`TestSwitches`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtalab.loadtests.live.bindings import REGISTRY, binding_list
from rtalab.loadtests.live.wire import DEFAULT_EXT_URI
from rtalab.sim.config import build, to_plain
from rtalab.sim.policy.config import LivePolicyConfig
from rtalab.sim.scenario import RunConfig, Scenario

ENV = "RTALAB_LOAD_SETTINGS"
WORKER_DIR_ENV = "RTALAB_LOAD_WORKER_DIR"  # a remote worker's own run folder (rtalab load worker)
HARD_TIMEOUT_S = 60.0  # safety bound of one attempt when no Live timer applies (load side only)
# the Live options that are a scenario's [live] key: option -> key (their defaults are the key's)
SCENARIO_KEYS = {"hold_s": "reorder_gap_s"}
HOLD_S: float = getattr(LivePolicyConfig(), SCENARIO_KEYS["hold_s"])
_RUN = RunConfig()  # the defaults of [run]: a run's own values are always given


@dataclass(frozen=True)
class TestSwitches:
    """TEST ONLY: the negative controls and conformance hooks of a load run (never set in a
    real one).  The Live users read the first three; the embedded Reasoner gets
    ``unsafe_bugs`` (and, for the forced errors, ``--test-hooks``)."""

    __test__ = False  # not a pytest test class, whatever its name

    no_reorder: bool = False  # --no-reorder: play events in arrival order
    unsafe_test_retry_codes: tuple[str, ...] = ()  # --unsafe-test-retry-code: retry these anyway
    force_error_codes: tuple[str, ...] = ()  # --test-force-error: turn i forces code i % n
    unsafe_bugs: tuple[str, ...] = ()  # --unsafe-bug: planted bugs of the embedded Reasoner


@dataclass(frozen=True)
class LiveOptions:
    """The Live users' options that the scenario file does not carry as such: one object from
    the command line to every Live user.  ``hold_s`` is the scenario's ``live.reorder_gap_s``
    (:data:`SCENARIO_KEYS`); ``ext_uri`` and ``hard_timeout_s`` are the load side's own."""

    ext_uri: str = DEFAULT_EXT_URI
    hold_s: float = HOLD_S  # reorder buffer: how long a gap is waited for
    hard_timeout_s: float = HARD_TIMEOUT_S  # safety bound of one attempt without a Live timer
    test: TestSwitches = field(default_factory=TestSwitches)

    @classmethod
    def of_scenario(cls, sc: Scenario, test: TestSwitches | None = None) -> LiveOptions:
        """The options of a run of ``sc``: its ``[live]`` keys, the load side's defaults and
        the test switches."""
        keys = {opt: getattr(sc.live, key) for opt, key in SCENARIO_KEYS.items()}
        return cls(**keys, test=test or TestSwitches())

    @property
    def reorder(self) -> bool:
        """The reorder buffer is on (off only with the test-only ``--no-reorder``)."""
        return not self.test.no_reorder

    @property
    def unsafe_test_retry_codes(self) -> tuple[str, ...]:
        """TEST ONLY: non-retryable codes retried anyway."""
        return self.test.unsafe_test_retry_codes

    @property
    def force_error_codes(self) -> tuple[str, ...]:
        """TEST ONLY: turn i forces code i % n (the Reasoner's ``--test-hooks``)."""
        return self.test.force_error_codes


@dataclass(frozen=True)
class LoadSettings:
    """Everything a Locust process needs besides the scenario file."""

    run_dir: str
    run_id: str
    scenario_path: str
    binding: str = "sse"  # the canonical comma list (bindings.parse_bindings); calls alternate
    duration_s: float = _RUN.duration_s
    drain_s: float = _RUN.drain_s
    processes: int = 1
    seed: int = _RUN.seed
    token: str | None = None
    tokens: tuple[str, ...] = field(default_factory=tuple)  # >1: calls alternate principals
    grpc_target: str = ""  # the gRPC address the target's agent card advertises (host:port)
    grpc_secure: bool = False  # TLS on it (the run's target is https)
    live: LiveOptions = field(default_factory=LiveOptions)

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
        Path(path).write_text(json.dumps(to_plain(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: str | Path) -> LoadSettings:
        """Read the JSON written by :meth:`write` (the same types: ``rtalab.sim.config.build``); a
        run folder written before the Live options had their own object reads as well."""
        return build(cls, _nested(json.loads(Path(path).read_text(encoding="utf-8"))))

    def for_remote_workers(self) -> str:
        """JSON for workers on other hosts (``rtalab load worker``): these settings plus the
        scenario's text, so a worker needs neither the settings file nor the scenario file."""
        data = to_plain(self)
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
        settings = build(cls, {**data, "run_dir": str(run), "scenario_path": str(scenario)})
        settings.write(run / "ledger" / "settings.json")
        return settings

    @classmethod
    def from_env(cls) -> LoadSettings:
        """The settings named by ``$RTALAB_LOAD_SETTINGS``."""
        path = os.environ.get(ENV)
        if not path:
            raise RuntimeError(f"{ENV} is not set: start Locust through 'rtalab load run'")
        return cls.read(path)


_FLAT_LIVE = ("ext_uri", "hold_s", "hard_timeout_s")
_FLAT_TEST = ("unsafe_test_retry_codes", "force_error_codes")


def _nested(data: dict[str, Any]) -> dict[str, Any]:
    """``settings.json`` as :meth:`LoadSettings.write` writes it: the flat layout of earlier
    runs (Live options and test switches beside the run's fields) moved under ``live``."""
    if "live" in data or not any(k in data for k in (*_FLAT_LIVE, *_FLAT_TEST, "reorder")):
        return data
    out = {k: v for k, v in data.items()
           if k not in (*_FLAT_LIVE, *_FLAT_TEST, "reorder")}
    test = {k: data[k] for k in _FLAT_TEST if k in data}
    if "reorder" in data:
        test["no_reorder"] = not data["reorder"]
    out["live"] = {**{k: data[k] for k in _FLAT_LIVE if k in data}, "test": test}
    return out

