"""One-off: print the measured coverage of every interval family (the table of
docs/metrics.md, "Intervals and their coverage").  Not part of ``make test``; the same
measurements are asserted, family by family, in tests/trust/test_interval_coverage.py.

    nice .venv/bin/python -m tests.oneoff.interval_coverage
"""

from __future__ import annotations

import sys
import time

from tests.trust.coverage import DRAWS, FAMILIES, bootstrap_se_ratio


def main() -> int:
    print(f"| interval | code | truth | covers (of {DRAWS:,} draws) | band tested |")
    print("| --- | --- | --- | --- | --- |")
    for f in FAMILIES:
        t0 = time.monotonic()
        share = f.measure()
        print(f"| {f.name} | `{f.where}` | {f.truth} | {share:.1%} | "
              f"{f.band[0]:.1%}–{f.band[1]:.1%} |", flush=True)
        print(f"  ({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    se, truth = bootstrap_se_ratio()
    print(f"| load-run bootstrap over calls | `rtalab.loadtests.loadrun.uncertainty` | its se of "
          f"attempts/turn against the cluster standard error over calls | "
          f"{se / truth:.2f} x | 0.75-1.25 x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
