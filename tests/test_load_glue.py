"""Small shared pieces of the load side, value by value: the request headers (one rule for
the Live users and the wire client), the timing histograms, the servers' uvicorn logging."""

from __future__ import annotations

import logging

import pytest

EXT = "https://schemas.salesforce.com/a2a/ext/realtime-agent/v0.1"


def test_live_headers() -> None:
    from rtalab.loadtests.live.wire import headers

    assert headers("urn:x", "tok", True) == {
        "Content-Type": "application/json", "A2A-Version": "1.0",
        "Accept": "text/event-stream", "A2A-Extensions": "urn:x", "Authorization": "Bearer tok"}
    assert headers("urn:x", None, False, sse=False) == {
        "Content-Type": "application/json", "A2A-Version": "1.0"}
    assert headers("urn:x", "", True, version=False) == {
        "Content-Type": "application/json", "Accept": "text/event-stream",
        "A2A-Extensions": "urn:x"}


def test_wire_client_headers() -> None:
    from rtalab.loadtests.wireclient import headers

    assert headers() == {
        "Content-Type": "application/json", "A2A-Version": "1.0",
        "Accept": "text/event-stream", "A2A-Extensions": EXT,
        "Authorization": "Bearer token-alice"}
    assert headers("token-bob", ext=False, sse=False) == {
        "Content-Type": "application/json", "A2A-Version": "1.0",
        "Authorization": "Bearer token-bob"}
    assert headers(None, ext=False, version=False, sse=False) == {
        "Content-Type": "application/json"}


def test_each_timing_feeds_its_own_histogram() -> None:
    from prometheus_client import REGISTRY

    from rtalab.loadtests.reasoner import metrics
    from rtalab.loadtests.reasoner.executor import Timing

    names = ("intake", "queue_wait", "service", "first_chunk_delay")

    def sample(name: str, suffix: str) -> float:
        return REGISTRY.get_sample_value(f"rta_reasoner_{name}_seconds_{suffix}") or 0.0

    before = {(n, s): sample(n, s) for n in names for s in ("sum", "count")}
    metrics.observe_timing(Timing(intake_s=0.25, queue_wait_s=0.5, service_s=2.0,
                                  first_chunk_delay_s=None))
    after = {k: sample(*k) - v for k, v in before.items()}  # other tests may have observed
    assert after == pytest.approx({("intake", "sum"): 0.25, ("intake", "count"): 1.0,
                     ("queue_wait", "sum"): 0.5, ("queue_wait", "count"): 1.0,
                     ("service", "sum"): 2.0, ("service", "count"): 1.0,
                     ("first_chunk_delay", "sum"): 0.0, ("first_chunk_delay", "count"): 0.0},
                                  abs=1e-9)


def _record(msg: str, exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, msg, None, info)


@pytest.mark.parametrize("server", ["reasoner", "chaos"])
def test_server_log_config(server: str) -> None:
    if server == "reasoner":
        from rtalab.loadtests.reasoner.server import log_config
    else:
        from rtalab.loadtests.chaos.server import log_config
    cfg = log_config("debug")
    loggers = cfg["loggers"]
    assert loggers["rtalab"] == {"handlers": ["default"], "level": "DEBUG", "propagate": False}
    assert loggers["uvicorn.error"] == {"level": "INFO", "filters": ["noise"]}
    assert loggers["uvicorn"] == {"handlers": ["default"], "level": "INFO", "propagate": False}
    if server == "reasoner":
        assert loggers["a2a"] == {"handlers": ["default"], "level": "ERROR", "propagate": False}
    else:
        assert "a2a" not in loggers
    noise = cfg["filters"]["noise"]["()"]()
    assert not noise.filter(_record("ASGI callable returned without completing handshake."))
    assert noise.filter(_record("Exception in ASGI application"))


def test_the_proxy_filter_drops_its_own_cuts() -> None:
    from rtalab.loadtests.chaos.proxy import DropConnection
    from rtalab.loadtests.chaos.server import log_config

    noise = log_config("info")["filters"]["noise"]["()"]()
    assert not noise.filter(_record("Exception in ASGI application", DropConnection()))
    assert noise.filter(_record("Exception in ASGI application", RuntimeError("boom")))
