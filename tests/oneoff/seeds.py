"""One-off: run the statistical tests on 20 seeds and report how often each passes.

Not part of ``make test`` (``make seed-check`` runs it).  Each round sets
``RTALAB_TEST_SEED_OFFSET`` (see tests/stats.py) so every seeded test draws
other random numbers; round 0 is what ``make test`` runs.  A test that holds
on any seed passes in every round.

    .venv/bin/python tests/oneoff/seeds.py [--rounds 20] [modules...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["tests/test_model_queueing.py", "tests/test_model_retry.py",
           "tests/test_model_dedup.py", "tests/test_model_budgets.py",
           "tests/test_model_policy_semantics.py"]


def run_round(offset: int, modules: list[str], workdir: Path) -> dict[str, bool]:
    """Run ``modules`` with seed offset ``offset``; return test id -> passed."""
    xml = workdir / f"round{offset}.xml"
    env = {**os.environ, "RTALAB_TEST_SEED_OFFSET": str(offset)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
           "--dist", "loadfile", f"--junitxml={xml}", *modules]
    subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    result: dict[str, bool] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        bad = any(child.tag in ("failure", "error") for child in case)
        result[name] = not bad
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("modules", nargs="*", default=MODULES)
    a = p.parse_args(argv)
    passed: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    failed_rounds: list[int] = []
    with tempfile.TemporaryDirectory(prefix="rtalab-seeds-") as tmp:
        for k in range(a.rounds):
            res = run_round(k, a.modules, Path(tmp))
            for name, ok in res.items():
                seen[name] += 1
                passed[name] += ok
            bad = [n for n, ok in res.items() if not ok]
            if bad:
                failed_rounds.append(k)
            print(f"seed offset {k:2d}: {len(res) - len(bad)}/{len(res)} passed"
                  + (f"; failed: {', '.join(bad)}" if bad else ""), flush=True)
    width = max(len(n) for n in seen)
    print()
    for name in sorted(seen):
        print(f"{name:<{width}}  {passed[name]:2d}/{seen[name]}")
    print(f"\nrounds with every test passing: {a.rounds - len(failed_rounds)}/{a.rounds}")
    return 0 if not failed_rounds else 1


if __name__ == "__main__":
    sys.exit(main())
