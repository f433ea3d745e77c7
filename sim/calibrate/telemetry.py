"""Observations from a deployment's own telemetry: Prometheus scrapes (a URL or a file).

``from_prometheus(SOURCE, window_s, every_s)`` -> :class:`~sim.calibrate.observations.Observations`.
SOURCE is a URL (``http(s)://host:port/metrics``, scraped every ``every_s`` seconds for
``window_s`` seconds, certificates verified) or a file of text exposition format: one or
more scrapes, told apart by the samples' timestamps (a file without timestamps is one
scrape, its totals since the server started: distributions and counts, but no rates).
The parser is prometheus_client's (``text_string_to_metric_families``).

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

import math
import ssl
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sim.calibrate.observations import HISTOGRAMS, ObservationError, Observations

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


def _context(ca: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)  # verified, always
    return ctx


def scrape_url(url: str, window_s: float, every_s: float, ca: str | None = None,
               say: Any = None) -> tuple[list[Scrape], str]:
    """Scrape ``url`` every ``every_s`` for ``window_s`` seconds (at least two scrapes);
    the scrapes and their text with timestamps (to save and calibrate again later)."""
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
                                        context=_context(ca) if url.startswith("https") else None
                                        ) as r:
                text = r.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise ObservationError(f"{url}: cannot scrape ({reason})") from None
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
                    mapping: str | Path | None = None, ca: str | None = None,
                    save: str | Path | None = None, say: Any = None) -> Observations:
    """Observations from a Prometheus URL (scraped) or exposition file; ``save``: write the
    scrapes (timestamped exposition text) there, to calibrate again without the server."""
    m = load_mapping(mapping)
    if source.startswith(("http://", "https://")):
        scrapes, text = scrape_url(source, window_s, every_s, ca, say)
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
