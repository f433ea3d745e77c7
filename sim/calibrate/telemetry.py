"""Observations from a deployment's own telemetry: Prometheus scrapes (a URL or a file).

``from_prometheus(SOURCE, window_s, every_s)`` ->
:class:`~rtalab.sim.calibrate.observations.Observations`. SOURCE is a URL
(``http(s)://host:port/metrics``, scraped every ``every_s`` seconds for ``window_s`` seconds,
certificates verified as :class:`rtalab.sim.shared.tls.ClientTls` says: ``--ca``, ``--client-cert``,
``--insecure``) or a file of text exposition format: one or more scrapes, told apart by the samples'
timestamps (a file without timestamps is one scrape, its totals since the server started:
distributions and counts, but no rates). The parser is prometheus_client's
(``text_string_to_metric_families``).

What the window gives (the last scrape minus the first; labels other than ``le`` summed):

* histogram bucket deltas of the **roles** in :data:`ROLES` (service, queue wait, first-chunk
  delay, intake, chunk interval) -> ``server_histograms`` (cumulative ``le``, counts);
* the turn counter by ``outcome`` and ``code`` -> ``server_turns`` (turns answered, failed
  per code) and ``turns_per_s`` (its rate over the window);
* the chunk counter / completed turns -> ``chunks_per_completed``;
* the busy-workers and queued-turns gauges at each scrape -> ``gauges`` (capacity: a scrape
  that finds turns queued finds every worker busy).

A server with its own names gives a mapping file (TOML, ``[metrics]`` role = name; the
labels of the turn counter in ``[labels]``): see docs/calibration.md "From telemetry".
"""

from __future__ import annotations

import json
import math
import re
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rtalab.sim.calibrate.observations import HISTOGRAMS, ObservationError, Observations
from rtalab.sim.shared.tls import ClientTls, reason

# role -> the reference Reasoner's metric name (docs/reasoner.md "Metrics")
ROLES = {**HISTOGRAMS, "turns": "rta_reasoner_turns_total", "chunks": "rta_reasoner_chunks_total",
         "busy": "rta_reasoner_workers_busy", "queued": "rta_reasoner_queued",
         "capacity": "rta_reasoner_capacity"}
LABELS = {"outcome": "outcome", "code": "code"}  # the turn counter's labels
SCRAPE_TIMEOUT_S = 10.0


@dataclass
class Scrape:
    """One scrape: its time (unix seconds, NaN if unknown) and its samples."""

    t: float
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


@dataclass
class Mapping:
    """Which metric plays which role (defaults: the reference Reasoner's names)."""

    names: dict[str, str] = field(default_factory=lambda: dict(ROLES))
    labels: dict[str, str] = field(default_factory=lambda: dict(LABELS))


def load_mapping(path: str | Path | None) -> Mapping:
    """The mapping of ``path`` (TOML: ``[metrics] role = "name"``, ``[labels] outcome =
    "..."``), over the defaults; unknown roles are an error."""
    m = Mapping()
    if path is None:
        return m
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ObservationError(f"{path}: not a readable TOML mapping ({e})") from None
    for section, known, target in (("metrics", ROLES, m.names), ("labels", LABELS, m.labels)):
        for role, name in (data.get(section) or {}).items():
            if role not in known or not isinstance(name, str):
                raise ObservationError(f"{path}: [{section}] {role!r} is not one of "
                                       f"{', '.join(known)} (a string)")
            target[role] = name
    return m


def parse_exposition(text: str, source: str) -> list[Scrape]:
    """The scrapes of exposition text (grouped by sample timestamp, in time order)."""
    # lazy: +47 ms (prometheus_client) off importing telemetry
    from prometheus_client.parser import text_string_to_metric_families

    by_t: dict[float, Scrape] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                t = float(s.timestamp) if s.timestamp is not None else math.nan
                key = -1.0 if math.isnan(t) else t
                by_t.setdefault(key, Scrape(t)).samples.append(
                    (s.name, dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ObservationError(f"{source}: not Prometheus text exposition format "
                               f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
                               ) from None
    if not by_t:
        raise ObservationError(f"{source}: no samples (not Prometheus text exposition format?)")
    if -1.0 in by_t and len(by_t) > 1:
        raise ObservationError(f"{source}: some samples have timestamps and some not (one "
                               "scrape per timestamp, or one scrape without any)")
    return [by_t[k] for k in sorted(by_t)]


def scrape_url(url: str, window_s: float, every_s: float, tls: ClientTls | None = None,
               say: Any = None) -> tuple[list[Scrape], str]:
    """Scrape ``url`` every ``every_s`` for ``window_s`` seconds (at least two scrapes);
    the scrapes and their text with timestamps (to save and calibrate again later).  An
    ``https`` URL is verified as ``tls`` says (default: the system's CAs); a failed scrape is
    one line (:func:`rtalab.sim.shared.tls.reason`: the certificate problem named)."""
    tls = tls or ClientTls()
    n = max(2, int(window_s // every_s) + 1) if every_s > 0 else 2
    scrapes, texts = [], []
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i * (window_s / (n - 1))
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        now = time.time()
        try:
            with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S,
                                        context=tls.context_for(url)) as r:
                text = r.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as e:
            raise ObservationError(f"{url}: cannot scrape (HTTP {e.code} {e.reason})".rstrip()
                                   ) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            line = reason(e, url, tls)
            if line.startswith("TLS error"):
                raise ObservationError(f"cannot scrape: {line}") from None
            raise ObservationError(f"{url}: cannot scrape ({line.removeprefix(f'{url}: ')})"
                                   ) from None
        (one,) = parse_exposition(text, url) or [Scrape(now)]
        one.t = round(now * 1000) / 1000  # as saved (ms): a replay gives the same rates
        scrapes.append(one)
        texts.append(stamped(one))
        if say:
            say(f"scrape {i + 1}/{n} of {url}")
    return scrapes, "".join(texts)


def stamped(s: Scrape) -> str:
    """A scrape as exposition lines with its timestamp (ms), for a replayable file."""
    ms = round(s.t * 1000)
    out = []
    for name, labels, value in s.samples:
        lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        out.append(f"{name}{{{lab}}} {value!r} {ms}\n" if lab else f"{name} {value!r} {ms}\n")
    return "".join(out)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _buckets(s: Scrape, name: str) -> dict[float, float]:
    acc: dict[float, float] = {}
    for n, labels, v in s.samples:
        if n == f"{name}_bucket" and "le" in labels:
            le = math.inf if labels["le"] in ("+Inf", "Inf", "inf") else float(labels["le"])
            acc[le] = acc.get(le, 0.0) + v
    return acc


def _sum(s: Scrape, name: str, want: dict[str, str] | None = None) -> float | None:
    vals = [v for n, labels, v in s.samples if n == name and all(
        labels.get(k) == x for k, x in (want or {}).items())]
    return sum(vals) if vals else None


def _turns(s: Scrape, m: Mapping) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    name = m.names["turns"]
    for n, labels, v in s.samples:
        if n in (name, name.removesuffix("_total")) and not n.endswith("_created"):
            key = (labels.get(m.labels["outcome"], ""), labels.get(m.labels["code"], ""))
            out[key] = out.get(key, 0.0) + v
    return out


def _delta(last: dict[Any, float], first: dict[Any, float], what: str,
           source: str) -> dict[Any, float]:
    d = {k: v - first.get(k, 0.0) for k, v in last.items()}
    if any(v < 0 for v in d.values()):
        raise ObservationError(f"{source}: {what} went down between the first and the last "
                               "scrape (the server restarted?): scrape a window without a "
                               "restart")
    return d


def observations_from_scrapes(scrapes: list[Scrape], source: str,
                              mapping: Mapping | None = None) -> Observations:
    """The observations of the window from the first to the last scrape (module docstring)."""
    m = mapping or Mapping()
    first, last = scrapes[0], scrapes[-1]
    window = last.t - first.t if len(scrapes) > 1 else math.nan
    one = len(scrapes) == 1
    hist: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for role in HISTOGRAMS:
        name = m.names[role]
        b1 = _buckets(last, name)
        if not b1 or math.inf not in b1:
            continue
        b = b1 if one else _delta(b1, _buckets(first, name), f"{name} buckets", source)
        le = tuple(sorted(b))
        hist[ROLES[role]] = (le, tuple(b[x] for x in le))  # the Reasoner's name: the role
    if ROLES["service"] not in hist:
        raise ObservationError(
            f"{source}: no service-time histogram {m.names['service']!r} (a server with its "
            "own metric names needs a mapping file: --map FILE.toml, docs/calibration.md)")
    t1 = _turns(last, m)
    turns = t1 if one else _delta(t1, _turns(first, m), m.names["turns"], source)
    total = sum(turns.values())
    chunks = None
    c1 = _sum(last, m.names["chunks"])
    if c1 is not None:
        c0 = 0.0 if one else (_sum(first, m.names["chunks"]) or 0.0)
        done = sum(v for (o, _), v in turns.items() if o == "completed")
        chunks = (c1 - c0) / done if done > 0 else None
    gauges = []
    for s in scrapes:
        busy, queued = _sum(s, m.names["busy"]), _sum(s, m.names["queued"])
        if busy is not None and queued is not None:
            gauges.append((s.t, busy, queued))
    cap = _sum(last, m.names["capacity"])
    attempts = pd.DataFrame({"send_s": pd.Series(dtype=float)})
    what = (f"{len(scrapes)} scrapes over {window:.0f} s" if not one else
            "one scrape (totals since the server started: no rates)")
    return Observations(
        attempts=attempts, duration_s=window if math.isfinite(window) else 0.0,
        server_histograms=hist, capacity=int(cap) if cap else None,
        capacity_source=f"server metric {m.names['capacity']}" if cap else "",
        source=f"prometheus:{source} ({what})", server_turns=turns,
        turns_per_s=total / window if window > 0 else math.nan,
        chunks_per_completed=chunks if chunks is not None else math.nan, gauges=gauges)


def from_prometheus(source: str, window_s: float = 60.0, every_s: float = 5.0,
                    mapping: str | Path | None = None, tls: ClientTls | None = None,
                    save: str | Path | None = None, say: Any = None) -> Observations:
    """Observations from a Prometheus URL (scraped) or exposition file; ``save``: write the
    scrapes (timestamped exposition text) there, to calibrate again without the server."""
    m = load_mapping(mapping)
    if source.startswith(("http://", "https://")):
        scrapes, text = scrape_url(source, window_s, every_s, tls, say)
        if save:
            Path(save).write_text(text, encoding="utf-8")
    else:
        p = Path(source)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ObservationError(f"{source}: cannot read ({getattr(e, 'strerror', None) or e})"
                                   ) from None
        scrapes = parse_exposition(text, source)
    return observations_from_scrapes(scrapes, source, m)


# ---- OTLP/JSON (``--from otlp:FILE``) --------------------------------------------------------

_UNIT_SUFFIX = {"s": "seconds", "ms": "milliseconds", "us": "microseconds",
                "ns": "nanoseconds", "By": "bytes"}


def prometheus_name(name: str, unit: str = "", counter: bool = False) -> str:
    """The Prometheus name of an OpenTelemetry metric (the OpenTelemetry specification's
    Prometheus compatibility rules): characters outside ``[a-zA-Z0-9_:]`` become ``_`` (runs
    of them one), the unit's suffix is appended unless the name ends with it (``s`` ->
    ``_seconds``; an annotation unit ``{turn}`` adds nothing), a monotonic sum ends with
    ``_total``."""
    out = re.sub(r"[^a-zA-Z0-9_:]+", "_", name).strip("_")
    suffix = _UNIT_SUFFIX.get(unit, "" if (not unit or unit.startswith("{") or unit == "1")
                              else re.sub(r"[^a-zA-Z0-9_:]+", "_", unit).strip("_"))
    if suffix and not out.endswith(f"_{suffix}"):
        out = f"{out}_{suffix}"
    if counter and not out.endswith("_total"):
        out += "_total"
    return out


def _attr_value(v: dict[str, Any]) -> str:
    for k in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if k in v:
            return str(v[k]).lower() if k == "boolValue" else str(v[k])
    return json_text(v)


def json_text(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {a["key"]: _attr_value(a.get("value") or {}) for a in items or []}


def _num(dp: dict[str, Any]) -> float:
    return float(dp["asDouble"]) if "asDouble" in dp else float(dp.get("asInt", 0))


def _otlp_samples(metric: dict[str, Any], alias: dict[str, str]
                  ) -> list[tuple[int, str, dict[str, str], float]]:
    """(time ns, Prometheus name, labels, value) of one OTLP metric's data points (cumulative
    histograms and sums; a delta temporality is refused: it needs every export)."""
    name, unit = metric.get("name", ""), metric.get("unit", "")
    out = []
    if "histogram" in metric:
        body = metric["histogram"]
        if body.get("aggregationTemporality") == 1:
            raise ObservationError(f"OTLP metric {name}: delta temporality (export cumulative "
                                   "histograms: the default of OpenTelemetry's SDK)")
        base = prometheus_name(name, unit)
        alias[name] = base
        for dp in body.get("dataPoints", []):
            t, labels = int(dp.get("timeUnixNano", 0)), _attrs(dp.get("attributes"))
            bounds = [float(b) for b in dp.get("explicitBounds", [])]
            counts = [float(c) for c in dp.get("bucketCounts", [])]
            if len(counts) != len(bounds) + 1:
                raise ObservationError(f"OTLP metric {name}: {len(counts)} bucket counts for "
                                       f"{len(bounds)} bounds (expected one more)")
            acc = 0.0
            for le, c in zip([*bounds, math.inf], counts, strict=True):
                acc += c
                out.append((t, f"{base}_bucket", {**labels, "le": "+Inf" if le == math.inf
                                                  else repr(le)}, acc))
            out.append((t, f"{base}_count", labels, float(dp.get("count", acc))))
            out.append((t, f"{base}_sum", labels, float(dp.get("sum", 0.0))))
    elif "sum" in metric or "gauge" in metric:
        body = metric.get("sum") or metric.get("gauge") or {}
        mono = bool(body.get("isMonotonic")) and "sum" in metric
        if mono and body.get("aggregationTemporality") == 1:
            raise ObservationError(f"OTLP metric {name}: delta temporality (export cumulative "
                                   "sums: the default of OpenTelemetry's SDK)")
        base = prometheus_name(name, unit, counter=mono)
        alias[name] = base
        for dp in body.get("dataPoints", []):
            out.append((int(dp.get("timeUnixNano", 0)), base, _attrs(dp.get("attributes")),
                        _num(dp)))
    return out


def parse_otlp(text: str, source: str) -> tuple[list[Scrape], dict[str, str]]:
    """The scrapes of an OTLP/JSON file (one ``ExportMetricsServiceRequest`` per line, as the
    Collector's file exporter and the reference Reasoner write them) and {OpenTelemetry
    name: Prometheus name}.  Trace lines count only where the metrics have no turn counter:
    the GenAI agent spans (``gen_ai.operation.name`` = ``invoke_agent``, with
    ``a2a.task.state`` and ``error.type``) that ended by a scrape's time are its turns.

    Each resource (a process) exports cumulative values at its own times; a scrape is taken
    at every export time from the moment every resource has exported once, each resource
    contributing its latest export at or before it (a resource's values are its totals since
    its start, so the window's deltas count each one's turns once)."""
    alias: dict[str, str] = {}
    series: dict[str, list[tuple[int, list[tuple[str, dict[str, str], float]]]]] = {}
    ends: list[tuple[int, str, str]] = []  # agent spans: (end ns, outcome, code)
    lines = [x for x in text.splitlines() if x.strip()]
    for n, line in enumerate(lines, 1):
        try:
            doc = json.loads(line)
        except ValueError as e:
            raise ObservationError(f"{source}: line {n} is not OTLP/JSON ({e})") from None
        if not isinstance(doc, dict) or not ({"resourceMetrics", "resourceSpans",
                                              "resourceLogs"} & set(doc)):
            raise ObservationError(f"{source}: line {n} is not OTLP/JSON (no resourceMetrics)")
        try:
            for rm in doc.get("resourceMetrics") or []:
                res = json_text(sorted(_attrs((rm.get("resource") or {}).get("attributes"))
                                       .items()))
                by_t: dict[int, list[tuple[str, dict[str, str], float]]] = {}
                for sm in rm.get("scopeMetrics") or []:
                    for metric in sm.get("metrics") or []:
                        for t, name, labels, v in _otlp_samples(metric, alias):
                            by_t.setdefault(t, []).append((name, labels, v))
                for t, samples in by_t.items():
                    series.setdefault(res, []).append((t, samples))
            for rs in doc.get("resourceSpans") or []:
                for ss in rs.get("scopeSpans") or []:
                    for span in ss.get("spans") or []:
                        a = _attrs(span.get("attributes"))
                        if a.get("gen_ai.operation.name") == "invoke_agent" and \
                                "a2a.task.state" in a:
                            ends.append((int(span.get("endTimeUnixNano", 0)),
                                         a["a2a.task.state"], a.get("error.type", "")))
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            if isinstance(e, ObservationError):
                raise
            raise ObservationError(f"{source}: line {n}: malformed OTLP metrics "
                                   f"({type(e).__name__}: {e})") from None
    if not series:
        raise ObservationError(f"{source}: no OTLP metrics (only spans or logs, or empty)")
    for s in series.values():
        s.sort(key=lambda x: x[0])
    start = max(s[0][0] for s in series.values())  # every resource has exported once
    times = sorted({t for s in series.values() for t, _ in s if t >= start})
    counted = any(n == ROLES["turns"] for s in series.values() for _, smp in s
                  for n, _, _ in smp)
    scrapes = []
    for t in times:
        samples = []  # (name, labels, value), as in by_t above
        for s in series.values():
            latest = [x for x in s if x[0] <= t]
            if latest:
                samples += latest[-1][1]
        if ends and not counted:  # no turn counter: the agent spans that ended by t
            by: dict[tuple[str, str], float] = {}
            for end, state, code in ends:
                if end <= t:
                    key = ("completed" if state == "completed" else state, code)
                    by[key] = by.get(key, 0.0) + 1.0
            samples += [(ROLES["turns"], {"outcome": o, "code": c}, v)
                        for (o, c), v in sorted(by.items())]
        scrapes.append(Scrape(t / 1e9, samples))
    return scrapes, alias


def from_otlp(source: str, mapping: str | Path | None = None) -> Observations:
    """Observations from an OTLP/JSON metrics file (:func:`parse_otlp`); a mapping file may
    name a role's metric by its OpenTelemetry name or by its Prometheus translation."""
    m = load_mapping(mapping)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ObservationError(f"{source}: cannot read ({getattr(e, 'strerror', None) or e})"
                               ) from None
    scrapes, alias = parse_otlp(text, source)
    m.names = {role: alias.get(name, name) for role, name in m.names.items()}
    obs = observations_from_scrapes(scrapes, source, m)
    obs.source = obs.source.replace("prometheus:", "otlp:", 1).replace(" scrapes over ",
                                                                         " exports over ", 1)
    return obs
