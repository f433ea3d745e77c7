"""Every ``# type: ignore`` in ``sim`` and ``loadtests`` names its error code and says why.

mypy runs strict on both packages (``[tool.mypy]`` in pyproject.toml, ``make test``), with
``warn_unused_ignores``: an ignore that no longer hides an error fails mypy.  What mypy
cannot check is the reason, so this test does: the only accepted form is

    ``<code>  # type: ignore[<code>, ...]  # <why it is safe here>``

on the line itself (a bare ``# type: ignore``, or one without a reason, fails).  Comments are
read with :mod:`tokenize`, so the pattern inside a string (as below) is no ignore.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "loadtests")
IGNORE = re.compile(r"type:\s*ignore")
WITH_REASON = re.compile(r"^#\s*type:\s*ignore\[[a-z][a-z-]*(?:,\s*[a-z][a-z-]*)*\]\s+#\s*\S")


def ignore_comments(source: str) -> list[tuple[int, str]]:
    """(line, comment) of every comment of ``source`` that says ``type: ignore``."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(tok.start[0], tok.string) for tok in tokens
            if tok.type == tokenize.COMMENT and IGNORE.search(tok.string)]


def unexplained(source: str) -> list[tuple[int, str]]:
    """The ignores of ``source`` without an error code or without a reason after them."""
    return [(line, c) for line, c in ignore_comments(source) if not WITH_REASON.match(c)]


@pytest.mark.parametrize("comment", [
    "# type: ignore[arg-type]  # TurnRules types the ids Hashable",
    "# type: ignore[arg-type, return-value]  # read-only, as build() makes dicts",
])
def test_an_ignore_with_its_code_and_reason_passes(comment: str) -> None:
    assert unexplained(f"x = f()  {comment}\n") == []


@pytest.mark.parametrize("comment", [
    "# type: ignore",
    "# type: ignore[arg-type]",
    "# type: ignore[arg-type]  #",
    "# type: ignore  # no code",
    "# noqa: E501  # type: ignore[misc]  # not first",
])
def test_an_ignore_without_code_or_reason_fails(comment: str) -> None:
    assert unexplained(f"x = f()  {comment}\n") == [(1, comment)]


def test_the_pattern_in_a_string_is_no_ignore() -> None:
    assert ignore_comments('text = "# type: ignore"\n') == []


def test_every_ignore_in_sim_and_loadtests_says_why() -> None:
    files = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
    assert len(files) > 100  # the packages were found
    bad = [f"{path.relative_to(REPO)}:{line}: {comment}"
           for path in files for line, comment in unexplained(path.read_text(encoding="utf-8"))]
    assert not bad, ("a `# type: ignore` needs its error code and a reason on the same line, "
                     "`# type: ignore[code]  # why`:\n" + "\n".join(bad))
