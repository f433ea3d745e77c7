"""One vocabulary: outcomes, endings, reasons and decisions are named in sim/vocab.py only.

Read from the source (AST): a string constant anywhere in ``sim``, ``loadtests`` or
``benchmarks`` that *equals* an outcome, end reason, call end reason or decision value is a
second definition of the vocabulary (the enum member is the way to say it).  Checked are the
distinctive values; the generic English words among them (``completed``, ``failed``,
``timeout``, ``cancelled``, ``retry``, ``budget``, ``deadline``) also name run states,
columns and options, so they are left out.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from pathlib import Path

from rtalab.sim import vocab as V
from rtalab.sim.shared import schema as S

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "loadtests", "benchmarks")
HOME = "sim/vocab.py"
GENERIC = {"completed", "failed", "timeout", "cancelled", "retry", "budget", "deadline"}
WORDS = frozenset(m.value for e in (V.AttemptOutcome, V.TurnOutcome, V.EndReason,
                                    V.CallEndReason, V.Decision) for m in e) - GENERIC
# (file, value): the same spelling naming something else
ALLOWED = {
    ("sim/shared/schema.py", "escalated"): "the turns table's column name S.ESCALATED",
    ("sim/model/live.py", "escalated"): "a row-writer cell: the variable named escalated",
    ("sim/shared/manage.py", "unfinished"): "a run-folder kind of `rtalab results list`",
}


def bare_outcomes(root: Path, packages: Iterable[str] = PACKAGES) -> list[str]:
    """``file:line: 'value'`` of every string constant equal to a vocabulary word outside
    the vocabulary's module (the allowed spellings of other things left out)."""
    out = []
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if rel == HOME:
                continue
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), rel)):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and node.value in WORDS and (rel, node.value) not in ALLOWED):
                    out.append(f"{rel}:{node.lineno}: {node.value!r}")
    return out


def test_no_bare_outcome_string_outside_the_vocabulary() -> None:
    assert bare_outcomes(REPO) == []


def test_a_planted_bare_outcome_is_found(tmp_path: Path) -> None:
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "x.py").write_text(
        '"""A docstring saying response-lost is fine."""\n'
        'LOST = "response-lost"\n'
        'ok = outcome == "completed"  # a generic word: not checked\n'
        'def f(a):\n    return a.get("end_reason") == "barge-in"\n', encoding="utf-8")
    (tmp_path / "sim" / "vocab.py").write_text('X = "response-lost"\n')
    assert bare_outcomes(tmp_path, ["sim"]) == ["sim/x.py:2: 'response-lost'",
                                                "sim/x.py:5: 'barge-in'"]


def test_the_checker_sees_the_words() -> None:
    assert {"response-lost", "input-required", "not-retryable", "end-of-run", "barge-in",
            "all-turns-done", "abandoned"} <= WORDS


def test_record_categories_are_the_vocabulary_in_its_order() -> None:
    assert tuple(V.AttemptOutcome) == S.ATTEMPT_OUTCOMES
    assert tuple(V.TurnOutcome) == S.TURN_OUTCOMES
    assert tuple(V.EndReason) == S.END_REASONS
    assert tuple(V.CallEndReason) == S.CALL_END_REASONS
    assert tuple(V.Decision) == S.DECISIONS
    assert tuple(V.Phase) == S.PHASES
    # plain strings on disk: categories and JSON carry the value, not the member's name
    assert all(type(c) is str for c in (*S.ATTEMPT_OUTCOMES, *S.END_REASONS))
    assert json.dumps({"o": V.AttemptOutcome.RESPONSE_LOST}) == '{"o": "response-lost"}'
    assert f"{V.EndReason.BARGE_IN}" == "barge-in"


def test_the_bindings_are_the_registry() -> None:
    from rtalab.loadtests.live.bindings import REGISTRY
    assert set(REGISTRY) == set(V.BindingName)
