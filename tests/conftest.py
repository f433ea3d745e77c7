"""Shared fixtures: a real redis-server and a witness service, one of each per xdist worker."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from loadtests.common.procs import ManagedProcess, start_redis, start_witness

# Property tests are derandomized so a CI run is reproducible; explore new examples with
# `pytest --hypothesis-profile=explore`.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("ci")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """A throw-away ``redis-server --save '' --appendonly no`` on a free port (per worker)."""
    base = tmp_path_factory.mktemp("redis")
    with start_redis(dir=base, log_path=base / "redis.log") as proc:
        yield proc


@pytest.fixture
def redis_url(redis_server: ManagedProcess) -> str:
    """The session Redis, flushed before the test: ``redis://127.0.0.1:PORT/0``."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def witness_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """A witness service with ``--test-hooks`` on a free port (per worker)."""
    base = tmp_path_factory.mktemp("witness")
    with start_witness(base / "ledger.db", extra_args=["--test-hooks", "--seed", "1"],
                       log_path=base / "witness.log") as proc:
        yield proc


def post_json(url: str, body: object, timeout_s: float = 10.0) -> dict:
    """POST a JSON body and return the decoded JSON answer (stdlib only)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.loads(r.read())


@pytest.fixture
def witness(witness_server: ManagedProcess) -> Iterator[str]:
    """The session witness with an empty ledger and no faults (reset again afterwards)."""
    post_json(f"{witness_server.url}/reset", {})
    yield witness_server.url
    post_json(f"{witness_server.url}/reset", {})


@pytest.fixture
def repo_root() -> Path:
    """The repository root (the working directory of subprocesses)."""
    return Path(__file__).resolve().parents[1]
