"""The compact per-call containers answer as the set and dict they replace, in a fraction of
the memory (the Reasoner keeps them for the whole run: issue 27, bounded memory)."""

from __future__ import annotations

import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from rtalab.sim.model.intsets import GROW_SLACK, IntCounts, IntSet

# dense ids, negative ones, ids far past the dense part, and keys that are not ints
KEYS = st.one_of(st.integers(0, 5000), st.integers(-5, -1),
                 st.integers(GROW_SLACK + 5000, 2**40), st.sampled_from(["a", 1.5, True]))


@given(st.lists(KEYS), st.lists(KEYS))
def test_an_int_set_answers_as_a_set(added: list, asked: list) -> None:
    ref: set = set()
    s = IntSet()
    for k in added:
        ref.add(k)
        s.add(k)
        assert len(s) == len(ref)
    for k in [*asked, *added]:
        assert (k in s) == (k in ref), k
    assert sorted(map(str, s)) == sorted(map(str, ref))
    s.clear()
    assert len(s) == 0 and all(k not in s for k in added)


@given(st.lists(st.tuples(KEYS, st.integers(1, 2**33))), st.lists(KEYS))
def test_int_counts_answer_as_a_dict_of_counts(writes: list, asked: list) -> None:
    """Counts >= 1, as the Reasoner stores them (2**32 and over: the plain dict's)."""
    ref: dict = {}
    c = IntCounts()
    for k, v in writes:
        ref[k] = v
        c[k] = v
        assert len(c) == len(ref)
    for k in [*asked, *ref]:
        assert c.get(k) == ref.get(k, 0), k
        assert c.get(k, -7) == ref.get(k, -7), k
    assert dict(c.items()) == ref
    for k, v in ref.items():
        assert c[k] == v


def test_a_missing_count_is_a_key_error() -> None:
    c = IntCounts()
    c[3] = 1
    for k in (2, 4, 10**9, "x"):
        try:
            c[k]
        except KeyError:
            continue
        raise AssertionError(f"{k!r} should be missing")


def test_a_million_calls_cost_bytes_not_a_set_and_a_dict() -> None:
    """What they are for: 1 M call ids in ~5 MB instead of ~100 MB."""
    n = 1_000_000
    tracemalloc.start()
    s, c = IntSet(), IntCounts()
    for i in range(n):
        s.add(i)
        c[i] = c.get(i, 0) + 1
    compact = tracemalloc.get_traced_memory()[0]
    del s, c
    ref_s, ref_c = set(), {}
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        ref_s.add(i)
        ref_c[i] = ref_c.get(i, 0) + 1
    plain = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(f"1 M ids: compact {compact / 2**20:.1f} MiB, set + dict {plain / 2**20:.1f} MiB")
    assert compact < 10 * 2**20 < plain


def test_a_negative_id_is_never_read_from_the_end_of_the_flags() -> None:
    s = IntSet()
    for i in range(1024):  # the whole first block set, its last flag too
        s.add(i)
    assert -1 not in s and -1024 not in s
    s.add(-1)
    assert -1 in s and -2 not in s and len(s) == 1025


def test_incr_counts_as_get_plus_one_on_every_path() -> None:
    c, ref = IntCounts(), {}
    for k in (3, 3, 3, 0, 7, 10**12, 10**12, -4, 3):
        c.incr(k)
        ref[k] = ref.get(k, 0) + 1
    assert dict(c.items()) == ref and len(c) == len(ref)
