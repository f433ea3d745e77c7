"""One-off, re-runnable: the module paths of the tree become ``rtalab.*``.

The folders ``sim/``, ``loadtests/`` and ``benchmarks/`` stay where they are; the
distribution installs them as ``rtalab.sim``, ``rtalab.loadtests`` and ``rtalab.benchmarks``
(``[tool.setuptools.package-dir]``, docs/decisions.md).  This script rewrites every place
that names one of their modules by its old dotted path:

- ``.py`` files, read with :mod:`tokenize`: in code, the ``import`` and ``from ... import``
  statements (``import sim`` alone becomes ``from rtalab import sim``; where a file binds the
  bare name by ``import sim.x``, its attribute chains ``sim.x.f`` follow); in strings and
  comments, the dotted module paths (``"-m", "loadtests.reasoner"``, mock targets,
  ``find_spec`` names, ``"sim.cli:main"``) and the import statements a string holds;
- notebooks: the source of every cell (read and written as JSON);
- the other text files (docs, README, Makefile, pyproject.toml, CI): the same text rules.

A dotted path is rewritten only when its second part is a module or folder of that package
in the tree (``sim.policy``, ``loadtests.chaos``), so file paths (``sim/model/live.py``),
file names (``benchmarks.md``, ``benchmarks/sim.py``), words (``the sim``) and attributes of
variables that happen to be called ``sim`` (``sim.mean``) are left alone.  Code is never
rewritten by a regular expression, only by its tokens.  Running it twice changes nothing the
second time (``rtalab.sim.x`` is preceded by a dot, so it is never matched again).

    .venv/bin/python tests/oneoff/namespace.py [--check] [--root DIR]

``--check``: change nothing, list the files that would change, exit 1 if any.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tokenize
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "rtalab"
PACKAGES = ("sim", "loadtests", "benchmarks")
# text files read by the text rules (besides .py and .ipynb)
TEXT_SUFFIXES = {".md", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".j2", ".sh", ""}
# never rewritten: this script and its test (their examples name the old paths on purpose),
# the profile's spec (a verbatim copy, tests/test_spec_copy.py), run outputs
SKIP_PREFIXES = ("tests/oneoff/namespace.py", "tests/test_namespace.py", "docs/spec/",
                 "results/")


def children(root: Path) -> dict[str, set[str]]:
    """{package: the names of its modules and folders}: what may follow ``package.``."""
    out: dict[str, set[str]] = {}
    for pkg in PACKAGES:
        names = set()
        for p in (root / pkg).iterdir():
            if p.is_dir() and p.name != "__pycache__" and not p.name.startswith("."):
                names.add(p.name)
            elif p.suffix == ".py":
                names.add(p.stem)
        out[pkg] = names
    return out


class Rules:
    """The text rules for one tree (the module names its packages have)."""

    def __init__(self, kids: dict[str, set[str]]) -> None:
        def alts(dot: str) -> str:
            return "|".join(
                rf"{re.escape(pkg)}{dot}(?=(?:{'|'.join(sorted(map(re.escape, names)))})(?!\w))"
                for pkg, names in kids.items() if names)

        pkgs = "|".join(PACKAGES)
        # sim.policy.decide -> rtalab.sim.policy.decide (not after a word, a dot, / or -)
        not_after = r"(?<![\w.\-/])"
        self.dotted = re.compile(not_after + "(?:" + alts(r"\.") + ")")
        # the same path in a regular expression: sim\.policy -> rtalab\.sim\.policy
        self.escaped = re.compile(not_after + "(?:" + alts(r"\\\.") + ")")
        # from sim import x -> from rtalab.sim import x
        self.from_bare = re.compile(rf"\bfrom(\s+)({pkgs})(\s+import)\b")
        # import sim as s -> import rtalab.sim as s; import sim (alone) -> from rtalab import sim
        self.import_as = re.compile(rf"\bimport(\s+)({pkgs})(\s+as\s)")
        self.import_bare = re.compile(rf"\bimport ({pkgs})(?=[ \t]*(?:$|;|#|\\n|[\"']))",
                                      re.MULTILINE)

    def text(self, s: str) -> str:
        s = self.dotted.sub(lambda m: f"{NAMESPACE}.{m.group(0)}", s)
        s = self.escaped.sub(lambda m: f"{NAMESPACE}\\.{m.group(0)}", s)
        s = self.from_bare.sub(rf"from\1{NAMESPACE}.\2\3", s)
        s = self.import_as.sub(rf"import\1{NAMESPACE}.\2\3", s)
        return self.import_bare.sub(rf"from {NAMESPACE} import \1", s)


def _offsets(source: str) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def python(source: str, rules: Rules) -> str:
    """``source`` with its imports, its chains on a bare-bound package and its strings and
    comments rewritten (token spans replaced in the original text: nothing else moves)."""
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    starts = _offsets(source)

    def at(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    edits: list[tuple[int, int, str]] = []
    bound: set[str] = set()  # packages this file binds by their bare name (import sim.x)
    in_import: set[int] = set()  # indices of tokens inside import statements
    skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    i = 0
    while i < len(toks):
        t = toks[i]
        at_start = (i == 0 or toks[i - 1].type in (tokenize.NEWLINE, tokenize.INDENT,
                                                   tokenize.DEDENT, tokenize.NL)
                    or (toks[i - 1].type == tokenize.OP and toks[i - 1].string == ";"))
        if t.type == tokenize.NAME and t.string in ("import", "from") and at_start:
            j = i
            depth = 0
            stmt = []
            while j < len(toks) and toks[j].type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if toks[j].type == tokenize.OP and toks[j].string in "([{":
                    depth += 1
                elif toks[j].type == tokenize.OP and toks[j].string in ")]}":
                    depth -= 1
                elif toks[j].type == tokenize.OP and toks[j].string == ";" and depth == 0:
                    break
                if toks[j].type not in skip:
                    stmt.append(j)
                j += 1
            in_import.update(stmt)
            _import_statement(toks, stmt, at, edits, bound)
            i = j
            continue
        i += 1
    for k, t in enumerate(toks):
        if t.type in (tokenize.STRING, tokenize.COMMENT):
            new = rules.text(t.string)
            if new != t.string:
                edits.append((at(t.start), at(t.end), new))
        elif (t.type == tokenize.NAME and t.string in bound and k not in in_import
              and k + 1 < len(toks) and toks[k + 1].string == "."
              and not (k > 0 and toks[k - 1].string == ".")):
            edits.append((at(t.start), at(t.end), f"{NAMESPACE}.{t.string}"))
    out = source
    for a, b, new in sorted(edits, reverse=True):
        out = out[:a] + new + out[b:]
    return out


def _import_statement(toks: list[tokenize.TokenInfo], stmt: list[int],
                      at: Callable[[tuple[int, int]], int], edits: list[tuple[int, int, str]],
                      bound: set[str]) -> None:
    first = toks[stmt[0]]
    if first.string == "from":
        mod = toks[stmt[1]] if len(stmt) > 1 else None
        if mod is not None and mod.type == tokenize.NAME and mod.string in PACKAGES:
            edits.append((at(mod.start), at(mod.end), f"{NAMESPACE}.{mod.string}"))
        return
    # import a.b [as c], d ...: split at the commas
    items: list[list[int]] = [[]]
    for k in stmt[1:]:
        if toks[k].string == ",":
            items.append([])
        elif toks[k].string not in ("(", ")"):
            items[-1].append(k)
    for item in items:
        if not item or toks[item[0]].string not in PACKAGES:
            continue
        head = toks[item[0]]
        words = [toks[k].string for k in item]
        if len(items) == 1 and words == [head.string]:
            # import sim -> from rtalab import sim (binds the same name)
            edits.append((at(first.start), at(head.end), f"from {NAMESPACE} import {head.string}"))
            continue
        edits.append((at(head.start), at(head.end), f"{NAMESPACE}.{head.string}"))
        if "as" not in words:
            bound.add(head.string)


def notebook(text: str, rules: Rules) -> str:
    """A notebook with the text rules applied to every cell's source, written back as it
    was written (one-space indent, non-ASCII kept, trailing newline)."""
    nb = json.loads(text)
    changed = False
    for cell in nb.get("cells", []):
        src = cell.get("source", [])
        lines = [src] if isinstance(src, str) else src
        new = [rules.text(line) for line in lines]
        if new != lines:
            cell["source"] = new[0] if isinstance(src, str) else new
            changed = True
    if not changed:
        return text
    out = json.dumps(nb, indent=1, ensure_ascii=False)
    return out + "\n" if text.endswith("\n") else out


# --------------------------------------------------------------------------- long lines

LIMIT = 100  # [tool.ruff] line-length


def _space_before(line: str, lo: int, hi: int) -> int | None:
    """The last space of ``line[lo:hi]`` to break at, outside a ``literal`` if there is one."""
    ticks = 0  # runs of backticks so far: odd = inside a literal
    outside, anywhere = None, None
    for k, ch in enumerate(line[:hi]):
        if ch == "`":
            ticks += k == 0 or line[k - 1] != "`"
        elif ch == " " and k > lo and line[k - 1] != " ":
            anywhere = k
            if ticks % 2 == 0:
                outside = k
    return outside if outside is not None else anywhere


def _is_docstring(toks: list[tokenize.TokenInfo], k: int) -> bool:
    """A string statement on its own (a docstring, or a bare string): its lines may break."""
    skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    before = next((t for t in reversed(toks[:k]) if t.type not in skip), None)
    after = next((t for t in toks[k + 1:] if t.type not in {tokenize.NL, tokenize.COMMENT}), None)
    return ((before is None or before.type == tokenize.NEWLINE
             or (before.type == tokenize.OP and before.string == ":"))
            and after is not None and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER))


_BULLET = re.compile(r"^(\s*)([-*] |\d+\. )")


def _split(toks: list[tokenize.TokenInfo], row: int, line: str, nxt: str | None
           ) -> tuple[str, str, bool] | None:
    """``line`` (row ``row``) broken in two: (head, rest, whether ``rest`` took in ``nxt``,
    the line after, as the same paragraph of a docstring or comment, or more elements of the
    same bracket).  In a docstring, in a comment, or after a comma inside brackets (the rest
    aligned under the bracket's first element)."""
    for k, t in enumerate(toks):
        triple = t.string.lstrip("rRbBuU")[:3] in ('"""', "'''")
        if t.type == tokenize.STRING and t.start[0] <= row <= t.end[0] and triple:
            if not _is_docstring(toks, k):
                return None
            lo = t.start[1] + 3 if t.start[0] == row else len(line) - len(line.lstrip())
            hi = min(LIMIT + 1, t.end[1] if t.end[0] == row else len(line))
            at = _space_before(line, lo, hi)
            if at is None:
                return None
            indent = t.start[1] if t.start[0] == row else len(line) - len(line.lstrip())
            bullet = _BULLET.match(line)
            hang = indent + len(bullet.group(2)) if bullet and t.start[0] != row else indent
            joins = (nxt is not None and row < t.end[0] and nxt.strip() != ""
                     and not nxt.lstrip().startswith(('"""', "'''"))
                     and len(nxt) - len(nxt.lstrip()) == hang and not _BULLET.match(nxt))
            rest = " " * hang + line[at + 1:].lstrip()
            return line[:at].rstrip(), rest + " " + nxt.lstrip() if joins else rest, joins
        if t.type == tokenize.COMMENT and t.start[0] == row:
            c = t.start[1]
            at = _space_before(line, c + 2, LIMIT + 1)
            if at is None:
                break
            alone = line[:c].strip() == ""
            joins = (alone and nxt is not None and nxt[:c].strip() == ""
                     and nxt[c:].startswith("# ") and not nxt[c + 2:].startswith(" "))
            rest = " " * c + "# " + line[at + 1:].lstrip()
            return line[:at].rstrip(), rest + " " + nxt[c + 2:] if joins else rest, joins
    stack: list[int] = []  # the column each open bracket's elements start at
    best = None
    for k, t in enumerate(toks):
        if t.start[0] > row:
            break
        if t.type == tokenize.NEWLINE:
            stack = []
        elif t.type == tokenize.OP and t.string in "([{":
            after = toks[k + 1]
            stack.append(after.start[1] if after.start[0] == t.start[0]
                         and after.type not in (tokenize.NL, tokenize.COMMENT) else -1)
        elif t.type == tokenize.OP and t.string in ")]}":
            if stack:
                stack.pop()
        elif (t.type == tokenize.OP and t.string == "," and t.start[0] == row and stack
              and stack[-1] >= 0 and t.end[1] <= LIMIT and t.end[1] < len(line.rstrip())):
            best = (t.end[1], stack[-1], len(stack))
    if best is None:
        return None
    at, indent, depth = best
    # the rest joins the next line when that line holds more elements of the same bracket
    open_at_end = [0]
    for t in toks:
        if t.start[0] == row and t.start[1] >= at and t.type == tokenize.OP:
            if t.string in "([{":
                open_at_end[0] += 1
            elif t.string in ")]}":
                open_at_end[0] -= 1
    joins = (open_at_end[0] == 0 and nxt is not None and nxt.strip() != ""
             and len(nxt) - len(nxt.lstrip()) == indent and not nxt.lstrip().startswith("#")
             and depth > 0 and not line.rstrip().endswith(("(", "[", "{")))
    rest = " " * indent + line[at:].lstrip()
    return line[:at].rstrip(), rest + " " + nxt.lstrip() if joins else rest, joins


def wrap(new: str, old: str) -> str:
    """``new`` with each line the rewrite made longer than :data:`LIMIT` broken (over and
    over, the rest flowing into the next line of its paragraph or bracket), where
    :func:`_split` can; the lines it cannot are left (ruff names them)."""
    before = set(old.splitlines())
    stuck: set[int] = set()  # rows _split cannot break
    for _ in range(200):
        lines = new.splitlines(keepends=True)
        row = next((r for r, line in enumerate(lines, 1)
                    if len(line.rstrip("\r\n")) > LIMIT and line.rstrip("\r\n") not in before
                    and r not in stuck), None)
        if row is None:
            break
        toks = list(tokenize.generate_tokens(io.StringIO(new).readline))
        line = lines[row - 1].rstrip("\r\n")
        end = lines[row - 1][len(line):] or "\n"
        nxt = lines[row].rstrip("\r\n") if row < len(lines) else None
        parts = _split(toks, row, line, nxt)
        if parts is None or len(parts[0]) >= len(line):
            stuck.add(row)
            continue
        head, rest, joined = parts
        lines[row - 1:row + 1 if joined else row] = [head + end, rest + end]
        new = "".join(lines)
    return new


def tracked(root: Path) -> list[str]:
    """The files git tracks, and those it would track (not ignored), under ``root``."""
    p = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=root, capture_output=True, check=True)
    return sorted({f for f in p.stdout.decode().split("\0") if f})


def rewrite(rel: str, text: str, rules: Rules) -> str:
    suffix = Path(rel).suffix
    if suffix == ".py":
        new = python(text, rules)
        return wrap(new, text) if new != text else new
    if suffix == ".ipynb":
        return notebook(text, rules)
    if suffix in TEXT_SUFFIXES:
        return rules.text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tests/oneoff/namespace.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would")
    args = ap.parse_args(argv)
    rules = Rules(children(args.root))
    changed: dict[str, str] = {}  # file: its text before
    for rel in tracked(args.root):
        path = args.root / rel
        if rel.startswith(SKIP_PREFIXES) or not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file
        new = rewrite(rel, text, rules)
        if new != text:
            changed[rel] = text
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "would change" if args.check else "changed"
    print(f"{len(changed)} files {verb}", *changed, sep="\n  ")
    py = [rel for rel in changed if rel.endswith(".py")]
    if py and not args.check:
        # import blocks re-sorted (rtalab.* is first-party: [tool.ruff.lint.isort])
        ruff = Path(sys.executable).with_name("ruff")
        subprocess.run([str(ruff) if ruff.exists() else "ruff", "check", "--fix", "--quiet",
                        "--select", "I001", *py], cwd=args.root, check=False)
        long = [f"{rel}:{n}" for rel in py
                for n, line in enumerate((args.root / rel).read_text("utf-8").splitlines(), 1)
                if len(line) > LIMIT and line not in changed[rel].splitlines()]
        if long:
            print(f"lines still over {LIMIT} characters (break them by hand):", *long,
                  sep="\n  ")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
