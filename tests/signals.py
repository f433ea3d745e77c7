"""Signal dispositions for tests that interrupt a process.

A suite started as a background job (``make test &``, ``nohup``, many CI runners) inherits
SIGINT *ignored*, and a Python child started from it then never sees KeyboardInterrupt. A
test of a command's Ctrl-C handling must therefore set the disposition itself, as an
interactive shell would, so it tests the command and not the shell that started the suite.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


def default_sigint() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: the child starts with SIGINT at its default
    disposition, so Python installs its KeyboardInterrupt handler as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
    """Within the block this (main-thread) process raises KeyboardInterrupt on SIGINT, as
    a Python started from a terminal does; the previous disposition is restored after."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
