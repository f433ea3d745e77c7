"""The proxy's pure parts: [network] mapping, seeded draws, release timing, wire, CLI."""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtalab.loadtests.chaos.config import ChaosConfig, rng_for, uplink_faults, with_overrides
from rtalab.loadtests.chaos.release import Releaser, StreamTiming
from rtalab.loadtests.chaos.wire import SseSplitter, parse_frame, parse_request, sse_data
from rtalab.sim.cli import main
from rtalab.sim.scenario import OutageConfig, load_scenario


def cfg_of(**kw: float) -> ChaosConfig:
    return with_overrides(ChaosConfig(), **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ seeded draws


def test_draws_depend_on_seed_and_key_only() -> None:
    link = cfg_of(duplicate=0.5, delay_s=0.0).network.uplink
    a = [uplink_faults(link, rng_for(1, f"g{i}#0"), True) for i in range(50)]
    b = [uplink_faults(link, rng_for(1, f"g{i}#0"), True) for i in reversed(range(50))][::-1]
    assert a == b  # arrival order does not matter
    c = [uplink_faults(link, rng_for(2, f"g{i}#0"), True) for i in range(50)]
    assert a != c


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_duplication_rate_matches_the_scenario(p: float) -> None:
    link = cfg_of(duplicate=p).network.uplink
    n = 4000
    k = sum(uplink_faults(link, rng_for(3, f"g{i}#0"), True).duplicate for i in range(n))
    se = math.sqrt(p * (1 - p) / n)
    assert abs(k / n - p) < 4 * se
    assert not any(uplink_faults(link, rng_for(3, f"g{i}#0"), False).duplicate
                   for i in range(200))  # only message-sending methods are duplicated


def test_scenario_network_section_is_the_source() -> None:
    s = load_scenario("lossy_network")
    cfg = ChaosConfig(network=s.network)
    assert cfg.network.uplink.duplication == s.network.uplink.duplication
    over = with_overrides(cfg, duplicate=0.25, reorder=0.5, drop=0.01, delay_s=0.0)
    assert over.network.uplink.duplication == 0.25
    assert over.network.downlink.reorder == 0.5 and over.network.downlink.loss == 0.01
    assert over.network.uplink.latency_s.mean == 0.0 == over.network.downlink.latency_s.mean


def test_outage_windows_by_direction() -> None:
    cfg = ChaosConfig(extra_outages=(OutageConfig(start_s=10, duration_s=5, direction="uplink"),
                                     OutageConfig(start_s=1, duration_s=1)))
    assert [o.start_s for o in cfg.outages] == [1, 10]
    assert cfg.outage_at(1.5, "downlink") is not None
    assert cfg.outage_at(2.0, "downlink") is None  # [start, start + duration)
    assert cfg.outage_at(12, "uplink") is not None and cfg.outage_at(12, "downlink") is None


def test_start_at_shifts_the_outage_clock() -> None:
    import time

    from rtalab.loadtests.chaos.server import _clock_start

    t0 = _clock_start(time.time() - 10.0)  # the schedule began 10 s ago
    assert time.monotonic() - t0 == pytest.approx(10.0, abs=0.5)
    assert _clock_start(None) == pytest.approx(time.monotonic(), abs=0.5)


# ------------------------------------------------------------------------------ release timing


def test_fifo_without_reordering() -> None:
    t = StreamTiming(cfg_of(delay_s=0.01).network.downlink, rng_for(1, "x"))
    times = [t.release(now, terminal=False) for now in (0.0, 0.0, 0.001, 0.5)]
    assert times == sorted(times) and t.delayed == 0 and t.overtaken == 0
    assert times[0] == pytest.approx(0.01) and times[-1] == pytest.approx(0.51)


def test_reordering_rate_and_terminal_last() -> None:
    t = StreamTiming(cfg_of(reorder=0.3, reorder_delay_s=0.05, delay_s=0).network.downlink,
                     rng_for(5, "y"))
    n = 5000
    times = [t.release(i * 0.001, terminal=False) for i in range(n)]
    se = math.sqrt(0.3 * 0.7 / n)
    assert abs(t.delayed / n - 0.3) < 4 * se
    assert t.overtaken > 0
    end = t.release(n * 0.001, terminal=True)
    assert end > max(times)  # nothing is delivered after the terminal event
    unsequenced = StreamTiming(t.link, rng_for(5, "z"))
    assert not any(unsequenced.release(0.0, False, reorderable=False) < 0 for _ in range(100))
    assert unsequenced.delayed == 0


def test_random_latency_keeps_fifo_without_reordering() -> None:
    """docs/chaos.md: ``downlink.latency_s`` delays each stream event, FIFO kept -- a latency
    law with spread must not reorder events (only ``downlink.reorder`` does)."""
    from rtalab.sim.dist import Exp
    from rtalab.sim.scenario import LinkConfig

    t = StreamTiming(LinkConfig(latency_s=Exp(0.05), reorder=0.0), rng_for(3, "fifo"))
    times = [t.release(i * 0.001, terminal=False) for i in range(2000)]
    assert all(b > a for a, b in itertools.pairwise(times))
    assert t.overtaken == 0 and t.delayed == 0


def test_reorder_terminal_lets_later_events_be_overtaken_by_the_terminal_one() -> None:
    """``--reorder-terminal``: the terminal event may overtake held chunks (without it, it is
    released after every earlier event)."""
    from rtalab.sim.dist import Const
    from rtalab.sim.scenario import LinkConfig

    link = LinkConfig(latency_s=Const(0.0), reorder=1.0, reorder_delay_s=Const(1.0))
    for reorder_terminal in (False, True):
        t = StreamTiming(link, rng_for(1, "t"), reorder_terminal=reorder_terminal)
        chunks = [t.release(i * 0.01, terminal=False) for i in range(3)]  # each held 1 s
        end = t.release(0.05, terminal=True, reorderable=False)
        if reorder_terminal:
            assert end == pytest.approx(0.05) and end < min(chunks) and t.overtaken == 1
        else:
            assert end > max(chunks) and t.overtaken == 0


def test_releaser_delivers_in_release_order() -> None:
    async def scenario() -> list[int]:
        out: list[int] = []

        async def deliver(x: int) -> None:
            out.append(x)

        loop = asyncio.get_running_loop()
        r = Releaser(deliver)
        now = loop.time()
        for i, dt in enumerate([0.03, 0.0, 0.01, 0.01, 0.02]):
            r.put(now + dt, i)
        await r.drain()
        return out

    assert asyncio.run(scenario()) == [1, 2, 3, 4, 0]


# ------------------------------------------------------------------------------ wire


def test_sse_splitter_handles_split_chunks_and_crlf() -> None:
    s = SseSplitter()
    assert s.feed(b'data: {"a"') == []
    assert s.feed(b': 1}\n\ndata: 2\r\n\r\nda') == [b'data: {"a": 1}\n\n', b"data: 2\r\n\r\n"]
    assert s.rest() == b"da"
    assert sse_data(b'data: {"a": 1}\n\n') == b'{"a": 1}'


def test_parse_request_and_frame() -> None:
    body = (b'{"jsonrpc":"2.0","id":7,"method":"SendStreamingMessage","params":{"message":'
            b'{"metadata":{"https://x/ext/requestGuid":"g-1"}}}}')
    _, info = parse_request(body)
    assert (info.method, info.rpc_id, info.request_guid) == ("SendStreamingMessage", 7, "g-1")
    ev = parse_frame('{"id":7,"result":{"statusUpdate":{"status":{"state":"TASK_STATE_COMPLETED"},'
                     '"metadata":{"u/sequenceId":3}}}}')
    assert ev.terminal and ev.sequence_id == 3.0 and ev.rpc_id == 7
    assert parse_frame('{"id":1,"error":{"code":-32600}}').terminal
    assert not parse_frame('{"id":1,"result":{"artifactUpdate":{"metadata":{}}}}').terminal


def test_parse_rest_request_and_frame() -> None:
    """HTTP+JSON: the SendMessageRequest body of POST /message:stream carries the identity;
    its stream events are bare StreamResponse objects."""
    body = b'{"message":{"metadata":{"https://x/ext/requestGuid":"g-2"}}}'
    _, info = parse_request(body, "/message:stream")
    assert (info.method, info.rpc_id, info.request_guid, info.binding) == (
        "SendStreamingMessage", None, "g-2", "rest")
    _, info = parse_request(body, "/tenant-a/message:send")
    assert (info.method, info.binding) == ("SendMessage", "rest")
    for path in ("/tasks/t-1:cancel", "/tasks/t-1"):  # no message: never faulted
        _, info = parse_request(b"{}", path)
        assert not info.method and info.binding == "rest"
    ev = parse_frame('{"statusUpdate":{"status":{"state":"TASK_STATE_COMPLETED"},'
                     '"metadata":{"u/sequenceId":4}}}')
    assert ev.terminal and ev.sequence_id == 4.0
    ev = parse_frame('{"artifactUpdate":{"metadata":{"u/sequenceId":2}}}')
    assert not ev.terminal and ev.sequence_id == 2.0
    assert parse_frame('{"error":{"code":500,"status":"INTERNAL"}}').terminal


@given(st.one_of(st.binary(max_size=200), st.text(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                              lambda c: st.lists(c, max_size=3)
                              | st.dictionaries(st.text(max_size=8), c, max_size=3),
                              max_leaves=12).map(lambda v: __import__("json").dumps(v))))
def test_wire_parsing_never_raises(data: bytes | str) -> None:
    parse_request(data)
    parse_request(data, "/message:stream")
    parse_frame(data)
    SseSplitter().feed(data if isinstance(data, bytes) else data.encode())


# ------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize("args, needle", [
    (["--listen", "nowhere", "--upstream", "http://127.0.0.1:1"], "HOST:PORT"),
    (["--listen", "127.0.0.1:0", "--upstream", "ftp://x"], "http(s)"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--duplicate", "1.5"], "[0, 1]"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--outage", "5"], "START:DURATION"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--outage", "1:0"], "DURATION > 0"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--scenario", "nope"], "scenario"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--set",
      "network.uplink.loss=2"], "network.uplink.loss"),
    (["--listen", "127.0.0.1:9", "--upstream", "http://127.0.0.1:9"], "same address"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--balancer", "sticky"],
     "need several --upstream"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--upstream", "http://127.0.0.1:1"],
     "given twice"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--upstream", "http://127.0.0.1:2",
      "--balancer", "fastest"], "invalid choice"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--upstream", "http://127.0.0.1:2",
      "--grpc-listen", ":0", "--grpc-upstream", "grpc://127.0.0.1:3"], "one gRPC address per"),
    (["--listen", ":0", "--upstream", "http://127.0.0.1:1", "--upstream", "http://127.0.0.1:2",
      "--grpc-listen", ":0", "--grpc-upstream", "grpc://127.0.0.1:3", "--grpc-upstream",
      "grpcs://127.0.0.1:4"], "mix of grpc:// and grpcs://"),
])
def test_cli_errors_are_one_line(args: list[str], needle: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


def test_cli_unwritable_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    assert main(["chaos", "--listen", ":0", "--upstream", "http://127.0.0.1:1",
                 "--ledger", str(tmp_path / "file" / "chaos.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ledger" in err


def test_rng_for_is_a_generator() -> None:
    assert isinstance(rng_for(1, "k"), np.random.Generator)
