"""``python -m loadtests.reasoner [options]``: same as ``rtalab serve reasoner``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from loadtests.cli import EXIT_USAGE, REASONER_PROG, add_reasoner_arguments, cmd_reasoner


class _Parser(argparse.ArgumentParser):
    """Errors are one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and serve."""
    parser = _Parser(prog=REASONER_PROG, description="Serve the reference Reasoner.")
    add_reasoner_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_reasoner(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
