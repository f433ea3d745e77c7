"""``rtalab serve``: the group of the reference servers, registered via ``rtalab.commands``.

``register(subparsers)`` adds the ``serve`` group to the root parser of ``sim.cli``; each
server package owns its command and adds it here: ``reasoner``
(:mod:`loadtests.reasoner.cli`), ``witness`` (:mod:`loadtests.witness.cli`) and ``fuzz``
(:mod:`loadtests.fuzz.cli`).  Other packages extend the group through the entry points
named ``serve.<command>`` (the benchmarks add ``rtalab serve bench``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loadtests.fuzz import cli as fuzz_cli
from loadtests.reasoner import cli as reasoner_cli
from sim.shared.argtypes import add_group


def _unavailable(name: str, reason: str) -> Any:
    """A command function that explains why ``name`` cannot run."""

    def func(args: argparse.Namespace) -> int:
        """Explain and fail."""
        print(f"rtalab serve {name}: {reason}", file=sys.stderr)
        return 1

    return func


def register(subparsers: Any) -> None:
    """Add ``serve`` with ``reasoner``, ``witness`` and ``fuzz`` to the root parser."""
    sub = add_group(subparsers, "serve", help="run the reference servers and benchmarks",
                    description="Run the reference Reasoner, the witness, "
                                "or the server benchmark.")
    reasoner_cli.register(sub)
    try:
        from loadtests.witness.cli import register_witness
    except ImportError as e:
        witness = sub.add_parser("witness", help="the side-effect witness (unavailable)")
        witness.set_defaults(func=_unavailable("witness", f"not available ({e})"))
    else:
        register_witness(sub)
    fuzz_cli.register(sub)
