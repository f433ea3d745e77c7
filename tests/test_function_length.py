"""Functions a reader can hold: none in ``sim/`` or ``loadtests/`` is over 80 lines unless its
``def`` line says why (``# long: <reason>``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "loadtests")
MAX_LINES = 80
MARK = "# long:"
# being split by the engineers who own them now: (file name, function) -> why not yet.  An
# entry that is no longer over the limit fails too, so the list only shrinks.
PENDING: dict[tuple[str, str], str] = {}


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function in ``source`` over ``limit`` lines whose
    ``def`` line (any line of a multi-line signature) carries no ``# long: <reason>``."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= limit:
            continue
        body_start = node.body[0].lineno
        signature = lines[node.lineno - 1:max(node.lineno, body_start - 1)]
        if any(MARK in line and line.split(MARK, 1)[1].strip() for line in signature):
            continue
        out.append((node.name, node.lineno, length))
    return out


def _files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_function_over_80_lines_without_a_reason() -> None:
    found, pending_seen = [], set()
    for path in _files():
        for name, line, length in long_functions(path.read_text(encoding="utf-8")):
            if (path.name, name) in PENDING:
                pending_seen.add((path.name, name))
                continue
            found.append(f"{path.relative_to(ROOT)}:{line} {name}: {length} lines")
    assert not found, ("split these, or say why on the def line (# long: <reason>):\n"
                       + "\n".join(found))
    assert pending_seen == set(PENDING), f"no longer long, drop from PENDING: " \
                                         f"{set(PENDING) - pending_seen}"


LONG = "def f(x):\n" + "".join(f"    x += {i}\n" for i in range(MAX_LINES)) + "    return x\n"


@pytest.mark.parametrize(("source", "flagged"), [
    (LONG, True),  # 82 lines
    (LONG.replace("def f(x):", "def f(x):  # long: one table, read top to bottom"), False),
    (LONG.replace("def f(x):", "def f(x):  # long:"), True),  # a mark without a reason
    ("def f(\n    x,\n):  # long: a reason\n" + LONG.split("\n", 1)[1], False),
    ("def f(x):\n" + "".join(f"    x += {i}\n" for i in range(MAX_LINES - 2))
     + "    return x\n", False),  # 80 lines
    ("class C:\n    " + LONG.replace("\n", "\n    ").rstrip() + "\n", True),  # a method
])
def test_long_functions_flags_what_it_should(source: str, flagged: bool) -> None:
    assert bool(long_functions(source)) is flagged
