"""The mutation list of tests/oneoff/mutate.py stays valid as the code moves: every old
text occurs exactly once in its file, every test file exists."""

from __future__ import annotations

from tests.oneoff.mutate import MUTATIONS, Mutation, validate


def test_every_mutation_applies_exactly_once() -> None:
    assert validate() == []


def test_validate_reports_a_stale_mutation() -> None:
    stale = Mutation("x", "sim/shared/stats.py", "this text is nowhere", "y", (), "stale")
    assert validate((stale,)) == ["sim/shared/stats.py: old text found 0 times (stale)"]


def test_every_area_has_mutations() -> None:
    areas = {m.area for m in MUTATIONS}
    assert {"intervals", "multiple comparisons", "tune", "calibration"} <= areas


def test_the_fleet_areas_of_round_4_have_four_to_eight_bugs_each() -> None:
    """Issue 31: fresh bugs in every area of the fleet code of 2026-12-04, each area's fast
    guards (written for its first run's survivors) among its test files."""
    from collections import Counter

    from tests.oneoff.mutate import ROUND4, ROUND5

    fleet = {"balancer", "fleet load run", "fleet split", "intsets", "fleet answers",
             "fleet report", "fleet bench"}
    counts = Counter(m.area for m in MUTATIONS[ROUND4:ROUND5])
    assert set(counts) == fleet and all(4 <= n <= 8 for n in counts.values()), counts
    assert all(m.tests[0].endswith("_guards.py") for m in MUTATIONS[ROUND4:ROUND5])


def test_round_6_plants_in_the_code_since_2026_12_05_and_in_older_areas() -> None:
    """Fresh bugs in each part of the code that landed since 2026-12-05 (two or more per
    area), then fresh ones in older areas -- none in the files being rewritten in parallel
    (sim/model/*, loadtests/live/call.py)."""
    from collections import Counter

    from tests.oneoff.mutate import ROUND6, ROUND7

    new = {"options", "run folders", "vocabulary", "turn machine", "namespace", "report",
           "recovery", "wire client", "serve CLIs"}
    r6 = MUTATIONS[ROUND6:ROUND7]
    counts = Counter(m.area for m in r6)
    assert new <= set(counts) and all(counts[a] >= 2 for a in new), counts
    assert len(set(counts) - new) >= 10  # older areas, one or two fresh bugs each
    assert not [m.file for m in r6 if m.file.startswith("sim/model/")
                or m.file == "loadtests/live/call.py"]


def test_round_7_plants_only_in_code_no_earlier_round_planted_in() -> None:
    """Round 7 plays the outside reviewer: 50-70 fresh bugs, each area new to the list, in
    files no earlier round had planted in (the policy, the budgets, the error mapping per
    binding, the reorder buffer, ...), at least three per area."""
    from collections import Counter

    from tests.oneoff.mutate import ROUND7

    before, r7 = MUTATIONS[:ROUND7], MUTATIONS[ROUND7:]
    assert 50 <= len(r7) <= 70
    counts = Counter(m.area for m in r7)
    assert not set(counts) & {m.area for m in before}, counts
    assert all(n >= 3 for n in counts.values()), counts
    old_files = {m.file for m in before} - {"sim/policy/budget.py", "sim/policy/decide.py",
                                            "sim/shared/summary.py"}
    assert not [m.file for m in r7 if m.file in old_files]
