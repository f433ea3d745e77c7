"""The dedup window's boundaries, written out once (docs/decisions.md D4: a closed window).

Shared by the simulator's store tests (``tests/test_dedup_window_table.py``) and the
reference stores' tests (``tests/serve/test_dedup_window_table.py``), so neither
computes its expected value with the rule it tests.  Each row: an outcome stored
``completed_s`` after the test's origin with window ``window_s``, asked for again at
``at`` — seconds after the origin, or ``"end"`` (exactly completed + window),
``"after_end"`` (the next float after it) — and what the store must answer:
``"replayed"`` (the stored outcome) or ``"new"`` (the key is free again).
"""

from __future__ import annotations

WINDOW_CASES: tuple[tuple[float, float, float | str, str], ...] = (
    # completed_s, window_s, at, expected
    (2.0, 10.0, 2.0, "replayed"),  # at completion
    (2.0, 10.0, 11.0, "replayed"),  # inside
    (2.0, 10.0, 11.999, "replayed"),  # just inside
    (2.0, 10.0, "end", "replayed"),  # at 12.0 exactly: the window is closed
    (2.0, 10.0, "after_end", "new"),  # the next float after 12.0
    (2.0, 10.0, 12.001, "new"),
    (2.0, 10.0, 30.0, "new"),  # long expired
    (5.0, 1.0, "end", "replayed"),  # at 6.0
    (5.0, 1.0, "after_end", "new"),
    (5.0, 1.0, 7.0, "new"),
    (0.0, 300.0, 299.0, "replayed"),
    (0.0, 300.0, "end", "replayed"),
    (0.0, 300.0, 301.0, "new"),
)
