"""``rtalab results list | prune`` and answer folders that keep only what their report needs
(issue 18, acceptance 8)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from rtalab.sim.cli import main
from rtalab.sim.shared.manage import human_size, parse_duration, prune_records, scan
from tests.kinds import MMC, TINY

DAY = 86400.0


def _age(path: Path, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(path, (t, t))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "results"
    assert main(["sim", "run", "baseline", "--set", *TINY, "--replications", "1",
                 "--no-plots", "--results", str(r), "-q"]) == 0
    run = next(r.iterdir())
    (run / "verdict.json").write_text(json.dumps({"ok": False, "failed": ["lost"],
                                                  "rules": []}))
    old = r / "20200101T000000Z-sim-baseline-s1"
    old.mkdir()
    (old / "meta.json").write_text(json.dumps({"status": "interrupted"}))
    (old / "turns.parquet").write_bytes(b"x" * 5000)
    _age(old, 10)
    (r / "notes").mkdir()
    (r / "report.html").write_text("<html></html>")
    (r / "README.md").write_text("kept")
    return r


def test_list_shows_size_kind_age_verdict(root: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    entries = {e.path.name: e for e in scan(root)}
    assert "README.md" not in entries
    run = next(n for n in entries if n.endswith("-sim-baseline-s1") and not n.startswith("2020"))
    assert (entries[run].kind, entries[run].verdict) == ("run", "FAIL (lost)")
    old = entries["20200101T000000Z-sim-baseline-s1"]
    assert (old.kind, old.verdict, old.size) == ("unfinished", "interrupted", 5000 + len(
        json.dumps({"status": "interrupted"})))
    assert 9.9 * DAY < old.age_s < 10.1 * DAY
    assert entries["notes"].kind == "other" and entries["report.html"].kind == "file"
    capsys.readouterr()
    assert main(["results", "list", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "FAIL (lost)" in out and "interrupted" in out and "10 d" in out
    assert f"4 item(s), {human_size(sum(e.size for e in entries.values()))}" in out


def test_prune_is_a_dry_run_unless_yes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in root.iterdir())
    assert main(["results", "prune", "--root", str(root), "--older-than", "7d"]) == 0
    out = capsys.readouterr().out
    assert "would remove: 1 item(s)" in out and "dry run: nothing removed" in out
    assert sorted(p.name for p in root.iterdir()) == before
    assert main(["results", "prune", "--root", str(root), "--older-than", "7d", "--yes"]) == 0
    assert sorted(p.name for p in root.iterdir()) == [n for n in before if
                                                      not n.startswith("2020")]
    assert main(["results", "prune", "--root", str(root)]) == 2  # no selector: refused
    assert main(["results", "list", "--root", str(root / "nope")]) == 2
    assert parse_duration("12h") == 43200 and parse_duration("2w") == 14 * DAY


def test_answer_folders_keep_only_what_the_report_needs(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    def capacity(out: Path, *extra: str) -> None:
        assert main(["sim", "capacity", "baseline", "--set", *MMC, "--load",
                     "workload.calls_per_s=1", "--knob", "reasoner.workers", "--range", "1:4",
                     "--slo", "p_wait<=0.5", "--replications", "2", "--processes", "1",
                     "--out", str(out), "-q", *extra]) == 0

    capacity(tmp_path / "lean")
    capacity(tmp_path / "full", "--keep-records")
    lean, full = tmp_path / "lean", tmp_path / "full"
    assert not list(lean.rglob("turns.parquet")) and not list(lean.rglob("attempts.parquet"))
    assert list(full.rglob("turns.parquet")) and list(full.rglob("attempts.parquet"))
    # the summaries stay: the report renders, and a rerun into the folder resumes
    assert len(list(lean.rglob("summary.json"))) == len(list(full.rglob("summary.json"))) > 0
    assert main(["report", str(lean), "--out", str(tmp_path / "r.html"), "-q"]) == 0
    capacity(lean)
    assert prune_records(full) > 0 and prune_records(full) == 0
    capsys.readouterr()
