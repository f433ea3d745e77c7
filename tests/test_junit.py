"""``--junit FILE`` (issue 18, acceptance 7): one test case per rule or SLO, failures with
their counts and example ids; the exit status stays the single source of pass/fail."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rtalab.loadtests.check.synth import clean_ledger, write_ledger
from rtalab.sim.cli import main
from tests.kinds import MMC, TINY


def read(path: Path) -> tuple[ET.Element, dict[str, ET.Element]]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuite"
    return root, {c.get("name"): c for c in root.findall("testcase")}


def test_check_junit_one_case_per_rule_and_failures_with_examples(tmp_path: Path) -> None:
    led = clean_ledger(300, seed=5)
    clean = write_ledger(tmp_path / "clean", led)
    assert main(["check", str(clean), "-q", "--junit", str(tmp_path / "clean.xml")]) == 0
    root, cases = read(tmp_path / "clean.xml")
    assert root.get("failures") == "0" and int(root.get("tests")) == len(cases) >= 10
    assert {"lost", "duplicated", "ordering", "retry-limit"} <= set(cases)
    assert all(c.find("failure") is None for c in cases.values())

    led["witness"] = led["witness"].iloc[1:]
    lost = write_ledger(tmp_path / "lost", led)
    assert main(["check", str(lost), "-q", "--junit", str(tmp_path / "lost.xml")]) == 1
    root, cases = read(tmp_path / "lost.xml")
    assert root.get("failures") == "1"  # exactly the rule that made the exit status 1
    failure = cases["lost"].find("failure")
    assert failure is not None and failure.get("message").startswith("1 × lost")
    assert "examples:" in failure.get("message")
    assert cases["lost"].get("classname") == "rtalab.check.violation"
    import json

    [rule] = [r for r in json.loads((lost / "verdict.json").read_text())["rules"]
              if r["name"] == "lost"]
    assert rule["examples"] and all(e in failure.get("message") for e in rule["examples"])


def test_capacity_and_tune_junit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "capacity", "baseline", "--set", *MMC, "--load",
                 "workload.calls_per_s=0.5,1", "--knob", "reasoner.workers", "--range", "1:8",
                 "--slo", "p_wait<=0.5", "--slo", "success_rate>=0.5", "--replications", "2",
                 "--processes", "1", "--out", str(tmp_path / "cap"), "-q",
                 "--junit", str(tmp_path / "cap.xml")]) == 0
    root, cases = read(tmp_path / "cap.xml")
    # one case per load level × SLO, all passing at the required value (exit 0)
    assert sorted(cases) == ["workload.calls_per_s=0.5: queue.p_wait <= 0.5",
                             "workload.calls_per_s=0.5: success_rate >= 0.5",
                             "workload.calls_per_s=1: queue.p_wait <= 0.5",
                             "workload.calls_per_s=1: success_rate >= 0.5"]
    assert root.get("failures") == "0"
    space = tmp_path / "space.toml"
    space.write_text('[tune]\n"live.timeouts.turn_response_s" = { low = 1.0, high = 3.0 }\n')
    assert main(["sim", "tune", "baseline", "--set", *TINY, "--minimize",
                 "turn_completion_p99_s", "--constraint", "success_rate>=0.5", "--trials", "2",
                 "--space", str(space), "--replications", "2", "--top", "1", "--processes",
                 "1", "--out", str(tmp_path / "tune"), "-q",
                 "--junit", str(tmp_path / "tune.xml")]) == 0
    root, cases = read(tmp_path / "tune.xml")
    assert list(cases) == ["success_rate >= 0.5"] and root.get("failures") == "0"
    capsys.readouterr()


def test_check_at_80_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from rtalab.loadtests.check.show import wrap_text

    monkeypatch.setenv("COLUMNS", "80")
    led = clean_ledger(300, seed=5)
    led["witness"] = led["witness"].iloc[1:]
    lost = write_ledger(tmp_path / "lost", led)
    capsys.readouterr()
    assert main(["check", str(lost)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "verdict: FAIL (lost)"
    assert max(len(line) for line in lines) <= 80
    i = next(i for i, line in enumerate(lines) if line.startswith("✘ lost "))
    assert lines[i].split()[-2:] == ["1", lines[i].split()[-1]]  # count, then the rate
    assert any(line.startswith("    examples: ") for line in lines[i + 1:i + 5])
    assert sum(line.startswith("✔ ") for line in lines) >= 10
    footer = " ".join(lines[-3:])
    assert "✔ pass" in footer and "✘ fail" in footer and "– not checked" in footer
    text = "verdict: FAIL (lost)\n  FAILED lost [errors.md §6 (at-least-once delivery)]: " + \
        "x" * 30 + " y" * 40 + "\n"
    wrapped = wrap_text(text, 60).splitlines()
    assert wrapped[1].startswith("  FAILED lost [errors.md") and wrapped[2].startswith(" " * 6)
    assert max(map(len, wrapped)) <= 60
