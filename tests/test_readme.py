"""The README and the user guide (docs/guide.md) followed line by line: every command block
parses with the real command line, calls `.venv/bin/rtalab` (not a bare `rtalab` that a
fresh shell does not have), and the simulation, sweep, report and answer commands and the
Python snippets run as written, made small by appended options (later options win)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtalab.sim.cli import build_parser, normalise_sets
from tests.kinds import REPO

README = REPO / "README.md"
GUIDE = REPO / "docs" / "guide.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SMALL = ["--set", "run.duration_s=30", "run.warmup_s=5", "run.drain_s=5"]
# appended to make a README command small; argparse keeps the last value of an option
SHRINK = {
    "sim run": [*SMALL, "--replications", "2"],
    "sim show": [],
    "sim presets": [],
    "sim sweep": [*SMALL, "--replications", "2", "--processes", "2"],
    "sim capacity": [*SMALL, "--load", "workload.calls_per_s=1,2", "--replications", "2",
                     "--range", "1:8", "--processes", "2"],
    "sim tune": [*SMALL, "--trials", "2", "--replications", "2", "--top", "1",
                 "--processes", "2"],
    "sim storm": ["--set", "run.duration_s=240", "run.warmup_s=10", "run.drain_s=10",
                  "--replications", "1", "--strategies", "exponential,breaker",
                  "--processes", "2"],
    "compare": ["--no-plot"],
    "report": [],
}


def blocks(lang: str) -> list[str]:
    """The ``lang`` fenced blocks of the README, then of the guide (commands run in order)."""
    return [body for doc in (README, GUIDE)
            for kind, body in FENCE.findall(doc.read_text(encoding="utf-8")) if kind == lang]


def shell_commands() -> list[list[str]]:
    """Every command line of the README's ``sh`` blocks, continuation lines joined."""
    out = []
    for body in blocks("sh"):
        pending = ""
        for line in body.replace("\\\n", " ").splitlines():
            pending = f"{pending}\n{line}" if pending else line
            try:  # a quoted argument may span lines (the curl example's JSON)
                words = shlex.split(pending, comments=True)
            except ValueError:
                continue
            pending = ""
            if words:
                out.append(words)
        assert not pending, f"unclosed quote in a README block: {pending[:80]}"
    return out


def _command(words: list[str]) -> str:
    rest = [w for w in words[1:] if not w.startswith("-")]
    two = " ".join(rest[:2])
    return two if two in SHRINK or two.split(" ")[0] in ("sim", "load", "serve",
                                                         "results") else rest[0]


def test_commands_call_the_venv_and_parse() -> None:
    cmds = shell_commands()
    assert len(cmds) > 20
    parser, failed = build_parser()  # no command: every plugin is loaded
    assert failed == {}
    for words in cmds:
        assert words[0] != "rtalab", f"bare rtalab (not on a fresh PATH): {shlex.join(words)}"
        if words[0] != ".venv/bin/rtalab":
            continue
        try:
            parser.parse_args(normalise_sets(words[1:]))
        except SystemExit as e:
            pytest.fail(f"README command does not parse ({e.code}): {shlex.join(words)}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory with the checkout's .venv and docs, and the README's my.toml."""
    d = tmp_path_factory.mktemp("readme")
    (d / ".venv").symlink_to(REPO / ".venv")
    (d / "docs").symlink_to(REPO / "docs")
    [toml] = [b for b in blocks("toml") if "[workload]" in b]
    (d / "my.toml").write_text(toml, encoding="utf-8")
    return d


def test_simulation_blocks_run_as_written(workdir: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="100")
    ran = []
    seen: set[tuple[str, ...]] = set()
    for words in shell_commands():
        if words[0] != ".venv/bin/rtalab" or "--dask" in words or tuple(words) in seen:
            continue
        seen.add(tuple(words))
        cmd = _command(words)
        if cmd not in SHRINK:
            continue
        argv = [*words, *SHRINK[cmd]]
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=300, check=False)
        print(f"{time.perf_counter() - t0:5.1f} s  {shlex.join(argv)}")
        assert p.returncode == 0, f"{shlex.join(argv)}\n{p.stderr[-2000:]}"
        ran.append(cmd)
    assert {"sim run", "sim sweep", "compare", "report", "sim capacity", "sim tune",
            "sim storm"} <= set(ran)
    assert (workdir / "capacity.html").is_file()  # the report command of the sweep block


def test_python_blocks_run_as_written(workdir: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    snippets = blocks("python")
    assert snippets
    for i, code in enumerate(snippets):
        script = workdir / f"snippet{i}.py"
        script.write_text(code, encoding="utf-8")
        p = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, f"README Python block {i}:\n{code}\n{p.stderr[-2000:]}"
