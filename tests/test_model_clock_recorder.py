"""The scheduling and recording primitives of the model's hot path.

``Deadlines`` (sim/model/clock.py) keeps fixed-length timers with one pending SimPy
event; the packed ``Table`` (sim/model/recorder.py) writes rows as typed bytes.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
import simpy

from rtalab.sim.model.clock import (
    ENTRY_PRIORITY,
    Deadlines,
    call_at,
    call_later,
    pusher,
    run,
    sim_time,
)
from rtalab.sim.model.recorder import Table


class Box:
    def __init__(self, name: str) -> None:
        self.name = name
        self.alive = True


def test_deadlines_fire_each_entry_at_its_own_deadline_in_order() -> None:
    env = simpy.Environment()
    fired: list[tuple[float, str]] = []
    dl = Deadlines(env, lambda b: fired.append((sim_time(env), b.name)), lambda b: b.alive)
    boxes = {n: Box(n) for n in "abcd"}

    def arm(name: str, after: float) -> None:
        call_later(env, after, lambda _: dl.add(sim_time(env) + 2.0, boxes[name]))

    arm("a", 0.0)
    arm("b", 0.5)
    arm("c", 0.5)  # same deadline as b: fired in arming order
    arm("d", 3.0)  # armed after a fired: a new wake-up
    run(env)
    assert fired == [(2.0, "a"), (2.5, "b"), (2.5, "c"), (5.0, "d")]


def test_deadlines_skip_dead_heads_without_waking() -> None:
    """Entries that died before their deadline cost no wake-up: 100 timers armed, 98 of them
    dead by the time the head fires, give 2 wake-ups (the head, then the last live one)."""
    env = simpy.Environment()
    wakes: list[float] = []
    fired: list[str] = []
    dl = Deadlines(env, lambda b: fired.append(b.name), lambda b: b.alive)
    orig = dl._wake

    def counting_wake(_: object = None) -> None:
        wakes.append(sim_time(env))
        orig()

    dl._wake_cb = counting_wake  # type: ignore[assignment]
    boxes = [Box(str(i)) for i in range(100)]
    for i, b in enumerate(boxes):
        call_at(env, i * 0.01, lambda _, b=b: dl.add(sim_time(env) + 10.0, b))

    def kill(_: object) -> None:
        for b in boxes[1:-1]:
            b.alive = False

    call_at(env, 5.0, kill)
    run(env)
    assert wakes == [10.0, pytest.approx(10.99)]
    assert fired == ["0", "99"]
    assert len(dl) == 0


def test_deadlines_out_of_order_entry_gets_its_own_event() -> None:
    env = simpy.Environment()
    fired: list[tuple[float, str]] = []
    dl = Deadlines(env, lambda b: fired.append((sim_time(env), b.name)), lambda b: b.alive)
    dl.add(5.0, Box("late"))
    dl.add(1.0, Box("early"))  # earlier than the last armed: not queued behind "late"
    run(env)
    assert fired == [(1.0, "early"), (5.0, "late")]


def test_deadlines_and_call_at_refuse_the_past() -> None:
    env = simpy.Environment(initial_time=3.0)
    dl = Deadlines(env, lambda b: None, lambda b: True)
    with pytest.raises(ValueError, match="past"):
        dl.add(2.0, Box("x"))
    with pytest.raises(ValueError, match="past"):
        call_at(env, 2.0, lambda _: None)


def _mixed_schedule(env: simpy.Environment, log: list[tuple[float, str]],
                    model_entries: bool) -> None:
    """The same schedule built from model entries (``call_at``) or from SimPy timeouts, with
    a SimPy process in between: ties at one time must keep the scheduling order."""

    def note(name: str) -> Any:
        return lambda _: log.append((env.now, name))

    def proc(env: simpy.Environment) -> Any:
        yield env.timeout(1.0)
        log.append((env.now, "proc@1"))
        yield env.timeout(1.0)
        log.append((env.now, "proc@2"))

    for when, name in ((2.0, "a@2"), (1.0, "b@1"), (2.0, "c@2"), (3.0, "d@3"), (5.0, "e@5")):
        if model_entries:
            call_at(env, when, note(name))
        else:
            env.timeout(when).callbacks.append(note(name))
        if name == "b@1":
            env.process(proc(env))


def test_run_orders_model_entries_exactly_as_simpy_orders_its_events() -> None:
    """clock.run over model entries and a SimPy process gives the same trace, times and final
    clock as Environment.run over the equivalent SimPy timeouts, with ``until`` semantics
    (an entry at exactly ``until`` does not run)."""
    ours, theirs = [], []
    env = simpy.Environment()
    _mixed_schedule(env, ours, True)
    run(env, 5.0)
    ref = simpy.Environment()
    _mixed_schedule(ref, theirs, False)
    ref.run(until=5.0)
    assert ours == theirs == [(1.0, "b@1"), (1.0, "proc@1"), (2.0, "a@2"), (2.0, "c@2"),
                              (2.0, "proc@2"), (3.0, "d@3")]
    assert env.now == ref.now == 5.0
    run(env)  # to exhaustion: the entry at 5.0 runs now
    assert ours[-1] == (5.0, "e@5")
    with pytest.raises(ValueError, match="greater than"):
        run(env, 5.0)


def test_pusher_entries_share_the_id_sequence_of_call_at_and_simpy() -> None:
    """Entries pushed by ``pusher`` tie-break with ``call_at`` entries and SimPy timeouts at
    the same time in scheduling order (one id sequence), and run as ``callback(value)``."""
    env = simpy.Environment()
    push, eid = pusher(env)
    log: list[tuple[float, str]] = []
    for name in "abcdef":
        if name in "ae":
            call_at(env, 1.0, lambda v, n=name: log.append((env.now, n)))
        elif name == "c":
            env.timeout(1.0).callbacks.append(lambda _: log.append((env.now, "c")))
        else:
            push((env.now + 1.0, ENTRY_PRIORITY, eid(), lambda v: log.append((env.now, v)), name))
    push((0.5, ENTRY_PRIORITY, eid(), lambda v: log.append((env.now, v)), "early"))
    run(env)
    assert log == [(0.5, "early"), (1.0, "a"), (1.0, "b"), (1.0, "c"), (1.0, "d"), (1.0, "e"),
                   (1.0, "f")]


def test_run_raises_a_failed_simpy_event_like_simpy() -> None:
    env = simpy.Environment()
    ev = env.event()
    ev.fail(KeyError("boom"))
    with pytest.raises(KeyError, match="boom"):
        run(env)
    defused = env.event()
    defused.fail(KeyError("quiet"))
    defused.defused = True
    run(env)  # a defused failure does not crash the run


SPEC = (("i", "i8"), ("x", "f8"), ("flag", "bool"), ("cat", ("a", "b", "c")))


def test_table_round_trips_typed_cells_across_compactions() -> None:
    t = Table(SPEC, chunk_rows=3)
    rows = [(k, k * 0.5 if k % 4 else math.nan, k % 2 == 0, (k % 4) - 1) for k in range(10)]
    for r in rows[:5]:
        t.write(t.pack(*r))
    t.compact()  # 5 >= 3: compacted
    assert t.pending == 0 and len(t) == 5
    for r in rows[5:]:
        t.add(r)
    assert t.pending == 5 and len(t) == 10
    cols = t.columns()
    assert [c.dtype for c in cols] == [np.int64, np.float64, np.bool_, np.int16]
    assert cols[0].tolist() == [r[0] for r in rows]
    np.testing.assert_array_equal(cols[1], [r[1] for r in rows])  # NaN where NaN
    assert cols[2].tolist() == [r[2] for r in rows]
    assert cols[3].tolist() == [r[3] for r in rows]
    assert len(t) == 0  # emptied by columns()


def test_table_rejects_wrong_cells_at_the_writer() -> None:
    t = Table(SPEC)
    with pytest.raises(struct.error):
        t.add((1.5, 0.0, True, 0))  # a float in an integer column
    with pytest.raises(struct.error):
        t.add((1, None, True, 0))  # None where a number belongs
    with pytest.raises(struct.error):
        t.add((1, 0.0, True))  # a cell missing
    assert len(t) == 0  # nothing half-written


def test_table_large_integers_are_exact() -> None:
    t = Table((("guid", "i8"),))
    t.add((2**62 + 1,))
    assert t.columns()[0].tolist() == [2**62 + 1]


def test_row_writer_names_every_cell_and_packs_in_schema_order() -> None:
    from rtalab.sim.model.recorder import row_writer

    t = Table(SPEC)
    # cells given out of order: the writer packs them in the schema's order
    write = row_writer(t, {}, "a, b", {"cat": "b", "flag": "a > 1", "x": "a / 2", "i": "a"})
    write(3, 2)
    write(1, -1)
    cols = t.columns()
    assert [c.tolist() for c in cols] == [[3, 1], [1.5, 0.5], [True, False], [2, -1]]
    with pytest.raises(ValueError, match=r"missing \['flag'\]"):
        row_writer(t, {}, "a", {"i": "a", "x": "a", "cat": "a"})
    with pytest.raises(ValueError, match=r"unknown \['bogus'\]"):
        row_writer(t, {}, "a", {"i": "a", "x": "a", "flag": "a", "cat": "a", "bogus": "a"})


def test_the_model_writers_cover_their_tables() -> None:
    """Every table the model writes has one named writer matching rtalab.sim.shared.schema exactly
    (built when the model is built: a column added to the schema without a cell fails here)."""
    from rtalab.sim.model import live, reasoner, witness
    from rtalab.sim.model.recorder import row_writer
    from rtalab.sim.shared.schema import (
        ATTEMPTS_TABLE,
        CALLS_TABLE,
        EXECUTIONS_TABLE,
        SIDE_EFFECTS_TABLE,
        TURNS_TABLE,
    )

    for spec, (params, cells, *prelude) in ((ATTEMPTS_TABLE, live.ATTEMPT_ROW),
                                      (TURNS_TABLE, live.TURN_ROW),
                                      (CALLS_TABLE, live.CALL_ROW),
                                      (EXECUTIONS_TABLE, reasoner.EXECUTION_ROW),
                                      (SIDE_EFFECTS_TABLE, witness.LEDGER_ROW)):
        assert list(cells) == [name for name, _ in spec]  # written in the schema's order too
        row_writer(Table(spec), vars(live), params, cells, *prelude)
