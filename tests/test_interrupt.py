"""A Ctrl-C that other code swallows still stops a simulation (rtalab.sim.shared.interrupt).

Cython's ABC registration at a compiled module's import catches every exception: a SIGINT
that landed there while ``rtalab sim run`` imported pandas was lost, and the run went on
(tests/test_cli.py's Ctrl-C test timed out once in a full suite; one interrupt in ~40 under
load)."""

from __future__ import annotations

import os
import signal

import pytest

from rtalab.sim.model.world import World
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared import interrupt
from tests.signals import python_sigint


def _swallowed_sigint() -> None:
    """SIGINT to this process, its KeyboardInterrupt caught as Cython's ``except: pass``."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at a bytecode boundary of this loop
            pass
    except BaseException:  # the swallowing rtalab.sim.shared.interrupt guards against
        pass


def test_a_swallowed_ctrl_c_stops_the_simulation_at_its_next_second() -> None:
    sc = load_scenario("baseline").with_overrides({"run.duration_s": 30.0, "run.warmup_s": 1.0})
    with python_sigint(), interrupt.installed() as on:
        assert on
        _swallowed_sigint()
        with pytest.raises(KeyboardInterrupt):
            World(sc, 1, 0).run()
    # after the block: the handler back, the flag gone -- a later run is not interrupted
    assert signal.getsignal(signal.SIGINT) is not interrupt._on_sigint
    interrupt.check()


def test_the_flag_is_not_raised_without_a_sigint() -> None:
    sc = load_scenario("baseline").with_overrides({"run.duration_s": 5.0, "run.warmup_s": 1.0})
    with python_sigint(), interrupt.installed():
        World(sc, 1, 0).run()


def test_an_ignored_or_foreign_sigint_handler_is_left_alone() -> None:
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's disposition
    try:
        with interrupt.installed() as on:
            assert not on and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
