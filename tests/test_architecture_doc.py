"""docs/ARCHITECTURE.md names every module of ``sim``, ``loadtests`` and ``benchmarks``: a
module added without a word in the code map fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def unnamed_modules(doc: str, root: Path) -> list[str]:
    """The modules under ``root``'s three packages whose name the code map never says."""
    words = set(re.findall(r"[A-Za-z_][\w]*", doc))
    out = []
    for pkg in ("sim", "loadtests", "benchmarks"):
        for py in sorted((root / pkg).rglob("*.py")):
            if py.stem in ("__init__", "__main__") or "templates" in py.parts:
                continue
            if py.stem not in words:
                out.append(str(py.relative_to(root)))
    return out


def test_the_code_map_names_every_module() -> None:
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert unnamed_modules(doc, REPO) == []


def test_a_module_left_out_is_seen(tmp_path: Path) -> None:
    for f in ("sim/runner.py", "sim/model/clock.py", "loadtests/check/rules.py",
              "benchmarks/run.py", "sim/__init__.py", "loadtests/chaos/__main__.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    doc = "runner.py does it; model/ is: world, clock; run.py runs; rulesets are not rules_x"
    assert unnamed_modules(doc, tmp_path) == ["loadtests/check/rules.py"]
