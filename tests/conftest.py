"""Shared fixtures: a real redis-server and a witness service, one of each per xdist worker."""

from __future__ import annotations

import json
import os
import resource
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from rtalab.loadtests.common.procs import ManagedProcess, start_redis, start_witness

# Property tests are derandomized so a CI run is reproducible; explore new examples with
# `pytest --hypothesis-profile=explore`.  No per-example wall-clock deadline: on a busy
# 2-core runner an example of tests/test_intsets.py took 259 ms against hypothesis's
# default 200 ms and failed a correct run; speed is the benchmarks' business, not a unit
# test's.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _no_gevent_patching_in_the_test_process() -> Iterator[None]:
    """Locust monkey-patches the process that imports it (gevent's ``patch_all``).  In the
    pytest process that is a hazard: done mid-run while any other Python thread is alive (a
    Reasoner's capacity broker, a pool) the import deadlocks on importlib's module locks and
    the worker hangs for good; done at all, it changes every later test in that worker.  So
    Locust and patched gevent live only in subprocesses (the tests' scripts do
    ``gevent.monkey.patch_all()`` first), and a test that brings either into this process
    fails here, by name, instead of hanging the suite some runs later."""
    import sys

    had = "locust" in sys.modules or _gevent_patched()
    yield
    if not had and ("locust" in sys.modules or _gevent_patched()):
        pytest.fail("this test imported locust (or monkey-patched gevent) into the pytest "
                    "process; run that part in a subprocess (see tests/conftest.py)",
                    pytrace=False)


def _gevent_patched() -> bool:
    import sys

    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_anything_patched())


# The fast tier (`make test-fast`, `-m "not slow"`): the inner loop, under 2 minutes on 2
# cores. It leaves out what starts real servers or load runs, runs notebooks or a browser,
# and the longest model validations (statistical checks whose simulations take seconds each);
# `make test` (and CI) runs everything.
SLOW_PATHS = ("tests/load/", "tests/twin/", "tests/serve/", "tests/chaos/",
              "tests/test_notebooks.py", "tests/test_probe.py", "tests/test_reports.py",
              "tests/test_readme.py", "tests/test_bench_runner.py", "tests/test_sweepbench.py",
              "tests/test_answers_metastability.py", "tests/test_lab.py",
              "tests/test_presets_show.py", "tests/test_fleet_meanfield.py")
SLOW_TESTS = frozenset({
    "tests/test_answers_capacity.py::test_capacity_equals_erlang_c",
    "tests/test_answers_capacity.py::test_bracketing_doubles_so_a_far_answer_costs_"
    "logarithmically_many_runs",
    "tests/test_answers_capacity.py::test_float_knob_and_sentence",
    "tests/test_sweep.py::test_sigint_mid_sweep_then_rerun_finishes_without_recomputing",
    "tests/test_sweep.py::test_broken_grid_exits_2_with_one_line_before_anything_runs",
    "tests/test_sweep.py::test_one_process_two_processes_and_dask_give_byte_identical_tables",
    "tests/test_cli.py::test_run_every_preset_writes_a_complete_folder",
    "tests/test_cli.py::test_broken_scenario_exits_2_with_one_line",
    "tests/test_cli.py::test_user_errors_exit_2_with_one_line",
    "tests/test_answers_tune.py::test_tune_finds_what_exhaustive_search_finds",
    "tests/test_answers_tune.py::test_study_is_stored_and_resumed",
    "tests/test_answers_tune.py::test_indistinguishable_ranges_overlap_across_sampler_seeds",
    "tests/test_model_retry.py::test_success_rate_matches_closed_form",
    "tests/test_model_queueing.py::test_littles_law_with_faults_and_retries",
    "tests/test_cli_edges.py::test_unwritable_dedup_file_is_one_line",
    "tests/test_cli_edges.py::test_serve_witness_says_where_it_listens",
    "tests/test_compare_report.py::test_report_of_a_run_and_a_sweep_is_one_self_contained_file",
    "tests/check/test_equivalence.py::test_false_alarms_at_most_alpha_without_margins",
    "tests/test_junit.py::test_capacity_and_tune_junit",
    "tests/test_model_retry.py::test_attempts_per_turn_matches_closed_form",
    "tests/trust/test_multiple_comparisons.py::test_agreement_of_80_metrics_raises_a_false_"
    "alarm_in_at_most_5_percent_of_runs",
    "tests/test_intsets.py::test_a_million_calls_cost_bytes_not_a_set_and_a_dict",
    "tests/trust/test_interval_coverage.py::test_a_bucket_fits_cv_interval_spans_every_law_"
    "the_buckets_allow",
})


def is_slow(nodeid: str) -> bool:
    """Whether a test belongs to the full suite only (see :data:`SLOW_PATHS`)."""
    return nodeid.startswith(SLOW_PATHS) or nodeid.split("[", 1)[0] in SLOW_TESTS


# The files longest first (tests/durations.json, tests/oneoff/record_durations.py): with
# `--dist loadfile --no-loadscope-reorder` (the Makefile) xdist hands them out in this order,
# so a long file never starts last and leaves one worker running alone (xdist's own order,
# most tests first, put the one-test load runs at the end).
DURATIONS = Path(__file__).with_name("durations.json")


def file_order(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` grouped by file, the files longest first (unknown: 0 s, after the known
    ones), the order within a file and among equals kept."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::", 1)[0], i)
    return sorted(items, key=lambda it: (-seconds.get(f := it.nodeid.split("::", 1)[0], 0.0),
                                         first[f]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    try:
        seconds = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return  # no table: pytest's order
    items[:] = file_order(items, seconds)


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


# Opt-in CPU accounting (tests/oneoff/cpu_table.py reads it): RTALAB_TEST_CPU=<dir> writes one
# JSON line per test -- wall seconds, this process's CPU and its waited-for children's CPU
# (load runs, servers) -- to <dir>/<worker>.jsonl.  The suite's budget is CPU on 2 cores.
CPU_DIR = os.environ.get("RTALAB_TEST_CPU")


def _cpu() -> tuple[float, float]:
    """CPU seconds so far: (this process, its waited-for children)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not CPU_DIR:
        return (yield)
    t0, (s0, c0) = time.monotonic(), _cpu()
    try:
        return (yield)
    finally:
        s1, c1 = _cpu()
        row = {"test": item.nodeid, "wall": round(time.monotonic() - t0, 3),
               "self": round(s1 - s0, 3), "children": round(c1 - c0, 3)}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(Path(CPU_DIR) / f"{worker}.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
