"""``rtalab load run``: servers, Locust, crash schedule, ledgers, tables, verdict, results folder.

Without ``--target`` the run starts, on free ports of 127.0.0.1 and with
:mod:`rtalab.loadtests.common.procs`: the witness (its ledger in the run folder), the
reference Reasoner (workers and dedup store from the flags, else the
scenario's ``[reasoner]``; ``--witness`` pointing at the witness; the witness
takes ``[reasoner].tool_latency_s`` per side effect, as the simulator's tool),
and the L7 proxy (``rtalab chaos``) in front of it when the scenario's
``[network]`` has any key that is not zero (``--chaos`` forces it, ``--no-chaos``
runs over the real loopback: docs/contracts.md "How each scenario key is
realised").  ``--crash-at S``
SIGKILLs the Reasoner's process group S seconds after the load started and
restarts it on the same port and the same dedup store.

Locust runs headless as subprocesses (one local process, or a master and N
workers), with :mod:`rtalab.loadtests.live.locustfile`; its CSV/JSON/HTML land in
``locust/``.  Afterwards the witness ledger and the Reasoner's ``/metrics``
are saved next to the Live users' ledgers, the ledgers become the simulator's
tables and ``summary.json`` (:mod:`rtalab.loadtests.loadrun.tables`), the server's and the
witness's counts are saved (``ledger/counts.json``), and the checker
(:func:`rtalab.loadtests.check.check_run`) writes the run's one verdict (``verdict.json``:
delivery rules, run-integrity checks, gates), which ``meta.json``, ``report.html``
(written after the run is final), the terminal and the exit status repeat.

Everything started is stopped on success, failure, Ctrl-C, SIGTERM and SIGHUP
(every child runs in its own process group and is signalled as a group); an
interrupted run is marked ``interrupted`` in ``meta.json`` and can be judged
afterwards with ``rtalab load summarize``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtalab.loadtests.chaos.procs import start_chaos
from rtalab.loadtests.common.procs import (
    LOCALHOST,
    ManagedProcess,
    ProcessError,
    _pdeathsig_preexec,
    free_port,
    grpc_problem,
    port_clash,
    start_reasoner,
    start_witness,
    url_problem,
    url_ready,
    wait_ready,
)
from rtalab.loadtests.common.tls import ClientTls, ServerTls
from rtalab.loadtests.live.config import (
    ENV,
    WORKER_DIR_ENV,
    LiveOptions,
    LoadSettings,
    TestSwitches,
)
from rtalab.loadtests.loadrun.fleet import (
    FailureSchedule,
    embedded_fleet,
    fleet_problem,
    kill_replica,
    replica_dedup,
    sum_metrics,
    write_restart_row,
)
from rtalab.sim.scenario import Scenario, load_scenario
from rtalab.sim.shared.results import (
    RunLifecycle,
    collect_meta,
    signals_interrupt,
    write_json,
    write_records,
    write_summary,
)
from rtalab.sim.vocab import TIMEOUT_OUTCOMES
from rtalab.sim.vocab import AttemptOutcome as A

# attempts the server answered with an end state
ANSWERED = (A.COMPLETED, A.FAILED, A.INPUT_REQUIRED, A.CANCELLED)

LOCUSTFILE = Path(__file__).resolve().parents[1] / "live" / "locustfile.py"
#: Locust's command line, its import ~0.15 CPU-s cheaper (rtalab.loadtests.live.locust_main)
LOCUST_MAIN = "rtalab.loadtests.live.locust_main"
TOKEN = "rtalab-load-token"
PRINCIPAL = "load"
# the embedded Reasoner knows two principals; calls alternate between them (pairs of calls,
# so each principal sees both bindings): turnIds reused across principals are exercised
TOKENS = {TOKEN: PRINCIPAL, f"{TOKEN}-2": f"{PRINCIPAL}-2"}
EXIT_RULE_FAILED = 1


class RunError(Exception):
    """A load run could not be carried out (one line for the user)."""


@dataclass(kw_only=True)
class RunOptions:
    """The flags of ``rtalab load run``, grouped: the deployment a run drives, the load it
    offers, where it writes, and ``live``: the one object the Live users get (built once
    from the flags and the scenario, :meth:`LiveOptions.of_scenario`; its ``test`` holds
    every test-only switch)."""

    scenario: Scenario
    live: LiveOptions  # verbatim to every Live user (ledger/settings.json)
    # the deployment
    target: str | None = None
    token: str | None = None
    tokens: tuple[str, ...] = ()  # --target: several --token, calls alternate principals
    witness_url: str | None = None
    tls: ClientTls = field(default_factory=ClientTls)  # how every client verifies the servers
    serve_tls: bool = False  # --tls: the embedded servers speak mutual TLS (throwaway CA)
    workers: int | None = None
    dedup: str | None = None
    dedup_mode: str | None = None
    # the load
    binding: str = "sse"
    processes: int = 1
    master_bind: tuple[str, int] | None = None  # --workers-expected: workers on other hosts
    duration_s: float | None = None
    drain_s: float | None = None
    chaos: bool | None = None  # None: the proxy iff the scenario's [network] is not zero
    crash_at: tuple[float, ...] = ()  # restart times (embedded: SIGKILL + restart)
    restart_cmd: str | None = None  # with --target: the user's restart command
    # the results
    results: Path = Path("results")
    argv: list[str] = field(default_factory=list)
    quiet: bool = False
    plots: bool = True
    uncertainty: bool = True  # False: no bootstrap CIs in summary.json (a caller that shows none)
    slo: tuple[str, ...] = ()

    @classmethod
    def of(cls, scenario: Scenario, test: TestSwitches | None = None,
           **flags: Any) -> RunOptions:
        """Options of a run of ``scenario``, the Live users' from the scenario (and ``test``)."""
        return cls(scenario=scenario, live=LiveOptions.of_scenario(scenario, test), **flags)

    @property
    def test(self) -> TestSwitches:
        """The run's test-only switches."""
        return self.live.test


@dataclass
class Stack:
    """The processes a run started (stopped in reverse order)."""

    procs: list[ManagedProcess] = field(default_factory=list)
    reasoner: ManagedProcess | None = None
    witness: ManagedProcess | None = None
    reasoner_args: dict[str, Any] = field(default_factory=dict)
    server_tls: ServerTls = field(default_factory=ServerTls)  # what the embedded servers serve
    client_tls: ClientTls = field(default_factory=ClientTls)  # how this run's clients verify
    grpc_proxy: str = ""  # host:port of the chaos proxy's gRPC side (with --chaos on gRPC)
    # a [fleet]: every replica (reasoner is replicas[0]) and the arguments that restart each
    replicas: list[ManagedProcess] = field(default_factory=list)
    replica_args: list[dict[str, Any]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop everything still running."""
        for p in reversed(self.procs):
            p.stop(timeout_s=5.0)
        for r in self.replicas:
            r.stop(timeout_s=5.0)
        if self.reasoner is not None:
            self.reasoner.stop(timeout_s=5.0)
        self.procs.clear()

    @property
    def servers(self) -> list[ManagedProcess]:
        """The Reasoner processes: every replica of a fleet, else the one Reasoner."""
        return self.replicas or ([self.reasoner] if self.reasoner is not None else [])


def _say(opts: RunOptions, text: str) -> None:
    if not opts.quiet:
        print(text, file=sys.stderr, flush=True)


def network_is_zero(sc: Scenario) -> bool:
    """True if no ``[network]`` key of ``sc`` is non-zero: no latency, loss, duplication,
    reordering or outage on either direction (the real loopback is then the model's link)."""
    return not sc.network.outages and all(
        link.latency_s.mean == 0.0 and link.loss == 0.0 and link.duplication == 0.0
        and link.reorder == 0.0 for link in (sc.network.uplink, sc.network.downlink))


def network_changes_counts(sc: Scenario) -> bool:
    """True if the proxy, applying ``[network]``, makes the server see other requests than
    the clients sent or the clients lose answers (loss, duplication, outages)."""
    return bool(sc.network.outages) or any(
        link.loss > 0.0 or link.duplication > 0.0
        for link in (sc.network.uplink, sc.network.downlink))


def use_chaos(opts: RunOptions) -> bool:
    """The proxy is in front: forced by ``--chaos``/``--no-chaos``, else iff the network is
    not zero (and the Reasoner is the embedded one); always in front of an embedded fleet of
    several replicas (it is their balancer; ``--no-chaos`` is refused then)."""
    if opts.chaos is not None:
        return opts.chaos
    fleet = embedded_fleet(opts.scenario, opts.target)
    if fleet is not None and fleet.replicas > 1:
        return True
    return opts.target is None and not network_is_zero(opts.scenario)


def run_tls(opts: RunOptions, run_dir: Path) -> tuple[ServerTls, ClientTls]:
    """What the embedded servers serve and how the run's clients verify them: with
    ``--tls`` a throwaway CA in ``<run>/tls/`` signs a server certificate (for 127.0.0.1)
    and a client certificate, and every server requires a client certificate; otherwise
    plain HTTP servers and the clients' own settings (``--ca`` ... for a --target)."""
    if not opts.serve_tls:
        return ServerTls(), opts.tls
    # lazy: +69 ms (cryptography) off importing orchestrate
    from rtalab.loadtests.common.certs import make_pki

    pki = make_pki(run_dir / "tls")
    return (ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.ca)),
            ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key)))


def start_stack(opts: RunOptions, run_dir: Path, scenario_path: Path) -> tuple[Stack, str, str]:
    """Start witness, Reasoner (and chaos proxy); return the stack, the target and witness URL."""
    st = Stack()
    st.server_tls, st.client_tls = run_tls(opts, run_dir)
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    # the witness starts while the Reasoner does (both from this thread: see procs); the
    # tool's latency is the witness's: the side effect happens when it ends (slow success)
    tool = json.dumps(opts.scenario.reasoner.tool_latency_s.to_toml())
    st.witness = start_witness(run_dir / "witness.sqlite", extra_args=["--latency-s", tool],
                               log_path=logs / "witness.log", wait=False,
                               server_tls=st.server_tls, client_tls=st.client_tls)
    st.procs.append(st.witness)
    dedup = opts.dedup or f"sqlite:///{run_dir / 'dedup.sqlite'}"
    fleet = embedded_fleet(opts.scenario, opts.target)
    if fleet is not None:  # one shared store, or each replica its own memory
        dedup = replica_dedup(fleet, dedup)
    extra = ["--log-level", "warning"]
    for tok, principal in TOKENS.items():
        extra += ["--token", f"{tok}={principal}"]
    if opts.dedup_mode:
        extra += ["--dedup-mode", opts.dedup_mode]
    if opts.test.force_error_codes or opts.scenario.reasoner.capacity_drops:
        extra.append("--test-hooks")  # forced errors; /test/capacity for the drops
    for bug in opts.test.unsafe_bugs:
        extra += ["--unsafe-bug", bug]
    # the gRPC binding on a port fixed for the run (a crash restart serves it again there)
    st.reasoner_args = dict(workers=opts.workers or 1, dedup=dedup, scenario=scenario_path,
                            witness=st.witness.url,
                            extra_args=[*extra, "--grpc-port", str(free_port())],
                            log_path=logs / "reasoner.log", server_tls=st.server_tls,
                            client_tls=st.client_tls)
    if fleet is not None:  # each replica: its own log and gRPC port
        st.replica_args = [dict(st.reasoner_args, log_path=logs / f"reasoner-r{i}.log",
                                extra_args=[*extra, "--grpc-port", str(free_port()),
                                            "--instance", f"r{i}"])
                           for i in range(fleet.replicas)]
    try:
        for args in st.replica_args:
            st.replicas.append(_start_first(args))
        st.reasoner = st.replicas[0] if st.replicas else _start_first(st.reasoner_args)
        wait_ready(st.witness, "/healthz", tls=st.client_tls)
    except BaseException:
        st.stop()
        raise
    target = st.reasoner.url
    if use_chaos(opts):  # `rtalab chaos --listen ADDR --upstream URL --scenario FILE`
        target = start_proxy(st, target, run_dir, scenario_path, grpc_on(opts),
                             upstreams=[r.url for r in st.replicas])
    return st, target, st.witness.url


def _start_first(args: dict[str, Any], attempts: int = 3) -> ManagedProcess:
    """A Reasoner's first start; its gRPC port lost to another process between being picked
    and being bound, it starts again on a fresh one, kept in ``args`` for its restarts."""
    for attempt in range(attempts):
        try:
            return start_reasoner(**args)
        except ProcessError as e:
            extra = list(args["extra_args"])
            at = extra.index("--grpc-port") + 1
            if attempt == attempts - 1 or not port_clash(e) or \
                    f"--grpc-port {extra[at]}: cannot listen" not in str(e):
                raise
            extra[at] = str(free_port())
            args["extra_args"] = extra
    raise AssertionError("unreachable")


def grpc_on(opts: RunOptions) -> bool:
    """True when the run's bindings include gRPC."""
    return "grpc" in opts.binding.split(",")


def start_proxy(st: Stack, upstream: str, run_dir: Path, scenario_path: Path,
                grpc: bool = False, upstreams: list[str] | None = None) -> str:
    """The chaos proxy (``rtalab chaos --upstream URL --scenario FILE``) in front of
    ``upstream`` (the embedded Reasoner or a --target); its URL.  With ``grpc`` it proxies
    the gRPC interface ``upstream``'s agent card advertises too (``--grpc-listen`` /
    ``--grpc-upstream``; its address in ``st.grpc_proxy``).  Several ``upstreams`` (a
    fleet's replicas): the proxy balances them by the scenario's ``[fleet]``, gRPC too."""
    (run_dir / "logs").mkdir(exist_ok=True)
    extra = ["--start-file", str(run_dir / "ledger" / "clock.json")]
    if grpc:  # a fleet: each replica's gRPC address, in the order of the HTTP upstreams
        st.grpc_proxy = f"127.0.0.1:{free_port()}"
        extra += ["--grpc-listen", st.grpc_proxy]
        for up in (upstreams if upstreams and len(upstreams) > 1 else [upstream]):
            at, secure = grpc_target(f"{up.rstrip('/')}/.well-known/agent-card.json",
                                     st.client_tls)
            extra += ["--grpc-upstream", f"{'grpcs' if secure else 'grpc'}://{at}"]
    proxy = start_chaos(upstreams if upstreams and len(upstreams) > 1 else upstream,
                        ledger=run_dir / "ledger" / "chaos.jsonl",
                        scenario=scenario_path, log_path=run_dir / "logs" / "chaos.log",
                        extra_args=extra, server_tls=st.server_tls, client_tls=st.client_tls)
    st.procs.append(proxy)
    return proxy.url


def restart_replica(st: Stack, r: int) -> None:
    """Start replica ``r`` of a fleet again on its port (a per-replica store: empty)."""
    st.replicas[r] = start_reasoner(port=st.replicas[r].port, **st.replica_args[r])
    if r == 0:
        st.reasoner = st.replicas[0]


def crash_restart(st: Stack) -> None:
    """SIGKILL the Reasoner's process group and start it again on the same port and store."""
    assert st.reasoner is not None
    port = st.reasoner.port
    st.reasoner.kill(signal.SIGKILL)
    st.reasoner = start_reasoner(port=port, **st.reasoner_args)


RESTART_CMD_TIMEOUT_S = 120.0  # a restart command (e.g. a container restart) must end by then
READY_TIMEOUT_S = 60.0  # and the target must answer its agent card again by then


def restart(opts: RunOptions, st: Stack | None, target: str, run_dir: Path, at_s: float,
            t0: float) -> dict[str, Any]:
    """One scheduled restart (embedded: SIGKILL + restart; --target: ``--restart-cmd``, then
    wait for the agent card); the row it adds to ``ledger/restarts.jsonl``."""
    start = time.time()
    # "t": when the server went away (the checker classifies requests open across it)
    row: dict[str, Any] = {"t": start, "at_s": at_s, "start_s": start - t0, "start_unix": start}
    if opts.target is None:
        assert st is not None
        crash_restart(st)
        row.update(how="crash", command=None, exit_code=None, ready=True)
    else:
        assert opts.restart_cmd is not None
        with open(run_dir / "logs" / "restart.log", "ab") as log:
            log.write(f"--- {at_s:g} s: {opts.restart_cmd}\n".encode())
            log.flush()
            try:
                code: int | None = subprocess.run(
                    opts.restart_cmd, shell=True, stdout=log, stderr=subprocess.STDOUT,
                    timeout=RESTART_CMD_TIMEOUT_S, check=False).returncode
            except subprocess.TimeoutExpired:
                code = None
        deadline = time.time() + READY_TIMEOUT_S
        ready = False
        while not ready and time.time() < deadline:
            ready = url_ready(f"{target}/.well-known/agent-card.json", timeout_s=1.0,
                              tls=opts.tls)
        row.update(how="command", command=opts.restart_cmd, exit_code=code, ready=ready)
    end = time.time()
    row.update(end_s=end - t0, end_unix=end, took_s=end - start)
    with open(run_dir / "ledger" / "restarts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
    return row


def _locust_cmd(opts: RunOptions, target: str, locust_dir: Path, role: str,
                master_port: int) -> list[str]:
    cmd = [sys.executable, "-m", LOCUST_MAIN, "-f", str(LOCUSTFILE), "--host", target,
           "--loglevel", "WARNING"]
    if role == "worker":
        return [*cmd, "--worker", "--master-host", LOCALHOST, "--master-port", str(master_port)]
    n = opts.processes
    cmd += ["--headless", "-u", str(n), "-r", str(n), "--csv", str(locust_dir / "locust"),
            "--json-file", str(locust_dir / "locust"), "--html", str(locust_dir / "locust.html"),
            "--only-summary"]
    if role == "master":
        host, port = opts.master_bind or (LOCALHOST, master_port)
        cmd += ["--master", "--master-bind-host", host, "--master-bind-port", str(port),
                "--expect-workers", str(n)]
        if opts.master_bind:  # remote workers: give up if they do not all come
            cmd += ["--expect-workers-max-wait", str(REMOTE_WORKERS_WAIT_S)]
    return cmd


REMOTE_WORKERS_WAIT_S = 300  # a master waits this long for its remote workers


def read_clock(path: Path) -> float | None:
    """The load's start (``ledger/clock.json`` ``t0``), None until Locust has written it."""
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["t0"])
    except (OSError, ValueError, KeyError):  # not there yet, or caught half-written
        return None


def run_locust(opts: RunOptions, settings: LoadSettings, target: str, run_dir: Path,
               st: Stack | None, t_limit_s: float, restart_url: str | None = None,
               tls: ClientTls | None = None) -> int:
    """Run Locust (local, or master + workers) to its end; restart the Reasoner on schedule
    (``restart_url``: where a --target answers again after its restart command)."""
    locust_dir = run_dir / "locust"
    locust_dir.mkdir(exist_ok=True)
    settings_path = run_dir / "ledger" / "settings.json"
    settings.write(settings_path)
    env = dict(os.environ, **{ENV: str(settings_path)}, **(tls or ClientTls()).to_env())
    env.pop("PYTEST_CURRENT_TEST", None)
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    files = []
    try:
        master_port = free_port()
        role = "master" if opts.processes > 1 or opts.master_bind else "local"
        log = open(logs / "locust-master.log", "wb")  # noqa: SIM115 - closed in finally
        files.append(log)
        main = subprocess.Popen(_locust_cmd(opts, target, locust_dir, role, master_port),
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_pdeathsig_preexec())
        children.append(main)
        local_workers = opts.processes if role == "master" and not opts.master_bind else 0
        for i in range(local_workers):
            wlog = open(logs / f"locust-worker{i}.log", "wb")  # noqa: SIM115 - closed below
            files.append(wlog)
            children.append(subprocess.Popen(
                _locust_cmd(opts, target, locust_dir, "worker", master_port), env=env,
                stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_pdeathsig_preexec()))
        clock = run_dir / "ledger" / "clock.json"
        restarts = sorted(opts.crash_at)
        drops = capacity_schedule(opts.scenario) if st is not None and st.reasoner else []
        failures = FailureSchedule(embedded_fleet(opts.scenario, opts.target)
                                   if st is not None and st.replicas else None)
        t_start, t0 = time.time(), None
        while main.poll() is None:
            if time.time() - t_start > t_limit_s:
                raise RunError(f"Locust did not finish within {t_limit_s:.0f} s "
                               f"(see {logs / 'locust-master.log'})")
            t0 = read_clock(clock) if restarts or drops or failures else t0
            if t0 is not None and failures:
                assert st is not None
                failures.step(time.time() - t0, t0, lambda r: kill_replica(st.replicas[r]),
                              lambda r: restart_replica(st, r),
                              lambda row: write_restart_row(run_dir, row),
                              lambda text: _say(opts, text))
            if t0 is not None and drops and time.time() - t0 >= drops[0][0]:
                at_s, workers = drops.pop(0)
                assert st is not None
                set_capacity(st, run_dir, at_s, workers, t0)
                _say(opts, f"rtalab load: Reasoner workers set to {workers} at "
                           f"{time.time() - t0:.1f} s (capacity drop, test hook)")
            if t0 is not None and restarts and time.time() - t0 >= restarts[0]:
                row = restart(opts, st, restart_url or target, run_dir, restarts.pop(0), t0)
                _say(opts, f"rtalab load: restarted the Reasoner ({row['how']}) at "
                           f"{row['start_s']:.1f} s, answering again after "
                           f"{row['took_s']:.1f} s")
            time.sleep(0.05)  # polling the child with a bounded deadline
        failures.finish(t0 or read_clock(clock), lambda row: write_restart_row(run_dir, row))
        main_exit_s = time.time()
        reap_by = time.time() + 2.0  # the master told them to quit; their ledger is gathered
        for c in children[1:]:
            try:
                c.wait(timeout=max(0.01, reap_by - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(c.pid, signal.SIGTERM)
        _say(opts, f"rtalab load: Locust finished ({time.time() - main_exit_s:.1f} s to reap "
                   "workers)")
        return int(main.returncode)
    finally:
        stop_groups(children)
        for f in files:
            f.close()


def stop_groups(children: list[subprocess.Popen[bytes]], timeout_s: float = 3.0) -> None:
    """SIGTERM the process group of every child still running, then SIGKILL what is left
    after ``timeout_s`` (all groups at once, so N children take ``timeout_s``, not N times)."""
    live = [c for c in children if c.poll() is None]
    for c in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(c.pid, signal.SIGTERM)
    deadline = time.time() + timeout_s
    for c in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.wait(timeout=max(0.01, deadline - time.time()))
    for c in children:  # the group may outlive its leader (workers, grandchildren)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(c.pid, signal.SIGKILL)
        if c.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.wait(timeout=1.0)


def run_worker(master_host: str, master_port: int, results: Path, quiet: bool = False,
                timeout_s: float | None = None) -> tuple[Path, int]:
    """``rtalab load worker``: a Locust worker of a remote master, in its own process group,
    with its own run folder (``results/<UTC>-load-worker-<host>-s0``: the settings and
    scenario it received, its log); its exit code."""
    run_dir = RunLifecycle.new(results, kind="load-worker", scenario_name=socket.gethostname(),
                            seed=0).path
    (run_dir / "logs").mkdir()
    env = dict(os.environ, **{WORKER_DIR_ENV: str(run_dir)})
    env.pop(ENV, None)
    env.pop("PYTEST_CURRENT_TEST", None)
    cmd = [sys.executable, "-m", LOCUST_MAIN, "-f", str(LOCUSTFILE), "--worker", "--master-host",
           master_host, "--master-port", str(master_port), "--loglevel", "WARNING"]
    if not quiet:
        print(f"rtalab load worker: joining {master_host}:{master_port} (log "
              f"{run_dir / 'logs' / 'locust-worker.log'})", file=sys.stderr, flush=True)
    with open(run_dir / "logs" / "locust-worker.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_pdeathsig_preexec())
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = EXIT_RULE_FAILED
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    return run_dir, rc


def reachable(opts: Any) -> str | None:
    """Why the --target or the --witness of a run cannot be used (one line), or None: each
    is asked once, and its answer is read as sent (a status, a certificate problem, a
    refused connection)."""
    if opts.target:
        problem = url_problem(f"{opts.target}/.well-known/agent-card.json", opts.tls)
        if problem:
            return f"target {opts.target}: agent card: {problem}"
    if opts.target and "grpc" in str(getattr(opts, "binding", "")).split(","):
        problem = grpc_reachable(opts.target, opts.tls)
        if problem:
            return f"target {opts.target}: gRPC interface: {problem}"
    if opts.witness_url:
        problem = url_problem(f"{opts.witness_url}/ledger?since=0&limit=1", opts.tls,
                              json_keys=("rows", "nextSince", "more"))
        if problem:
            return f"--witness {opts.witness_url}: not a witness ledger: {problem}"
    return None


def grpc_reachable(target: str, tls: ClientTls) -> str | None:
    """Why the gRPC interface a --target's agent card advertises cannot be used (one line:
    none advertised, a certificate problem, no answer), or None."""
    try:
        address, secure = grpc_target(f"{target.rstrip('/')}/.well-known/agent-card.json", tls)
    except RunError as e:
        return str(e).removeprefix("--binding grpc: ")
    return grpc_problem(address, secure, tls)


def grpc_target(card_url: str, tls: ClientTls) -> tuple[str, bool]:
    """(address, TLS) of the gRPC interface the agent card at ``card_url`` advertises
    (``supportedInterfaces[].protocolBinding == "GRPC"``); TLS when the card came over https
    or the address says ``grpcs://``.  RunError (one line) if there is none."""
    # lazy: +632 ms (pandas, pyarrow, gevent) off importing orchestrate
    from rtalab.loadtests.live.grpc_channel import grpc_address

    try:
        card = fetch_json(card_url, tls=tls)
    except Exception as e:
        raise RunError(f"--binding grpc: cannot read the agent card {card_url}: {e}") from None
    for iface in (card.get("supportedInterfaces") or []) if isinstance(card, dict) else []:
        if isinstance(iface, dict) and iface.get("protocolBinding") == "GRPC" and iface.get(
                "url"):
            address, secure = grpc_address(str(iface["url"]))
            return address, secure or card_url.startswith("https://")
    raise RunError(f"--binding grpc: the agent card {card_url} advertises no GRPC interface "
                   "(supportedInterfaces[].protocolBinding)")


def fetch_json(url: str, timeout_s: float = 10.0, tls: ClientTls | None = None) -> Any:
    """GET a JSON document (an ``https`` URL verified with ``tls``)."""
    with urllib.request.urlopen(url, timeout=timeout_s,
                                context=(tls or ClientTls()).context_for(url)) as r:
        return json.loads(r.read())


def witness_position(witness_url: str, tls: ClientTls | None = None) -> int:
    """The id of the witness's last execution now (0 when empty): a reused witness's rows
    up to it belong to earlier runs."""
    since = 0
    while True:
        page = fetch_json(f"{witness_url}/ledger?since={since}&limit=10000", tls=tls)
        since = page["nextSince"]
        if not page["more"]:
            return int(since)


def save_witness(witness_url: str, path: Path, since: int = 0,
                 tls: ClientTls | None = None) -> int:
    """Page through the witness's ``/ledger`` after ``since`` into ``path`` (JSON lines);
    rows written."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        while True:
            page = fetch_json(f"{witness_url}/ledger?since={since}&limit=10000", tls=tls)
            for row in page["rows"]:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                n += 1
            since = page["nextSince"]
            if not page["more"]:
                return n


def parse_prometheus(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of a Prometheus scrape as a flat dict."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def save_metrics(st: Stack | None, server_url: str, path: Path,
                 tls: ClientTls | None = None) -> dict[str, float] | None:
    """``save_server_metrics`` of the run's server; a fleet: each replica's scrape in
    ``server_metrics_r<i>.json`` and their sum in ``path``."""
    if st is None or not st.replicas:
        return save_server_metrics(server_url, path, tls)
    parts = [save_server_metrics(r.url, path.with_name(f"{path.stem}_r{i}.json"), tls)
             for i, r in enumerate(st.replicas)]
    total = sum_metrics(parts)
    if total is not None:
        write_json(path, total)
    return total


def save_server_metrics(target: str, path: Path,
                        tls: ClientTls | None = None) -> dict[str, float] | None:
    """Scrape ``/metrics`` into ``path``; None if unreachable."""
    url = f"{target}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=10,
                                    context=(tls or ClientTls()).context_for(url)) as r:
            metrics = parse_prometheus(r.read().decode("utf-8", "replace"))
    except OSError:
        return None
    write_json(path, metrics)
    return metrics


TURN_REQUESTS_METRIC = "rta_reasoner_turn_requests_total"


def server_turns_answered(metrics: dict[str, float]) -> float:
    """Requests the Reasoner answered: ``rta_reasoner_turn_requests_total`` (every send that
    reached its pipeline gets one answer: an execution, a replay or join of a duplicate, a
    rejection or a core A2A error), else ``rta_reasoner_turns_total`` over all labels (which
    leaves out replays and joins: duplicates sent without the proxy would not add up)."""
    if TURN_REQUESTS_METRIC in metrics:
        return metrics[TURN_REQUESTS_METRIC]
    return sum(v for k, v in metrics.items() if k.startswith("rta_reasoner_turns_total{"))


def count_check(run_dir: Path, metrics: dict[str, float] | None, witness_rows: int | None,
                comparable: bool, side_effects_comparable: bool = True,
                metrics_before: dict[str, float] | None = None) -> dict[str, Any]:
    """Ledger counts next to the server's /metrics and the witness (``ledger/counts.json``).

    ``comparable`` is False when chaos or crashes make the server see other requests
    than the clients sent (duplicates upstream, counters reset by a restart);
    ``side_effects_comparable`` is False with barge-in (a cancelled turn's tool call
    may or may not have run).  The raw ``*_matches`` flags are informative only: the
    verdict's integrity rules (:mod:`rtalab.loadtests.check.integrity`) judge these counts
    with the requests that never completed taken into account.
    """
    # lazy: +475 ms (pandas, pyarrow) off importing orchestrate
    from rtalab.loadtests.loadrun.tables import read_jsonl

    led = run_dir / "ledger"
    attempts = read_jsonl(led / "attempts.jsonl")
    ended = [a for a in attempts if a.get("outcome") in ANSWERED]
    se_guids = {a["request_guid"] for a in attempts
                if a.get("side_effect") and a.get("outcome") == "completed"}
    # a side effect may also have run for a request the caller saw fail: the tool outlived
    # upstream_timeout_s (slow success, a ghost-success hazard the simulator has too), or
    # the caller stopped listening first
    maybe = {a["request_guid"] for a in attempts
             if a.get("side_effect") and a["request_guid"] not in se_guids
             and (a.get("error_code") == "upstream-timeout"
                  or a.get("outcome") in TIMEOUT_OUTCOMES)}
    out: dict[str, Any] = {"comparable": comparable, "attempts": len(attempts),
                           "attempts_answered": len(ended),
                           "completed_side_effect_request_guids": len(se_guids),
                           "maybe_executed_side_effect_request_guids": len(maybe)}
    if metrics is not None and any(k.startswith("rta_reasoner_turns_total{") for k in metrics):
        # only a server that exports the reference Reasoner's counter can be compared
        out["server_turns_answered"] = server_turns_answered(metrics) - (
            server_turns_answered(metrics_before) if metrics_before else 0.0)
        out["server_matches"] = (out["server_turns_answered"] == len(ended)) if comparable \
            else None
    if witness_rows is not None:
        out["witness_rows"] = witness_rows
        out["witness_matches"] = (len(se_guids) <= witness_rows <= len(se_guids) + len(maybe)
                                  ) if (comparable and side_effects_comparable) else None
    return out


def run_load(opts: RunOptions) -> tuple[Path, int]:
    """Carry out a load run; return its folder and exit code (0 ok, 1 a rule failed)."""
    with signals_interrupt():
        return _run_load(opts)


def _run_load(opts: RunOptions) -> tuple[Path, int]:
    t_begin = time.time()
    problem = fleet_problem(opts.scenario, target=opts.target, chaos=opts.chaos,
                            crash_at=opts.crash_at, dedup=opts.dedup, workers=opts.workers)
    if problem:
        raise RunError(problem)
    run = LoadRun(opts)
    folder = run.open_folder()
    with folder.guard():  # interrupted or failed in meta.json, once everything stopped
        run.carry_out()
    verdict = judge(folder.path, folder.meta, status="complete")
    run.marks["checked"] = time.time()
    write_report(folder.path)
    run.marks["reported"] = time.time()
    verdict.overhead = overhead(folder.path, t_begin, run.marks)
    verdict.write(folder.path)
    return folder.path, 0 if verdict.ok else EXIT_RULE_FAILED


class LoadRun:
    """One load run's steps, from the servers to the tables: :meth:`open_folder`, then
    :meth:`carry_out` (start, Locust, gather, tables), which stops everything it started if
    any step fails or is interrupted."""

    def __init__(self, opts: RunOptions) -> None:
        self.opts = opts
        sc = self.sc = opts.scenario
        self.duration = opts.duration_s if opts.duration_s is not None else sc.run.duration_s
        self.drain = opts.drain_s if opts.drain_s is not None else sc.run.drain_s
        self.warmup = min(sc.run.warmup_s, self.duration / 2)
        self.chaos = use_chaos(opts)
        self.st: Stack | None = None
        self.marks: dict[str, float] = {}
        self.witness_url, self.witness_since = opts.witness_url, 0
        self.tls = opts.tls
        self.stopping: threading.Thread | None = None
        self.meta: dict[str, Any] = {}
        self.run_dir = Path()

    @property
    def led(self) -> Path:
        """The run's ledger folder."""
        return self.run_dir / "ledger"

    def open_folder(self) -> RunLifecycle:
        """A new ``load`` run folder: ``meta.json`` (running), the scenario, ``ledger/`` with
        ``gates.json``."""
        opts, sc = self.opts, self.sc
        folder = RunLifecycle.new(opts.results, kind="load", scenario_name=sc.name,
                               seed=sc.run.seed)
        self.run_dir = folder.path
        fleet = embedded_fleet(sc, opts.target)
        self.meta = collect_meta(
            kind="load", scenario=sc, seed=sc.run.seed, replications=1, argv=opts.argv or None,
            extra={"target": opts.target, "binding": opts.binding,
                   "processes": opts.processes, "chaos": self.chaos,
                   "network": "chaos-proxy" if self.chaos else "real-loopback",
                   "crash_at": list(opts.crash_at), "duration_s": self.duration,
                   "restart_cmd": opts.restart_cmd,
                   "unsafe_bugs": list(opts.test.unsafe_bugs),
                   "slo": list(opts.slo),
                   "tls": ("mutual TLS, throwaway CA in tls/" if opts.serve_tls
                           else opts.tls.describe()),
                   "tls_insecure": opts.tls.insecure,
                   "fleet": None if fleet is None else {
                       "replicas": fleet.replicas, "balancer": fleet.balancer,
                       "state": fleet.state, "health_check_s": fleet.health_check_s,
                       "failures": len(fleet.failures)}})
        folder.start(sc, self.meta)
        self.led.mkdir()
        write_json(self.led / "gates.json", {"slo": list(opts.slo),
                                             "availability_min": sc.load.availability_min})
        return folder

    def carry_out(self) -> None:
        """Servers, Locust, the gathered ledgers and the tables; on an error or an interrupt,
        everything started is stopped (and an interrupted run's witness rows kept)."""
        try:
            target, token, tokens = self.start()
            settings = self.settings(target, token, tokens)
            self.announce(target)
            self.load_and_gather(settings, target)
            self.marks["gathered"] = time.time()
            write_results(self.run_dir, self.sc, self.duration, self.warmup, self.opts.plots,
                          self.opts.uncertainty)
            self.marks["tables"] = time.time()
        except BaseException as e:
            self.abort(e)
            raise
        if self.stopping is not None:
            self.stopping.join()

    def start(self) -> tuple[str, str | None, tuple[str, ...]]:
        """The embedded witness and Reasoner (and proxy), or the proxy in front of a
        --target; (target URL, token, tokens)."""
        opts, scenario_path = self.opts, self.run_dir / "scenario.toml"
        if opts.target is None:
            _say(opts, "rtalab load: starting witness and Reasoner ...")
            self.st, target, self.witness_url = start_stack(opts, self.run_dir, scenario_path)
            self.tls = self.st.client_tls
            return target, TOKEN, tuple(TOKENS)
        target = opts.target.rstrip("/")
        if use_chaos(opts):  # the proxy serves plain HTTP; it verifies the --target
            self.st = Stack(client_tls=self.tls)
            target = start_proxy(self.st, target, self.run_dir, scenario_path, grpc_on(opts))
        return target, opts.token, opts.tokens

    def settings(self, target: str, token: str | None, tokens: tuple[str, ...]) -> LoadSettings:
        """What every Locust process reads: the run, its gRPC address, the Live options."""
        opts, st = self.opts, self.st
        if self.witness_url:
            self.witness_since = witness_position(self.witness_url, self.tls)
        # gRPC goes to the address the server's card advertises, or (--chaos) to the chaos
        # proxy's gRPC side in front of it (docs/chaos.md: what an L7 fault means there)
        card_base = st.reasoner.url if st is not None and st.reasoner else (
            opts.target or target).rstrip("/")
        grpc_at, grpc_tls = grpc_target(f"{card_base}/.well-known/agent-card.json", self.tls) \
            if grpc_on(opts) else ("", False)
        if grpc_at:
            self.meta["grpc_target"] = f"{'grpcs' if grpc_tls else 'grpc'}://{grpc_at}"
        if grpc_at and st is not None and st.grpc_proxy:  # the users dial the proxy
            self.meta["grpc_proxy"] = st.grpc_proxy
            grpc_at, grpc_tls = st.grpc_proxy, st.server_tls.enabled
        return LoadSettings(
            run_dir=str(self.run_dir), run_id=uuid.uuid4().hex[:8],
            scenario_path=str(self.run_dir / "scenario.toml"), binding=opts.binding,
            duration_s=self.duration, drain_s=self.drain, processes=opts.processes,
            seed=self.sc.run.seed, token=token, tokens=tokens, grpc_target=grpc_at,
            grpc_secure=grpc_tls, live=opts.live)

    def announce(self, target: str) -> None:
        """The run's one progress line: bindings, processes, length, target, network."""
        opts = self.opts
        _say(opts, f"rtalab load: {opts.binding} Live users, {opts.processes} process(es), "
                   f"{self.duration:g} s + drain ≤ {self.drain:g} s against {target}; network: "
                   + ("[network] by the chaos proxy" if self.chaos else "real loopback"
                      + ("" if network_is_zero(self.sc) else " ([network] NOT applied)")))

    @property
    def server_url(self) -> str:
        """The Reasoner whose /metrics count (behind a proxy: the --target's own)."""
        st, opts = self.st, self.opts
        if st is not None and st.reasoner:
            return st.reasoner.url
        assert opts.target is not None
        return opts.target

    def load_and_gather(self, settings: LoadSettings, target: str) -> None:
        """Locust to its end, then the witness rows, the server's metrics and
        ``ledger/counts.json``; the servers start stopping meanwhile."""
        opts, sc, st, led = self.opts, self.sc, self.st, self.led
        # a server reused across runs counts from its start: this run's share is the difference
        before = save_server_metrics(self.server_url, led / "server_metrics_before.json",
                                     self.tls) if opts.target else None
        rc = run_locust(opts, settings, target, self.run_dir, st,
                        self.duration + self.drain + 180.0, restart_url=opts.target,
                        tls=self.tls)
        self.marks["locust_end"] = time.time()
        self.meta["timeline"] = timeline(led)
        if not (led / "clock.json").exists():
            tail = (self.run_dir / "logs" / "locust-master.log").read_text(
                encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise RunError(f"Locust did not start (exit {rc}; {self.run_dir / 'logs'}): "
                           f"{tail[0]}")
        metrics = save_metrics(st, self.server_url, led / "server_metrics.json", self.tls)
        witness_rows = None
        if self.witness_url:
            witness_rows = save_witness(self.witness_url, led / "witness.jsonl",
                                        self.witness_since, self.tls)
        gather = json.loads((led / "gather.json").read_text(encoding="utf-8")) if (
            led / "gather.json").exists() else {"complete": False}
        counts = count_check(self.run_dir, metrics, witness_rows,
                             comparable=not (self.chaos and network_changes_counts(sc))
                             and not opts.crash_at and not (st and st.replicas
                                                            and sc.fleet.failures),
                             side_effects_comparable=sc.load.barge_in_share == 0,
                             metrics_before=before)
        counts["witness_since"] = self.witness_since
        counts["ledger_complete"] = bool(gather.get("complete"))
        counts["locust_exit_code"] = rc
        write_json(led / "counts.json", counts)
        if st is not None:  # the servers stop while the tables and the verdict are made
            self.stopping = threading.Thread(target=st.stop, name="rtalab-stop-servers")
            self.stopping.start()

    def abort(self, e: BaseException) -> None:
        """After a failed or interrupted step: an interrupted run's witness rows so far, then
        every process stopped (the folder's guard then marks ``meta.json``)."""
        if self.stopping is not None:
            self.stopping.join()
        interrupted = isinstance(e, KeyboardInterrupt)
        if interrupted and self.witness_url and (self.led / "clock.json").exists():
            _save_partial_witness(self.run_dir, self.witness_url, self.witness_since, self.tls)
        if self.st is not None:
            self.st.stop()
        if interrupted:
            _say(self.opts, f"rtalab load: interrupted ({e or 'SIGINT'}); every process "
                            "stopped; judge the partial ledger with: rtalab load summarize "
                            f"{self.run_dir}")


def _save_partial_witness(run_dir: Path, witness_url: str, since: int,
                          tls: ClientTls | None = None) -> None:
    """Best effort on an interrupt: this run's witness rows so far (and their count), so that
    ``rtalab load summarize`` can judge the partial ledger's side effects."""
    led = run_dir / "ledger"
    with contextlib.suppress(OSError, ValueError, KeyError):
        rows = save_witness(witness_url, led / "witness.jsonl", since, tls)
        write_json(led / "counts.json", {"witness_rows": rows, "witness_since": since,
                                         "comparable": False, "interrupted": True})


def overhead(run_dir: Path, t_begin: float, marks: dict[str, float]) -> dict[str, Any]:
    """Wall-clock time of the run beyond its load (duration + the drain it took): start
    (servers, Locust), gather (Locust's end, ledgers, witness, metrics), tables, check,
    report."""
    led = run_dir / "ledger"
    t0 = json.loads((led / "clock.json").read_text(encoding="utf-8"))["t0"]
    gather = json.loads((led / "gather.json").read_text(encoding="utf-8")) if (
        led / "gather.json").exists() else {}
    stopped = float(gather.get("stopped_s") or marks["locust_end"])
    load_s = stopped - t0
    parts = {"start": t0 - t_begin, "gather": marks["gathered"] - stopped,
             "tables": marks["tables"] - marks["gathered"],
             "check": marks["checked"] - marks["tables"],
             "report": marks["reported"] - marks["checked"]}
    total = marks["reported"] - t_begin
    return {"total_s": round(total, 3), "load_s": round(load_s, 3),
            "overhead_s": round(total - load_s, 3),
            "parts": {k: round(v, 3) for k, v in parts.items()}}


def timeline(led: Path) -> list[dict[str, Any]]:
    """The run's timeline for ``meta.json``: load start, restarts, stop (seconds since t0)."""
    # lazy: +560 ms (pandas, pyarrow) off importing orchestrate
    from rtalab.loadtests.loadrun.tables import read_jsonl

    out: list[dict[str, Any]] = []
    if (led / "clock.json").exists():
        out.append({"t_s": 0.0, "event": "load-start"})
    if (led / "restarts.jsonl").exists():
        out += [{"t_s": r["start_s"], "event": f"restart ({r['how']})", "took_s": r["took_s"],
                 "ready": r["ready"]} for r in read_jsonl(led / "restarts.jsonl")]
    return out


def load_trigger(sc: Scenario, run_dir: Path | None = None) -> tuple[float, float] | None:
    """The trigger a load run applied (seconds since the load's start): the scenario's
    network outages, which the chaos proxy enacts on the same clock (``--start-file``), and
    the capacity drops this run enacted on the embedded Reasoner (``ledger/capacity.jsonl``,
    :func:`capacity_schedule`).  Rate schedules are the simulator's; a load run does not
    enact them.  None: no trigger (``recovery_s`` is then not reported)."""
    # lazy: +543 ms (pandas, pyarrow) off importing orchestrate
    from rtalab.loadtests.loadrun.tables import read_jsonl

    spans = [(o.start_s, o.start_s + o.duration_s) for o in sc.network.outages]
    rows = read_jsonl(run_dir / "ledger" / CAPACITY_LEDGER) if run_dir is not None and (
        run_dir / "ledger" / CAPACITY_LEDGER).exists() else []
    start = None
    for r in rows:
        if r["workers"] < sc.reasoner.workers and start is None:
            start = float(r["start_s"])
        elif r["workers"] >= sc.reasoner.workers and start is not None:
            spans.append((start, float(r["start_s"])))
            start = None
    if start is not None:
        spans.append((start, start))
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)


CAPACITY_LEDGER = "capacity.jsonl"


def capacity_schedule(sc: Scenario) -> list[tuple[float, int]]:
    """(seconds since the load's start, workers) where the scenario's capacity drops change
    the embedded Reasoner's workers (overlapping drops: the fewest workers win)."""
    drops = sc.reasoner.capacity_drops
    cuts = sorted({d.start_s for d in drops} | {d.start_s + d.duration_s for d in drops})
    out, cur = [], sc.reasoner.workers
    for t in cuts:
        active = [d.workers for d in drops if d.start_s <= t < d.start_s + d.duration_s]
        w = min([sc.reasoner.workers, *active])
        if w != cur:
            out.append((t, w))
            cur = w
    return out


def set_capacity(st: Stack, run_dir: Path, at_s: float, workers: int, t0: float) -> None:
    """POST the embedded Reasoner's test hook ``/test/capacity`` and log the row."""
    # lazy: +100 ms (httpx, rich) off importing orchestrate
    import httpx

    assert st.reasoner is not None
    start = time.time()
    status = 200
    with httpx.Client(verify=st.client_tls.context(), timeout=10.0) as c:
        for server in st.servers:  # a fleet: every replica that is up (as rtalab.sim.model.fleet)
            if not server.alive():
                continue
            r = c.post(f"{server.url}/test/capacity", json={"workers": workers},
                       headers={"Authorization": f"Bearer {TOKEN}"})
            status = r.status_code if status == 200 else status
    row = {"at_s": at_s, "start_s": start - t0, "workers": workers, "status": status}
    with open(run_dir / "ledger" / CAPACITY_LEDGER, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    if status != 200:
        raise RunError(f"the Reasoner refused the capacity change to {workers} workers "
                       f"(HTTP {status})")


def write_results(run_dir: Path, sc: Scenario, duration_s: float, warmup_s: float,
                  plots: bool = True, uncertainty: bool = True) -> None:
    """Tables, ``summary.json``/``summary.csv`` and plots from the gathered ledgers
    (``uncertainty=False``: no bootstrap CIs, seconds saved per run)."""
    # lazy: +494 ms (pandas, pyarrow) off importing orchestrate
    from rtalab.loadtests.loadrun.tables import build_output, load_summary, split_by_binding

    out = build_output(run_dir, duration_s, sc.run.seed, load_trigger(sc, run_dir),
                       replicas=sc.fleet.replicas, warmup_s=warmup_s)
    write_records(run_dir, [out])
    _write_summary(run_dir, load_summary(out, warmup_s, uncertainty))
    parts = split_by_binding(run_dir, out)
    if parts:  # a run over several bindings: the same summary for each one's calls
        write_json(run_dir / "summary_by_binding.json",
                   {b: load_summary(part, warmup_s, uncertainty) for b, part in parts.items()})
    if plots:
        _plots(run_dir, sc, out)


def judge(run_dir: Path, meta: dict[str, Any] | None = None, status: str | None = None) -> Any:
    """The run's one verdict (:func:`rtalab.loadtests.check.check_run` writes ``verdict.json`` /
    ``verdict.txt``); with ``meta``, ``meta.json`` is made final first (``status``, and
    ``verdict`` / ``verdict_ok`` / ``failed_rules`` copied from the verdict)."""
    # lazy: +0.9 s (pandas, pyarrow) off importing orchestrate
    from rtalab.loadtests.check import check_run

    if meta is not None and status is not None:
        meta["status"] = status  # the checker reads the final status
        write_json(run_dir / "meta.json", meta)
    verdict = check_run(run_dir)
    if meta is not None and status is not None:
        meta.update(verdict_ok=verdict.ok, verdict=verdict.headline,
                    failed_rules=verdict.failed)
        RunLifecycle(run_dir, meta).finish(status)
    return verdict


def write_report(run_dir: Path) -> None:
    """``report.html`` of the run folder: scenario, figures with CIs, verdict, plots."""
    # lazy: +758 ms (pandas, pyarrow) off importing orchestrate
    from rtalab.sim.report.render import render_report

    (run_dir / "report.html").write_text(render_report([run_dir]), encoding="utf-8")


def summarize_run(run_dir: Path) -> tuple[int, Any]:
    """``rtalab load summarize``: tables, summary, verdict and report of a gathered (or
    interrupted) run folder; (exit code: 0 ok, 1 a rule failed or the run was interrupted;
    the verdict)."""
    settings = LoadSettings.read(run_dir / "ledger" / "settings.json")
    sc = load_scenario(run_dir / "scenario.toml") if (run_dir / "scenario.toml").exists() \
        else load_scenario(settings.scenario_path)
    write_results(run_dir, sc, settings.duration_s, min(sc.run.warmup_s,
                                                         settings.duration_s / 2))
    verdict = judge(run_dir)
    write_report(run_dir)
    return (0 if verdict.ok else EXIT_RULE_FAILED), verdict


def _write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` + ``summary.csv`` (rtalab.sim.shared.results' writer)."""
    write_summary(run_dir, summary)


def _plots(run_dir: Path, sc: Scenario, out: Any) -> None:
    """The simulator's run plots, from the load run's tables."""
    try:
        # lazy: +1.62 s (matplotlib, pandas, pyarrow) off importing orchestrate
        from rtalab.sim.shared.plots import plot_run

        meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
        plot_run(run_dir, sc, out.turns, out.timeseries, clock="real",
                 crashes=[float(t) for t in meta.get("crash_at") or []])
    except Exception as e:  # a plot must never lose the run
        print(f"rtalab load: warning: plots not written: {e}", file=sys.stderr)
