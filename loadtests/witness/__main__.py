"""``python -m loadtests.witness [options]``: same as ``rtalab serve witness``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from loadtests.witness.cli import EXIT_USAGE, PROG, add_witness_arguments, run_witness


class _Parser(argparse.ArgumentParser):
    """Errors are one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and serve."""
    parser = _Parser(prog=PROG, description="Serve the side-effect witness.")
    add_witness_arguments(parser)
    return run_witness(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
