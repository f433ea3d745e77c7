"""Scenario files: one TOML experiment that drives both the simulator and a load test.

A scenario has six sections, each parsed into a frozen, validated object:
``[workload]`` (calls and turns), ``[live]`` (the Live layer's policy, see
:mod:`rtalab.sim.policy.config`), ``[network]`` (per-direction fault model),
``[reasoner]`` (capacity, latency, errors, dedup), ``[run]`` (duration,
warm-up, seed, replications) and ``[load]`` (client-side behaviour only the
Locust Live users have: injected duplicate requests and barge-in; the
simulator ignores it).  Every field has a default, so an empty file is
a valid scenario; units are in the names (``_s``, ``_ms``, ``_per_s``,
``_bytes``).  Presets live in ``sim/scenarios/*.toml``.
"""

from __future__ import annotations

import copy
import math
import tomllib
import types
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import tomli_w

from rtalab.sim.config import ConfigError, build, num, prob, to_plain
from rtalab.sim.dist import Const, Dist, Exp
from rtalab.sim.policy.codes import ALL_CODES
from rtalab.sim.policy.config import LivePolicyConfig

# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class RatePhase:
    """One piece of a piecewise-constant arrival schedule, from ``start_s`` on."""

    start_s: float = num(0.0, ge=0.0)
    calls_per_s: float = num(1.0, ge=0.0)


@dataclass(frozen=True)
class WorkloadConfig:
    """``[workload]``: the calls arriving and the turns inside them."""

    arrival: Literal["poisson", "schedule"] = "poisson"
    calls_per_s: float = num(1.0, ge=0.0, doc="Poisson call arrival rate")
    schedule: tuple[RatePhase, ...] = ()  # arrival = "schedule": Poisson within each phase
    turns_per_call: Dist = Const(4.0)  # rounded up, at least 1
    think_time_s: Dist = Exp(2.0)  # caller speaking/listening between turns
    side_effect_share: float = prob(0.3, doc="share of turns that call a side-effecting tool")
    handoff_share: float = prob(0.0, doc="share of turns that go INPUT_REQUIRED")
    caller_response_time_s: Dist = Exp(5.0)  # handoff turns: caller's structured answer
    max_calls: int = num(0, ge=0, doc="stop arrivals after this many calls; 0 = no limit")
    barge_in_share: float = prob(0.0, doc="share of turns the caller interrupts while in flight")
    barge_in_after_s: Dist = Exp(1.5)  # barge-in turns: caller speaks this long after turn start

    def __post_init__(self) -> None:
        if self.arrival == "schedule":
            if not self.schedule:
                raise ConfigError("schedule", "arrival = 'schedule' needs at least one phase")
            starts = [p.start_s for p in self.schedule]
            if starts != sorted(starts) or len(set(starts)) != len(starts):
                raise ConfigError("schedule", f"phases must have increasing start_s, got {starts}")

    def rate_at(self, t_s: float) -> float:
        """Call arrival rate in force at simulated time ``t_s``."""
        if self.arrival == "poisson":
            return self.calls_per_s
        rate = 0.0
        for p in self.schedule:
            if p.start_s <= t_s:
                rate = p.calls_per_s
        return rate


# --------------------------------------------------------------------------- network

Direction = Literal["uplink", "downlink", "both"]


@dataclass(frozen=True)
class LinkConfig:
    """Faults applied to each application message on one direction of the path.

    ``uplink`` is Live layer -> Reasoner (requests); ``downlink`` is Reasoner ->
    Live layer (stream events).  Loss drops a message; duplication delivers a
    second copy ``duplicate_delay_s`` later; reordering adds ``reorder_delay_s``
    to a message so later ones overtake it.
    """

    latency_s: Dist = Const(0.02)
    loss: float = prob(0.0)
    duplication: float = prob(0.0)
    duplicate_delay_s: Dist = Exp(0.05)
    reorder: float = prob(0.0)
    reorder_delay_s: Dist = Exp(0.1)


OutageKind = Literal["blackhole", "reset", "reasoner-down", "loss"]
#: kinds that act on connections: every open stream is cut at the window's start and every
#: attempt sent inside it fails at once (the Live layer notices without waiting for a timer)
REFUSING_KINDS = ("reset", "reasoner-down")


@dataclass(frozen=True)
class OutageConfig:
    """A scheduled outage of ``kind`` during ``[start_s, start_s + duration_s)``:

    * ``blackhole`` (default): messages on ``direction`` vanish; connections hang until a
      Live-layer timer ends the attempt;
    * ``reset``: open connections are cut at the window's start and new ones are reset at
      once (both directions);
    * ``reasoner-down``: the Reasoner refuses connections (ECONNREFUSED) and its open
      streams are cut at the window's start (both directions);
    * ``loss``: each message on ``direction`` is lost with probability ``loss``, as the
      link's own ``loss`` is (a lost stream event cuts the stream)."""

    start_s: float = num(0.0, ge=0.0)
    duration_s: float = num(10.0, gt=0.0)
    direction: Direction = "both"
    kind: OutageKind = "blackhole"
    loss: float = prob(0.5, "the loss probability of a 'loss' outage")

    def __post_init__(self) -> None:
        if self.kind in REFUSING_KINDS and self.direction != "both":
            raise ConfigError("direction", f"a {self.kind!r} outage acts on connections, so on "
                              f"both directions: drop direction = {self.direction!r}")


@dataclass(frozen=True)
class NetworkConfig:
    """``[network]``: per-direction fault model plus scheduled outages."""

    uplink: LinkConfig = LinkConfig()
    downlink: LinkConfig = LinkConfig()
    outages: tuple[OutageConfig, ...] = ()


# --------------------------------------------------------------------------- reasoner

DedupMode = Literal["request-guid", "turn", "none"]


@dataclass(frozen=True)
class CapacityDrop:
    """Scheduled capacity loss: only ``workers`` workers in [start_s, start_s+duration_s)."""

    start_s: float = num(0.0, ge=0.0)
    duration_s: float = num(10.0, gt=0.0)
    workers: int = num(0, ge=0)


@dataclass(frozen=True)
class ReasonerConfig:
    """``[reasoner]``: the A2A server's capacity, latency, failures and dedup."""

    workers: int = num(8, ge=1, doc="turns reasoned concurrently")
    queue_limit: int = num(200, ge=0, doc="waiting turns beyond which a turn is refused")
    queue_full_code: Literal["rate-limited", "internal"] = "rate-limited"
    queue_timeout_s: float = num(0.0, ge=0.0,
                                 doc="refuse work that waited longer (queue_full_code); 0 = off")
    queue_discipline: Literal["fifo", "lifo"] = "fifo"  # which waiting request a free worker takes
    retry_after_ms: int = num(500, ge=0, doc="hint sent with rate-limited")
    context_rate_per_s: float = num(0.0, ge=0.0, doc="per-contextId turn rate limit; 0 = off")
    context_burst: int = num(5, ge=1)
    reasoning_time_s: Dist = Exp(0.6)  # service time of one turn (a worker is busy)
    load_latency_base_s: float = num(0.0, ge=0.0, doc="extra service time, fixed")
    load_latency_k_s: float = num(0.0, ge=0.0, doc="extra service time per turn in flight")
    first_chunk_s: Dist = Const(0.0)  # from end of reasoning to first chunk
    chunks: int = num(3, ge=1, doc="spoken artifact chunks per turn")
    chunk_interval_s: float = num(0.2, ge=0.0, doc="cadence of chunks after the first")
    progress_directive: bool = True  # send a `progress` directive when work starts
    tool_latency_s: Dist = Exp(0.3)  # side-effect turns: upstream tool call duration
    upstream_timeout_s: float = num(2.0, ge=0.0, doc="give up on the tool; 0 = wait forever")
    errors: dict[str, float] = field(
        default_factory=lambda: types.MappingProxyType({}),  # type: ignore[arg-type,return-value]  # read-only, as build() makes dicts
        metadata={"keys": ALL_CODES, "ge": 0.0, "le": 1.0},
    )  # injected failure probability per code, per execution
    dedup: DedupMode = "request-guid"
    # errors.md §4: a message naming a taskId known on its context (not the INPUT_REQUIRED
    # continuation) is a retry of that turn: "retry" joins / replays it (the MUST), "execute"
    # runs it beside the first (the pre-issue-6 behaviour, a control)
    known_task: Literal["retry", "execute"] = "retry"
    dedup_window_s: float = num(300.0, ge=0.0, doc="how long a finished entry is kept")
    dedup_entry_bytes: int = num(512, ge=0, doc="memory charged per dedup entry")
    handoff_timeout_s: float = num(60.0, ge=0.0, doc="server bound on INPUT_REQUIRED; 0 = none")
    capacity_drops: tuple[CapacityDrop, ...] = ()

    def __post_init__(self) -> None:
        total = sum(self.errors.values())
        if total > 1.0:
            raise ConfigError("errors", f"probabilities must sum to <= 1, got {total:g}")


# --------------------------------------------------------------------------- fleet


@dataclass(frozen=True)
class ReplicaFailure:
    """Replica ``replica`` is down in [start_s, start_s + duration_s): requests sent to it get
    no answer, its work in progress is lost, and it restarts with an empty memory."""

    replica: int = num(0, ge=0)
    start_s: float = num(0.0, ge=0.0)
    duration_s: float = num(10.0, gt=0.0)


BALANCERS = ("random", "round_robin", "least_outstanding", "power_of_two", "sticky")


@dataclass(frozen=True)
class FleetConfig:
    """``[fleet]``: ``replicas`` Reasoners, each with ``[reasoner]``'s workers, queue and
    (``state = "per-replica"``) its own dedup store and sessions, behind a load balancer."""

    replicas: int = num(1, ge=1, doc="Reasoner replicas, each configured by [reasoner]")
    balancer: Literal["random", "round_robin", "least_outstanding", "power_of_two",
                      "sticky"] = "random"
    # "shared": one dedup store, session and task state for all replicas (Redis);
    # "per-replica": each replica remembers only what it served (an in-memory store)
    state: Literal["shared", "per-replica"] = "shared"
    health_check_s: float = num(1.0, ge=0.0,
                                doc="a failed replica leaves the balancer this long after")
    failures: tuple[ReplicaFailure, ...] = ()

    def __post_init__(self) -> None:
        for f in self.failures:
            if f.replica >= self.replicas:
                raise ConfigError("failures", f"replica {f.replica} of {self.replicas} "
                                              f"(replicas are numbered from 0)")

    @property
    def is_fleet(self) -> bool:
        """False for one plain pool (the model without a balancer)."""
        return self.replicas > 1 or bool(self.failures)


# --------------------------------------------------------------------------- run


@dataclass(frozen=True)
class RunConfig:
    """``[run]``: how long, how many replications, which seed."""

    duration_s: float = num(300.0, gt=0.0, doc="arrivals stop after this")
    warmup_s: float = num(30.0, ge=0.0, doc="turns starting earlier are excluded from summaries")
    drain_s: float = num(120.0, ge=0.0, doc="time after duration_s for open turns to finish")
    seed: int = num(1, ge=0)
    replications: int = num(1, ge=1)
    # "all": every record row (the default); "sample:P": the rows of a seeded share P of the
    # calls; "none": no rows.  The metrics are computed in every case (docs/contracts.md).
    records: str = "all"

    def __post_init__(self) -> None:
        if self.warmup_s >= self.duration_s:
            raise ConfigError("warmup_s", f"must be < duration_s ({self.duration_s:g})")
        self.record_share  # noqa: B018  (validates)

    @property
    def record_share(self) -> float | None:
        """None for ``records = "all"``, else the share of calls whose rows are kept."""
        r = self.records
        if r == "all":
            return None
        if r == "none":
            return 0.0
        if r.startswith("sample:"):
            try:
                p = float(r[len("sample:"):])
            except ValueError:
                p = math.nan
            if 0.0 < p <= 1.0:
                return p
        raise ConfigError("records", f'must be "all", "none" or "sample:P" with 0 < P <= 1, '
                                     f"got {r!r}")


# --------------------------------------------------------------------------- load


@dataclass(frozen=True)
class LoadConfig:
    """``[load]``: client-side faults and caller behaviour of the Locust Live users.

    The simulator does not model these (its defaults of 0 keep both sides
    comparable).  Each share is a probability per request (attempt) or per turn.
    """

    resend_share: float = prob(0.0, doc="attempt re-sent byte-identical after it ended")
    resend_delay_s: Dist = Const(0.0)  # from the end of the attempt to its re-sent copy
    concurrent_duplicate_share: float = prob(0.0, doc="attempt sent twice at once")
    concurrent_first_share: float = prob(
        0.5, doc="of those concurrent copies, the share sent before their original")
    continuation_duplicate_share: float = prob(
        0.0, doc="INPUT_REQUIRED continuation sent twice at once")
    barge_in_share: float = prob(0.0, doc="turn interrupted by the caller (CancelTask)")
    barge_in_after_s: Dist = Exp(0.3)  # from the first playable chunk to the interruption
    availability_min: float = prob(
        0.9, doc="release gate of a load run without --slo: least share of judged turns "
                 "that completed (docs/check.md)")
    # "unique": every turnId is globally unique; "per_call": t-1, t-2, ... counted per call
    # (reused across calls, contexts and principals, as many Live layers do)
    turn_ids: Literal["unique", "per_call"] = "unique"
    # restart the Reasoner this many seconds after the load started (embedded: SIGKILL and
    # restart; --target: the run's --restart-cmd); added to --restart-at / --crash-at
    restart_at_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if any(t < 0 for t in self.restart_at_s):
            raise ConfigError("restart_at_s", f"times must be >= 0, got {list(self.restart_at_s)}")


# --------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class Scenario:
    """One experiment. ``name`` defaults to the file stem."""

    name: str = "scenario"
    description: str = ""
    workload: WorkloadConfig = WorkloadConfig()
    live: LivePolicyConfig = LivePolicyConfig()
    network: NetworkConfig = NetworkConfig()
    reasoner: ReasonerConfig = ReasonerConfig()
    run: RunConfig = RunConfig()
    load: LoadConfig = LoadConfig()
    fleet: FleetConfig = FleetConfig()

    def with_overrides(self, overrides: dict[str, Any] | list[str]) -> Scenario:
        """A copy with dotted-key overrides applied (``{"run.seed": 7}`` or ``["run.seed=7"]``)."""
        return from_dict(apply_overrides(to_plain(self), overrides))

    def with_seed(self, seed: int) -> Scenario:
        return replace(self, run=replace(self.run, seed=seed))


def from_dict(data: dict[str, Any]) -> Scenario:
    """Validate plain data into a :class:`Scenario` (raises :class:`ConfigError`)."""
    return build(Scenario, data)


def _parse_value(text: str) -> Any:
    """Parse the right-hand side of ``--set key=value`` as a TOML value, else a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | list[str]) -> dict[str, Any]:
    """Set dotted keys in (a deep copy of) ``data``; ``overrides`` values may be TOML text."""
    data = copy.deepcopy(data)
    items = overrides.items() if isinstance(overrides, dict) else []
    if isinstance(overrides, list):
        parsed = []
        for item in overrides:
            if "=" not in item:
                raise ConfigError(item, "override must look like key.path=value")
            k, v = item.split("=", 1)
            parsed.append((k.strip(), _parse_value(v.strip())))
        items = parsed
    for key, value in items:
        parts = key.split(".")
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p) if isinstance(node, dict) else None
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(".".join(parts[: i + 1]), "is not a table; cannot set a sub-key")
            node = nxt
        node[parts[-1]] = value
    return data


PRESETS_PACKAGE = "rtalab.sim.scenarios"


def preset_names() -> list[str]:
    """Names of the scenarios shipped in ``sim/scenarios/``."""
    files = resources.files(PRESETS_PACKAGE).iterdir()
    return sorted(f.name[:-5] for f in files if f.name.endswith(".toml"))


PRESET_PREFIX = "preset:"


def resolve_path(ref: str | Path) -> Path:
    """A scenario reference is a file path, the name of a preset, or ``preset:NAME`` (always
    the preset).  A bare name that is both a preset and a file or folder in the current
    directory is refused with both spellings (``preset:NAME`` / ``./NAME``): neither hides
    the other."""
    text = str(ref)
    names = preset_names()

    def preset(name: str) -> Path:
        return Path(str(resources.files(PRESETS_PACKAGE).joinpath(f"{name}.toml")))

    if text.startswith(PRESET_PREFIX):
        name = text[len(PRESET_PREFIX):]
        if name not in names:
            raise ConfigError("", f"no preset named {name!r} (presets: {', '.join(names)})")
        return preset(name)
    p = Path(ref)
    bare = isinstance(ref, str) and "/" not in text and p.suffix == "" and text in names
    if bare and p.exists():
        what = "folder" if p.is_dir() else "file"
        raise ConfigError("", f"{text!r} is both a preset and a {what} here: write "
                              f"{PRESET_PREFIX}{text} for the preset or ./{text} for the {what}")
    if p.exists():
        return p
    if bare:
        return preset(text)
    raise ConfigError("", f"no scenario file or preset named {text!r} "
                          f"(presets: {', '.join(names)})")


def _anchor_files(node: Any, base: Path) -> None:
    """Make every ``file`` of an empirical distribution absolute, relative to ``base``."""
    if isinstance(node, dict):
        f = node.get("file")
        if node.get("dist") == "empirical" and isinstance(f, str) and f \
                and not Path(f).is_absolute():
            node["file"] = str(base / f)
        for v in node.values():
            _anchor_files(v, base)
    elif isinstance(node, list):
        for v in node:
            _anchor_files(v, base)


def load_scenario(ref: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read, override and validate a scenario file or preset (raises :class:`ConfigError`)."""
    path = resolve_path(ref)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("", f"{path}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("", f"{path}: cannot read: {e}") from None
    data.setdefault("name", path.stem)
    _anchor_files(data, path.resolve().parent)
    data.pop("tune", None)  # search ranges of `rtalab sim tune` (sim/answers/tune.py); not a run
    if overrides:
        data = apply_overrides(data, overrides)
    return from_dict(data)



def load_scenario_args(ref: str | Path, overrides: Sequence[str] | None) -> Scenario:
    """:func:`load_scenario` with a command's ``--set`` values (``None`` = none)."""
    return load_scenario(ref, list(overrides or []))


def dumps(scenario: Scenario) -> str:
    """The resolved scenario as TOML text (every default spelled out)."""
    return tomli_w.dumps(to_plain(scenario))
