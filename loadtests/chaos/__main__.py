"""``python -m rtalab.loadtests.chaos`` = ``rtalab chaos``."""

from __future__ import annotations

import sys

from rtalab.loadtests.chaos.cli import PROG, add_arguments, cmd_chaos
from rtalab.sim.shared.argtypes import OneLineParser


def main(argv: list[str] | None = None) -> int:
    """Parse and run."""
    p = OneLineParser(prog=PROG, description="The chaos proxy (see docs/chaos.md).")
    add_arguments(p)
    return cmd_chaos(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
