"""Start servers (witness, Reasoner, redis-server) as subprocesses on free ports; never leak them.

Every child runs in its own session and process group, with stdout and stderr
in a log file, and is started only when it answers on its port or URL within a
bounded deadline; otherwise :class:`ProcessError` carries the tail of its log.
``stop()`` sends SIGTERM to the whole group (so uvicorn workers go too), then
SIGKILL after a timeout.  Safety nets against orphans: an ``atexit`` hook stops
every process still running, and a child started from the main thread gets
``PR_SET_PDEATHSIG`` = SIGTERM (Linux), so it is told to stop even if this
process is SIGKILLed.  (PDEATHSIG fires when the *thread* that started the
child exits, hence main thread only.)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from rtalab.loadtests.common.tls import (
    ClientTls,
    ServerTls,
    TlsError,
    client_grpc_credentials,
    reason,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCALHOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class ProcessError(RuntimeError):
    """A managed process died or did not become ready; the message ends with its log tail."""


_ISSUED: dict[int, float] = {}  # port -> when free_port handed it out (this process)
_ISSUED_LOCK = threading.Lock()
_REISSUE_AFTER_S = 120.0


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port that was free a moment ago (bind to port 0 and release it), never one this
    process handed out in the last two minutes: a server started later (``wait=False``) has
    not bound its port yet when the next port is picked, and the kernel may offer it again."""
    with _ISSUED_LOCK:
        now = time.monotonic()
        for old in [p for p, t in _ISSUED.items() if now - t > _REISSUE_AFTER_S]:
            del _ISSUED[old]
        for _ in range(64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _ISSUED:
                break
        _ISSUED[port] = now
        return port


def port_open(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def url_ready(url: str, timeout_s: float = 1.0, tls: ClientTls | None = None) -> bool:
    """True if ``url`` answers HTTP with a status below 500 (an ``https`` URL verified with
    ``tls``, default the system's CAs)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s,
                                    context=(tls or ClientTls()).context_for(url)) as r:
            return int(r.status) < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except (OSError, ValueError):
        return False


def url_problem(url: str, tls: ClientTls | None = None, timeout_s: float = 5.0,
                json_keys: Sequence[str] = ()) -> str | None:
    """Why ``url`` cannot be used, in one line, or None when it answers 2xx (and, with
    ``json_keys``, a JSON object having them): the status as sent (``answers HTTP 503
    Service Unavailable``), the certificate problem (:func:`rtalab.loadtests.common.tls.reason`),
    or that it does not answer, with the connection error (refused, timed out, unknown
    host)."""
    tls = tls or ClientTls()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=tls.context_for(url)) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        return f"{url} answers HTTP {e.code} {e.reason}".rstrip()
    except (OSError, ValueError) as e:
        line = reason(e, url, tls)
        if line.startswith("TLS error"):
            return line
        return f"{url} does not answer: {line.removeprefix(f'{url}: ')}"
    if json_keys:
        try:
            data = json.loads(body)
        except ValueError:
            return f"{url} answers 200 but not with JSON"
        missing = [k for k in json_keys if not isinstance(data, dict) or k not in data]
        if missing:
            return f"{url} answers JSON without {', '.join(missing)}"
    return None


GRPC_PING = "/rtalab.Probe/Ping"  # no server has it: any status but UNAVAILABLE is an answer


def grpc_problem(address: str, secure: bool, tls: ClientTls | None = None,
                 timeout_s: float = 5.0) -> str | None:
    """Why the gRPC server at ``address`` cannot be used, in one line, or None when it
    answers: one unary call of a method no server has (an answer, UNIMPLEMENTED or any
    other status, means the connection and its TLS work), on a channel verified as the Live
    users' is (:func:`rtalab.loadtests.common.tls.client_grpc_credentials`).  UNAVAILABLE is
    the certificate problem (:func:`rtalab.loadtests.common.tls.reason`, a handshake of our own
    when gRPC says only "Socket closed") or that it does not answer."""
    # lazy: +52 ms (grpc) off importing procs
    import grpc

    tls = tls or ClientTls()
    where = f"{'grpcs' if secure else 'grpc'}://{address}"
    try:
        channel = (grpc.secure_channel(address, client_grpc_credentials(tls)) if secure
                   else grpc.insecure_channel(address))
    except TlsError as e:
        return f"{where}: {e}"
    try:
        ping: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(GRPC_PING)
        ping(b"", timeout=timeout_s)
    except grpc.RpcError as e:
        if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return None
        line = reason(e, where, tls if secure else None)
        if line.startswith("TLS error"):
            return line
        details = (e.details() or e.code().name).strip().splitlines()[0]
        return f"{where} does not answer: gRPC {e.code().name}: {details}"
    finally:
        channel.close()
    return None


def serves_from(url: str, pgid: int, timeout_s: float = 1.0,
                tls: ClientTls | None = None) -> bool:
    """True if ``url`` answers JSON whose ``pid`` is in process group ``pgid`` (ours), so a
    server that lost the free-port race to another one is never taken for ready; True too
    when the answer names no pid (nothing to tell)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s,
                                    context=(tls or ClientTls()).context_for(url)) as r:
            data = json.loads(r.read())
    except (OSError, ValueError):
        return False
    pid = data.get("pid") if isinstance(data, dict) else None
    if not isinstance(pid, int):
        return True
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False


def redis_ping(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if a Redis server on ``host:port`` answers PING with PONG."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


# ---------------------------------------------------------------------------- registry


_LIVE: dict[int, ManagedProcess] = {}
_LIVE_LOCK = threading.Lock()
_TEMP_DIRS: list[Path] = []


def _stop_all() -> None:
    """atexit: stop every managed process still running (SIGTERM all, then wait, then SIGKILL)."""
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
    for p in procs:
        p.signal_group(signal.SIGTERM)
    for p in procs:
        p.stop(timeout_s=5.0)
    if not os.environ.get("RTALAB_KEEP_LOGS"):
        for d in _TEMP_DIRS:
            shutil.rmtree(d, ignore_errors=True)


atexit.register(_stop_all)


def _log_dir() -> Path:
    """A per-interpreter temporary directory for logs (removed at exit unless RTALAB_KEEP_LOGS)."""
    if not _TEMP_DIRS:
        _TEMP_DIRS.append(Path(tempfile.mkdtemp(prefix="rtalab-procs-")))
    return _TEMP_DIRS[0]


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when this thread dies (main thread only)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
            threading.main_thread()):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


# ---------------------------------------------------------------------------- ManagedProcess


class ManagedProcess:
    """A child process in its own process group, with its log file and readiness address."""

    def __init__(self, popen: subprocess.Popen[bytes], cmd: Sequence[str], log_path: Path,
                 name: str, host: str = LOCALHOST, port: int | None = None,
                 url: str | None = None, cleanup: Sequence[Path] = ()):
        self.popen = popen
        self.cmd = list(cmd)
        self.log_path = log_path
        self.name = name
        self.host = host
        self.port = port
        self.url = url if url is not None else (f"http://{host}:{port}" if port else "")
        self._cleanup = list(cleanup)
        self._stopped = False

    def __repr__(self) -> str:
        """Name, pid, address and state."""
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"<ManagedProcess {self.name} pid={self.pid} {self.url or ''} {state}>"

    @property
    def pid(self) -> int:
        """The child's pid (also its process-group id)."""
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """Exit code (negative signal number if killed), ``None`` while running."""
        return self.popen.poll()

    def alive(self) -> bool:
        """True while the child itself has not exited."""
        return self.popen.poll() is None

    def log_text(self) -> str:
        """The whole log so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the child's process group; False if the group is gone."""
        try:
            os.killpg(self.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the child to exit; its return code or ``None``."""
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, sig: int = signal.SIGKILL, *, group: bool = True) -> None:
        """Send ``sig`` (default SIGKILL) to the group or only the child; reap it if SIGKILL."""
        if group:
            self.signal_group(sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)
        if sig == signal.SIGKILL:
            self.wait(10.0)
        if not self.alive():
            self._forget()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the group, wait up to ``timeout_s``, then SIGKILL; idempotent; the exit code."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            if self.wait(timeout_s) is None:
                self.signal_group(signal.SIGKILL)
                self.wait(10.0)
        self._forget()
        if not self._stopped:
            self._stopped = True
            self.signal_group(signal.SIGKILL)  # stragglers of the group (workers, grandchildren)
            for p in self._cleanup:
                shutil.rmtree(p, ignore_errors=True)
        return self.returncode

    def _forget(self) -> None:
        """Remove from the atexit registry."""
        with _LIVE_LOCK:
            _LIVE.pop(self.pid, None)

    def __enter__(self) -> ManagedProcess:
        """Use as ``with start_...() as proc:``; stopped on exit."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the process."""
        self.stop()


# ---------------------------------------------------------------------------- starting


def start_process(cmd: Sequence[str], env: Mapping[str, str] | None = None, *,
                  ready_url: str | None = None, ready_port: int | None = None,
                  ready_check: Callable[[], bool] | None = None, timeout_s: float = 30.0,
                  host: str = LOCALHOST, port: int | None = None, url: str | None = None,
                  name: str | None = None,
                  log_path: str | Path | None = None, cwd: str | Path | None = None,
                  cleanup: Sequence[Path] = (), owner_url: str | None = None,
                  tls: ClientTls | None = None) -> ManagedProcess:
    """Start ``cmd`` in a new process group and wait until it is ready (URL, port or check;
    an ``https`` URL verified with ``tls``)."""
    cmd = [str(c) for c in cmd]
    name = name or Path(cmd[0]).name
    if log_path is None:
        fd, tmp = tempfile.mkstemp(prefix=f"{name}-", suffix=".log", dir=_log_dir())
        os.close(fd)
        log_path = tmp
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONUNBUFFERED"] = "1"
    pythonpath = full_env.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in pythonpath.split(os.pathsep):
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), pythonpath) if p)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                 start_new_session=True, preexec_fn=_pdeathsig_preexec())
    port = port if port is not None else ready_port
    proc = ManagedProcess(popen, cmd, log_path, name, host=host, port=port,
                          url=url if url is not None else _base_url(ready_url, host, port),
                          cleanup=cleanup)
    with _LIVE_LOCK:
        _LIVE[proc.pid] = proc
    checks: list[Callable[[], bool]] = []
    if ready_port is not None:
        checks.append(lambda: port_open(host, ready_port))
    if ready_url is not None:
        checks.append(lambda: url_ready(ready_url, tls=tls))
    if ready_check is not None:
        checks.append(ready_check)
    if owner_url is not None:  # the answer must come from this process group, not another's
        checks.append(lambda: serves_from(owner_url, proc.pid, tls=tls))
    try:
        _wait_ready(proc, checks, timeout_s)
    except BaseException:
        proc.stop(timeout_s=5.0)
        raise
    return proc


def _base_url(ready_url: str | None, host: str, port: int | None) -> str:
    """``scheme://host:port`` of the readiness URL, else ``http://host:port``, else empty."""
    if ready_url:
        scheme, _, rest = ready_url.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}"
    return f"http://{host}:{port}" if port else ""


def _wait_ready(proc: ManagedProcess, checks: Sequence[Callable[[], bool]],
                timeout_s: float) -> None:
    """Poll the readiness checks with backoff until they all pass, the child dies or time is up."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        if not proc.alive():
            raise ProcessError(f"{proc.name} (pid {proc.pid}) exited with code {proc.returncode} "
                               f"before it was ready: {' '.join(proc.cmd)}\n"
                               f"--- {proc.log_path} (tail) ---\n{proc.log_tail()}")
        if all(check() for check in checks):
            return
        if time.monotonic() > deadline:
            raise ProcessError(f"{proc.name} (pid {proc.pid}) not ready after {timeout_s:g} s: "
                               f"{' '.join(proc.cmd)}\n"
                               f"--- {proc.log_path} (tail) ---\n{proc.log_tail()}")
        time.sleep(delay)  # readiness polling with a bounded deadline
        delay = min(delay * 1.5, 0.1)


def port_clash(err: ProcessError) -> bool:
    """The child died because its port was taken (a free_port race)."""
    text = str(err).lower()
    return "exited with code" in text and ("address already in use" in text
                                           or "errno 98" in text)


def _start_on_port(port: int | None, start: Callable[[int], ManagedProcess],
                   attempts: int = 3) -> ManagedProcess:
    """Start on ``port``, or on a fresh free port, retrying a lost free-port race."""
    if port is not None:
        return start(port)
    for attempt in range(attempts):
        try:
            return start(free_port())
        except ProcessError as e:
            if attempt == attempts - 1 or not port_clash(e):
                raise
    raise AssertionError("unreachable")


def redis_server_path() -> str:
    """Path of the ``redis-server`` binary (Debian package ``redis-server``)."""
    found = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.path.exists(p)),
        None)
    if found is None:
        raise FileNotFoundError("redis-server not found: install the Debian package "
                                "'redis-server' (make system-deps)")
    return found


def start_redis(port: int | None = None, dir: str | Path | None = None, *,
                extra_args: Sequence[str] = (), log_path: str | Path | None = None,
                timeout_s: float = 15.0) -> ManagedProcess:
    """A throw-away redis-server on 127.0.0.1 (no persistence); ``.url`` is ``redis://...:P/0``."""
    binary = redis_server_path()
    cleanup: list[Path] = []
    if dir is None:
        dir = Path(tempfile.mkdtemp(prefix="rtalab-redis-"))
        cleanup.append(dir)

    def start(p: int) -> ManagedProcess:
        cmd = [binary, "--port", str(p), "--bind", LOCALHOST, "--save", "", "--appendonly",
               "no", "--dir", str(dir), "--daemonize", "no", "--logfile", "", *extra_args]
        return start_process(cmd, ready_check=lambda: redis_ping(LOCALHOST, p),
                             timeout_s=timeout_s, port=p, url=f"redis://{LOCALHOST}:{p}/0",
                             name="redis-server", log_path=log_path, cleanup=cleanup)

    return _start_on_port(port, start)


def start_witness(db_path: str | Path, port: int | None = None,
                  extra_args: Sequence[str] = (), *, host: str = LOCALHOST,
                  env: Mapping[str, str] | None = None, log_path: str | Path | None = None,
                  timeout_s: float = 30.0, wait: bool = True,
                  server_tls: ServerTls = ServerTls(),
                  client_tls: ClientTls | None = None) -> ManagedProcess:
    """``python -m rtalab.loadtests.witness`` on ``host:port`` with its ledger at ``db_path``
    (serving TLS with ``server_tls``; readiness checked with ``client_tls``).

    ``wait=False`` returns as soon as it is started (start something else meanwhile, then
    :func:`wait_ready`)."""

    def start(p: int) -> ManagedProcess:
        cmd = [sys.executable, "-m", "rtalab.loadtests.witness", "--host", host, "--port", str(p),
               "--db", str(db_path), *server_tls.to_args(), *extra_args]
        base = f"{server_tls.scheme}://{host}:{p}"
        if not wait:
            return start_process(cmd, env, ready_check=lambda: True, host=host, port=p,
                                 url=base, name="witness", log_path=log_path)
        return start_process(cmd, env, ready_url=f"{base}/healthz", host=host,
                             port=p, timeout_s=timeout_s, name="witness", log_path=log_path,
                             owner_url=f"{base}/healthz", tls=client_tls)

    return _start_on_port(port if wait else (port or free_port()), start)


def wait_ready(proc: ManagedProcess, path: str, timeout_s: float = 30.0,
               tls: ClientTls | None = None) -> ManagedProcess:
    """Wait until ``proc.url + path`` answers (ProcessError if it dies or time is up)."""
    try:
        _wait_ready(proc, [lambda: url_ready(f"{proc.url}{path}", tls=tls),
                           lambda: serves_from(f"{proc.url}{path}", proc.pid, tls=tls)],
                    timeout_s)
    except BaseException:
        proc.stop(timeout_s=5.0)
        raise
    return proc


def reasoner_command(*, port: int, host: str = LOCALHOST, workers: int = 1,
                     dedup: str | None = None, scenario: str | Path | None = None,
                     witness: str | None = None, extra_args: Sequence[str] = ()) -> list[str]:
    """The command line of ``python -m rtalab.loadtests.reasoner`` for these options."""
    cmd = [sys.executable, "-m", "rtalab.loadtests.reasoner", "--host", host, "--port", str(port),
           "--workers", str(workers)]
    if dedup is not None:
        cmd += ["--dedup", dedup]
    if scenario is not None:
        cmd += ["--scenario", str(scenario)]
    if witness is not None:
        cmd += ["--witness", witness]
    return cmd + [str(a) for a in extra_args]


def start_reasoner(*, port: int | None = None, host: str = LOCALHOST, workers: int = 1,
                   dedup: str | None = None, scenario: str | Path | None = None,
                   witness: str | None = None, extra_args: Sequence[str] = (),
                   env: Mapping[str, str] | None = None,
                   ready_path: str = "/.well-known/agent-card.json",
                   log_path: str | Path | None = None, timeout_s: float = 60.0,
                   server_tls: ServerTls = ServerTls(),
                   client_tls: ClientTls | None = None) -> ManagedProcess:
    """The reference Reasoner as a subprocess; ready when ``ready_path`` answers.  It serves
    TLS with ``server_tls``; ``client_tls`` is how it calls the witness and how its
    readiness is checked."""

    def start(p: int) -> ManagedProcess:
        cmd = reasoner_command(port=p, host=host, workers=workers, dedup=dedup,
                               scenario=scenario, witness=witness,
                               extra_args=[*server_tls.to_args(),
                                           *(client_tls.to_args() if client_tls else ()),
                                           *extra_args])
        base = f"{server_tls.scheme}://{host}:{p}"
        return start_process(cmd, env, ready_url=f"{base}{ready_path}", host=host,
                             port=p, timeout_s=timeout_s, name="reasoner", log_path=log_path,
                             owner_url=f"{base}/healthz", tls=client_tls)

    return _start_on_port(port, start)
