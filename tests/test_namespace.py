"""One namespace: the distribution installs ``rtalab.sim``, ``rtalab.loadtests`` and
``rtalab.benchmarks`` (the folders ``sim/``, ``loadtests/``, ``benchmarks/`` at the root,
mapped by ``[tool.setuptools.package-dir]``), and nothing imports them by their bare names
(a module imported under two names is two modules: two classes, two module states).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.oneoff import namespace

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("sim", "loadtests", "benchmarks")
# not read: the environment, run outputs, build output, the type checker's links (typecheck/)
SKIP_DIRS = {".venv", ".git", "results", "build", "typecheck", "__pycache__", "node_modules"}


def _pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def tree_packages(root: Path) -> list[str]:
    """``rtalab`` and ``rtalab.<folder path>`` of every folder with an ``__init__.py``."""
    out = ["rtalab"]
    for folder in FOLDERS:
        for init in sorted((root / folder).rglob("__init__.py")):
            out.append(".".join(["rtalab", *init.parent.relative_to(root).parts]))
    return sorted(out)


def data_files(root: Path) -> list[str]:
    """Every file under the folders that is not Python source (what package data must hold)."""
    return sorted(p.relative_to(root).as_posix() for folder in FOLDERS
                  for p in (root / folder).rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc")
                  and "__pycache__" not in p.parts)


def python_files(root: Path) -> list[Path]:
    """The .py files of the repository (links and the skipped folders left out)."""
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if SKIP_DIRS.isdisjoint(rel.parts) and not any(
                q.is_symlink() for q in [p, *p.parents] if root in q.parents):
            out.append(p)
    return out


def bare_imports(source: str, where: str) -> list[str]:
    """``where:line: name`` of every absolute import of ``sim``, ``loadtests`` or
    ``benchmarks`` by its bare name (function bodies included)."""
    bad = []
    for node in ast.walk(ast.parse(source, where)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        bad += [(node.lineno, n) for n in names if n.split(".")[0] in FOLDERS]
    return [f"{where}:{line}: {n}" for line, n in sorted(bad)]


def notebook_sources(path: Path) -> str:
    """The code cells of a notebook as one module (IPython's magics and shell lines left out)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            src = cell["source"]
            src = "".join(src) if isinstance(src, list) else src
            lines += [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the package list


def test_the_wheel_lists_every_package_of_the_tree() -> None:
    """A new subpackage (a folder with an __init__.py) missing from the list would be left
    out of the wheel: installed, its imports fail."""
    setuptools = _pyproject()["tool"]["setuptools"]
    assert sorted(setuptools["packages"]) == tree_packages(REPO)
    assert setuptools["package-dir"] == {"rtalab": "rtalab", **{f"rtalab.{f}": f
                                                              for f in FOLDERS}}


def test_a_package_left_out_of_the_list_is_seen(tmp_path: Path) -> None:
    for f in ("sim/__init__.py", "sim/new/__init__.py", "sim/new/x.py", "loadtests/__init__.py",
              "benchmarks/__init__.py", "sim/shared/templates/t.j2"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    assert tree_packages(tmp_path) == ["rtalab", "rtalab.benchmarks", "rtalab.loadtests",
                                       "rtalab.sim", "rtalab.sim.new"]
    assert data_files(tmp_path) == ["sim/shared/templates/t.j2"]


def _package_data_matches(rel: str) -> bool:
    """Whether ``[tool.setuptools.package-data]`` puts the file ``rel`` (under a folder) in
    the wheel: a glob of the package of the deepest folder it is under."""
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    path = Path(rel)
    for depth in range(len(path.parts) - 1, 0, -1):
        pkg = ".".join(["rtalab", *path.parts[:depth]])
        inside = Path(*path.parts[depth:])
        if any(inside.match(g) and len(inside.parts) == len(Path(g).parts)
               for g in data.get(pkg, [])):
            return True
    return False


def test_every_data_file_is_package_data() -> None:
    """Templates, scenario TOMLs, anything non-.py the code reads: in the wheel."""
    files = data_files(REPO)
    assert "sim/scenarios/baseline.toml" in files and "sim/report/templates/report.html.j2" in files
    assert [f for f in files if not _package_data_matches(f)] == []


# --------------------------------------------------------------------------- no bare names


def test_no_module_imports_a_bare_package_name() -> None:
    bad = []
    for p in python_files(REPO):
        bad += bare_imports(p.read_text(encoding="utf-8"), p.relative_to(REPO).as_posix())
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        bad += bare_imports(notebook_sources(nb), nb.relative_to(REPO).as_posix())
    assert bad == []


def test_a_planted_bare_import_is_found() -> None:
    src = ("import os\nfrom rtalab.sim import policy\nimport rtalab.loadtests.check\n"
           "def f():\n    from sim.policy import decide\n"
           "import benchmarks.run as R\nfrom loadtests import cli\nfrom . import x\n")
    assert bare_imports(src, "x.py") == ["x.py:5: sim.policy", "x.py:6: benchmarks.run",
                                         "x.py:7: loadtests"]


def test_nothing_names_a_module_by_its_old_path() -> None:
    """The rewrite (tests/oneoff/namespace.py) has nothing left to do anywhere: no old module
    path in code, strings (``-m`` targets, mock targets, entry points), notebooks or docs."""
    assert namespace.main(["--check"]) == 0


def test_the_rewrite_finds_old_paths_and_leaves_the_rest() -> None:
    rules = namespace.Rules(namespace.children(REPO))
    text = ("python -m sim.cli; sim/model/live.py; sim.policy.decide; the sim; sim.mean; "
            "benchmarks.md; benchmarks/sim.py; rtalab.sim.policy; loadtests.chaos:main; "
            r"match=r'loadtests\.live\.nope'; rtalab\.sim\.cli")
    assert rules.text(text) == (
        "python -m rtalab.sim.cli; sim/model/live.py; rtalab.sim.policy.decide; the sim; "
        "sim.mean; benchmarks.md; benchmarks/sim.py; rtalab.sim.policy; "
        r"rtalab.loadtests.chaos:main; match=r'rtalab\.loadtests\.live\.nope'; rtalab\.sim\.cli")
    code = ("import sim\nimport sim.model.reasoner as R\nfrom sim.shared import fmt\n"
            "sim.mean = 1\nx = sim.policy\n")
    assert namespace.python(code, rules) == (
        "from rtalab import sim\nimport rtalab.sim.model.reasoner as R\n"
        "from rtalab.sim.shared import fmt\nsim.mean = 1\nx = sim.policy\n")
    once = namespace.python(code, rules)
    assert namespace.python(once, rules) == once


# --------------------------------------------------------------------------- rtalab/__init__


def _import_in(site: Path, code: str) -> dict:  # type: ignore[type-arg]
    """Run ``code`` with only ``site`` on the path (no site-packages: no installed rtalab)
    and return the JSON it prints."""
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(site)}, cwd=site, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)  # type: ignore[no-any-return]


SHOW = ("import json, rtalab, rtalab.sim as s; "
        "print(json.dumps({'path': list(rtalab.__path__), 'sim': s.__file__}))")


def test_a_source_checkout_finds_the_folders_beside_rtalab(tmp_path: Path) -> None:
    (tmp_path / "rtalab").mkdir()
    (tmp_path / "rtalab" / "__init__.py").write_bytes((REPO / "rtalab" / "__init__.py")
                                                      .read_bytes())
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "__init__.py").write_text("")
    got = _import_in(tmp_path, SHOW)
    assert got == {"path": [str(tmp_path / "rtalab"), str(tmp_path)],
                   "sim": str(tmp_path / "sim" / "__init__.py")}


def test_an_installed_rtalab_never_reaches_beside_itself(tmp_path: Path) -> None:
    """Installed, rtalab/sim is a real folder; a foreign ``sim`` beside it is not used."""
    for d in ("rtalab/sim", "sim"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "rtalab" / "__init__.py").write_bytes((REPO / "rtalab" / "__init__.py")
                                                      .read_bytes())
    got = _import_in(tmp_path, SHOW)
    assert got == {"path": [str(tmp_path / "rtalab")],
                   "sim": str(tmp_path / "rtalab" / "sim" / "__init__.py")}


def test_the_command_line_imports_nothing_by_a_bare_name(tmp_path: Path) -> None:
    """From outside the repository: the installed package, and no bare ``sim`` loaded."""
    code = ("import json, sys, rtalab.sim.cli as c, rtalab.loadtests.check.run, "
            "rtalab.benchmarks.cli; c.main(['sim', 'presets']); "
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FOLDERS!r})))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "baseline" in p.stdout
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


# --------------------------------------------------------------------------- the wheel


@pytest.mark.slow
def test_the_wheel_holds_only_rtalab_and_its_data(tmp_path: Path) -> None:
    # built from a copy: setuptools reuses an old build/ folder of the tree (stale packages)
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "results", "build", "*.egg-info", "__pycache__", ".*_cache"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (wheel,) = tmp_path.glob("rtalab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    (info,) = [t for t in tops if t.endswith(".dist-info")]
    assert tops == {"rtalab", info}
    sources = [p.relative_to(REPO).as_posix() for f in FOLDERS for p in (REPO / f).rglob("*.py")
               if "__pycache__" not in p.parts]
    expected = {f"rtalab/{rel}" for rel in [*sources, *data_files(REPO)]} | {"rtalab/__init__.py"}
    assert {n for n in names if not n.startswith(info)} == expected
    entry = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "rtalab = rtalab.sim.cli:main" in entry
    for line in entry.splitlines():
        if " = " in line:
            module = line.split(" = ")[1].split(":")[0]
            assert (f"{module.replace('.', '/')}.py" in names
                    or f"{module.replace('.', '/')}/__init__.py" in names), line
