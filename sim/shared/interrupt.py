"""A Ctrl-C that other code swallowed, raised again where the simulator can.

CPython turns SIGINT into a KeyboardInterrupt at the main thread's next bytecode, wherever
that is, and code that catches every exception there loses it.  Cython's registration of its
generator types with :mod:`collections.abc`, run when a compiled module is imported, is such
code (``try: ... except: pass``): a Ctrl-C that landed while ``rtalab sim run`` imported
pandas was lost and the run went on (about one interrupt in 40 under load; found with a
handler that printed where it ran: ``pandas._libs.window.indexers``' import, in
``abc.register``).

Within :func:`installed` SIGINT also sets a flag; :func:`check`, which the simulator calls once a
simulated second and between replications, raises KeyboardInterrupt while the flag is set.
Used only by the command line, and only where SIGINT has Python's own handler: a
process that ignores SIGINT (a background job) keeps ignoring it, and a library user's (a
notebook kernel's) handler is left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_pending = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def installed() -> Iterator[bool]:
    """Within the block SIGINT sets the flag as it raises KeyboardInterrupt; after it, the
    previous handler is back and the flag cleared.  Yields False (nothing changed) off the
    main thread or when SIGINT's handler is not Python's default one."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield False
        return
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        clear()


def check() -> None:
    """Raise KeyboardInterrupt if a SIGINT came within :func:`installed` and not yet cleared."""
    if _pending:
        raise KeyboardInterrupt


def clear() -> None:
    """Forget a SIGINT that was handled."""
    global _pending
    _pending = False
