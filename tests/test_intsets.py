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


# settling: the dense ids below a mark compressed in blocks, still exact (bounded-memory runs)

SETTLE = st.tuples(st.just("settle"), st.integers(-10, 6000))
NEAR = st.one_of(st.integers(0, 400), KEYS)  # most keys dense and low: blocks of 64 settle


@given(st.lists(st.one_of(st.tuples(st.just("add"), NEAR), SETTLE)), st.lists(NEAR))
def test_a_settling_int_set_answers_as_a_set(ops: list, asked: list) -> None:
    import pytest

    from rtalab.sim.model import intsets

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(intsets, "BLOCK", 64)
        ref: set = set()
        s = intsets.SettlingIntSet()
        for op, k in ops:
            if op == "settle":
                s.settle(k)
                continue
            ref.add(k)
            s.add(k)
            assert len(s) == len(ref)
        for k in [*asked, *ref]:
            assert (k in s) == (k in ref), k
        assert sorted(map(str, s)) == sorted(map(str, ref))
        s.clear()
        assert len(s) == 0 and all(k not in s for k in ref)


@given(st.lists(st.one_of(st.tuples(st.just("set"), st.tuples(KEYS, st.integers(1, 2**33))),
                          st.tuples(st.just("incr"), KEYS), SETTLE)), st.lists(KEYS))
def test_settling_int_counts_answer_as_a_dict_of_counts(ops: list, asked: list) -> None:
    import pytest

    from rtalab.sim.model import intsets

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(intsets, "BLOCK", 64)
        ref: dict = {}
        c = intsets.SettlingIntCounts()
        for op, arg in ops:
            if op == "settle":
                c.settle(arg)
            elif op == "incr":
                c.incr(arg)
                ref[arg] = ref.get(arg, 0) + 1
            else:
                k, v = arg
                c[k] = v
                ref[k] = v
            assert len(c) == len(ref)
        for k in [*asked, *ref]:
            assert c.get(k) == ref.get(k, 0), k
        assert dict(c.items()) == ref
        for k, v in ref.items():
            assert c[k] == v


def test_settled_ids_are_compressed_and_change_exactly() -> None:
    """A million sessions settled cost a few KiB; a late one on a settled id still counts."""
    from rtalab.sim.model.intsets import SettlingIntCounts, SettlingIntSet

    s, c = SettlingIntSet(), SettlingIntCounts()
    for i in range(1_000_000):
        s.add(i)
        c.incr(i)
        if i % 100_000 == 0:
            s.settle(i - 70_000)
            c.settle(i - 70_000)
    assert 1 in s and 999_999 in s and 1_000_000 not in s and c.get(1) == 1
    assert s._blocks.nbytes() < 80_000 and c._blocks.nbytes() < 300_000  # 786 Ki ids settled
    assert s.nbytes() < 500_000 and c.nbytes() < 2_000_000  # vs 1 MB and 4 MB all dense
    c.incr(5)
    s.add(3)
    assert c.get(5) == 2 and c.get(6) == 1 and 3 in s and len(s) == 1_000_000
    assert sum(1 for _, v in c.items() if v > 1) == 1 and len(c) == 1_000_000
