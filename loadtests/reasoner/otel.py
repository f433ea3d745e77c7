"""OpenTelemetry export of the Reasoner: its metrics and one span per turn, as OTLP JSON lines.

``rtalab serve reasoner --otlp-file FILE`` (``--otlp-interval S``, default 5 s): every worker
process appends to FILE, one line per export, each line an OTLP/JSON
``ExportMetricsServiceRequest`` or ``ExportTraceServiceRequest`` (the encoding of the
OpenTelemetry Collector's file exporter and ``otlpjsonfile`` receiver: lowerCamelCase fields,
64-bit integers as strings, enums as integers, trace and span ids in hex).  The SDK is
OpenTelemetry's own (``opentelemetry-sdk``: a ``MeterProvider`` with a periodic reader, a
``TracerProvider`` with a batch processor); the lines are its OTLP protobuf encoding
(``opentelemetry-exporter-otlp-proto-common``) written as JSON.  Each process is its own
resource (``service.name`` = ``rtalab-reasoner``, ``service.instance.id`` = host and pid);
its metrics are cumulative from its start.

The metrics are the ``/metrics`` ones under OpenTelemetry names whose Prometheus translation
(dots to underscores, the unit's suffix, ``_total`` on counters) is the Prometheus name, so
``rtalab calibrate --from otlp:FILE`` reads them with the same roles (docs/reasoner.md
"Metrics", docs/calibration.md "From telemetry"):

============================== ===== =============================================
``rta.reasoner.service``        s     worker held (reasoning + load latency + tool)
``rta.reasoner.queue_wait``     s     queue entry to a worker (or to the refusal)
``rta.reasoner.first_chunk_delay`` s  worker freed to the first spoken chunk
``rta.reasoner.intake``         s     request received to queue entry
``rta.reasoner.chunk_interval`` s     gap between consecutive chunks of a turn
``rta.reasoner.turns``          {turn} requests answered, by ``outcome`` and ``code``
``rta.reasoner.chunks``         {chunk} spoken chunks sent
``rta.reasoner.workers_busy``   {worker} up-down counter: workers held now
``rta.reasoner.queued``         {turn} up-down counter: turns waiting now
``gen_ai.invoke_agent.duration`` s    GenAI semantic conventions: request received to
                                      the end of its stream (``gen_ai.operation.name`` =
                                      ``invoke_agent``, ``gen_ai.agent.name``,
                                      ``error.type`` = the profile's code)
============================== ===== =============================================

The span of a turn is ``invoke_agent <agent name>`` (kind SERVER, from the request's arrival
to its stream's end) with the GenAI A2A attributes ``gen_ai.operation.name``,
``gen_ai.agent.name``, ``gen_ai.conversation.id`` (the contextId), ``a2a.task.id``,
``a2a.task.state``, ``error.type`` (the code, when it failed) and the profile's
``rta.turn_id``, ``rta.request_guid`` and timings (``rta.queue_wait_s``, ``rta.service_s``).

Without ``--otlp-file`` nothing is configured: the instruments are OpenTelemetry's no-op
proxies, one cheap call per observation.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

SERVICE_NAME = "rtalab-reasoner"
AGENT_NAME = "rtalab reference Reasoner"
SCOPE = "rtalab.reasoner"
_CONFIGURED = False  # this process exports (configure ran)


def meter() -> Any:
    """The Reasoner's meter (a proxy until :func:`configure` sets the SDK's provider)."""
    return otel_metrics.get_meter(SCOPE)


def tracer() -> Any:
    """The Reasoner's tracer (a proxy until :func:`configure`)."""
    return otel_trace.get_tracer(SCOPE)


class _JsonLines:
    """Appends one JSON line per write to ``path``, under a lock (one process: its
    exporters' threads; processes: O_APPEND writes of whole lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, obj: dict[str, Any]) -> None:
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


def _hex_ids(obj: Any) -> Any:
    """OTLP/JSON's ids are hex, protobuf JSON's base64: re-encode traceId/spanId/parentSpanId."""
    if isinstance(obj, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId")
                    and isinstance(v, str) else _hex_ids(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_hex_ids(x) for x in obj]
    return obj


def _as_json(message: Any) -> dict[str, Any]:
    # lazy: +27 ms (google) off importing otel
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(message, use_integers_for_enums=True)


def configure(path: str | Path, interval_s: float = 5.0) -> None:
    """Set the SDK's meter and tracer providers of this process, exporting to ``path``."""
    # lazy: +40 ms (google) off importing otel
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    out = _JsonLines(Path(path))

    class FileMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__(preferred_temporality={}, preferred_aggregation={})

        def export(self, metrics_data: Any, timeout_millis: float = 10_000,
                   **kwargs: Any) -> MetricExportResult:
            try:
                out.write(_as_json(encode_metrics(metrics_data)))
            except OSError:
                return MetricExportResult.FAILURE
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            return None

    class FileSpanExporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            try:
                out.write(_hex_ids(_as_json(encode_spans(spans))))
            except OSError:
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    # lazy: +72 ms (starlette, prometheus_client) off importing otel
    from rtalab.loadtests.reasoner import metrics as m

    resource = Resource.create({"service.name": SERVICE_NAME,
                                "service.instance.id": f"{socket.gethostname()}-{os.getpid()}"})
    views = [View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(
        boundaries=tuple(bounds))) for name, bounds in m.OTEL_BUCKETS.items()]
    reader = PeriodicExportingMetricReader(FileMetricExporter(),
                                           export_interval_millis=interval_s * 1000)
    # every instrument is cumulative: the SDK's default AggregationTemporality
    otel_metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader],
                                                  views=views))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(),
                                                   schedule_delay_millis=interval_s * 1000))
    otel_trace.set_tracer_provider(provider)
    global _CONFIGURED
    _CONFIGURED = True


def shutdown() -> None:
    """Export what is pending (a worker's exit)."""
    for provider in (otel_metrics.get_meter_provider(), otel_trace.get_tracer_provider()):
        stop = getattr(provider, "shutdown", None)
        if stop is not None:
            stop()




def turn_done(plan: Any, outcome: str, code: str | None, task_id: str | None,
              context_id: str | None) -> None:
    """The GenAI duration of a turn and its span (``plan``: the handler's TurnPlan, its
    ``received_s`` on the monotonic clock); no-ops unless :func:`configure` ran."""
    # lazy: +59 ms (starlette, prometheus_client) off importing otel
    from rtalab.loadtests.reasoner import metrics as m

    now_mono, now_ns = time.monotonic(), time.time_ns()
    took = max(0.0, now_mono - plan.received_s)
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME}
    if code:
        attrs["error.type"] = code
    m.GENAI_DURATION.record(took, attrs)
    if _CONFIGURED:
        t = tracer()
        req, timing = plan.request, getattr(plan, "timing", None)
        span = t.start_span(f"invoke_agent {AGENT_NAME}", kind=otel_trace.SpanKind.SERVER,
                            start_time=now_ns - int(took * 1e9))
        span.set_attributes({**attrs, "a2a.task.state": outcome,
                             **({"a2a.task.id": task_id} if task_id else {}),
                             **({"gen_ai.conversation.id": context_id} if context_id else {}),
                             **({"rta.turn_id": str(req.turn_id)} if req.turn_id else {}),
                             **({"rta.request_guid": str(req.request_guid)}
                                if req.request_guid else {})})
        for name in ("queue_wait_s", "service_s", "first_chunk_delay_s"):
            value = getattr(timing, name, None) if timing is not None else None
            if value is not None:
                span.set_attribute(f"rta.{name}", float(value))
        if code:
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, code))
        span.end(end_time=now_ns)
