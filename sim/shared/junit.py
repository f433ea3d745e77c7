"""``--junit FILE``: a verdict as JUnit XML, so a CI pipeline shows each rule or SLO like a test.

One ``<testsuite name tests failures skipped>`` with one ``<testcase classname name time>``
per rule or SLO; a ``<failure message>`` child (with the count and example ids) when it
failed and ``<skipped message>`` when it was not checked.  The command's exit status stays
the single source of pass/fail: a case fails here exactly when it makes the command fail.
"""

from __future__ import annotations

import argparse
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One test case: ``status`` is "pass", "fail" or "skipped"."""

    name: str
    classname: str
    status: str
    message: str = ""
    details: str = ""


def to_xml(suite: str, cases: Sequence[Case]) -> str:
    """The JUnit XML text of ``cases`` in one test suite."""
    root = ET.Element("testsuite", name=suite, tests=str(len(cases)),
                      failures=str(sum(c.status == "fail" for c in cases)),
                      errors="0", skipped=str(sum(c.status == "skipped" for c in cases)))
    for c in cases:
        el = ET.SubElement(root, "testcase", classname=c.classname, name=c.name, time="0")
        if c.status == "fail":
            f = ET.SubElement(el, "failure", message=c.message or "failed")
            f.text = c.details or c.message
        elif c.status == "skipped":
            ET.SubElement(el, "skipped", message=c.message or "not checked")
        elif c.details:
            ET.SubElement(el, "system-out").text = c.details
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def write(path: Path, suite: str, cases: Sequence[Case]) -> None:
    """Write the XML file (raises OSError)."""
    path = Path(path)
    if path.parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_xml(suite, cases), encoding="utf-8")


def add_junit_argument(p: argparse.ArgumentParser) -> None:
    """The shared ``--junit FILE`` option."""
    p.add_argument("--junit", type=Path, metavar="FILE",
                   help="also write the verdict as JUnit XML (one test case per rule or SLO) "
                        "for CI; the exit status stays the pass/fail")


# --------------------------------------------------------------------------- builders


def verdict_cases(verdict: dict[str, Any], classname: str = "rtalab.check") -> list[Case]:
    """Cases of a ``verdict.json``: one per rule; failures carry the count and example ids."""
    cases = []
    for r in verdict.get("rules") or []:
        status = {"pass": "pass", "fail": "fail"}.get(str(r.get("status")), "skipped")
        examples = ", ".join(str(e) for e in (r.get("examples") or [])[:5])
        detail = str(r.get("detail", ""))
        msg = f"{r.get('count', 0)} × {r.get('name')}: {detail}" if status == "fail" else detail
        if status == "fail" and examples:
            msg += f" (examples: {examples})"
        kind = str(r.get("kind", "rule"))
        cases.append(Case(str(r.get("name")), f"{classname}.{kind}", status, msg,
                          f"{msg}\nsource: {r.get('section', '')}"))
    return cases


def load_run_cases(run_dir: Path, verdict: dict[str, Any] | None,
                   counts: dict[str, Any]) -> list[Case]:
    """A load run: every rule of its verdict (which judges the run's integrity too: ledger
    gathered, server and witness counts); without a verdict, the ledger and count checks."""
    cls = "rtalab.load"
    if verdict is not None:
        return verdict_cases(verdict, cls)
    cases = [Case("ledger-complete", cls, "pass" if counts.get("ledger_complete") else "fail",
                  "every Locust process delivered its ledger rows" if counts.get(
                      "ledger_complete") else "the gathered ledger is incomplete",
                  str(run_dir / "ledger" / "gather.json"))]
    for key, label in (("server_matches", "server-count-matches"),
                       ("witness_matches", "witness-count-matches")):
        v = counts.get(key)
        cases.append(Case(label, cls, "skipped" if v is None else "pass" if v else "fail",
                          "not comparable in this run (chaos or crashes)" if v is None else
                          f"{key.replace('_', ' ')}: {v}", str(run_dir / "ledger" /
                                                              "counts.json")))
    return cases


def _num(v: Any) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    return "undefined" if not math.isfinite(x) else f"{x:.4g}"


def capacity_cases(res: Any, slos: Iterable[Any]) -> list[Case]:
    """``sim capacity``: one case per load level × SLO.  It passes at the required value
    (held with 95 % confidence); with no value in the range it is skipped (the command
    still answers, "more than HI", and exits 0)."""
    cases = []
    slos = list(slos)
    for load, req in res.required.items():
        for s in slos:
            name = f"{res.load_key}={_num(load)}: {s}"
            if req is None:
                cases.append(Case(name, "rtalab.capacity", "skipped",
                                  f"no {res.knob.key} in [{_num(res.knob.lo)}, "
                                  f"{_num(res.knob.hi)}] meets it"))
            else:
                cases.append(Case(name, "rtalab.capacity", "pass",
                                  f"holds at {res.knob.key} = {_num(req)}"))
    return cases


def tune_cases(candidates: Any, constraints: Iterable[Any]) -> list[Case]:
    """``sim tune``: one case per constraint, at the recommended candidate (re-run on fresh
    seeds); skipped when no candidate met every constraint (the command exits 0)."""
    rec = candidates[candidates["recommended"]] if "recommended" in candidates else None
    cases = []
    for s in constraints:
        if rec is not None and len(rec):
            row = rec.iloc[0]
            value = row.get(s.metric)
            cases.append(Case(str(s), "rtalab.tune", "pass",
                              f"holds with 95 % confidence at {row['candidate']} "
                              f"({s.metric} = {_num(value)})"))
        else:
            cases.append(Case(str(s), "rtalab.tune", "skipped",
                              "no candidate met every constraint with confidence on fresh "
                              "seeds"))
    return cases
