"""``rtalab serve``: the group of the reference servers, registered via ``rtalab.commands``.

``register(subparsers)`` adds the ``serve`` group to the root parser of ``rtalab.sim.cli``; each
server package owns its command and adds it here: ``reasoner``
(:mod:`rtalab.loadtests.reasoner.cli`), ``witness`` (:mod:`rtalab.loadtests.witness.cli`) and
``fuzz`` (:mod:`rtalab.loadtests.fuzz.cli`).  Other packages extend the group through the entry
points named ``serve.<command>`` (the benchmarks add ``rtalab serve bench``).
"""

from __future__ import annotations

from typing import Any

from rtalab.loadtests.fuzz import cli as fuzz_cli
from rtalab.loadtests.reasoner import cli as reasoner_cli
from rtalab.loadtests.witness import cli as witness_cli
from rtalab.sim.shared.argtypes import add_group


def register(subparsers: Any) -> None:
    """Add ``serve`` with ``reasoner``, ``witness`` and ``fuzz`` to the root parser."""
    sub = add_group(subparsers, "serve", help="run the reference servers and benchmarks",
                    description="Run the reference Reasoner, the witness, "
                                "or the server benchmark.")
    reasoner_cli.register(sub)
    witness_cli.register_witness(sub)
    fuzz_cli.register(sub)
