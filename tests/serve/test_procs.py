"""Managed subprocesses: readiness, failures with log tails, group kills, no orphans."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from rtalab.loadtests.common import procs
from rtalab.loadtests.common.procs import (
    ProcessError,
    free_port,
    reasoner_command,
    redis_ping,
    start_process,
    start_redis,
    start_witness,
)

HTTP_SERVER = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1"]


def gone(pid: int) -> bool:
    """True if ``pid`` no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Poll until ``pid`` is gone, with a bounded deadline."""
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} still running"
        time.sleep(0.02)


def test_free_port_is_bindable() -> None:
    """free_port returns a port one can listen on."""
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_free_port_never_hands_out_a_port_twice() -> None:
    """A run picks several ports before its servers bind them (the witness starts with
    ``wait=False``): the kernel offers a released port again (34 repeats in 1,000 bare
    bind-to-0 calls here), which once gave the witness and the gRPC binding one port."""
    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports)


def test_a_taken_grpc_port_is_one_line_and_a_run_picks_another(tmp_path: Path) -> None:
    """``serve reasoner --grpc-port P`` with P taken exits 2 with one line naming the port
    (no lifespan traceback); a load run's first start of its Reasoner then takes a fresh
    gRPC port, kept in its arguments for the restarts, and the card advertises it."""
    from rtalab.loadtests.loadrun.orchestrate import _start_first

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        p = subprocess.run([*reasoner_command(port=free_port(), dedup="memory"),
                            "--grpc-port", str(taken)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().splitlines() == [
            f"rtalab serve reasoner: error: --grpc-port {taken}: cannot listen on "
            f"127.0.0.1:{taken}: address already in use"], p.stderr
        args = dict(dedup="memory", extra_args=["--grpc-port", str(taken)],
                    log_path=tmp_path / "reasoner.log")
        with _start_first(args) as r:
            fresh = int(args["extra_args"][1])
            assert fresh != taken
            with urllib.request.urlopen(r.url + "/.well-known/agent-card.json",
                                        timeout=10) as resp:
                assert f"127.0.0.1:{fresh}" in resp.read().decode()


def test_start_ready_stop(tmp_path: Path) -> None:
    """A server is started, answers at .url, and stop() ends it (context manager too)."""
    port = free_port()
    with start_process([*HTTP_SERVER, str(port)], ready_port=port, cwd=tmp_path,
                       log_path=tmp_path / "http.log") as p:
        assert p.alive() and p.port == port and p.url == f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(p.url + "/", timeout=5) as r:
            assert r.status == 200
        pid = p.pid
    assert not p.alive() and p.returncode is not None
    wait_gone(pid)
    assert p.stop() == p.returncode  # idempotent


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    """Grandchildren (like uvicorn workers) go with their parent."""
    port = free_port()
    pidfile = tmp_path / "grandchild.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys, http.server
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port={port},
                         bind="127.0.0.1")
    """)
    p = start_process([sys.executable, "-c", script], ready_port=port, cwd=tmp_path)
    grandchild = int(pidfile.read_text())
    assert not gone(grandchild)
    p.stop()
    wait_gone(grandchild)


def test_death_before_ready_raises_with_log_tail(tmp_path: Path) -> None:
    """A child that dies is reported with its exit code and the end of its log."""
    cmd = [sys.executable, "-c", "import sys; print('boom: bad config', file=sys.stderr); "
                                 "sys.exit(3)"]
    before = set(procs._LIVE)
    with pytest.raises(ProcessError) as e:
        start_process(cmd, ready_port=free_port(), log_path=tmp_path / "x.log")
    assert "exited with code 3" in str(e.value) and "boom: bad config" in str(e.value)
    assert set(procs._LIVE) == before  # forgotten by the atexit registry


def test_not_ready_in_time_raises_and_kills(tmp_path: Path) -> None:
    """A child that never listens is killed after the deadline."""
    cmd = [sys.executable, "-c", "import time; print('starting', flush=True); time.sleep(60)"]
    with pytest.raises(ProcessError) as e:
        start_process(cmd, ready_port=free_port(), timeout_s=0.5, log_path=tmp_path / "y.log")
    assert "not ready after 0.5 s" in str(e.value) and "starting" in str(e.value)
    pid = int(str(e.value).split("pid ")[1].split(")")[0])
    wait_gone(pid)


def test_sigkill(tmp_path: Path) -> None:
    """kill() SIGKILLs the group and reaps the child."""
    port = free_port()
    p = start_process([*HTTP_SERVER, str(port)], ready_port=port, cwd=tmp_path)
    p.kill()
    assert p.returncode == -signal.SIGKILL
    p.stop()


def _run_parent(body: str, cwd: Path, log: Path) -> subprocess.Popen[str]:
    """A Python process that starts a managed server with procs and prints its pid."""
    script = textwrap.dedent(f"""
        import sys
        from rtalab.loadtests.common.procs import free_port, start_process
        port = free_port()
        p = start_process([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                           str(port)], ready_port=port, log_path=sys.argv[1])
        print(p.pid, flush=True)
        {body}
    """)
    return subprocess.Popen([sys.executable, "-c", script, str(log)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE)


def test_atexit_stops_children(repo_root: Path, tmp_path: Path) -> None:
    """A parent that forgets to stop its child still takes it down when it exits."""
    parent = _run_parent("sys.exit(0)", repo_root, tmp_path / "child.log")
    out, _ = parent.communicate(timeout=30)
    assert parent.returncode == 0
    wait_gone(int(out.split()[0]))


def test_sigkilled_parent_leaves_no_orphan(repo_root: Path, tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: even a SIGKILLed parent does not leave its child running."""
    parent = _run_parent("sys.stdin.read()", repo_root, tmp_path / "child.log")
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not gone(child)
    parent.kill()
    parent.communicate(timeout=10)
    wait_gone(child)


def test_start_redis(tmp_path: Path) -> None:
    """A throw-away redis-server answers PING at .url."""
    with start_redis(dir=tmp_path) as r:
        assert r.url == f"redis://127.0.0.1:{r.port}/0" and redis_ping("127.0.0.1", r.port)
    assert not redis_ping("127.0.0.1", r.port)


def test_port_race_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the free port is taken before the child binds it, the helper retries another one."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = iter([taken, free_port()])
        monkeypatch.setattr(procs, "free_port", lambda host="127.0.0.1": next(ports))
        with start_witness(tmp_path / "l.db") as w:
            assert w.port != taken
            with urllib.request.urlopen(w.url + "/healthz", timeout=5) as r:
                assert r.status == 200


def test_reasoner_command() -> None:
    """start_reasoner's command line is built from keyword arguments."""
    cmd = reasoner_command(port=8123, workers=2, dedup="sqlite:///tmp/d.db",
                           scenario="baseline", witness="http://127.0.0.1:9/",
                           extra_args=["--test-hooks"])
    assert cmd == [sys.executable, "-m", "rtalab.loadtests.reasoner", "--host", "127.0.0.1",
                   "--port", "8123", "--workers", "2", "--dedup", "sqlite:///tmp/d.db",
                   "--scenario", "baseline", "--witness", "http://127.0.0.1:9/", "--test-hooks"]
    assert reasoner_command(port=1)[-2:] == ["--workers", "1"]


def test_a_server_that_lost_its_port_is_never_taken_for_ready(tmp_path):
    """Another witness already answers on the port: the new one must not count as ready
    (it dies with 'address in use'), though the port's /healthz answers."""
    from rtalab.loadtests.common.procs import ProcessError, start_reasoner, start_witness

    with start_witness(tmp_path / "a.sqlite") as first:
        with pytest.raises(ProcessError):
            start_witness(tmp_path / "b.sqlite", port=first.port, timeout_s=20)
        assert first.alive()
    with start_reasoner(dedup="memory") as first:
        with pytest.raises(ProcessError):
            start_reasoner(port=first.port, dedup="memory", timeout_s=30)
        assert first.alive()


def test_a_grpc_port_in_time_wait_is_not_taken(tmp_path: Path) -> None:
    """A crash restart serves gRPC again on its port while the killed server's connections
    are in TIME_WAIT there: the start-up check must let it (as gRPC's own bind does), and
    refuse only a socket that listens."""
    from rtalab.loadtests.reasoner.cli import FlagError, _check_port_free

    with socket.socket() as lst:
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        port = lst.getsockname()[1]
        with pytest.raises(FlagError, match="address already in use"):
            _check_port_free("127.0.0.1", port)
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = lst.accept()
        conn.close()  # the server side closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    states = Path("/proc/net/tcp").read_text()
    assert f":{port:04X} " in states  # the TIME_WAIT entry is there
    _check_port_free("127.0.0.1", port)
