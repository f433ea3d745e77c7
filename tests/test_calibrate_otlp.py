"""``rtalab calibrate --from otlp:FILE``: OTLP/JSON metrics read as the Prometheus scrapes
they translate to (rtalab.sim.calibrate.telemetry.parse_otlp, from_otlp).

The same deployment written both ways -- Prometheus exposition with timestamps, and OTLP
lines of two processes exporting cumulative values at their own times -- gives the same
observations; the translation follows the OpenTelemetry specification's Prometheus rules."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rtalab.sim.calibrate.observations import ObservationError
from rtalab.sim.calibrate.telemetry import (
    from_otlp,
    from_prometheus,
    parse_otlp,
    prometheus_name,
)

BOUNDS = [0.1, 0.2, 0.4, 0.8]


def test_prometheus_names_follow_the_specification() -> None:
    assert prometheus_name("rta.reasoner.service", "s") == "rta_reasoner_service_seconds"
    assert prometheus_name("rta.reasoner.turns", "{turn}", counter=True) == \
        "rta_reasoner_turns_total"
    assert prometheus_name("rta.reasoner.workers_busy", "{worker}") == "rta_reasoner_workers_busy"
    assert prometheus_name("http.server.request.duration", "ms") == \
        "http_server_request_duration_milliseconds"
    assert prometheus_name("x_seconds", "s") == "x_seconds"  # the suffix is not doubled
    assert prometheus_name("a-b..c", "By") == "a_b_c_bytes"
    assert prometheus_name("done_total", "", counter=True) == "done_total"


def _hist(name: str, counts: list[int], t_ns: int) -> dict:
    return {"name": name, "unit": "s", "histogram": {"aggregationTemporality": 2, "dataPoints": [
        {"timeUnixNano": str(t_ns), "count": str(sum(counts)), "sum": 0.2 * sum(counts),
         "explicitBounds": BOUNDS, "bucketCounts": [str(c) for c in counts]}]}}


def _sum(name: str, unit: str, value: float, t_ns: int, mono: bool,
         attrs: dict[str, str] | None = None) -> dict:
    return {"name": name, "unit": unit, "sum": {"aggregationTemporality": 2, "isMonotonic": mono,
            "dataPoints": [{"timeUnixNano": str(t_ns), "asDouble": value, "attributes": [
                {"key": k, "value": {"stringValue": v}} for k, v in (attrs or {}).items()]}]}}


def _export(pid: str, t_s: float, service: list[int], turns: float, failed: float, busy: float,
            queued: float) -> str:
    t = int(t_s * 1e9)
    doc = {"resourceMetrics": [{"resource": {"attributes": [
        {"key": "service.instance.id", "value": {"stringValue": pid}}]}, "scopeMetrics": [
        {"scope": {"name": "rtalab.reasoner"}, "metrics": [
            _hist("rta.reasoner.service", service, t),
            _sum("rta.reasoner.turns", "{turn}", turns, t, True,
                 {"outcome": "completed", "code": ""}),
            _sum("rta.reasoner.turns", "{turn}", failed, t, True,
                 {"outcome": "failed", "code": "internal"}),
            _sum("rta.reasoner.workers_busy", "{worker}", busy, t, False),
            _sum("rta.reasoner.queued", "{turn}", queued, t, False)]}]}]}
    return json.dumps(doc)


# two processes; A exports at 100, 110, 120 s; B at 105, 115, 125 s (cumulative since start)
A = [(100.0, [1, 2, 1, 0, 0], 4, 0, 1, 0), (110.0, [3, 6, 4, 1, 0], 13, 1, 2, 1),
     (120.0, [5, 9, 8, 2, 1], 24, 1, 2, 0)]
B = [(105.0, [0, 1, 1, 0, 0], 2, 0, 0, 0), (115.0, [2, 4, 3, 1, 0], 9, 1, 2, 2),
     (125.0, [4, 8, 6, 3, 0], 20, 1, 1, 0)]


def _otlp_text() -> str:
    lines = [_export("A", *a) for a in A] + [_export("B", *b) for b in B]
    lines.insert(2, json.dumps({"resourceSpans": []}))  # a trace line: skipped
    return "\n".join(lines) + "\n"


def _prom_text() -> str:
    """The scrapes parse_otlp must give, as Prometheus exposition: at each export time from
    105 s on, each process's latest values, summed."""
    out = []
    for t in (105.0, 110.0, 115.0, 120.0, 125.0):
        la = [a for a in A if a[0] <= t][-1]
        lb = [b for b in B if b[0] <= t][-1]
        ms = round(t * 1000)
        cum = 0.0
        for le, ca, cb in zip([*BOUNDS, "+Inf"], la[1], lb[1], strict=True):
            cum += ca + cb
            out.append(f'rta_reasoner_service_seconds_bucket{{le="{le}"}} {cum} {ms}')
        out.append(f'rta_reasoner_turns_total{{outcome="completed",code=""}} {la[2] + lb[2]} '
                   f"{ms}")
        out.append(f'rta_reasoner_turns_total{{outcome="failed",code="internal"}} '
                   f"{la[3] + lb[3]} {ms}")
        out.append(f"rta_reasoner_workers_busy {la[4] + lb[4]} {ms}")
        out.append(f"rta_reasoner_queued {la[5] + lb[5]} {ms}")
    return "\n".join(out) + "\n"


def test_two_processes_read_as_the_scrapes_they_translate_to(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(_otlp_text())
    (tmp_path / "m.prom").write_text(_prom_text())
    scrapes, alias = parse_otlp(_otlp_text(), "m.jsonl")
    assert [s.t for s in scrapes] == [105.0, 110.0, 115.0, 120.0, 125.0]
    assert alias["rta.reasoner.service"] == "rta_reasoner_service_seconds"
    o = from_otlp(str(tmp_path / "m.jsonl"))
    p = from_prometheus(str(tmp_path / "m.prom"))
    assert o.server_histograms == p.server_histograms
    assert o.server_turns == p.server_turns
    assert o.gauges == p.gauges
    assert o.duration_s == p.duration_s == 20.0
    assert o.turns_per_s == pytest.approx((24 + 20 + 1 + 1 - 4 - 2) / 20.0)
    assert o.source.startswith("otlp:")
    # the window starts when both processes have exported: B's first export counts from 0,
    # A's values at 105 s are its 100-s export
    le, counts = o.server_histograms["rta_reasoner_service_seconds"]
    assert le[-1] == math.inf and counts[-1] == (25 + 21) - (4 + 2)


def test_a_mapping_names_a_metric_by_its_opentelemetry_name(tmp_path: Path) -> None:
    text = _otlp_text().replace("rta.reasoner.service", "my.agent.busy_time")
    (tmp_path / "m.jsonl").write_text(text)
    with pytest.raises(ObservationError, match="no service-time histogram"):
        from_otlp(str(tmp_path / "m.jsonl"))
    (tmp_path / "map.toml").write_text('[metrics]\nservice = "my.agent.busy_time"\n')
    o = from_otlp(str(tmp_path / "m.jsonl"), tmp_path / "map.toml")
    assert "rta_reasoner_service_seconds" in o.server_histograms


@pytest.mark.parametrize(("text", "message"), [
    ("not json\n", "line 1 is not OTLP/JSON"),
    ('{"foo": 1}\n', "line 1 is not OTLP/JSON (no resourceMetrics)"),
    ('{"resourceSpans": []}\n', "no OTLP metrics"),
    (_export("A", 1.0, [1, 2, 3], 1, 0, 0, 0) + "\n", "bucket counts for 4 bounds"),
    (_export("A", 1.0, [1, 2, 3, 0, 0], 1, 0, 0, 0).replace('"aggregationTemporality": 2',
                                                             '"aggregationTemporality": 1')
     + "\n", "delta temporality"),
    ('{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "sum": '
     '{"dataPoints": [{"asDouble": "zz"}]}}]}]}]}\n', "malformed OTLP metrics"),
])
def test_a_broken_file_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(ObservationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_otlp(str(tmp_path / "bad.jsonl"))


def _span(end_s: float, state: str, code: str = "") -> dict:
    attrs = {"gen_ai.operation.name": "invoke_agent", "a2a.task.state": state,
             **({"error.type": code} if code else {})}
    return {"name": "invoke_agent x", "kind": 2, "startTimeUnixNano": str(int((end_s - 1) * 1e9)),
            "endTimeUnixNano": str(int(end_s * 1e9)),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}


def test_without_a_turn_counter_the_agent_spans_count_the_turns(tmp_path: Path) -> None:
    """A server exporting the GenAI spans but no turn counter: the spans that ended inside
    the window are its turns, by a2a.task.state and error.type."""
    lines = [json.loads(x) for x in _otlp_text().splitlines()]
    for doc in lines:
        for rm in doc.get("resourceMetrics", []):
            for sm in rm["scopeMetrics"]:
                sm["metrics"] = [m for m in sm["metrics"] if m["name"] != "rta.reasoner.turns"]
    spans = [_span(t, "completed") for t in (101, 106, 108, 112, 119, 124)] + [
        _span(111, "failed", "internal"), _span(126, "completed"), _span(107, "input-required")]
    lines.append({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    o = from_otlp(str(tmp_path / "s.jsonl"))
    # the window is 105..125 s: completed at 106, 108, 112, 119, 124; failed at 111; the
    # input-required turn at 107 (126 is after the last export, 101 before the first)
    assert o.server_turns == {("completed", ""): 5.0, ("failed", "internal"): 1.0,
                              ("input-required", ""): 1.0}
    assert o.turns_per_s == pytest.approx(7 / 20.0)
