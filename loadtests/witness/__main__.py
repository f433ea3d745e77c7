"""``python -m rtalab.loadtests.witness [options]``: same as ``rtalab serve witness``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rtalab.loadtests.witness.cli import PROG, add_witness_arguments, run_witness
from rtalab.sim.shared.argtypes import OneLineParser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and serve."""
    parser = OneLineParser(prog=PROG, description="Serve the side-effect witness.")
    add_witness_arguments(parser)
    return run_witness(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
