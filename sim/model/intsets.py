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

import zlib
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
        if type(k) is int and 0 <= k < len(f):  # inside the dense part: no _room call
            if not f[k]:
                f[k] = 1
                self._n += 1
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
        elif type(k) is int and 0 <= k < len(c) and k not in self._other:
            c[k] = 1  # a new dense id (as self[k] = 1, without its calls)
            self._n += 1
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


# --------------------------------------------------------------------------- settled prefixes

BLOCK = 1 << 16  # ids per settled block


class _Blocks:
    """The settled prefix of a dense part: blocks of ``BLOCK`` slots of ``width`` bytes,
    zlib-compressed, the last one read or written kept decompressed."""

    __slots__ = ("_at", "_cur", "_data", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self._data: dict[int, bytes] = {}
        self._at = -1
        self._cur = bytearray()

    def block(self, b: int) -> bytearray:
        """Block ``b``'s bytes (changes to it are kept: :meth:`store` after them)."""
        if b != self._at:
            data = self._data.get(b)
            self._cur = (bytearray(zlib.decompress(data)) if data is not None
                         else bytearray(BLOCK * self.width))
            self._at = b
        return self._cur

    def store(self, b: int, raw: bytes | bytearray) -> None:
        """Keep ``raw`` as block ``b``."""
        self._data[b] = zlib.compress(raw, 1)
        if b == self._at and raw is not self._cur:
            self._at = -1

    def nbytes(self) -> int:
        return sum(len(v) for v in self._data.values()) + len(self._cur)


class _Settling:
    """What :class:`SettlingIntSet` and :class:`SettlingIntCounts` share: the dense part holds
    the ids from ``_lo`` on, the ones below it are in ``_blocks``."""

    WIDTH = 1
    _lo: int
    _blocks: _Blocks

    def _dense(self) -> bytearray | array[int]:
        raise NotImplementedError

    def _pad(self, n: int) -> None:
        """Zeros at the end of the dense part, ``n`` ids."""
        raise NotImplementedError

    def _restart(self) -> None:
        self._lo = 0
        self._blocks = _Blocks(self.WIDTH)

    def settle(self, below: int) -> None:
        """Compress the whole blocks of ids below ``below`` (their answers kept exactly)."""
        n = (max(0, below) // BLOCK) * BLOCK - self._lo  # ids to move
        if n <= 0:
            return
        d, w = self._dense(), self.WIDTH
        if len(d) < n:
            self._pad(n - len(d))
        raw = memoryview(d).cast("B")
        for j in range(0, n, BLOCK):
            self._blocks.store((self._lo + j) // BLOCK, bytes(raw[w * j:w * (j + BLOCK)]))
        raw.release()
        del d[:n]
        self._lo += n

    def nbytes(self) -> int:
        """Bytes of the dense part and the settled blocks (the set or dict beside them not
        counted)."""
        return self.WIDTH * len(self._dense()) + self._blocks.nbytes()


class SettlingIntSet(_Settling, IntSet):
    """An :class:`IntSet` whose dense ids below ``lo`` can be settled (:meth:`settle`, whole
    blocks compressed) and still answer and change exactly: for bounded-memory runs, where a
    session's contextId is looked up only while its call is open (and by a rare late copy
    after).  The dense part holds the ids from ``lo`` on."""

    __slots__ = ("_blocks", "_lo")

    def __init__(self) -> None:
        super().__init__()
        self._restart()

    def __contains__(self, k: object) -> bool:
        lo = self._lo
        try:
            if k >= lo and self._flags[k - lo]:  # type: ignore[operator]  # TypeError: not an int
                return True
        except (IndexError, TypeError):
            pass
        if isinstance(k, int) and 0 <= k < lo and self._blocks.block(k // BLOCK)[k % BLOCK]:
            return True
        return k in self._other

    def add(self, k: int) -> None:
        """Add ``k``."""
        lo = self._lo
        if type(k) is int and 0 <= k < lo and k not in self._other:
            b = k // BLOCK
            raw = self._blocks.block(b)
            if not raw[k % BLOCK]:
                raw[k % BLOCK] = 1
                self._n += 1
                self._blocks.store(b, raw)
            return
        f = self._flags
        if k in self._other:
            return
        if not (type(k) is int and k >= lo and _room(k - lo, len(f))):
            self._other.add(k)
            return
        i = k - lo
        if i >= len(f):
            f.extend(bytes(max(i + 1 - len(f), len(f), 1024)))
        if not f[i]:
            f[i] = 1
            self._n += 1

    def __iter__(self) -> Iterator[int]:
        for b in range(self._lo // BLOCK):
            raw = self._blocks.block(b)
            yield from (b * BLOCK + i for i in range(BLOCK) if raw[i])
        f, lo = self._flags, self._lo
        yield from (lo + i for i in range(len(f)) if f[i])
        yield from self._other

    def _dense(self) -> bytearray:
        return self._flags

    def _pad(self, n: int) -> None:
        self._flags.extend(bytes(n))

    def clear(self) -> None:
        """Forget every member."""
        super().clear()
        self._restart()


class SettlingIntCounts(_Settling, IntCounts):
    """An :class:`IntCounts` whose dense ids below ``lo`` can be settled, as
    :class:`SettlingIntSet`'s: a call's sessions are opened while it is open (and by a rare
    late copy after)."""

    __slots__ = ("_blocks", "_lo")
    WIDTH = 4

    def __init__(self) -> None:
        super().__init__()
        self._restart()

    def _settled(self, k: int) -> memoryview:
        return memoryview(self._blocks.block(k // BLOCK)).cast("I")

    def get(self, k: int, default: int = 0) -> int:
        """The count of ``k`` (``default`` when it has none)."""
        c, lo = self._counts, self._lo
        if type(k) is int and lo <= k < lo + len(c) and c[k - lo]:
            return c[k - lo]
        if type(k) is int and 0 <= k < lo:
            v = self._settled(k)[k % BLOCK]
            if v:
                return v
        return self._other.get(k, default)

    def incr(self, k: int) -> None:
        """Add 1 to the count of ``k``."""
        c, lo = self._counts, self._lo
        if type(k) is int and lo <= k < lo + len(c) and c[k - lo]:
            c[k - lo] += 1
        else:
            self[k] = self.get(k, 0) + 1

    def __setitem__(self, k: int, v: int) -> None:
        lo = self._lo
        if type(k) is int and 0 <= k < lo and k not in self._other and 0 <= v < 1 << 32:
            b = k // BLOCK
            view = self._settled(k)
            self._n += (v != 0) - (view[k % BLOCK] != 0)
            view[k % BLOCK] = v
            view.release()
            self._blocks.store(b, self._blocks.block(b))
            return
        c = self._counts
        if (k not in self._other and type(k) is int and k >= lo and _room(k - lo, len(c))
                and 0 <= v < 1 << 32):
            i = k - lo
            if i >= len(c):
                c.frombytes(bytes(4 * max(i + 1 - len(c), len(c), 1024)))
            self._n += (v != 0) - (c[i] != 0)
            c[i] = v
            return
        if type(k) is int and lo <= k < lo + len(c) and c[k - lo]:  # it leaves the dense part
            c[k - lo] = 0
            self._n -= 1
        elif type(k) is int and 0 <= k < lo and self._settled(k)[k % BLOCK]:
            self[k] = 0
        self._other[k] = v

    def items(self) -> Iterator[tuple[int, int]]:
        """(key, count) of every key."""
        for b in range(self._lo // BLOCK):
            view = self._settled(b * BLOCK)
            yield from ((b * BLOCK + i, view[i]) for i in range(BLOCK) if view[i])
        c, lo = self._counts, self._lo
        yield from ((lo + i, c[i]) for i in range(len(c)) if c[i])
        yield from self._other.items()

    def _dense(self) -> array[int]:
        return self._counts

    def _pad(self, n: int) -> None:
        self._counts.frombytes(bytes(4 * n))

    def clear(self) -> None:
        """Forget every count."""
        super().clear()
        self._restart()
