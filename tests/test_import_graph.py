"""The import graph of ``rtalab.sim``, ``rtalab.loadtests`` and ``rtalab.benchmarks`` (the
folders ``sim/``, ``loadtests/`` and ``benchmarks/``): no cycles, and one-way rules.

Read from the source (AST), every ``import`` anywhere in a module (function bodies too), so a
lazy import cannot hide a cycle.  ``from pkg import name`` depends on the module ``pkg.name``
when there is one, otherwise on ``pkg`` (a package's ``__init__`` that re-exports its modules
is not a cycle with them).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "rtalab"
PACKAGES = ("sim", "loadtests", "benchmarks")  # the folders of rtalab.sim, ...
# sim is the base: it never imports the load side, the benchmarks or a web/load framework
SIM_MUST_NOT_IMPORT = ("loadtests", "benchmarks", "locust", "gevent", "starlette", "uvicorn",
                       "fastapi", "a2a", "websockets", "httpx")


def modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package's __init__)} of every module under ``root``'s
    folders ``packages`` (``sim/a.py`` is ``rtalab.sim.a``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = [NAMESPACE, *p.relative_to(root).with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def imported_names(path: Path, module: str, is_pkg: bool) -> list[str]:
    """Every dotted name ``path`` imports, relative imports resolved (``a.b.c`` of
    ``from a.b import c``)."""
    package = module if is_pkg else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            names.extend(f"{base}.{a.name}" for a in node.names)
    return names


def graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """{module: modules of the tree it imports}; ``x.y.Name`` resolves to the longest module
    prefix (``x.y``)."""
    mods = modules(root, packages)
    g: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        deps = set()
        for target in imported_names(path, name, is_pkg):
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        g[name] = deps
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def top(name: str) -> str:
    """The top-level package ``name`` belongs to, the namespace left out (``rtalab.sim.x``:
    ``sim``; ``uvicorn.server``: ``uvicorn``)."""
    parts = name.split(".")
    return parts[1] if parts[0] == NAMESPACE and len(parts) > 1 else parts[0]


def forbidden_imports(root: Path, package: str, banned: Iterable[str]) -> list[str]:
    """``module -> name`` for every import in ``package`` of a banned top-level name."""
    banned = set(banned)
    bad = []
    for name, (path, is_pkg) in modules(root, [package]).items():
        for target in imported_names(path, name, is_pkg):
            if top(target) in banned:
                bad.append(f"{name} -> {target}")
    return bad


# --------------------------------------------------------------------------- the tree


def test_no_import_cycle_in_the_tree() -> None:
    assert cycles(graph(REPO)) == []


def package_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """The import graph between packages: a module counts as its package (``rtalab.sim.shared``,
    ``rtalab.loadtests.common``: the innermost folder with an ``__init__`` below a root package),
    a module right in a root package (``sim/cli.py``) as itself."""
    mods = modules(root, packages)

    def unit(module: str) -> str:
        parts = module.split(".")
        pkg = parts if mods[module][1] else parts[:-1]
        return ".".join(pkg) if len(pkg) > 2 else module  # rtalab.<root>.<package>

    out: dict[str, set[str]] = {}
    for m, deps in graph(root, packages).items():
        out.setdefault(unit(m), set()).update(unit(d) for d in deps if unit(d) != unit(m))
    return out


def test_no_package_level_cycle() -> None:
    """No two packages import each other (package A's modules importing package B's and B's
    importing A's), even where no module-level cycle exists: what both need goes down."""
    assert cycles(package_graph(REPO)) == []


def unresolved_imports(root: Path, packages: Iterable[str] = PACKAGES) -> list[str]:
    """``module -> name`` for every import of the tree that names no module of the tree
    (``from a.b import c``: ``a.b.c`` or ``a.b`` must be one): a path left behind by a move."""
    mods = modules(root, packages)
    bad = []
    for name, (path, is_pkg) in mods.items():
        for target in imported_names(path, name, is_pkg):
            if top(target) in packages and not (
                    target in mods or target.rpartition(".")[0] in mods):
                bad.append(f"{name} -> {target}")
    return bad


def test_every_import_of_the_tree_names_a_module_of_it() -> None:
    assert unresolved_imports(REPO) == []


def test_sim_never_imports_the_load_side_or_a_web_framework() -> None:
    assert forbidden_imports(REPO, "sim", SIM_MUST_NOT_IMPORT) == []


def test_nothing_in_sim_reaches_up_into_the_cli() -> None:
    """Rendering and answers take data; only sim/cli.py is the command line."""
    g = graph(REPO, ["sim"])
    assert sorted(m for m, deps in g.items() if "rtalab.sim.cli" in deps) == []


# what sim/shared may import of sim: itself and what it stands on (the vocabulary, the policy
# and the scenario format)
SHARED_STANDS_ON = ("rtalab.sim.shared", "rtalab.sim.vocab", "rtalab.sim.policy",
                    "rtalab.sim.config", "rtalab.sim.dist", "rtalab.sim.scenario")


def imports_above(g: dict[str, set[str]], package: str, allowed: Iterable[str]
                  ) -> dict[str, list[str]]:
    """{module of ``package``: the modules of the tree it imports outside ``allowed``}."""
    allowed = tuple(allowed)
    found = {m: sorted(d for d in deps if not any(d == a or d.startswith(a + ".")
                                                  for a in allowed))
             for m, deps in g.items() if m == package or m.startswith(package + ".")}
    return {m: d for m, d in found.items() if d}


def test_shared_imports_nothing_above_it() -> None:
    """sim/shared is what simulated and load runs share: it never reaches up into the model,
    the runner, the sweep engine, the answers, the calibration, the report or the CLI."""
    assert imports_above(graph(REPO, ["sim"]), "rtalab.sim.shared", SHARED_STANDS_ON) == {}


def test_the_report_sits_above_the_answers_not_in_shared() -> None:
    """The report is an application over every folder kind: its own package, above the sweep
    engine and the answers, and nothing below it imports it."""
    mods = modules(REPO, ["sim"])
    assert not any(m.startswith("rtalab.sim.shared.report") for m in mods)
    assert "rtalab.sim.report.render" in mods
    g = graph(REPO, ["sim"])
    users = sorted(m for m, deps in g.items() if not m.startswith(("rtalab.sim.report",
                                                                   "rtalab.sim.cli"))
                   and any(d.startswith("rtalab.sim.report") for d in deps))
    assert users == []


def test_the_graph_sees_the_tree() -> None:
    """A check that reads nothing passes everything: the known edges must be there."""
    g = graph(REPO)
    assert "rtalab.sim.shared.summary" in g["rtalab.sim.runner"] | g["rtalab.sim.stream"]
    assert "rtalab.sim.shared.fmt" in g["rtalab.sim.report.runs"]  # from rtalab.sim.shared.fmt
                                                                   # import ...
    assert "rtalab.sim.shared.schema" in g["rtalab.sim.runner"]  # from rtalab.sim.shared import
                                                                 # schema as S
    assert "rtalab.sim.cli" in g["rtalab.benchmarks.sweep"]  # an import inside a function body
    assert len(g) > 150


def test_loadtests_never_imports_the_benchmarks() -> None:
    """The benchmarks stand above both packages: they add their commands to the load side's
    through the entry points ``serve.bench``, ``load.bench`` and ``check.bench``."""
    assert forbidden_imports(REPO, "loadtests", ["benchmarks"]) == []


def commands_added(path: Path) -> list[str]:
    """The names of the commands ``path`` adds itself: ``add_command(sub, "NAME", ...)``."""
    return [node.args[1].value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "add_command"
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)]


# each server package and the command it owns, added in its own cli.py
SERVER_COMMANDS = {"reasoner": "reasoner", "witness": "witness", "fuzz": "fuzz",
                   "chaos": "chaos", "check": "check", "loadrun": "run"}


def test_each_server_package_owns_its_command() -> None:
    """``loadtests/cli.py`` is only the ``serve`` group: each package's command is added by
    the package's own cli.py, and the group imports nothing of a package but its cli."""
    owned = {pkg: commands_added(REPO / "loadtests" / pkg / "cli.py") for pkg in SERVER_COMMANDS}
    assert {pkg: cmd for pkg, cmd in SERVER_COMMANDS.items() if cmd not in owned[pkg]} == {}
    group = REPO / "loadtests" / "cli.py"
    assert commands_added(group) == []
    assert sorted(n for n in imported_names(group, "rtalab.loadtests.cli", False)
                  if n.startswith("loadtests.") and not n.endswith(".cli")
                  and ".cli." not in n) == []


# a lazy import says why, with the figure measured: ``# lazy: +120 ms (matplotlib) off ...``
LAZY = re.compile(r"#\s*lazy:.*\d")


def uncommented_lazy_imports(root: Path, packages: Iterable[str] = ("sim", "loadtests")
                             ) -> list[str]:
    """``file:line`` of every import inside a function body that carries no ``# lazy:``
    comment with a figure, on its own first line or on the line above (a run of imports, blank
    lines apart at most, shares the comment above the first)."""
    bad: list[tuple[str, int]] = []
    for path, _ in modules(root, packages).values():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for block in ast.walk(fn):
                for body in (getattr(block, f, None) for f in ("body", "orelse", "finalbody")):
                    if not isinstance(body, list):
                        continue
                    covered = False
                    prev: ast.stmt | None = None
                    for st in body:
                        if not isinstance(st, ast.Import | ast.ImportFrom):
                            prev = st
                            continue
                        own = LAZY.search(lines[st.lineno - 1]) is not None
                        above = st.lineno > 1 and LAZY.search(lines[st.lineno - 2]) is not None \
                            and lines[st.lineno - 2].lstrip().startswith("#")
                        run = (isinstance(prev, ast.Import | ast.ImportFrom) and covered
                               and not any(s.strip() for s in
                                           lines[(prev.end_lineno or 0):st.lineno - 1]))
                        covered = own or above or run
                        if not covered:
                            bad.append((str(path.relative_to(root)), st.lineno))
                        prev = st
    return [f"{f}:{n}" for f, n in sorted(set(bad))]


def test_every_function_level_import_says_why_it_is_lazy() -> None:
    """Imports are at module level, except where a lazy one is measured to matter (start-up,
    a heavy package only one path needs, gevent's patching order); that one says so."""
    assert uncommented_lazy_imports(REPO) == []


# --------------------------------------------------------------------------- the checker


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("files, expected", [
    # a planted cycle through a lazy (function-level) import
    ({"sim/__init__.py": "", "sim/a.py": "from rtalab.sim.b import f\n",
      "sim/b.py": "def f():\n    from rtalab.sim import a\n"},
     [["rtalab.sim.a", "rtalab.sim.b"]]),
    # a three-module cycle with a relative import
    ({"sim/__init__.py": "", "sim/p/__init__.py": "", "sim/p/x.py": "from . import y\n",
      "sim/p/y.py": "import rtalab.sim.z\n", "sim/z.py": "from rtalab.sim.p.x import X\n"},
     [["rtalab.sim.p.x", "rtalab.sim.p.y", "rtalab.sim.z"]]),
    # a package __init__ re-exporting its module, which imports a sibling: no cycle
    ({"sim/__init__.py": "", "sim/c/__init__.py": "from rtalab.sim.c.run import go\n",
      "sim/c/run.py": "from rtalab.sim.c import rules as R\n", "sim/c/rules.py": "X = 1\n"},
     []),
    # one-way imports only: no cycle
    ({"sim/__init__.py": "", "sim/a.py": "import rtalab.sim.b\n", "sim/b.py": "import os\n"},
     []),
])
def test_cycle_checker_finds_planted_cycles_and_no_false_ones(
        tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    assert cycles(graph(_tree(tmp_path, files), ["sim"])) == expected


BARE = "sim"  # spelt apart, or tests/oneoff/namespace.py would prefix it in these strings


def test_a_path_left_behind_by_a_move_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"sim/__init__.py": "", "sim/shared/__init__.py": "",
                            "sim/shared/fmt.py": "X = 1\n",
                            "sim/cli.py": "from rtalab.sim.shared.fmt import X\n"
                                          "from rtalab.sim.shared import fmt\n"
                                          "def f():\n    from rtalab.sim.fmt import X\n"
                                          f"def g():\n    from {BARE}.shared.fmt import X\n"})
    # a path left behind, and the old bare name (the same module under a second name)
    assert unresolved_imports(root, ["sim"]) == ["rtalab.sim.cli -> rtalab.sim.fmt.X",
                                                 f"rtalab.sim.cli -> {BARE}.shared.fmt.X"]


def test_one_way_rule_catches_a_planted_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"sim/__init__.py": "",
                            "sim/ok.py": "import numpy\nfrom rtalab.sim import ok2\n",
                            "sim/ok2.py": "",
                            "sim/bad.py": "def f():\n"
                                          "    from rtalab.loadtests.common import procs\n",
                            "sim/web.py": "import uvicorn.server\n"})
    assert forbidden_imports(root, "sim", SIM_MUST_NOT_IMPORT) == [
        "rtalab.sim.bad -> rtalab.loadtests.common.procs", "rtalab.sim.web -> uvicorn.server"]


def test_layer_rule_catches_shared_reaching_up(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"sim/__init__.py": "", "sim/shared/__init__.py": "",
                            "sim/shared/a.py": "from rtalab.sim.shared import b\n"
                                               "import rtalab.sim.policy\n",
                            "sim/shared/b.py": "def f():\n    from rtalab.sim.sweep import X\n",
                            "sim/policy.py": "", "sim/sweep.py": "X = 1\n"})
    assert imports_above(graph(root, ["sim"]), "rtalab.sim.shared", SHARED_STANDS_ON) == {
        "rtalab.sim.shared.b": ["rtalab.sim.sweep"]}


def test_command_ownership_check_sees_a_command_left_in_the_group(tmp_path: Path) -> None:
    group = _tree(tmp_path, {"cli.py": "from x import add_command\n"
                                       "def register(sub):\n"
                                       "    add_command(sub, 'reasoner', f, g)\n"})
    assert commands_added(group / "cli.py") == ["reasoner"]


def test_a_planted_benchmarks_import_in_loadtests_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"loadtests/__init__.py": "", "loadtests/check/__init__.py": "",
                            "loadtests/check/cli.py":
                                "def f():\n    from rtalab.benchmarks.check import run\n"})
    assert forbidden_imports(root, "loadtests", ["benchmarks"]) == [
        "rtalab.loadtests.check.cli -> rtalab.benchmarks.check.run"]


def test_package_cycle_without_a_module_cycle_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"sim/__init__.py": "", "sim/a/__init__.py": "",
                            "sim/b/__init__.py": "", "sim/a/x.py": "from rtalab.sim.b import y\n",
                            "sim/b/y.py": "", "sim/b/z.py": "def f():\n    import rtalab.sim.a.w\n",
                            "sim/a/w.py": "", "sim/top.py": "import rtalab.sim.a.x\n"})
    assert cycles(graph(root, ["sim"])) == []
    assert cycles(package_graph(root, ["sim"])) == [["rtalab.sim.a", "rtalab.sim.b"]]


def test_a_lazy_import_without_its_reason_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"sim/__init__.py": "", "sim/a.py": (
        "import os\n"
        "def f():\n"
        "    # lazy: +300 ms (scipy) off importing a\n"
        "    import scipy\n"
        "    from scipy import stats\n"       # the run under one comment
        "    x = 1\n"
        "    import json\n"                   # a new run: no comment
        "def g():\n"
        "    import pandas  # lazy: +400 ms (pandas)\n"
        "    if x:\n"
        "        import numpy  # lazy: a reason without its figure\n")})
    assert uncommented_lazy_imports(root, ["sim"]) == ["sim/a.py:7", "sim/a.py:11"]
