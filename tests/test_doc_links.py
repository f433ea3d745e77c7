"""Every relative link and image in the README and docs/*.md points at a file that exists,
and every ``#anchor`` at a heading of its target; the README names no issue numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def anchors(md: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in FENCE.sub("", md.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def broken_links(md: Path, root: Path = REPO) -> list[str]:
    """The relative links of ``md`` whose file (or heading) does not exist."""
    bad = []
    text = FENCE.sub("", md.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            bad.append(f"{md.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{md.relative_to(root)}: {target} (no such heading)")
    return bad


@pytest.mark.parametrize("md", docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(md: Path) -> None:
    assert broken_links(md) == []


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# Here it is\n", encoding="utf-8")
    (tmp_path / "pic.png").write_bytes(b"")
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](there.md) ![ok](pic.png) [ok](there.md#here-it-is) "
                   "[ok](https://example.com/x.md) [gone](missing.md) "
                   "[bad anchor](there.md#elsewhere) ![gone](figures/none.png)\n"
                   "```\n[in code](not-a-link.md)\n```\n", encoding="utf-8")
    assert broken_links(doc, tmp_path) == ["doc.md: missing.md (no such file)",
                                           "doc.md: there.md#elsewhere (no such heading)",
                                           "doc.md: figures/none.png (no such file)"]


def test_readme_is_a_front_door() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\bissue #?\d+|#\d+\b|DECISIONS|NOTES\.md|LEDGER\.md", text)
    assert text.index("make demo") < text.index("## What it answers")
    assert len(text.splitlines()) < 150
