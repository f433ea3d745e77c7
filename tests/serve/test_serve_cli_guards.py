"""The serve commands' own logic, in process: ``rtalab serve reasoner``'s flag checks and
``rtalab serve fuzz``'s bindings, seed, RSS and exit status (the fuzzer itself replaced by a
recorder: its runs are tests/serve/test_wire_fuzz.py's)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from rtalab.loadtests.fuzz import cli as fuzz_cli
from rtalab.loadtests.fuzz.engine import BindingReport
from rtalab.loadtests.reasoner.cli import (
    MAX_INSTANCE_CHARS,
    FlagError,
    add_reasoner_arguments,
    instance_name,
    settings_from_args,
)


def _reasoner_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_reasoner_arguments(p)
    return p.parse_args(["--dedup", "memory", *argv])


def test_an_instance_name_of_the_maximum_length_is_accepted() -> None:
    assert instance_name("r" * MAX_INSTANCE_CHARS) == "r" * MAX_INSTANCE_CHARS
    with pytest.raises(argparse.ArgumentTypeError):
        instance_name("r" * (MAX_INSTANCE_CHARS + 1))


def test_an_extension_uri_with_a_comma_is_refused() -> None:
    """A2A-Extensions is a comma list: a URI holding a comma would read as two."""
    with pytest.raises(FlagError, match="--ext-uri"):
        settings_from_args(_reasoner_args("--ext-uri", "urn:a,urn:b"))


def test_the_dedup_waits_and_window_are_their_own_flags() -> None:
    s = settings_from_args(_reasoner_args("--dedup-wait-s", "7", "--dedup-window-s", "100"))
    assert (s.dedup_wait_s, s.dedup_window_s) == (7.0, 100.0)
    assert settings_from_args(_reasoner_args("--dedup-window-s", "100")).dedup_wait_s == 30.0


def test_fuzz_bindings_must_name_at_least_one() -> None:
    assert fuzz_cli._bindings("jsonrpc, ws") == ("jsonrpc", "ws")
    for bad in (",", " ", "jsonrpc,grpc"):
        with pytest.raises(argparse.ArgumentTypeError):
            fuzz_cli._bindings(bad)


def _fuzz(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failing: set[str],
          *argv: str) -> tuple[int, list[dict[str, Any]]]:
    """``run_fuzz`` against --url with the fuzzer replaced: (exit status, its calls)."""
    calls: list[dict[str, Any]] = []

    def fake(client: Any, binding: str, requests: int, **kw: Any) -> BindingReport:
        calls.append({"binding": binding, "requests": requests, **kw})
        return BindingReport(binding, requests=requests, reached=float(requests),
                             normal_turn_after="TASK_STATE_COMPLETED",
                             unhandled=1.0 if binding in failing else 0.0)

    monkeypatch.setattr(fuzz_cli, "fuzz_binding", fake)
    monkeypatch.setattr(fuzz_cli, "url_problem", lambda *a, **kw: None)
    monkeypatch.setattr(fuzz_cli, "_rss_mib", lambda client: 1.0)
    p = argparse.ArgumentParser()
    fuzz_cli.add_arguments(p)
    args = p.parse_args(["--url", "http://127.0.0.1:9", "--results", str(tmp_path),
                         "--quiet", *argv])
    return fuzz_cli.run_fuzz(args), calls


def test_fuzz_passes_its_seed_and_fails_when_any_binding_fails(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rc, calls = _fuzz(monkeypatch, tmp_path, set(), "--seed", "5", "--requests", "20",
                      "--bindings", "jsonrpc,ws")
    assert rc == 0 and [(c["binding"], c["seed"], c["requests"]) for c in calls] == [
        ("jsonrpc", 5, 20), ("ws", 5, 20)]
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text(encoding="utf-8"))
    assert summary["seed"] == 5
    rc, _ = _fuzz(monkeypatch, tmp_path, {"ws"}, "--bindings", "jsonrpc,ws")
    assert rc == 1  # one binding of two failed


def test_the_servers_rss_is_in_mebibytes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Client:
        def get_json(self, path: str) -> dict[str, Any]:
            return {"pid": 4242}

    class Process:
        def __init__(self, pid: int) -> None:
            assert pid == 4242

        def memory_info(self) -> Any:
            return argparse.Namespace(rss=3 * 2**20)

    monkeypatch.setattr(fuzz_cli.psutil, "Process", Process)
    assert fuzz_cli._rss_mib(Client()) == 3.0  # type: ignore[arg-type]
