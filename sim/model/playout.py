"""The Live layer's reorder buffer: when each spoken chunk becomes *playable*, and when the
Live layer can know the turn is complete (errors.md §6: reorder by sequenceId; the
terminal state is authoritative).

Chunks carry sequenceIds 0..n-1 and are played in that order.  The chunk at the head
of the buffer plays as soon as it has arrived and its predecessor was played or
skipped.  The **gap rule**: a missing chunk is declared lost (skipped, the caller hears
a gap) ``gap_s`` after the buffer first knows it exists — when a later chunk or the
terminal state (which carries the final sequenceId) has arrived; a chunk arriving after
it was skipped is dropped.  The turn is complete for the Live layer once the terminal
state has arrived and every chunk was played or skipped: it never needs to know which
chunks the network lost.
"""

from __future__ import annotations

from collections.abc import Sequence

INF = float("inf")
NAN = float("nan")


def playout(arrivals: Sequence[float], terminal_s: float,
            gap_s: float) -> tuple[float, float, int]:
    """(first playable chunk time, completion time, chunks skipped) of one stream.

    ``arrivals[k]`` is the arrival time of chunk ``k`` (``inf``: never arrives);
    ``terminal_s`` the terminal state's arrival (``inf``: never).  The first playable
    time is NaN if every chunk was skipped; the completion time is ``inf`` while the
    terminal state is missing.
    """
    n = len(arrivals)
    # later[k] = earliest arrival among chunks after k, or of the terminal state
    later = [INF] * n
    m = terminal_s
    for k in range(n - 1, -1, -1):
        later[k] = m
        if arrivals[k] < m:
            m = arrivals[k]
    head = -INF  # when the previous chunk was played or skipped
    first = NAN
    skipped = 0
    for k in range(n):
        a = arrivals[k]
        give_up = later[k] + gap_s
        if give_up < head:
            give_up = head
        if a <= give_up and a < INF:  # arrived before the buffer gave up on it: plays
            head = a if a > head else head
            if first != first:
                first = head
        else:
            head = give_up
            skipped += 1
    done = terminal_s if terminal_s > head else head
    return first, done, skipped
