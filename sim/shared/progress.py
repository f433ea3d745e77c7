"""A progress bar on stderr driven by the runner's ``progress(fraction)`` callback.

The bar appears only when stderr is a terminal, the user did not ask for
``--quiet``, and the run is still going after ``delay_s`` seconds, so short
runs and piped output stay clean.  Updates are throttled: the callback is cheap
enough to call once per simulated second.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

ProgressFn = Callable[[float], None]


def _noop(fraction: float) -> None:
    """Progress sink that ignores its input."""


class _LazyBar:
    """Callable progress sink that starts a rich bar only once the run has taken ``delay_s``."""

    def __init__(self, description: str, delay_s: float, min_interval_s: float) -> None:
        self.description = description
        self.delay_s = delay_s
        self.min_interval_s = min_interval_s
        self.t0 = time.monotonic()
        self.last = 0.0
        self.fraction = 0.0
        self.progress: Any = None
        self.task: Any = None

    def __call__(self, fraction: float) -> None:
        """Record ``fraction`` (0..1) and redraw at most every ``min_interval_s``."""
        self.fraction = min(1.0, max(0.0, float(fraction)))
        now = time.monotonic()
        if now - self.last < self.min_interval_s and self.fraction < 1.0:
            return
        self.last = now
        if self.progress is None:
            if now - self.t0 < self.delay_s:
                return
            self._start()
        self.progress.update(self.task, completed=self.fraction)

    def _start(self) -> None:
        """Create and start the rich progress display on stderr."""
        # lazy: +49 ms (rich) off importing progress
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(self.description, total=1.0, completed=self.fraction)

    def close(self) -> None:
        """Stop the display if it was started."""
        if self.progress is not None:
            self.progress.update(self.task, completed=self.fraction)
            self.progress.stop()


def should_show(quiet: bool, stream: Any = None) -> bool:
    """True when a bar is wanted: not quiet and the stream is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not quiet and bool(isatty and isatty())


@contextlib.contextmanager
def progress_bar(
    description: str,
    *,
    enabled: bool,
    delay_s: float = 2.0,
    min_interval_s: float = 0.1,
) -> Iterator[ProgressFn]:
    """Yield a ``progress(fraction)`` callback; a bar shows if enabled and work lasts > delay_s."""
    if not enabled:
        yield _noop
        return
    bar = _LazyBar(description, delay_s, min_interval_s)
    try:
        yield bar
    finally:
        bar.close()
