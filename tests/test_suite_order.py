"""The suite hands its files to the xdist workers longest first (tests/conftest.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.conftest import DURATIONS, file_order


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_longest_first_tests_kept_together_in_their_order() -> None:
    items = _items("a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "d.py::t1", "b.py::t2")
    got = [i.nodeid for i in file_order(items, {"a.py": 1.0, "b.py": 50.0, "c.py": 9.0})]
    assert got == ["b.py::t1", "b.py::t2", "c.py::t1", "a.py::t1", "a.py::t2", "d.py::t1"]


def test_the_table_knows_the_long_files() -> None:
    seconds = json.loads(DURATIONS.read_text())
    assert all(p.startswith("tests/") and p.endswith(".py") for p in seconds)
    longest = max(seconds, key=seconds.get)
    assert seconds[longest] > 60 and (DURATIONS.parent.parent / longest).is_file()
