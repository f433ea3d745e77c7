"""``rtalab results list | prune``: what is in ``results/`` (size, kind, age, verdict) and
removing what is no longer needed (a dry run unless ``--yes``); and :func:`prune_records`,
with which the answer commands keep only what their report needs.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtalab.sim.shared.argtypes import UsageError, add_group, add_quiet
from rtalab.sim.shared.results import EXTRA_TABLES, RECORD_TABLES

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Entry:
    """One top-level item of a results folder."""

    path: Path
    kind: str
    size: int
    age_s: float
    verdict: str


def folder_size(path: Path) -> int:
    """Bytes of the files under ``path`` (a file: its own size); unreadable parts count 0."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _json(p: Path) -> dict[str, Any]:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _rows(p: Path) -> list[dict[str, str]]:
    try:
        with open(p, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def describe(path: Path) -> tuple[str, str]:
    """(kind, verdict) of one item: the verdict is one short phrase per kind."""
    # lazy: +772 ms (pandas, pyarrow) off importing manage
    from rtalab.sim.shared.compare import RunFolderError, folder_kind

    if path.is_file():
        return "file", path.suffix.lstrip(".") or "-"
    try:
        kind = folder_kind(path)
    except RunFolderError:
        if not (path / "meta.json").is_file():
            return "other", "not an rtalab folder"
        return "unfinished", str(_json(path / "meta.json").get("status") or "no results")
    if kind in ("run", "load"):
        meta = _json(path / "meta.json")
        if (path / "verdict.json").is_file():
            v = _json(path / "verdict.json")
            failed = v.get("failed") or []
            verdict = "PASS" if v.get("ok") else f"FAIL ({', '.join(map(str, failed))})"
        else:
            verdict = str(meta.get("status", "?"))
        return kind, verdict
    if kind == "storm":
        rows = _rows(path / "storm.csv")
        rec = sum(r.get("verdict") == "recovered" for r in rows)
        return kind, f"{rec}/{len(rows)} recovered"
    if kind == "capacity":
        rows = _rows(path / "capacity.csv")
        found = sum(bool(r.get("required")) for r in rows)
        return kind, f"answered {found}/{len(rows)} loads"
    if kind == "tune":
        rows = _rows(path / "candidates.csv")
        rec = any(r.get("recommended", "").lower() == "true" for r in rows)
        return kind, "recommendation" if rec else "no candidate met the constraints"
    spec = _json(path / "sweep.json")
    done = (path / "sweep.parquet").is_file()
    return kind, f"{len(spec.get('points') or [])} points" + ("" if done else ", unfinished")


def scan(root: Path, now: float | None = None) -> list[Entry]:
    """Every top-level item of ``root``, newest first (README.md left out)."""
    now = dt.datetime.now(dt.UTC).timestamp() if now is None else now
    out = []
    for p in root.iterdir():
        if p.name == "README.md" or p.name.startswith("."):
            continue
        kind, verdict = describe(p)
        out.append(Entry(p, kind, folder_size(p), max(0.0, now - p.stat().st_mtime), verdict))
    return sorted(out, key=lambda e: e.age_s)


def human_size(n: float) -> str:
    """Bytes as B / KiB / MiB / GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def human_age(s: float) -> str:
    """Seconds as a short age: 45 s, 12 min, 5 h, 3 d."""
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def parse_duration(text: str) -> float:
    """``30m``, ``12h``, ``7d``, ``2w`` -> seconds (argparse type)."""
    m = DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 12h, 7d or 2w, got {text!r}")
    return float(m.group(1)) * SECONDS[m.group(2)]


def _print(entries: list[Entry], title: str) -> None:
    # lazy: +48 ms (rich) off importing manage
    from rich.console import Console
    from rich.table import Table

    print(title)
    table = Table(box=None, pad_edge=False)
    table.add_column("age", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("verdict", overflow="fold")
    table.add_column("name", overflow="fold")
    for e in entries:
        table.add_row(human_age(e.age_s), human_size(e.size), e.kind, e.verdict, e.path.name)
    Console(soft_wrap=False).print(table)


def _root(args: argparse.Namespace) -> Path:
    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such folder (give --root DIR)")
    return root


def _select(entries: list[Entry], args: argparse.Namespace) -> list[Entry]:
    sel = entries
    if getattr(args, "kind", None):
        sel = [e for e in sel if e.kind == args.kind]
    if getattr(args, "older_than", None) is not None:
        sel = [e for e in sel if e.age_s > args.older_than]
    if getattr(args, "unfinished", False):
        sel = [e for e in sel if e.kind == "unfinished"]
    return sel


def cmd_list(args: argparse.Namespace) -> int:
    """``rtalab results list``."""
    entries = _select(scan(_root(args)), args)
    total = sum(e.size for e in entries)
    _print(entries, f"{args.root}: {len(entries)} item(s), {human_size(total)}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    """``rtalab results prune``: a dry run unless ``--yes``."""
    if args.older_than is None and not args.kind and not args.unfinished:
        raise UsageError("say what to prune: --older-than DURATION, --kind KIND and/or "
                         "--unfinished (nothing is removed without --yes)")
    entries = _select(scan(_root(args)), args)
    total = sum(e.size for e in entries)
    verb = "removed" if args.yes else "would remove"
    if not args.quiet:
        _print(entries, f"{verb}: {len(entries)} item(s), {human_size(total)}")
    if not args.yes:
        print(f"dry run: nothing removed; add --yes to remove these {len(entries)} item(s)")
        return 0
    for e in entries:
        try:
            shutil.rmtree(e.path) if e.path.is_dir() else e.path.unlink()
        except OSError as err:
            raise UsageError(f"cannot remove {e.path}: {err.strerror or err}") from None
    print(f"removed {len(entries)} item(s), {human_size(total)} freed")
    return 0


def prune_records(folder: Path, keep: tuple[str, ...] = ()) -> int:
    """Remove the record tables (``<table>.parquet`` of :data:`RECORD_TABLES` and
    :data:`EXTRA_TABLES`, except ``keep``) of every run folder below ``folder``; each point's
    ``summary.json``, ``meta.json`` and ``scenario.toml`` stay, so the answer, its report and
    a resumed run still work.  Returns the bytes freed."""
    freed = 0
    for table in (*RECORD_TABLES, *EXTRA_TABLES):
        if table in keep:
            continue
        for f in Path(folder).rglob(f"{table}.parquet"):
            if f.parent == Path(folder):
                continue  # the folder's own tables, if any, are its answer
            try:
                freed += f.stat().st_size
                f.unlink()
            except OSError as e:
                print(f"rtalab: warning: cannot remove {f}: {e.strerror or e}", file=sys.stderr)
    return freed


def add_parser(subparsers: Any) -> None:
    """Register ``rtalab results list | prune``."""
    sub = add_group(subparsers, "results", help="list and prune results folders",
                    description="What is in results/ (size, kind, age, verdict), "
                                "and removing what is no longer needed.")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--root", default="results", metavar="DIR",
                       help="the results folder (default: results)")
        p.add_argument("--kind", choices=("run", "load", "sweep", "capacity", "tune", "storm",
                                          "unfinished", "other", "file"),
                       help="only items of this kind")
        p.add_argument("--older-than", type=parse_duration, metavar="DURATION",
                       help="only items last changed longer ago than this (30m, 12h, 7d, 2w)")
        p.add_argument("--unfinished", action="store_true",
                       help="only folders without results (failed, interrupted, running)")

    ls = sub.add_parser("list", help="size, kind, age and verdict of each results folder",
                        description="One line per folder or file in results/, newest first, "
                                    "with the total size.")
    common(ls)
    ls.set_defaults(func=cmd_list)
    pr = sub.add_parser("prune", help="remove results folders (a dry run unless --yes)",
                        description="Remove the selected results folders. Without --yes it "
                                    "only lists what it would remove.")
    common(pr)
    pr.add_argument("--yes", action="store_true", help="really remove them")
    add_quiet(pr, "no table")
    pr.set_defaults(func=cmd_prune)
