"""Every relative link and image in the README and docs/**/*.md points at a file that exists,
and every ``#anchor`` at a heading of its target; no page names an issue number; every
``NAME.md`` the code and docs mention is a file of the repo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def ours(md: Path) -> bool:
    """Written by this project (docs/spec/ holds copies of the profile's own documents)."""
    return "spec" not in md.relative_to(REPO).parts[:2] or md.name == "README.md"


# Not files of the repo, on purpose: the profile's spec.md (cited by errors.md), the gRPC
# document the grpc backoff variant follows, the table `rtalab bench` writes into its run
# folder, and a metavar.
ELSEWHERE = {"spec.md", "connection-backoff.md", "bench.md", "FILE.md"}
MD_NAME = re.compile(r"(?<![\w/.:-])((?:\.\./)*[\w./-]*?[A-Za-z][\w-]*\.md)\b")


def missing_md_names(text: str, known: set[str]) -> list[str]:
    """The ``*.md`` names in ``text`` that are neither a known repo path nor a known basename."""
    out = []
    for name in MD_NAME.findall(text):
        tail = name.lstrip("./")
        if (name.split("/")[-1] in ELSEWHERE or tail in known or tail.split("/")[-1] in known
                or any(k.endswith("/" + tail) for k in known)):
            continue
        out.append(name)
    return out


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


ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&/])#\d+\b")


@pytest.mark.parametrize("md", [m for m in docs() if ours(m)],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_names_an_issue_number(md: Path) -> None:
    text = FENCE.sub("", md.read_text(encoding="utf-8"))
    assert ISSUE.findall(text) == []


def test_the_issue_pattern_sees_issue_numbers() -> None:
    text = "Before issue 16 it was; issues 3, (#42) and `#7` but not &#42; or p#1 or x.md#a"
    assert ISSUE.findall(text) == ["issue 16", "issues 3", "#42", "#7"]


def test_every_md_file_named_in_code_and_docs_exists() -> None:
    """``LEDGER.md``, ``NOTES.md``, ``docs/reports.md``: a name a reader cannot open is a
    broken promise, whether in a docstring, a comment or a page."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    known = {f for f in files if f.endswith(".md")}
    known |= {f.split("/")[-1] for f in known}
    bad = []
    for f in files:
        if not f.endswith((".py", ".md", ".toml", ".j2", ".ipynb", ".cfg", ".txt")) \
                or f.startswith("docs/spec/") or f == "tests/test_doc_links.py":
            continue
        text = (REPO / f).read_text(encoding="utf-8", errors="replace")
        bad += [f"{f}: {name}" for name in missing_md_names(text, known)]
    assert bad == []


def test_the_md_name_check_sees_missing_files() -> None:
    known = {"docs/ledger.md", "ledger.md", "README.md", "results/README.md"}
    text = ("see LEDGER.md and docs/ledger.md, ../README.md, results/README.md, "
            "spec.md, docs/reports.md, https://example.com/x.md, NOTES.md.")
    assert missing_md_names(text, known) == ["LEDGER.md", "docs/reports.md", "NOTES.md"]


def test_readme_is_a_front_door() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\bissue #?\d+|#\d+\b|DECISIONS|NOTES\.md|LEDGER\.md", text)
    assert text.index("make demo") < text.index("## What it answers")
    assert len(text.splitlines()) < 150
