"""``python -m rtalab.loadtests.reasoner [options]``: same as ``rtalab serve reasoner``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rtalab.loadtests.reasoner.cli import REASONER_PROG, add_reasoner_arguments, cmd_reasoner
from rtalab.sim.shared.argtypes import OneLineParser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and serve."""
    parser = OneLineParser(prog=REASONER_PROG, description="Serve the reference Reasoner.")
    add_reasoner_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_reasoner(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
