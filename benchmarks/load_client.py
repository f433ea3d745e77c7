"""One benchmark client process: ``python -m rtalab.benchmarks.load_client VARIANT URL S USERS``.

Runs Locust users of one variant in process (local runner) for a warm-up second
plus ``S`` seconds and prints ``{"turns": n, "seconds": s, "cpu_s": c}`` for the
measuring window.  Variants: ``bare-sse`` (a FastHttpUser that POSTs, reads
the stream's lines and decodes each event to recognise its end state),
``live-sse`` (the Live user: whole :class:`~rtalab.loadtests.live.call.Call` logic,
parsing, reorder buffer, policy, ledger rows), ``bare-rest`` / ``live-rest`` (the same on
HTTP+JSON: ``POST /message:stream``, bare StreamResponse events), ``bare-ws`` (one socket: send,
decode each frame, stop at the frame with this request's id and an end state,
report the request as one Locust stats row),
``live-ws`` (the Live user on a WebSocket call), ``bare-grpc`` (a Locust ``User`` with
grpcio's blocking stub in gevent mode: build the ``SendMessageRequest``, read the
``StreamResponse`` s to the end state, report one stats row; URL ``host:port``) and
``live-grpc`` (the Live user on the gRPC channel).  A call is one long session
of back-to-back turns, so connections persist in every variant.

The bare users are the least a client must do to know that its request
ended and how (docs/load.md): read every event, decode its JSON, find the
JSON-RPC ``id`` (WebSocket: several requests may share the socket) and the
state.  They keep no ledger, timers, reorder buffer or policy.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import uuid
from typing import Any

import gevent
import locust  # noqa: F401  (gevent monkey patching first)
import numpy as np
from locust import FastHttpUser, User, constant, task
from locust.env import Environment

from rtalab.loadtests.common.tls import ClientTls
from rtalab.loadtests.live.call import Call, Instance, LiveOptions
from rtalab.loadtests.live.ledger import Ledger
from rtalab.loadtests.live.rest import RestChannel, rest_body
from rtalab.loadtests.live.sse import SseChannel
from rtalab.loadtests.live.wire import (
    DEFAULT_EXT_URI,
    STREAM_END_STATES,
    Ids,
    headers,
    streaming_request,
)
from rtalab.loadtests.live.ws import WsChannel
from rtalab.sim.scenario import from_dict

TURNS = [0]
SCENARIO = from_dict({"workload": {"turns_per_call": 1_000_000, "think_time_s": 0.0,
                                   "side_effect_share": 0.0, "handoff_share": 0.0},
                      "live": {"timeouts": {"negotiation_s": 0.0}}})
OPTS = LiveOptions(ext_uri=DEFAULT_EXT_URI)
INSTANCE = Instance(0, SCENARIO, OPTS, time.time())
LEDGER = Ledger("bench")


def _body(rpc_id: str) -> bytes:
    ids = Ids(uuid.uuid4().hex, uuid.uuid4().hex, "t", "i", "ctx-1", None)
    return streaming_request(rpc_id, ids, DEFAULT_EXT_URI, True, text="hi",
                             side_effect=False, handoff=False)


def _end_state(frame: dict[str, Any]) -> str | None:
    """The end of a request, minimally: a JSON-RPC error or a status with an end state."""
    if "error" in frame:
        return "error"
    status = (frame.get("result") or {}).get("statusUpdate")
    state = status["status"].get("state") if status else None
    return state if state in STREAM_END_STATES else None


def _stat(kind: str, name: str, ms: float, ok: bool) -> None:
    if kind == "TURN":
        TURNS[0] += 1
        if len(LEDGER.rows["events"]) > 20_000:
            LEDGER.take_batch()  # what shipping costs in a real run


class BareSse(FastHttpUser):
    """POST, read the stream's lines, decode each event until the end state; nothing else."""

    wait_time = constant(0)
    concurrency = 4
    path = "/"

    @staticmethod
    def request() -> bytes:
        """The request body."""
        return _body(uuid.uuid4().hex)

    @staticmethod
    def frame(event: Any) -> dict[str, Any]:
        """One decoded event as a JSON-RPC response object."""
        return event  # type: ignore[no-any-return]

    @task
    def turn(self) -> None:
        h = headers(DEFAULT_EXT_URI, None, True)
        with self.client.post(self.path, data=self.request(), headers=h, stream=True,
                              catch_response=True, name="bare") as r:
            raw = r._response
            end = None
            while line := raw.readline(b"\n"):
                if line.startswith(b"data:"):
                    end = _end_state(self.frame(json.loads(line[5:].decode()))) or end
            if end is None:
                r.failure("no end state")
                return
            r.success()
        TURNS[0] += 1


class BareRest(BareSse):
    """The same on HTTP+JSON: POST /message:stream, bare StreamResponse events."""

    path = "/message:stream"

    @staticmethod
    def request() -> bytes:
        """The SendMessageRequest body."""
        return rest_body(_body(uuid.uuid4().hex))

    @staticmethod
    def frame(event: Any) -> dict[str, Any]:
        """A StreamResponse, as the result of a JSON-RPC response object."""
        return {"result": event}


class LiveSse(FastHttpUser):
    """The Live user over HTTP/SSE."""

    wait_time = constant(0)
    concurrency = 4
    channel: Any = SseChannel

    @task
    def call(self) -> None:
        rng = np.random.default_rng(1)
        Call("bench", SCENARIO, INSTANCE, self.channel(self.client, DEFAULT_EXT_URI, None),
             LEDGER, OPTS, rng, "w0", "bench", _stat).run()


class LiveRest(LiveSse):
    """The Live user over HTTP+JSON."""

    channel = RestChannel


class BareWs(User):
    """One socket: send a request frame, decode frames to this id's end state."""

    wait_time = constant(0)

    def on_start(self) -> None:
        from websockets.sync.client import connect

        self.ws = connect(self.host.replace("http://", "ws://") + "/ws", compression=None,
                          additional_headers=headers(DEFAULT_EXT_URI, None, True, sse=False))

    @task
    def turn(self) -> None:
        rpc_id = uuid.uuid4().hex
        start, t0 = time.time(), time.perf_counter()
        self.ws.send(_body(rpc_id).decode())
        while True:
            frame = json.loads(self.ws.recv())
            if frame.get("id") == rpc_id and _end_state(frame):
                break
        # one Locust stats row per request, as the bare FastHttpUser's client reports its POST
        self.environment.events.request.fire(
            request_type="WS", name="bare", start_time=start,
            response_time=(time.perf_counter() - t0) * 1000.0, response_length=0,
            exception=None, context={})
        TURNS[0] += 1


class LiveWs(User):
    """The Live user on a WebSocket call."""

    wait_time = constant(0)

    @task
    def call(self) -> None:
        rng = np.random.default_rng(1)
        ch = WsChannel(self.host, DEFAULT_EXT_URI, None, self.environment.events)
        Call("bench", SCENARIO, INSTANCE, ch, LEDGER, OPTS, rng, "w0", "bench", _stat).run()


class BareGrpc(User):
    """The least a gRPC client does per turn: a request proto, the stream to its end state
    (the state of each status update read), one stats row."""

    wait_time = constant(0)

    def on_start(self) -> None:
        from a2a.types import a2a_pb2_grpc

        from rtalab.loadtests.live.grpc_channel import channel_for

        self.stub = a2a_pb2_grpc.A2AServiceStub(channel_for(self.host, False, ClientTls()))
        self.meta = (("a2a-version", "1.0"), ("a2a-extensions", DEFAULT_EXT_URI))

    @task
    def turn(self) -> None:
        from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

        end_states = {TaskState.Value(s) for s in STREAM_END_STATES}
        msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, context_id="ctx-1",
                      parts=[Part(text="hi")])
        msg.metadata.update({DEFAULT_EXT_URI + "/turnId": "t",
                             DEFAULT_EXT_URI + "/requestGuid": uuid.uuid4().hex})
        start, t0 = time.time(), time.perf_counter()
        ended = False
        for sr in self.stub.SendStreamingMessage(SendMessageRequest(message=msg),
                                                 metadata=self.meta):
            if sr.HasField("status_update") and sr.status_update.status.state in end_states:
                ended = True
        self.environment.events.request.fire(
            request_type="gRPC", name="bare", start_time=start,
            response_time=(time.perf_counter() - t0) * 1000.0, response_length=0,
            exception=None if ended else RuntimeError("no end state"), context={})
        TURNS[0] += 1


class LiveGrpc(User):
    """The Live user on the gRPC channel."""

    wait_time = constant(0)

    @task
    def call(self) -> None:
        from rtalab.loadtests.live.grpc_channel import GrpcChannel

        rng = np.random.default_rng(1)
        ch = GrpcChannel(self.host, False, DEFAULT_EXT_URI, None, self.environment.events)
        Call("bench", SCENARIO, INSTANCE, ch, LEDGER, OPTS, rng, "w0", "bench", _stat).run()


VARIANTS: dict[str, Any] = {"bare-sse": BareSse, "live-sse": LiveSse, "bare-rest": BareRest,
                            "live-rest": LiveRest, "bare-ws": BareWs, "live-ws": LiveWs,
                            "bare-grpc": BareGrpc, "live-grpc": LiveGrpc}


def main(argv: list[str]) -> int:
    """Run one variant; print its measurement as JSON."""
    variant, url, seconds, users = argv[0], argv[1], float(argv[2]), int(argv[3])
    cpu = os.environ.get("RTALAB_BENCH_CPU")
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(cpu)})
    if variant.endswith("grpc"):  # grpcio's gevent mode, before any gRPC object
        from rtalab.loadtests.live.grpc_channel import init_gevent

        init_gevent()
    env = Environment(user_classes=[VARIANTS[variant]], host=url)
    runner = env.create_local_runner()
    runner.start(users, spawn_rate=users)
    gevent.sleep(1.0)  # warm-up: connections open, users running
    n0, t0, c0 = TURNS[0], time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    gevent.sleep(seconds)
    n1, t1, c1 = TURNS[0], time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    runner.quit()
    cpu_s = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    print(json.dumps({"variant": variant, "turns": n1 - n0, "seconds": t1 - t0,
                      "cpu_s": cpu_s}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
