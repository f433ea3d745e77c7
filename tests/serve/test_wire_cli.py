"""``rtalab serve reasoner`` / ``python -m rtalab.loadtests.reasoner``: bad flags exit 2 with one
line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BAD_FLAGS = [
    pytest.param(["--port", "0"], "port must be in 1..65535", id="port"),
    pytest.param(["--workers", "0"], "must be >= 1", id="workers"),
    pytest.param(["--dedup", "bogus://x"], "bad dedup store URL", id="dedup-url"),
    pytest.param(["--dedup-mode", "sometimes"], "invalid choice", id="dedup-mode"),
    pytest.param(["--dedup-window-s", "-1"], "must be a finite number >= 0", id="window"),
    pytest.param(["--scenario", "no-such-preset"], "no scenario file or preset", id="scenario"),
    pytest.param(["--set", "reasoner.chunks=0"], "reasoner.chunks", id="override"),
    pytest.param(["--token", "no-principal"], "TOKEN=PRINCIPAL", id="token"),
    pytest.param(["--tokens", "/nonexistent/tokens.txt"], "cannot read token file", id="tokens"),
    pytest.param(["--witness", "ftp://host"], "--witness must be an http(s) URL", id="witness"),
    pytest.param(["--ext-uri", "a b"], "--ext-uri", id="ext-uri"),
    pytest.param(["--instance", "r 0"], "--instance: expected 1-64 printable", id="instance"),
]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a command that must fail fast."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.mark.parametrize(("flags", "needle"), BAD_FLAGS)
def test_bad_flags_exit_2_with_one_line(flags: list[str], needle: str) -> None:
    r = _run([sys.executable, "-m", "rtalab.loadtests.reasoner", *flags])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(shutil.which("rtalab", path=str(Path(sys.executable).parent)) is None,
                    reason="the rtalab console script is not installed")
def test_rtalab_serve_entry_point() -> None:
    rtalab = str(Path(sys.executable).parent / "rtalab")
    assert "reasoner" in _run([rtalab, "serve", "--help"]).stdout
    bad = _run([rtalab, "serve", "reasoner", "--port", "70000"])
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    bench = _run([rtalab, "serve", "bench", "--help"])  # run for real in test_bench.py
    assert bench.returncode == 0 and "--turns" in bench.stdout
