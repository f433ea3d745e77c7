"""The fast tier's list stays true: every path and test it names exists, so a rename cannot
silently move a slow test into `make test-fast` (or a fast one out of it)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SLOW_PATHS, SLOW_TESTS, is_slow

ROOT = Path(__file__).resolve().parents[1]


def test_every_slow_path_exists() -> None:
    missing = [p for p in SLOW_PATHS if not (ROOT / p).exists()]
    assert not missing, missing


def test_every_slow_test_names_a_test_function() -> None:
    missing = []
    for nodeid in SLOW_TESTS:
        path, name = nodeid.split("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree)
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if name not in names:
            missing.append(nodeid)
    assert not missing, missing


def test_is_slow_matches_paths_and_parametrized_ids() -> None:
    assert is_slow("tests/load/test_load_run.py::test_x")
    assert is_slow("tests/test_answers_capacity.py::test_capacity_equals_erlang_c[3-0.9]")
    assert not is_slow("tests/test_answers_capacity.py::test_capacity_equals_erlang_c_x")
    assert not is_slow("tests/test_policy_decide.py::test_anything")
