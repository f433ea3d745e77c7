"""Compact per-call state that lives for the whole run: a set and a counter of ints.

The Reasoner remembers every session it opened (``known_contexts``) and how many times each
call opened one (``sessions_opened``) until the run ends.  As a ``set`` and a ``dict`` that
is ~150 bytes per call, the one cost of a run with ``records = "none"`` that grows with the
number of calls (a simulated hour of 1 M calls: ~150 MB).  Call ids and contextIds are dense
non-negative ints (arrival numbers, minted counters), so a growable ``bytearray`` /
``array('I')`` indexed by the id holds the same answers in 1 / 4 bytes per id.  A key the
dense part cannot take — negative, not an int, a count of 2**32 or more, or an id so far
past the ids seen so far that the array would more than double by over a million slots —
goes to an ordinary set / dict beside it.  Same answers, same members; no record changes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

GROW_SLACK = 1 << 20  # the dense part grows to an id at most this far past twice its size


def _room(k: int, size: int) -> bool:
    """Whether ``k`` goes to (or may grow) a dense part of ``size`` slots."""
    return type(k) is int and 0 <= k < 2 * size + GROW_SLACK


class IntSet:
    """A set: ``add``, ``in``, ``len``, ``clear``, iteration (dense ids first, in order)."""

    __slots__ = ("_flags", "_n", "_other")

    def __init__(self) -> None:
        self._flags = bytearray()
        self._n = 0  # dense members
        self._other: set[int] = set()

    def __contains__(self, k: object) -> bool:
        # the hot path (a known id) is one comparison and one index; a bool is its int, as
        # in a set ({1} holds True); anything that cannot index the flags asks the set
        try:
            if k >= 0 and self._flags[k]:  # type: ignore[operator,call-overload]  # TypeError: not an int
                return True
        except (IndexError, TypeError):
            pass
        return k in self._other

    def add(self, k: int) -> None:
        """Add ``k``."""
        f = self._flags
        if k in self._other:
            return
        if not _room(k, len(f)):
            self._other.add(k)
            return
        if k >= len(f):
            f.extend(bytes(max(k + 1 - len(f), len(f), 1024)))
        if not f[k]:
            f[k] = 1
            self._n += 1

    def __len__(self) -> int:
        return self._n + len(self._other)

    def __iter__(self) -> Iterator[int]:
        f = self._flags
        yield from (i for i in range(len(f)) if f[i])
        yield from self._other

    def clear(self) -> None:
        """Forget every member."""
        self._flags = bytearray()
        self._n = 0
        self._other.clear()


class IntCounts:
    """A counter keyed by ints, read as the dict it replaces (``get``, ``[k]``, ``[k] = v``,
    ``items``, ``len``, ``clear``) but for one thing: a dense id whose count is 0 is no key
    (the Reasoner only ever stores counts >= 1).  Dense ids first, in id order."""

    __slots__ = ("_counts", "_n", "_other")

    def __init__(self) -> None:
        self._counts = array("I")
        self._n = 0  # dense ids with a non-zero count
        self._other: dict[int, int] = {}

    def get(self, k: int, default: int = 0) -> int:
        """The count of ``k`` (``default`` when it has none)."""
        c = self._counts
        if type(k) is int and 0 <= k < len(c) and c[k]:
            return c[k]
        return self._other.get(k, default)

    def incr(self, k: int) -> None:
        """Add 1 to the count of ``k``."""
        c = self._counts
        if type(k) is int and 0 <= k < len(c) and c[k]:
            c[k] += 1  # the common case: a count already held in the dense part
        else:
            self[k] = self.get(k, 0) + 1

    def __getitem__(self, k: int) -> int:
        v = self.get(k, -1)
        if v == -1 and k not in self._other:
            raise KeyError(k)
        return v

    def __setitem__(self, k: int, v: int) -> None:
        c = self._counts
        if k not in self._other and _room(k, len(c)) and 0 <= v < 1 << 32:
            if k >= len(c):
                c.frombytes(bytes(4 * max(k + 1 - len(c), len(c), 1024)))
            self._n += (v != 0) - (c[k] != 0)
            c[k] = v
            return
        if type(k) is int and 0 <= k < len(c) and c[k]:  # it leaves the dense part
            c[k] = 0
            self._n -= 1
        self._other[k] = v

    def items(self) -> Iterator[tuple[int, int]]:
        """(key, count) of every key."""
        c = self._counts
        yield from ((i, c[i]) for i in range(len(c)) if c[i])
        yield from self._other.items()

    def __len__(self) -> int:
        return self._n + len(self._other)

    def clear(self) -> None:
        """Forget every count."""
        self._counts = array("I")
        self._n = 0
        self._other.clear()
