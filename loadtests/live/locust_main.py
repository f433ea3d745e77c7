"""``python -m rtalab.loadtests.live.locust_main ARGS``: Locust's own command line
(``python -m locust ARGS``), with the installed packages' entry points read once while
gevent patches the process.

Importing Locust runs gevent's ``monkey.patch_all()``, and gevent announces each module
it patches to plugins it looks up by entry point: ~25 calls of
``importlib.metadata.entry_points(group=...)``, each of which reads the metadata of every
installed distribution (~200 in the dev environment).  That was ~0.15 CPU-s of the
~0.45 a Locust process spends importing Locust, paid by every Locust process of every load
run (the master and each worker).  Here the entry points are read once and every lookup
during the import selects from them: the same groups, the same entry points
(``entry_points(**params)`` is ``entry_points().select(**params)``); afterwards
``importlib.metadata`` is as it was.  Nothing else differs from ``python -m locust``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any


@contextmanager
def entry_points_read_once() -> Iterator[None]:
    """Inside: ``importlib.metadata.entry_points(**params)`` selects from one reading of all
    the entry points, made on entry (no distribution is installed meanwhile)."""
    every = metadata.entry_points()
    original = metadata.entry_points

    def selected(**params: Any) -> Any:
        return every.select(**params) if params else every

    metadata.entry_points = selected
    try:
        yield
    finally:
        metadata.entry_points = original


def main() -> None:
    """Import Locust (gevent patches the process) with the entry points read once, then run
    Locust's command line on ``sys.argv``."""
    with entry_points_read_once():
        # lazy: +0.45 s (gevent's patching, locust): only the Locust processes run this
        from locust.main import main as locust_main
    locust_main()  # type: ignore[no-untyped-call]  # locust's main() is unannotated


if __name__ == "__main__":
    main()
