"""What calibration reads: a small, documented set of observations, whatever their source.

:class:`Observations` holds

* ``attempts`` — one row per request the client sent (a pandas DataFrame), columns
  (:data:`ATTEMPT_COLUMNS`; times in seconds on any one clock, durations in seconds):

  ============================  ==========================================================
  ``send_s``                    request sent
  ``first_response_s``          first event of any kind arrived (NaN if none)
  ``first_chunk_s``             first spoken chunk playable (completed attempts)
  ``end_s``                     the client stopped waiting
  ``outcome``                   ``completed``, ``input-required``, ``failed``, ``timeout``, …
  ``error_code``                code of a FAILED state (``rta/errorCode``), else empty
  ``retry_after_ms``            ``rta/retryAfterMs`` received, else NaN
  ``side_effect``, ``handoff``  the turn calls a tool / goes INPUT_REQUIRED
  ``worker``                    the server process that answered ("" if unknown)
  ``server_intake_s``           the server's own timings when it reports them (else NaN):
  ``server_queue_wait_s``       request received → queue, queue → a worker, worker held
  ``server_service_s``          (reasoning + tool), worker freed → first chunk
  ``server_first_chunk_delay_s``
  ============================  ==========================================================

* ``chunk_gaps_s`` — gaps between consecutive spoken chunks of completed attempts (a sample);
* ``chunks`` — spoken chunks per completed attempt (a sample);
* ``server_histograms`` — cumulative Prometheus histograms scraped from the server
  (``name -> (le bounds, cumulative counts)``), used when per-turn timings are absent;
* from a server's counters and gauges (a Prometheus scrape, an OTLP export:
  :mod:`rtalab.sim.calibrate.telemetry`): ``server_turns`` (turns answered in the window by
  (outcome, error code)), ``turns_per_s`` (their rate), ``chunks_per_completed``, ``gauges``
  (``(time, busy workers, queued turns)`` per scrape);
* ``duration_s``, ``calls_per_s`` (offered), ``capacity`` (concurrent turns, when the
  server exports it), ``probe`` (steps of a step-load: offered and completed turns/s, mean
  service time), ``source`` (where it came from, for the comments of the output).

:func:`from_run_dir` builds them from an ``rtalab load run`` folder (``ledger/*.jsonl``,
``ledger/server_metrics.json``, ``probe.json``); any other source (a Prometheus scrape,
OpenTelemetry spans of production turns) only has to fill the same columns.  This module
reads files only; it never imports the load-test code.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj

TIMING_COLUMNS = ("server_intake_s", "server_queue_wait_s", "server_service_s",
                  "server_first_chunk_delay_s")
FLOAT_COLUMNS = ("send_s", "first_response_s", "first_chunk_s", "end_s", "retry_after_ms",
                 *TIMING_COLUMNS)
ATTEMPT_COLUMNS = (*FLOAT_COLUMNS, "outcome", "error_code", "side_effect", "handoff", "worker")
# the server histograms calibration understands (docs/reasoner.md "Per-turn timings")
HISTOGRAMS = {"service": "rta_reasoner_service_seconds",
              "queue_wait": "rta_reasoner_queue_wait_seconds",
              "first_chunk_delay": "rta_reasoner_first_chunk_delay_seconds",
              "intake": "rta_reasoner_intake_seconds",
              "chunk_interval": "rta_reasoner_chunk_interval_seconds"}
CHUNK_SAMPLE_LINES = 200_000  # events read for the chunk cadence (a sample of the ledger)


class ObservationError(ValueError):
    """The observations cannot be read or are unusable; the message says why (one line)."""


@dataclass
class Probe:
    """One step of a step-load: offered and completed turns per second, mean service time."""

    offered_turns_per_s: float
    completed_turns_per_s: float
    mean_service_s: float = math.nan


@dataclass
class Observations:
    """The inputs of :func:`rtalab.sim.calibrate.calibrate` (see the module docstring)."""

    attempts: pd.DataFrame
    duration_s: float
    calls_per_s: float = math.nan
    chunk_gaps_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    chunks: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=int))
    server_histograms: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(
        default_factory=dict)
    capacity: int | None = None
    capacity_source: str = ""
    probe: list[Probe] = field(default_factory=list)
    source: str = ""
    # from a server's counters and gauges (rtalab.sim.calibrate.telemetry), when no attempts are
    # seen
    server_turns: dict[tuple[str, str], float] = field(default_factory=dict)
    turns_per_s: float = math.nan
    chunks_per_completed: float = math.nan
    gauges: list[tuple[float, float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.attempts = normalise_attempts(self.attempts)

    @property
    def has_server_timings(self) -> bool:
        """True if the server reported per-turn service times."""
        return bool(self.attempts["server_service_s"].notna().any())


def normalise_attempts(frame: pd.DataFrame) -> pd.DataFrame:
    """The attempt columns with their types; missing optional columns are added empty."""
    if "send_s" not in frame.columns:
        raise ObservationError("attempts need at least a 'send_s' column")
    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    for c in FLOAT_COLUMNS:
        out[c] = (pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float)
                  if c in frame.columns else np.full(len(frame), math.nan))
    for c in ("outcome", "error_code", "worker"):
        out[c] = (frame[c].fillna("").astype(str).to_numpy() if c in frame.columns
                  else np.full(len(frame), "", dtype=object))
    for c in ("side_effect", "handoff"):
        out[c] = (frame[c].fillna(False).astype(bool).to_numpy() if c in frame.columns
                  else np.zeros(len(frame), dtype=bool))
    return out


LEDGER_FIELDS = {**dict.fromkeys(FLOAT_COLUMNS, "float64"), "outcome": "string",
                 "error_code": "string", "side_effect": "bool", "handoff": "bool",
                 "server_worker": "string", "injected": "string", "call_id": "string"}


def _read_jsonl(path: Path) -> pd.DataFrame:
    """The calibration's columns of a JSON-lines ledger (pyarrow's reader, other fields
    skipped: ~1M rows in seconds)."""
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    types: dict[str, pa.DataType] = {"float64": pa.float64(), "string": pa.string(),
                                     "bool": pa.bool_()}
    schema = pa.schema([(k, types[v]) for k, v in LEDGER_FIELDS.items()])
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        return pj.read_json(path, parse_options=opts).to_pandas()
    except pa.ArrowInvalid:  # a field of another type than ours: read everything as it is
        pass
    try:
        return pj.read_json(path).to_pandas()
    except Exception as e:  # a ledger that is not JSON lines
        raise ObservationError(f"{path}: not a JSON-lines ledger ({str(e).splitlines()[0]})") \
            from None


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?$')


def parse_histograms(samples: dict[str, float]) -> dict[str, tuple[tuple[float, ...],
                                                                   tuple[float, ...]]]:
    """Cumulative histograms from flat Prometheus samples (``name_bucket{le="x"}: count``).

    Buckets of one name with other labels are summed; returns ``name -> (le, counts)`` with
    ``le`` ending in ``inf``.
    """
    acc: dict[str, dict[float, float]] = {}
    for key, value in samples.items():
        m = _SAMPLE.match(key)
        if not m or not m["name"].endswith("_bucket") or not m["labels"]:
            continue
        le = re.search(r'le="([^"]+)"', m["labels"])
        if not le:
            continue
        bound = math.inf if le[1] in ("+Inf", "Inf", "inf") else float(le[1])
        name = m["name"][: -len("_bucket")]
        acc.setdefault(name, {})
        acc[name][bound] = acc[name].get(bound, 0.0) + float(value)
    out = {}
    for name, buckets in acc.items():
        bounds = sorted(buckets)
        if bounds and bounds[-1] == math.inf:
            out[name] = (tuple(bounds), tuple(buckets[b] for b in bounds))
    return out


def _chunk_sample(events_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between spoken chunks and chunks per attempt, from the head of ``events.jsonl``."""
    if not events_path.exists():
        return np.empty(0), np.empty(0, dtype=int)
    times: dict[str, list[float]] = {}
    with open(events_path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= CHUNK_SAMPLE_LINES:
                break
            if '"artifact"' not in line:
                continue
            ev = json.loads(line)
            if ev.get("kind") == "artifact" and isinstance(ev.get("recv_s"), int | float):
                times.setdefault(ev.get("attempt_key", ""), []).append(float(ev["recv_s"]))
    gaps, counts = [], []
    complete = list(times.values())[:-1]  # the last attempt may be cut by the sample's end
    for ts in complete:
        ts.sort()
        counts.append(len(ts))
        gaps.extend(np.diff(ts).tolist())
    return np.asarray(gaps, dtype=float), np.asarray(counts, dtype=int)


def from_run_dir(run_dir: str | Path) -> Observations:
    """The observations of one ``rtalab load run`` folder (raises :class:`ObservationError`)."""
    d = Path(run_dir)
    led = d / "ledger"
    if not (led / "attempts.jsonl").exists() and (d / "probe.json").exists():
        return from_probe_dir(d)
    if not (led / "attempts.jsonl").exists():
        raise ObservationError(f"{d}: not a load run folder (no ledger/attempts.jsonl)")
    raw = _read_jsonl(led / "attempts.jsonl")
    if len(raw) == 0:
        raise ObservationError(f"{d}: the ledger has no attempts")
    if "injected" in raw.columns:  # client-injected copies are not the deployment's load
        raw = raw[raw["injected"].fillna("").astype(str) == ""]
    if "server_worker" in raw.columns:
        raw = raw.rename(columns={"server_worker": "worker"})
    meta = _json(d / "meta.json")
    duration = float(meta.get("duration_s") or 0.0)
    sends = pd.to_numeric(raw["send_s"], errors="coerce")
    if not duration > 0:
        duration = float(sends.max() - sends.min())
    calls = raw["call_id"].nunique() if "call_id" in raw.columns else 0
    metrics = _json(led / "server_metrics.json")
    capacity, cap_source = None, ""
    for key in ("rta_reasoner_capacity", "rta_reasoner_workers"):
        if key in metrics:  # a server that exports its concurrency limit
            capacity, cap_source = int(metrics[key]), f"server /metrics {key}"
    probe = [Probe(**p) for p in _json(d / "probe.json").get("steps", [])]
    gaps, chunks = _chunk_sample(led / "events.jsonl")
    return Observations(attempts=raw, duration_s=duration,
                        calls_per_s=calls / duration if duration > 0 else math.nan,
                        chunk_gaps_s=gaps, chunks=chunks,
                        server_histograms=parse_histograms(metrics), capacity=capacity,
                        capacity_source=cap_source, probe=probe, source=str(d))


def from_probe_dir(d: Path) -> Observations:
    """An ``rtalab load probe`` folder: its steps as probe observations, and the attempts of
    its unsaturated steps (all steps if every one saturated) as one combined set."""
    probe = _json(d / "probe.json")
    steps = [Probe(**p) for p in probe.get("steps", [])]
    runs = [(d / s["run"], s) for s in probe.get("detail", []) if s.get("run")]
    if not steps or not runs:
        raise ObservationError(f"{d}: probe.json has no steps")
    calm = [r for r, s in runs if s["completed_turns_per_s"] >= 0.9 * s["offered_turns_per_s"]]
    obs = combine([from_run_dir(r) for r in (calm or [r for r, _ in runs])])
    # the server's histograms count from its start: the last step's scrape holds every step
    # once (the steps' scrapes summed would count the early turns several times)
    obs.server_histograms = parse_histograms(_json(runs[-1][0] / "ledger"
                                                   / "server_metrics.json"))
    obs.probe = steps
    obs.source = f"{d} (step-load probe: {len(steps)} steps)"
    return obs


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ObservationError(f"{path}: not readable JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def combine(observations: list[Observations]) -> Observations:
    """Several runs as one set (the attempts side by side; clocks kept apart by an offset)."""
    if len(observations) == 1:
        return observations[0]
    frames: list[pd.DataFrame] = []
    offset = 0.0
    for o in observations:
        a = o.attempts.copy()
        t0 = np.nanmin(a["send_s"].to_numpy())
        for c in ("send_s", "first_response_s", "first_chunk_s", "end_s"):
            a[c] = a[c] - t0 + offset
        a["worker"] = [f"{len(frames)}:{w}" for w in a["worker"]]  # processes of other runs
        frames.append(a)
        offset += o.duration_s + 3600.0
    hist: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for o in observations:
        for name, (le, counts) in o.server_histograms.items():
            if name in hist and hist[name][0] == le:
                counts = tuple(x + y for x, y in zip(hist[name][1], counts, strict=True))
            hist[name] = (le, counts)
    caps = [o for o in observations if o.capacity is not None]
    return Observations(
        attempts=pd.concat(frames, ignore_index=True),
        duration_s=sum(o.duration_s for o in observations),
        calls_per_s=float(np.nanmean([o.calls_per_s for o in observations])),
        chunk_gaps_s=np.concatenate([o.chunk_gaps_s for o in observations]),
        chunks=np.concatenate([o.chunks for o in observations]),
        server_histograms=hist,
        capacity=caps[0].capacity if caps else None,
        capacity_source=caps[0].capacity_source if caps else "",
        probe=[p for o in observations for p in o.probe],
        source=", ".join(o.source for o in observations))
