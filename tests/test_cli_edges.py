"""Rough edges a newcomer trips on (issue 18, acceptance 5): help texts with an example,
--version, exit codes of bare command groups, --set anywhere, preset:NAME, -q everywhere,
the witness's start message and port, one-line errors."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rtalab.sim.cli import EXAMPLES, build_parser, commands, main, normalise_sets
from tests.kinds import REPO, rtalab
from tests.signals import default_sigint


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    parser, failed = build_parser()  # no command: every plugin is loaded
    assert failed == {}
    return commands(parser)


def test_every_command_has_an_example_and_every_option_a_help(parsers) -> None:
    assert {"sim run", "sim sweep", "report", "compare", "results prune", "load run", "check",
            "serve witness"} <= set(parsers)
    for path, p in parsers.items():
        assert EXAMPLES.get(path), f"no example for {path!r}"
        text = p.format_help()
        assert f"example:\n  {EXAMPLES[path]}" in text
        assert "%%" not in text and "%(" not in text, path
        assert EXAMPLES[path].startswith("rtalab " + path), path
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction) or a.help == argparse.SUPPRESS:
                continue
            assert a.help, f"{path}: {a.option_strings or a.dest} has no help"


def test_version_and_bare_groups(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "rtalab 0.1.0"
    for group in ("sim", "load", "serve", "results", "chaos", "check"):
        assert main([group]) == 2, group  # a bare group is a usage mistake, as `rtalab sim`
    assert "usage:" in capsys.readouterr().err


def test_quiet_is_accepted_everywhere_it_prints(parsers) -> None:
    for path in ("sim run", "sim sweep", "sim capacity", "sim tune", "sim storm", "report",
                 "load run", "check", "results prune", "serve fuzz"):
        flags = {s for a in parsers[path]._actions for s in a.option_strings}
        assert {"-q", "--quiet"} <= flags, path


def test_set_anywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert normalise_sets(["sim", "run", "--set", "a.b=1", "c.d=2", "baseline", "-q"]) == [
        "sim", "run", "--set=a.b=1", "--set=c.d=2", "baseline", "-q"]
    assert normalise_sets(["--set", "x", "--", "--set", "a=1"]) == [
        "--set", "x", "--", "--set", "a=1"]
    assert main(["sim", "show", "--set", "reasoner.workers=5", "live.instances=2",
                 "baseline"]) == 0
    out = capsys.readouterr().out
    assert "workers = 5" in out and "instances = 2" in out
    assert main(["sim", "run", "--set", "run.duration_s=20", "run.warmup_s=5", "baseline",
                 "--no-plots", "--replications", "1", "--results", str(tmp_path), "-q"]) == 0
    assert len(list(tmp_path.iterdir())) == 1


def test_preset_prefix_and_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "baseline").mkdir()  # e.g. a results folder named like the preset
    assert main(["sim", "show", "baseline"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "preset:baseline" in err and "./baseline" in err
    assert main(["sim", "show", "preset:baseline"]) == 0
    assert 'name = "baseline"' in capsys.readouterr().out
    assert main(["sim", "show", "preset:nope"]) == 2
    (tmp_path / "mine").write_text('name = "mine"\n[reasoner]\nworkers = 3\n')
    assert main(["sim", "show", "mine"]) == 0 and "workers = 3" in capsys.readouterr().out


def test_serve_witness_says_where_it_listens(tmp_path: Path, parsers) -> None:
    from rtalab.loadtests.common.procs import free_port

    assert parsers["serve witness"].get_default("port") == 8091  # the README's Reasoner: 8090
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "rtalab.sim.cli", "serve", "witness", "--port",
                          str(port), "--db", str(tmp_path / "w.db")], env=env, cwd=tmp_path,
                         stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        line = p.stderr.readline()  # blocks until the server has bound (or died)
        assert f"listening on http://127.0.0.1:{port}" in line, line
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=20)


def test_unwritable_dedup_file_is_one_line() -> None:
    p = rtalab("serve", "reasoner", "--port", "18999", "--dedup",
               "sqlite:///proc/nope/x.sqlite", timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "/proc/nope" in p.stderr


def test_witness_db_is_git_ignored() -> None:
    p = subprocess.run(["git", "check-ignore", "-q", "witness.db"], cwd=REPO, check=False)
    assert p.returncode == 0
