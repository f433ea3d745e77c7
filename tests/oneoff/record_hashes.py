"""Hash what the simulator writes, to prove a refactoring changed no number.

    .venv/bin/python tests/oneoff/record_hashes.py before.txt     # on the old commit
    .venv/bin/python tests/oneoff/record_hashes.py after.txt      # on the new one
    diff before.txt after.txt                                     # empty = bit-identical

Runs ``rtalab sim run`` at seed 3 for every preset, for ``retry_storm`` with each retry
budget on its own (and all of them with two Live instances), and for ``metastable_spike``
with the retry breaker, then writes one line per output: the SHA-256 of each records
table's decoded rows and of its dtypes, of ``summary.json`` (sorted keys), of the
``summary.csv`` bytes and of each PNG.  About a minute on two cores.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

B = "live.budget."
BUDGETS = ("token_bucket", "finagle", "adaptive", "circuit_breaker", "aws_quota", "envoy",
           "call_bucket", "retry_breaker")
RUNS: dict[str, tuple[str, list[str]]] = {
    **{p: (p, []) for p in ("baseline", "retry_storm", "lossy_network", "metastable_spike",
                            "release_gate")},
    # no preset enables a budget: retry_storm with each one, then all of them
    **{f"retry_storm+{b}": ("retry_storm", [f"{B}{b}.enabled=true"]) for b in BUDGETS},
    "retry_storm+adaptive_sre_book": ("retry_storm", [f"{B}adaptive.enabled=true",
                                                      f'{B}adaptive.variant="sre_book"',
                                                      f"{B}adaptive.apply_to_first=true"]),
    "retry_storm+all_budgets_2inst": ("retry_storm", [f"{B}{b}.enabled=true" for b in BUDGETS]
                                      + ["live.instances=2"]),
    "metastable_spike+retry_breaker_w0": ("metastable_spike", [f"{B}retry_breaker.enabled=true",
                                                               f"{B}retry_breaker.window_s=0"]),
}


def sha(data: bytes, n: int = 16) -> str:
    return hashlib.sha256(data).hexdigest()[:n]


def hash_run(name: str, run: Path) -> list[str]:
    """One line per output of the run folder ``run``."""
    lines = []
    for f in sorted(run.glob("*.parquet")):
        df = pd.read_parquet(f)
        dtypes = str(list(df.dtypes.astype(str).items())).encode()
        lines.append(f"{name:40s} {f.name:24s} rows={len(df):7d} "
                     f"{sha(df.to_csv(index=False).encode())} dtypes={sha(dtypes, 8)}")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    lines.append(f"{name:40s} {'summary.json':24s} {'':12s} "
                 f"{sha(json.dumps(summary, sort_keys=True).encode())}")
    lines.append(f"{name:40s} {'summary.csv':24s} {'':12s} "
                 f"{sha((run / 'summary.csv').read_bytes())}")
    for f in sorted(run.glob("*.png")):
        lines.append(f"{name:40s} {f.name:24s} {'(png bytes)':12s} {sha(f.read_bytes())}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (preset, sets) in RUNS.items():
            res = Path(tmp) / name.replace("+", "_")
            cmd = [sys.executable, "-m", "rtalab.sim.cli", "sim", "run", preset, "--seed", "3",
                   "--results", str(res), "--quiet", *(("--set", *sets) if sets else ())]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            (run,) = res.iterdir()
            lines += hash_run(name, run)
            print(name, "done", file=sys.stderr, flush=True)
    text = "\n".join(lines)
    Path(argv[0]).write_text(text + "\n", encoding="utf-8")
    print(hashlib.sha256(text.encode()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
