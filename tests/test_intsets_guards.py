"""IntSet / IntCounts edge cases one by one (issue 31: each planted bug of the "intsets" area
of tests/oneoff/mutate.py fails one of these): the boundaries hypothesis may not draw."""

from __future__ import annotations

from rtalab.sim.model.intsets import IntCounts, IntSet


def test_overwriting_a_dense_count_keeps_one_key() -> None:
    c = IntCounts()
    c[5] = 1
    c[5] = 2
    c[5] = 3
    assert len(c) == 1 and c[5] == 3 and dict(c.items()) == {5: 3}


def test_a_count_of_two_to_the_32_goes_to_the_dict() -> None:
    c = IntCounts()
    c[7] = 2**32
    c[8] = 2**32 - 1
    assert (c[7], c[8], len(c)) == (2**32, 2**32 - 1, 2)


def test_a_dense_count_that_outgrows_32_bits_moves_whole() -> None:
    c = IntCounts()
    c[3] = 1
    c[3] = 2**32 + 1
    assert len(c) == 1 and c.get(3) == 2**32 + 1 and dict(c.items()) == {3: 2**32 + 1}


def test_clearing_counts_forgets_the_fallback_dict_too() -> None:
    c = IntCounts()
    c[10**12] = 4
    c[-1] = 2
    c[1] = 1
    c.clear()
    assert len(c) == 0 and c.get(10**12) == 0 and c.get(-1, -7) == -7
    assert list(c.items()) == []


def test_a_dense_id_without_a_count_reads_the_default() -> None:
    c = IntCounts()
    c[3] = 1
    assert c.get(4, -7) == -7 and c.get(4) == 0


def test_small_ids_are_held_densely_from_the_first() -> None:
    """What the containers are for: an id near 0 goes to the compact part, not the set."""
    s, c = IntSet(), IntCounts()
    s.add(5)
    c[5] = 1
    assert s._other == set() and c._other == {}  # the storage is the point


def test_the_set_grows_to_take_an_id_far_past_its_end() -> None:
    s = IntSet()
    s.add(5000)
    s.add(12000)
    assert 5000 in s and 12000 in s and 4999 not in s and len(s) == 2
    assert s._other == set()
