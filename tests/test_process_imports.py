"""What the processes of a load run import at start-up: every load run starts a Reasoner, a
witness, a chaos proxy and one or more Locust processes, and their start-up CPU is paid per
run (and per Locust worker).  The Live users take only the policy, the turn machine and the
samplers from ``sim``: never the simulator, pandas, SciPy or matplotlib (importing
``rtalab.sim.model.rand`` once pulled all of ``rtalab.sim.model`` and pandas into every Locust
process, ~0.35 s CPU each); nor SQLAlchemy (a2a-sdk imports its SQL stores whenever it is
installed: ``rtalab.loadtests.reasoner`` keeps them out, 0.16 CPU-s a Reasoner start).  The
run's own process reads the ledgers with pandas, but its check and its report import neither
SciPy (only a run over several bindings reaches the equivalence tests' tails) nor
matplotlib (only a run that draws its plots): ~1.5 CPU-s of every ``--no-plots`` run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest

from rtalab.loadtests.live.locust_main import entry_points_read_once
from rtalab.loadtests.loadrun.orchestrate import LOCUST_MAIN

HEAVY = ("pandas", "scipy", "matplotlib", "simpy", "sqlalchemy", "rtalab.sim.model.world",
         "rtalab.sim.runner")
PROCESSES = {
    # the Locust process: gevent patched first, as locust's own entry point does
    "locust Live user": "from gevent import monkey; monkey.patch_all(); import locust; "
                        "import rtalab.loadtests.live.locustfile",
    "reasoner": "import rtalab.loadtests.reasoner.app",
    "witness": "import rtalab.loadtests.witness.app",
    "chaos proxy": "import rtalab.loadtests.chaos.proxy",
}


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_a_load_run_process_does_not_import_the_simulator(name: str) -> None:
    code = (PROCESSES[name] + "; import json, sys; "
            f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [], name


def test_a_load_runs_check_and_report_import_neither_scipy_nor_matplotlib() -> None:
    code = ("from rtalab.sim.cli import main; import rtalab.loadtests.check, "
            "rtalab.loadtests.loadrun.tables, rtalab.sim.report.render, rtalab.sim.report.runs; "
            "import json, sys; "
            "print(json.dumps([m for m in ('scipy', 'matplotlib') if m in sys.modules]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


GROUPS = ("gevent.plugins.monkey.will_patch_all", "gevent.plugins.monkey.did_patch_module",
          "console_scripts", "pytest11", "rtalab.commands", "no.such.group")


def _by_group(select: Callable[..., Any]) -> dict[str, list[tuple[str, str]]]:
    return {g: sorted((ep.name, ep.value) for ep in select(group=g)) for g in GROUPS}


def test_locust_processes_read_the_entry_points_once_and_see_the_same_ones() -> None:
    """Every Locust process starts through rtalab.loadtests.live.locust_main: while gevent
    patches the process (~25 lookups by group), the entry points come from one reading, the
    same ones a lookup finds; afterwards importlib.metadata is as it was."""
    original = metadata.entry_points
    plain = _by_group(metadata.entry_points)
    assert plain["rtalab.commands"] and plain["console_scripts"] and not plain["no.such.group"]
    with entry_points_read_once():
        assert metadata.entry_points is not original
        assert _by_group(metadata.entry_points) == plain
        name = plain["pytest11"][0][0]
        assert list(metadata.entry_points(group="pytest11", name=name)) == list(
            original(group="pytest11", name=name)) != []
    assert metadata.entry_points is original
    assert LOCUST_MAIN == "rtalab.loadtests.live.locust_main"


def test_the_locust_main_is_locusts_command_line() -> None:
    p = subprocess.run([sys.executable, "-m", LOCUST_MAIN, "--version"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(f"locust {metadata.version('locust')} ")
