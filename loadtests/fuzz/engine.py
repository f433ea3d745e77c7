"""A fuzzer that reaches the turn handler: mostly valid requests with mutated fields.

Each request starts as a VALID profile request (a turn message with turnId,
requestGuid and interactionId, or a task call on a task this client created)
and gets zero to two mutations: profile metadata of the wrong type, size or
value, unknown keys, parts of every kind and size, identifiers that are too
long, foreign, unknown or not valid Unicode, another principal's context, a
missing extension or version header, a bad token, a broken envelope.  So most
requests get past JSON decoding, authentication and the body bounds and reach
turn parsing (the server counts them: ``rta_reasoner_turn_requests_total``) or
execution, over the three bindings:

- ``jsonrpc``: ``POST /`` (SSE for ``SendStreamingMessage``, JSON otherwise);
- ``rest``: ``POST /message:stream`` (SSE), ``POST /message:send``,
  ``GET /tasks/{id}``, ``POST /tasks/{id}:cancel``;
- ``ws``: JSON-RPC frames on ``/ws``, one socket per client thread, kept open.

The oracle, per answer: an answer arrives (no timeout, no cut stream, no
closed socket), the HTTP status is below 500, a JSON-RPC error is one of the
stable codes (never ``-32603``), a stream ends in a final state, and a FAILED
turn carries a stable profile error code other than ``internal``.  Per run:
the server's unhandled-exception counter (``rta_reasoner_unhandled_exceptions_total``)
did not move, at least :data:`MIN_REACHED` of the requests reached turn parsing,
and a normal turn still completes on the binding afterwards.

The ``rta/test.raise`` test hook (``--test-hooks`` only) plants an exception in
turn parsing: ``plant_share`` > 0 is the negative control, the oracle must fail.
Generation is seeded (one ``random.Random`` per client thread).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed

from rtalab.loadtests.wireclient import (
    ALICE,
    BOB,
    END_STATES,
    EVENT_KINDS,
    Client,
    Turn,
    frame_ends,
    headers,
    k,
    kind,
    message,
    rpc,
    state,
    status_message,
    stream,
    uid,
)

BINDINGS: tuple[str, ...] = ("jsonrpc", "rest", "ws")
MIN_REACHED = 0.5  # share of requests that must reach turn parsing
STABLE_JSONRPC = frozenset({-32700, -32600, -32601, -32602, -32040} | set(range(-32099, -32000)))
STABLE_CODES = frozenset({"schema-validation", "unsupported-directive", "extension-inactive",
                          "auth", "rate-limited", "upstream-timeout", "session-not-found"})
LONE = "\ud800"
FOREIGN_CONTEXT = "ctx-of-bob"  # bound to Bob before each run; Alice's use is refused
_METRIC = re.compile(r"^(rta_reasoner_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", re.MULTILINE)


# ---------------------------------------------------------------------------- generation


@dataclass
class Case:
    """One fuzzed request: where it goes and its raw body (or WebSocket frame)."""

    binding: str
    body: bytes
    hdrs: dict[str, str]
    path: str = "/"
    method: str = "POST"
    streaming: bool = True
    mutations: tuple[str, ...] = ()


class Generator:
    """Seeded generator of mostly valid requests for one client thread."""

    def __init__(self, seed: int, plant_share: float = 0.0):
        self.rng = random.Random(seed)
        self.plant_share = plant_share
        self.contexts: list[str] = []
        self.tasks: list[tuple[str, str]] = []  # (taskId, contextId) this client created
        self.n = 0

    # --- mutations of the message ------------------------------------------------------

    def _value(self) -> Any:
        """A value of a random JSON type."""
        r = self.rng
        return r.choice([None, True, 0, -1, 2**70, 1.5, "", "x" * r.randint(1, 400),
                         [], ["progress", 3], {"a": {"b": [1]}}, LONE])

    def _mutate(self, msg: dict[str, Any], name: str) -> None:
        """Apply mutation ``name`` to a message dict."""
        r, md = self.rng, msg.setdefault("metadata", {})
        profile = ["turnId", "requestGuid", "interactionId", "sideEffect", "handoff",
                   "directives", "test.delayS"]
        if name == "meta-type":
            md[k(r.choice(profile))] = self._value()
        elif name == "meta-drop":
            md.pop(k(r.choice(profile[:3])), None)
        elif name == "meta-unknown":
            md[r.choice([k("nope"), "other", "x" * 50])] = self._value()
        elif name == "meta-big":
            md["blob"] = "y" * r.choice([100, 9000])
        elif name == "directives":
            md[k("directives")] = r.choice([["progress"], ["handoff"], [], ["end_session"],
                                            ["progress", "bogus"]])
        elif name == "handoff":
            md[k("handoff")] = True
        elif name == "side-effect":
            md[k("sideEffect")] = r.choice([True, False])
        elif name == "delay":
            md[k("test.delayS")] = r.choice([0.0, 0.01, -1, 61, "0.1", float("1e308")])
        elif name == "parts":
            msg["parts"] = r.choice([
                [], [{"text": ""}], [{"text": "z" * 33_000}], [{"text": "é😀" * 50}],
                [{"data": {"k": [1, 2, {"x": None}]}}], [{"data": {"big": "d" * 17_000}}],
                [{"url": "https://example.com/a"}], [{"raw": "aGVsbG8="}], [{}],
                [{"text": "a"}] * 17, [{"text": "a", "metadata": {"m": 1}}], "nope"])
        elif name == "role":
            msg["role"] = r.choice(["ROLE_AGENT", "ROLE_UNSPECIFIED", "nope", 7])
        elif name == "ids":
            field_name = r.choice(["messageId", "contextId", "taskId"])
            msg[field_name] = r.choice(["", "i" * 300, f"id-{LONE}", "ünï-çødé", uid("x"), 5])
        elif name == "known-task" and self.tasks:
            task, ctx = r.choice(self.tasks)
            msg["taskId"] = task
            msg["contextId"] = r.choice([ctx, ctx, uid("c")])
        elif name == "foreign-context":
            msg["contextId"] = FOREIGN_CONTEXT
        elif name == "no-context":
            msg.pop("contextId", None)

    MESSAGE_MUTATIONS = ("meta-type", "meta-drop", "meta-unknown", "meta-big", "directives",
                         "handoff", "side-effect", "delay", "parts", "role", "ids", "known-task",
                         "foreign-context", "no-context")

    def _message(self) -> tuple[dict[str, Any], list[str]]:
        """A valid turn message with 0-2 mutations."""
        r = self.rng
        if self.contexts and r.random() < 0.2:
            ctx = r.choice(self.contexts)
        else:
            ctx = uid("c")
            self.contexts = ([*self.contexts, ctx])[-20:]
        msg = message(r.choice(["what is my balance", "transfer 10", "é"]), ctx=ctx)
        names = r.sample(self.MESSAGE_MUTATIONS, r.choice([0, 1, 1, 2]))
        for name in names:
            self._mutate(msg, name)
        if self.plant_share and r.random() < self.plant_share:
            msg.setdefault("metadata", {})[k("test.raise")] = True
            names.append("planted")
        return msg, names

    def _headers(self, names: list[str], sse: bool) -> dict[str, str]:
        """Profile headers, sometimes mutated."""
        r = self.rng
        h = headers(ALICE, sse=sse)
        roll = r.random()
        if roll < 0.05:
            h = headers(ALICE, ext=False, sse=sse)
            names.append("no-extension")
        elif roll < 0.07:
            h = headers(ALICE, version=False, sse=sse)
            names.append("no-version")
        elif roll < 0.09:
            h["A2A-Extensions"] = "https://example.com/other, " + h["A2A-Extensions"]
            names.append("extra-extension")
        elif roll < 0.10:
            h = headers("wrong-token", sse=sse)
            names.append("bad-token")
        elif roll < 0.12:
            h = headers(BOB, sse=sse)
            names.append("other-principal")
        return h

    def _envelope(self, body: dict[str, Any], names: list[str]) -> bytes:
        """The JSON-RPC envelope, rarely broken."""
        r = self.rng
        roll = r.random()
        if roll < 0.02:
            body["jsonrpc"] = "1.0"
            names.append("envelope-version")
        elif roll < 0.04:
            body["id"] = r.choice([1.5, True, [1], LONE])
            names.append("envelope-id")
        elif roll < 0.05:
            names.append("truncated")
            return json.dumps(body).encode()[:-3]
        return json.dumps(body).encode()

    def case(self, binding: str) -> Case:
        """The next request for ``binding``."""
        self.n += 1
        r = self.rng
        call = r.random() < 0.12 and self.tasks
        if call:
            task = r.choice(self.tasks)[0]
            method = r.choice(["GetTask", "CancelTask", "SubscribeToTask"])
            names = [f"call-{method}"]
            if binding == "rest":
                path = f"/tasks/{task}" + {"GetTask": "", "CancelTask": ":cancel",
                                           "SubscribeToTask": ":subscribe"}[method]
                verb = "GET" if method != "CancelTask" else "POST"
                return Case(binding, b"", self._headers(names, method == "SubscribeToTask"),
                            path, verb, method == "SubscribeToTask", tuple(names))
            body = rpc(method, {"id": task}, rid=f"q{self.n}")
            return Case(binding, self._envelope(body, names),
                        self._headers(names, method == "SubscribeToTask"),
                        streaming=method == "SubscribeToTask", mutations=tuple(names))
        msg, names = self._message()
        streaming = r.random() < 0.75
        if binding == "rest":
            path = "/message:stream" if streaming else "/message:send"
            raw = json.dumps({"message": msg}).encode()
            if r.random() < 0.03:
                raw, names = raw[:-2], [*names, "truncated"]
            return Case(binding, raw, self._headers(names, streaming), path, "POST", streaming,
                        tuple(names))
        method = "SendStreamingMessage" if streaming else "SendMessage"
        body = rpc(method, {"message": msg}, rid=f"q{self.n}")
        hdrs = self._headers(names, streaming) if binding == "jsonrpc" else {}
        return Case(binding, self._envelope(body, names), hdrs, streaming=streaming,
                    mutations=tuple(names))

    def learn(self, answer: Answer) -> None:
        """Remember the tasks this client created (for task calls and continuations)."""
        if answer.task_id and answer.context_id:
            self.tasks = ([*self.tasks, (answer.task_id, answer.context_id)])[-20:]


# ---------------------------------------------------------------------------- answers


@dataclass
class Answer:
    """What one request got, and what is wrong with it (``problem``, None if nothing)."""

    status: int | None = None
    jsonrpc_codes: list[int] = field(default_factory=list)
    final_state: str | None = None
    error_code: str | None = None
    task_id: str | None = None
    context_id: str | None = None
    problem: str | None = None
    unanswered: bool = False


def _event_of(payload: Any) -> dict[str, Any] | None:
    """A stream event ``{kind: body}``, or a bare Task (unary results) wrapped as one."""
    if isinstance(payload, dict) and len(payload) == 1 and kind(payload) in EVENT_KINDS \
            and isinstance(payload[kind(payload)], dict):
        return payload
    if isinstance(payload, dict) and "id" in payload and isinstance(payload.get("status"), dict):
        return {"task": payload}
    return None


def _judge_events(ans: Answer, payloads: list[Any], streaming: bool) -> None:
    """Final state, error code and ids of a stream (or of a unary result)."""
    events = [e for e in map(_event_of, payloads) if e is not None]
    for ev in events:
        body = ev[kind(ev)]
        if kind(ev) == "task":
            ans.task_id, ans.context_id = body.get("id"), body.get("contextId")
        st = state(ev) if kind(ev) != "artifactUpdate" else None
        if st is not None:
            ans.final_state = st
        if st == "TASK_STATE_FAILED":
            ans.error_code = status_message(ev).get("metadata", {}).get(k("errorCode"))
    if streaming and (not events or state(events[-1]) not in END_STATES) and not (
            events and kind(events[-1]) == "message"):
        ans.problem = "stream cut before a final state"
    elif ans.final_state == "TASK_STATE_FAILED" and ans.error_code is not None and (
            ans.error_code not in STABLE_CODES):
        ans.problem = f"FAILED with error code {ans.error_code!r}"


def _judge_jsonrpc(ans: Answer, frames: list[dict[str, Any]], streaming: bool) -> None:
    """Oracle for the JSON-RPC frames of one request (HTTP or WebSocket)."""
    if not frames:
        ans.problem = "no answer"
        return
    for f in frames:
        if "error" in f:
            code = f["error"].get("code")
            ans.jsonrpc_codes.append(code)
            if code not in STABLE_JSONRPC:
                ans.problem = f"JSON-RPC error {code}: {str(f['error'].get('message'))[:80]}"
    if ans.jsonrpc_codes:
        if len(frames) > 1 and "error" not in frames[-1]:
            ans.problem = "frames after an error"
        return
    _judge_events(ans, [f.get("result") for f in frames], streaming)


def _sse_frames(r: httpx.Response) -> list[dict[str, Any]]:
    """The ``data:`` payloads of an SSE response."""
    return [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]


def send_http(client: httpx.Client, url: str, case: Case) -> Answer:
    """One JSON-RPC or REST request over HTTP, judged."""
    ans = Answer()
    try:
        with client.stream(case.method, url + case.path, headers=case.hdrs,
                           content=case.body or None) as r:
            ans.status = r.status_code
            sse = r.headers.get("content-type", "").startswith("text/event-stream")
            if sse:
                payloads = _sse_frames(r)
            else:
                raw = r.read()
                payloads = [json.loads(raw)] if raw else []
    except (httpx.HTTPError, ValueError) as e:
        ans.unanswered, ans.problem = True, f"no answer: {type(e).__name__}"
        return ans
    if ans.status >= 500:
        ans.problem = f"HTTP {ans.status}"
    elif case.binding == "jsonrpc":
        _judge_jsonrpc(ans, payloads, sse)
    elif ans.status >= 400:
        err = payloads[0].get("error") if payloads and isinstance(payloads[0], dict) else None
        if not isinstance(err, dict) or not err.get("status"):
            ans.problem = f"HTTP {ans.status} without a REST error body"
    else:
        if sse and payloads and isinstance(payloads[-1], dict) and "error" in payloads[-1]:
            return ans  # an error event ends a REST stream
        _judge_events(ans, payloads, sse)
    return ans


def send_ws(session: Any, case: Case) -> Answer:
    """One frame on an open WebSocket (requests are sequential per socket), judged."""
    ans = Answer()
    try:
        session.send(None, raw=case.body.decode("utf-8", "surrogatepass"))
        frames: list[dict[str, Any]] = []
        while True:
            frame = session.recv()
            frames.append(frame)
            if frame.get("id") is None or frame_ends(frame):
                break
    except ConnectionClosed as e:
        ans.unanswered, ans.problem = True, f"socket closed ({e.rcvd.code if e.rcvd else '-'})"
        return ans
    except TimeoutError:
        ans.unanswered, ans.problem = True, "no answer (timeout)"
        return ans
    _judge_jsonrpc(ans, frames, case.streaming)
    return ans


# ---------------------------------------------------------------------------- runs


def scrape(client: Client) -> dict[str, float]:
    """The Reasoner's counters by name (summed over label sets)."""
    totals: dict[str, float] = {}
    for name, _labels, value in _METRIC.findall(client.metrics()):
        totals[name] = totals.get(name, 0) + float(value)
    return totals


@dataclass
class BindingReport:
    """The outcome of fuzzing one binding."""

    binding: str
    requests: int = 0
    reached: float = 0.0  # server-counted requests that reached turn parsing
    http_5xx: int = 0
    unanswered: int = 0
    sockets_lost: int = 0
    unhandled: float = 0.0  # server-side tracebacks during the run
    completed: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    normal_turn_after: str = ""
    seconds: float = 0.0

    @property
    def reached_share(self) -> float:
        """Share of the requests that reached turn parsing."""
        return self.reached / self.requests if self.requests else 0.0

    def failures(self) -> list[str]:
        """Why this run fails the oracle (empty: it passes)."""
        out = [f"{n}x {p}" for p, n in self.problems.most_common(5)]
        if self.unhandled:
            out.append(f"{self.unhandled:g} unhandled exception(s) logged by the server")
        if self.reached_share < MIN_REACHED:
            out.append(f"only {self.reached_share:.0%} of requests reached turn parsing")
        if self.normal_turn_after != "TASK_STATE_COMPLETED":
            out.append(f"a normal turn afterwards ended {self.normal_turn_after or 'nowhere'}")
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"binding": self.binding, "requests": self.requests, "reached": self.reached,
                "reachedShare": round(self.reached_share, 4), "http5xx": self.http_5xx,
                "unanswered": self.unanswered, "socketsLost": self.sockets_lost,
                "unhandledExceptions": self.unhandled, "completedTurns": self.completed,
                "statuses": dict(self.statuses), "problems": dict(self.problems),
                "normalTurnAfter": self.normal_turn_after, "seconds": round(self.seconds, 2),
                "failures": self.failures()}


def _normal_turn(client: Client, binding: str) -> str:
    """Final state of one ordinary turn over ``binding`` after the fuzzing."""
    msg = message(ctx=uid("c"))
    if binding == "rest":
        with client.http() as c, c.stream(
                "POST", client.url + "/message:stream", headers=headers(ALICE),
                content=json.dumps({"message": msg}).encode()) as r:
            payloads = _sse_frames(r)
        return str(state(payloads[-1])) if payloads else ""
    turn: Turn = client.send("sse" if binding == "jsonrpc" else "ws", stream(msg))
    return turn.final_state or ""


def fuzz_binding(client: Client, binding: str, requests: int, *, seed: int = 1,
                 threads: int = 4, plant_share: float = 0.0,
                 progress: Callable[[float], None] | None = None) -> BindingReport:
    """Send ``requests`` fuzzed requests over ``binding`` from ``threads`` clients; judged."""
    if binding not in BINDINGS:
        raise ValueError(f"binding must be one of {BINDINGS}, got {binding!r}")
    report = BindingReport(binding)
    lock = threading.Lock()
    client.send("sse", stream(message(ctx=FOREIGN_CONTEXT)), headers(BOB))  # Bob's context
    before = scrape(client)
    started = time.monotonic()
    share = [requests // threads + (1 if i < requests % threads else 0) for i in range(threads)]

    def record(ans: Answer, case: Case) -> None:
        with lock:
            report.requests += 1
            report.statuses[str(ans.status) if ans.status else "ws"] += 1
            report.http_5xx += int(ans.status is not None and ans.status >= 500)
            report.unanswered += int(ans.unanswered)
            report.completed += int(ans.final_state == "TASK_STATE_COMPLETED")
            if ans.problem:
                report.problems[f"{ans.problem} [{','.join(case.mutations) or 'valid'}]"] += 1
            if progress is not None and report.requests % 50 == 0:
                progress(report.requests / requests)

    def worker(i: int) -> None:
        gen = Generator(seed * 1_000_003 + i, plant_share)
        if binding == "ws":
            left = share[i]
            while left > 0:  # one socket; a lost socket is counted and replaced
                with client.ws() as session:
                    while left > 0:
                        case = gen.case(binding)
                        ans = send_ws(session, case)
                        left -= 1
                        record(ans, case)
                        gen.learn(ans)
                        if ans.unanswered:
                            with lock:
                                report.sockets_lost += 1
                            break
            return
        with client.http() as http:
            for _ in range(share[i]):
                case = gen.case(binding)
                ans = send_http(http, client.url, case)
                record(ans, case)
                gen.learn(ans)

    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(worker, i) for i in range(threads)]:
            f.result()
    report.seconds = time.monotonic() - started
    report.normal_turn_after = _normal_turn(client, binding)
    after = scrape(client)
    report.reached = (after.get("rta_reasoner_turn_requests_total", 0.0)
                      - before.get("rta_reasoner_turn_requests_total", 0.0))
    key = "rta_reasoner_unhandled_exceptions_total"
    if key not in after:
        raise RuntimeError("the server exports no rta_reasoner_unhandled_exceptions_total")
    report.unhandled = after[key] - before.get(key, 0.0)
    return report
