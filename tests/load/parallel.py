"""Several ``rtalab load run`` subprocesses at once (each in its own folder): the short runs of
one test module share the machine's idle time instead of queueing one after another."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.load.conftest import FAST, load_run

AT_ONCE = 3  # more starve a busy 2-core machine (tests/load/test_gate_triggers.py)


def load_runs(tmp: Path, variants: dict[str, tuple[str, ...] | list[str]],
              scenarios: dict[str, str] | None = None
              ) -> dict[str, tuple[subprocess.CompletedProcess[str], Path | None]]:
    """``{name: load_run(tmp / name, *args)}`` for every variant, at most :data:`AT_ONCE`
    at a time; ``scenarios`` gives a variant's scenario text (default FAST)."""
    scenarios = scenarios or {}
    for name in variants:
        (tmp / name).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        futures = {name: pool.submit(load_run, tmp / name, *args,
                                     scenario=scenarios.get(name, FAST))
                   for name, args in variants.items()}
        return {name: f.result() for name, f in futures.items()}
