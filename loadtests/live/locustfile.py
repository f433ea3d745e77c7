"""The locustfile of ``rtalab load run``: one ``LiveCalls`` user per process, open arrivals.

Calls arrive as a Poisson process at the scenario's ``[workload]`` rate (or
schedule), split evenly over the Locust processes; each call runs in its own
greenlet (:class:`rtalab.loadtests.live.call.Call`), so the number of calls in
flight follows the load, not a user count.  Arrivals stop at
``duration_s``; a process then reports ``rta_idle`` when its calls are done.

The master (or the single local process) conducts the end of the run:
after ``duration_s`` it waits for every process to be idle (at most
``drain_s``), stops the runner (workers kill calls still open, recording them
``unfinished``, and ship their last ledger batch and ``rta_done``), waits
until every batch arrived and past Locust's report interval, writes
``ledger/gather.json``, and quits.  This avoids Locust's lost final reports
(at the end of ``-t`` the master waits only 0.5 s for the workers' last ones).
The exit code is 3 when the ledger is incomplete.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, cast

import gevent
import locust.stats
import numpy as np
from gevent.pool import Group
from locust import FastHttpUser, constant, events, task
from locust.runners import MasterRunner, WorkerRunner

from rtalab.loadtests.common.tls import ClientTls
from rtalab.loadtests.live.bindings import ChannelContext, open_channel
from rtalab.loadtests.live.call import Call, Instance
from rtalab.loadtests.live.config import ENV, WORKER_DIR_ENV, LoadSettings
from rtalab.loadtests.live.ledger import MSG_DONE, MSG_IDLE, MSG_LEDGER, Gatherer, Ledger
from rtalab.sim.scenario import load_scenario

REPORT_WAIT_S = 3.5  # > Locust's worker report interval (3 s)
CSV_INTERVAL_S = 0.25  # Locust's CSV write interval (its default: 1 s)
CSV_WAIT_S = 2 * CSV_INTERVAL_S  # past the next CSV write after the stop
GATHER_TIMEOUT_S = 60.0
SHIP_EVERY_S = 1.0


class Process:
    """This Locust process's part of the run (a worker or the local process)."""

    def __init__(self, settings: LoadSettings) -> None:
        self.s = settings
        self.scenario = load_scenario(settings.scenario_path)
        self.bindings = settings.bindings
        self.opts = settings.live  # as the command line built it
        self.calls = Group()
        self.ledger: Ledger | None = None
        self.instance: Instance | None = None
        self.index = 0
        self.t0 = 0.0
        self.running = False
        self.environment: Any = None
        self.shipper: gevent.Greenlet[..., Any] | None = None
        self.finished = False

    def start(self, environment: Any) -> None:
        """test_start: this process's clock, instance, ledger and shipper."""
        self.environment = environment
        runner = environment.runner
        self.index = int(getattr(runner, "worker_index", 0)) if isinstance(
            runner, WorkerRunner) else 0
        self.t0 = time.time()
        self.instance = Instance(self.index, self.scenario, self.opts, self.t0)
        self.ledger = Ledger(f"w{self.index}")
        self.finished = False
        self.shipper = gevent.spawn(self._ship_loop)

    def _ship_loop(self) -> None:
        while True:
            gevent.sleep(SHIP_EVERY_S)
            self.ship()

    def ship(self) -> None:
        """Send the buffered rows as the next batch (if any)."""
        if self.ledger is not None and self.ledger.pending():
            self.environment.runner.send_message(MSG_LEDGER, self.ledger.take_batch())

    def stop(self) -> None:
        """test_stop: end open calls (recorded unfinished), ship the rest, announce done."""
        if self.ledger is None or self.finished:
            return
        self.finished = True
        self.calls.kill(block=True, timeout=10)
        if self.shipper is not None:
            self.shipper.kill(block=True)
        self.ship()
        self.environment.runner.send_message(MSG_DONE, self.ledger.done_message())

    def _stat(self, kind: str, name: str, ms: float, ok: bool) -> None:
        self.environment.events.request.fire(
            request_type=kind, name=name, response_time=ms, response_length=0,
            exception=None if ok else RuntimeError(f"{kind.lower()} failed"), context={})

    def arrivals(self, user: FastHttpUser) -> None:
        """The open arrival process of this process's share of the calls."""
        if self.running or self.instance is None:
            gevent.sleep(3600)  # only one arrival process per Locust process
            return
        self.running = True
        s, wl = self.s, self.scenario.workload
        rng = np.random.default_rng(np.random.SeedSequence([s.seed, self.index, 0]))
        max_calls = math.ceil(wl.max_calls / s.processes) if wl.max_calls else 0
        n = 0
        while True:
            elapsed = time.time() - self.t0
            if elapsed >= s.duration_s or (max_calls and n >= max_calls):
                break
            rate = wl.rate_at(elapsed) / s.processes
            if rate <= 0:
                gevent.sleep(min(0.1, s.duration_s - elapsed))
                continue
            gap = float(rng.exponential(1.0 / rate))
            if elapsed + gap >= s.duration_s:
                gevent.sleep(s.duration_s - elapsed)
                break
            gevent.sleep(gap)
            self._start_call(user, n)
            n += 1
        self.calls.join()
        self.ship()
        self.environment.runner.send_message(MSG_IDLE, {"process": f"w{self.index}"})
        gevent.sleep(3600)

    def _start_call(self, user: FastHttpUser, n: int) -> None:
        s = self.s
        bindings = self.bindings
        k = len(bindings)
        # calls alternate over the bindings, and principals by rounds of the bindings (each
        # principal sees every binding)
        token = s.tokens[(n // k) % len(s.tokens)] if s.tokens else s.token
        channel = open_channel(bindings[n % k], ChannelContext(
            user.client, cast("str", user.host), s, token, self.environment.events,  # host: set
            CLIENT_TLS))
        rng = np.random.default_rng(np.random.SeedSequence([s.seed, self.index, n + 1]))
        assert self.instance is not None and self.ledger is not None
        call = Call(f"{s.run_id}-w{self.index}-{n}", self.scenario, self.instance, channel,
                    self.ledger, self.opts, rng, f"w{self.index}", s.run_id, self._stat,
                    spawn=self.calls.spawn)
        self.calls.spawn(call.run)


class Conductor:
    """The master's (or local process's) end-of-run protocol and ledger gathering."""

    def __init__(self, settings: LoadSettings) -> None:
        self.s = settings
        self.gatherer = Gatherer(Path(settings.run_dir) / "ledger")
        self.expected = 1

    def register(self, runner: Any) -> None:
        """Listen for ledger batches, done and idle messages."""
        runner.register_message(MSG_LEDGER, lambda environment, msg, **kw:
                                self.gatherer.on_batch(msg.data))
        runner.register_message(MSG_DONE, lambda environment, msg, **kw:
                                self.gatherer.on_done(msg.data))
        runner.register_message(MSG_IDLE, lambda environment, msg, **kw:
                                self.gatherer.idle.add(msg.data["process"]))

    def start(self, environment: Any) -> None:
        """test_start: begin the run's clock and conduct its end."""
        runner = environment.runner
        self.expected = runner.worker_count if isinstance(runner, MasterRunner) else 1
        t0 = time.time()
        clock = Path(self.s.run_dir) / "ledger" / "clock.json"
        tmp = clock.with_suffix(".tmp")  # written whole, then renamed: never read half-written
        tmp.write_text(json.dumps({"t0": t0, "processes": self.expected}) + "\n",
                       encoding="utf-8")
        tmp.replace(clock)
        gevent.spawn(self._conduct, environment, t0)

    def _conduct(self, environment: Any, t0: float) -> None:
        s = self.s
        gevent.sleep(max(0.0, t0 + s.duration_s - time.time()))
        drain_end = t0 + s.duration_s + s.drain_s
        while len(self.gatherer.idle) < self.expected and time.time() < drain_end:
            gevent.sleep(0.1)
        stop_t = time.time()
        environment.runner.stop()
        if not isinstance(environment.runner, MasterRunner) and PROCESS is not None:
            PROCESS.stop()  # the local runner's test_stop may have run before users ended
        deadline = stop_t + GATHER_TIMEOUT_S
        while not self.gatherer.complete(self.expected) and time.time() < deadline:
            gevent.sleep(0.1)
        # past the workers' last stats report (master), or past Locust's next periodic CSV
        # write (its stats CSV is not rewritten at exit; local process)
        wait_s = REPORT_WAIT_S if isinstance(environment.runner, MasterRunner) else CSV_WAIT_S
        gevent.sleep(max(0.0, stop_t + wait_s - time.time()))
        report = self.gatherer.report(self.expected)
        report["stopped_s"] = stop_t
        report["drained"] = len(self.gatherer.idle) >= self.expected
        self.gatherer.close()
        (Path(s.run_dir) / "ledger" / "gather.json").write_text(
            json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if not report["complete"]:
            environment.process_exit_code = 3
        environment.runner.quit()


locust.stats.CSV_STATS_INTERVAL_SEC = CSV_INTERVAL_S  # type: ignore[assignment]  # locust says int; its writer sleeps any seconds
# ``rtalab load run`` (master or local process, and the workers it starts itself) names the
# settings file; a worker started by ``rtalab load worker`` on another host has none: it gets
# the settings (and the scenario) from the master when the run starts (a Locust custom
# argument, forwarded to every worker in the spawn message)
SETTINGS = LoadSettings.from_env() if os.environ.get(ENV) else None
CLIENT_TLS = ClientTls.from_env()  # rtalab.loadtests.common.tls.ENV, set by rtalab load run
if SETTINGS is not None and SETTINGS.uses_grpc:  # grpcio's gevent mode, before any gRPC object
    from rtalab.loadtests.live.grpc_channel import init_gevent

    init_gevent()
PROCESS: Process | None = Process(SETTINGS) if SETTINGS is not None else None
CONDUCTOR: Conductor | None = Conductor(SETTINGS) if SETTINGS is not None else None


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]  # locust's add_listener is unannotated
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--rta-settings", default="",
                        help="(set by the master for remote workers; never by hand)")


@events.init.add_listener  # type: ignore[untyped-decorator]  # locust's add_listener is unannotated
def _on_init(environment: Any, **kw: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        assert CONDUCTOR is not None and SETTINGS is not None
        CONDUCTOR.register(environment.runner)
        if isinstance(environment.runner, MasterRunner) and environment.parsed_options:
            environment.parsed_options.rta_settings = SETTINGS.for_remote_workers()


@events.test_start.add_listener  # type: ignore[untyped-decorator]  # locust's add_listener is unannotated
def _on_test_start(environment: Any, **kw: Any) -> None:
    global PROCESS
    if PROCESS is None:  # a remote worker: the settings came with the spawn message
        PROCESS = Process(LoadSettings.from_remote(environment.parsed_options.rta_settings,
                                                   os.environ[WORKER_DIR_ENV]))
    if not isinstance(environment.runner, MasterRunner):
        PROCESS.start(environment)
    if not isinstance(environment.runner, WorkerRunner):
        assert CONDUCTOR is not None
        CONDUCTOR.start(environment)


@events.test_stop.add_listener  # type: ignore[untyped-decorator]  # locust's add_listener is unannotated
def _on_test_stop(environment: Any, **kw: Any) -> None:
    if not isinstance(environment.runner, MasterRunner) and PROCESS is not None:
        PROCESS.stop()


class LiveCalls(FastHttpUser):
    """One per Locust process: runs that process's open arrival process of calls.  Its
    connections verify certificates as ``rtalab load run`` says (:data:`CLIENT_TLS`; never
    Locust's default, which verifies nothing)."""

    insecure = CLIENT_TLS.insecure
    ssl_context_factory = staticmethod(CLIENT_TLS.new_context)

    concurrency = 1024  # connections of the process's pool (calls in flight share it)
    network_timeout = 600.0  # the Live layer's own timers bound every read
    connection_timeout = 10.0
    wait_time = constant(0)

    @task
    def arrivals(self) -> None:
        """Run the arrival process (returns only when this process's share is done)."""
        assert PROCESS is not None  # set at import (or at test start on a remote worker)
        PROCESS.arrivals(self)
