"""Prometheus metrics of the Reasoner, served at ``/metrics``.

With one worker the default registry is served.  With several uvicorn workers
the CLI sets ``PROMETHEUS_MULTIPROC_DIR`` before the workers start, so
prometheus_client keeps values in per-process files and ``/metrics`` (answered
by whichever worker gets the scrape) aggregates every worker: counters and
histograms are summed, the in-flight gauge is summed over live workers.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import metrics as otel_metrics
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _mp
from starlette.requests import Request
from starlette.responses import Response

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# OpenTelemetry instrument name -> its explicit bucket bounds (rtalab.loadtests.reasoner.otel's
# views)
OTEL_BUCKETS: dict[str, tuple[float, ...]] = {}


class _Tee:
    """A Prometheus metric and its OpenTelemetry twin (rtalab.loadtests.reasoner.otel): ``inc``,
    ``dec``, ``observe`` and ``labels`` go to both; anything else is the Prometheus
    metric's.  ``labels(*values)`` gives the child with the same values as attributes."""

    def __init__(self, prom: Any, otel: Any, labelnames: tuple[str, ...] = (),
                 attrs: dict[str, str] | None = None) -> None:
        self._prom, self._otel, self._names, self._attrs = prom, otel, labelnames, attrs or {}

    def labels(self, *values: str) -> _Tee:
        return _Tee(self._prom.labels(*values), self._otel, (), dict(zip(self._names, values,
                                                                         strict=True)))

    def inc(self, amount: float = 1.0) -> None:
        self._prom.inc(amount)
        self._otel.add(amount, self._attrs)

    def dec(self, amount: float = 1.0) -> None:
        self._prom.dec(amount)
        self._otel.add(-amount, self._attrs)

    def observe(self, value: float) -> None:
        self._prom.observe(value)
        self._otel.record(value, self._attrs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prom, name)


def _otel(kind: str, name: str, unit: str, doc: str,
          buckets: tuple[float, ...] | None = None) -> Any:
    meter = otel_metrics.get_meter("rtalab.reasoner")
    if buckets is not None:
        OTEL_BUCKETS[name] = buckets
    return {"counter": meter.create_counter, "updown": meter.create_up_down_counter,
            "histogram": meter.create_histogram}[kind](name, unit=unit, description=doc)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
                    7.5, 10.0, 20.0, 60.0)

_TURNS_DOC = "Requests answered, by outcome (final state) and error code ('' if none)"
TURNS = _Tee(Counter("rta_reasoner_turns_total", _TURNS_DOC, ["outcome", "code"]),
             _otel("counter", "rta.reasoner.turns", "{turn}", _TURNS_DOC), ("outcome", "code"))
# exported from the start, at 0: a scrape of a server that has answered nothing yet (or
# nothing since a restart) still shows the family, so a load run can compare its ledger
# with it instead of reading the counter as absent (ledger/counts.json server_matches)
TURNS.labels("completed", "")
DEDUP = Counter("rta_reasoner_dedup_total",
                "Dedup decisions: new, replay (stored outcome), join (waited for in-flight), "
                "lost (owner crashed), timeout (in-flight owner too slow), task (known taskId)",
                ["result"])
SIDE_EFFECTS = Counter("rta_reasoner_side_effects_total",
                       "Tool calls by result: ok, timeout, error, skipped (already run), "
                       "unrecorded (not started: the store could not record its start)",
                       ["result"])
IN_FLIGHT = Gauge("rta_reasoner_in_flight", "Turns executing now", multiprocess_mode="livesum")
# the capacity's state (calibration from a scrape, docs/calibration.md "From telemetry"): a
# scrape that finds turns waiting finds every worker busy, so busy there is the capacity
BUSY = _Tee(Gauge("rta_reasoner_workers_busy", "Reasoning workers held by a turn now",
                  multiprocess_mode="livesum"),
            _otel("updown", "rta.reasoner.workers_busy", "{worker}",
                  "Reasoning workers held by a turn now"))
QUEUED = _Tee(Gauge("rta_reasoner_queued", "Turns waiting for a reasoning worker now",
                    multiprocess_mode="livesum"),
              _otel("updown", "rta.reasoner.queued", "{turn}",
                    "Turns waiting for a reasoning worker now"))
CHUNKS = _Tee(Counter("rta_reasoner_chunks_total", "Spoken chunks sent"),
              _otel("counter", "rta.reasoner.chunks", "{chunk}", "Spoken chunks sent"))
_GAP_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0)
CHUNK_GAP_SECONDS = _Tee(
    Histogram("rta_reasoner_chunk_interval_seconds",
              "Gap between consecutive spoken chunks of a turn", buckets=_GAP_BUCKETS),
    _otel("histogram", "rta.reasoner.chunk_interval", "s",
          "Gap between consecutive spoken chunks of a turn", _GAP_BUCKETS))
GENAI_DURATION = _otel("histogram", "gen_ai.invoke_agent.duration", "s",
                       "GenAI agent invocation: request received to the end of its stream",
                       _LATENCY_BUCKETS)
TURN_SECONDS = Histogram("rta_reasoner_turn_seconds",
                         "Request received to end of its stream (terminal or INPUT_REQUIRED)",
                         ["outcome"], buckets=_LATENCY_BUCKETS)
FIRST_EVENT_SECONDS = Histogram("rta_reasoner_first_output_seconds",
                                "Request received to first progress directive or chunk",
                                buckets=_LATENCY_BUCKETS)
# the per-turn timings of docs/reasoner.md: executor.Timing attribute -> histogram, one
# observation per execution
# finer below 0.1 s than the turn's: calibration fits laws to these buckets (an interval-censored
# fit needs several buckets where the values are; docs/calibration.md "From telemetry")
TIMING_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06,
                  0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
                  20.0, 60.0)
TIMING_SECONDS = {attr: _Tee(Histogram(name, doc, buckets=TIMING_BUCKETS), _otel(
    "histogram", "rta.reasoner." + name.removeprefix("rta_reasoner_").removesuffix("_seconds"),
    "s", doc, TIMING_BUCKETS)) for attr, name, doc in (
    ("intake_s", "rta_reasoner_intake_seconds",
     "Request received to queue entry (parsing, sessions, dedup store)"),
    ("queue_wait_s", "rta_reasoner_queue_wait_seconds",
     "Queue entry to a worker (or to the refusal)"),
    ("service_s", "rta_reasoner_service_seconds",
     "Worker held: reasoning + load latency + tool call"),
    ("first_chunk_delay_s", "rta_reasoner_first_chunk_delay_seconds",
     "Worker freed to the first spoken chunk"),
)}
AUTH_FAILURES = Counter("rta_reasoner_auth_failures_total", "Rejected credentials", ["binding"])
WS_CONNECTIONS = Gauge("rta_reasoner_ws_connections", "Open WebSocket connections",
                       multiprocess_mode="livesum")
CONNECTIONS = Gauge("rta_reasoner_connections", "Open client connections (HTTP and WebSocket)",
                    multiprocess_mode="livesum")
CONNECTIONS_CLOSED = Counter("rta_reasoner_connections_closed_total",
                             "Connections closed by a deadline or refused by a limit "
                             "(rtalab.loadtests.reasoner.conns)", ["reason"])
BAD_REQUESTS = Counter("rta_reasoner_jsonrpc_errors_total",
                       "Malformed requests answered with a JSON-RPC error", ["binding", "code"])
TURN_REQUESTS = Counter("rta_reasoner_turn_requests_total",
                        "Send requests that reached turn parsing (past JSON-RPC/REST decoding, "
                        "auth and the body bounds)")
UNHANDLED = Counter("rta_reasoner_unhandled_exceptions_total",
                    "Tracebacks logged by the server: exceptions that reached a last-resort "
                    "handler (ours, the SDK's or uvicorn's); must stay 0", ["logger"])
STORE_FAILURES = Counter("rta_reasoner_store_failures_total",
                         "Dedup store operations that failed, by operation and cause (down, "
                         "timeout, full, busy, loading, read-only, io, error); each answered "
                         "as FAILED internal", ["op", "cause"])
STORE_HEALTHY = Gauge("rta_reasoner_store_healthy",
                      "1 while the dedup store answers (this worker's last operation or "
                      "probe), 0 after a failure", multiprocess_mode="livemin")
STORE_DEFERRED = Counter("rta_reasoner_store_deferred_total",
                         "Outcomes and releases that could not be stored at once, retried in "
                         "the background: queued, done, expired (lease over), dropped, failed",
                         ["op", "result"])
TRACEBACK_LOGGERS = ("rtalab", "a2a", "uvicorn", "starlette")


def observe_timing(timing: Any) -> None:
    """Feed the timing histograms from one execution's ``executor.Timing``."""
    for attr, hist in TIMING_SECONDS.items():
        value = getattr(timing, attr)
        if value is not None:
            hist.observe(value)


class _TracebackCounter(logging.Handler):
    """Counts every log record carrying an exception (``log.exception`` and the like)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Count ``record`` if it carries an exception."""
        if record.exc_info and record.exc_info[0] is not None:
            UNHANDLED.labels(record.name.split(".", 1)[0]).inc()


def count_tracebacks() -> None:
    """Attach the traceback counter to the server's loggers (once per process)."""
    for name in TRACEBACK_LOGGERS:
        logger = logging.getLogger(name)
        UNHANDLED.labels(name)  # exported as 0 from the start
        if not any(isinstance(h, _TracebackCounter) for h in logger.handlers):
            logger.addHandler(_TracebackCounter(logging.ERROR))


def multiprocess() -> bool:
    """True when metrics are aggregated over worker processes."""
    return bool(os.environ.get(MULTIPROC_ENV))


def render() -> bytes:
    """The exposition text of every metric (all workers in multiprocess mode)."""
    if multiprocess():
        registry = CollectorRegistry()
        _mp.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


async def metrics_endpoint(request: Request) -> Response:
    """GET /metrics."""
    return Response(render(), media_type=CONTENT_TYPE_LATEST)


def worker_exit() -> None:
    """Tell the multiprocess collector that this worker's live gauges are gone."""
    if multiprocess():
        _mp.mark_process_dead(os.getpid())
