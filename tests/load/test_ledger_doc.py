"""docs/ledger.md against a real load run: every file the run writes in ``ledger/`` and every
field of its rows is documented, and every documented file and field is written.

One short load run (both bindings, the chaos proxy with every fault a load run can
inject, a crash-restart), so that ``chaos.jsonl`` and ``restarts.jsonl`` exist.  The
field tables are parsed out of docs/ledger.md: a section ``### `FILE` `` and the first
table after it, one field per row (`` `name` ``, `` `name` (optional) `` when some
rows lack it; ``a.<key>.b`` for nested objects, ``<key>`` matching any key).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rtalab.loadtests.check.ledger import ATTEMPT_KEYS, SCHEMAS
from tests.load.conftest import FAST, jsonl, load_run

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ledger.md"

# FAST, shorter, with every client-injected copy, barge-in, every proxy fault a load run
# can inject (an outage in both directions) and a crash-restart (ARGS)
SCENARIO = FAST.replace("duration_s = 4", "duration_s = 3").replace(
    "drain_s = 10", "drain_s = 5").replace("turn_response_s = 2.0", "turn_response_s = 1.0") + """
[load]
availability_min = 0.0  # proxy faults and a crash in a 3-s run: the verdict is not the point
resend_share = 0.2
resend_delay_s = 0.2
concurrent_duplicate_share = 0.2
continuation_duplicate_share = 0.5
barge_in_share = 0.1
[network.uplink]
duplication = 0.2
loss = 0.05
[network.downlink]
reorder = 0.3
loss = 0.05
[[network.outages]]
start_s = 0.6
duration_s = 0.5
direction = "both"
"""
ARGS = ("--binding", "both", "--chaos", "--crash-at", "1.5")

# documented files this run does not write, and why
NOT_WRITTEN = {"server_metrics_before.json": "scraped only with --target",
               "server_metrics_r<i>.json": "one per replica, only with a [fleet]"}
# the fields docs/ledger.md marks (optional), and why some rows lack them
OPTIONAL = {
    ("attempts.jsonl", "task_id_learned"): "only on an attempt that learned its taskId",
    ("counts.json", "server_turns_answered"): "only if the server exports its turn counter",
    ("counts.json", "server_matches"): "only if the server exports its turn counter",
    ("counts.json", "witness_rows"): "only with a witness",
    ("counts.json", "witness_matches"): "only with a witness",
    ("counts.json", "interrupted"): "only in the counts of an interrupted run",
    ("chaos.jsonl", "in_flight"): "WebSocket drops only",
    ("chaos.jsonl", "connections"): "refuse outages only",
    ("chaos.jsonl", "replica"): "balancer rotation lines, only with a [fleet]",
    ("chaos.jsonl", "upstream"): "balancer rotation lines, only with a [fleet]",
    ("restarts.jsonl", "replica"): "replica rows, only with [[fleet.failures]]",
}
# of those, the ones a run like this one never writes
NEVER_HERE = {("counts.json", "interrupted"),  # the run is not interrupted
              ("chaos.jsonl", "connections"),  # rtalab load run never uses refuse outages
              # no [fleet] in this run (tests/load/test_load_fleet.py has them)
              ("chaos.jsonl", "replica"), ("chaos.jsonl", "upstream"),
              ("restarts.jsonl", "replica")}
# of those, the ones written only on an event of chance (a 3-s run on a busy machine may
# not meet it): demanded exactly when the rows show the event happened
OCCASION: dict[tuple[str, str], Callable[[list[dict[str, Any]]], bool]] = {
    ("chaos.jsonl", "in_flight"): lambda rows: any(
        r.get("kind") == "drop" and r.get("binding") == "ws" for r in rows),
}

HEADING = re.compile(r"^### (.*)$", re.M)
FIELD = re.compile(r"^`([^`]+)`( \(optional\))?$")


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def doc_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """File name -> the rows of the field table of its section (column name -> cell)."""
    out: dict[str, list[dict[str, str]]] = {}
    parts = HEADING.split(text)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        names = re.findall(r"`([^`]+\.jsonl?)`", heading)
        block = body.split("\n|", 1)  # the first table after the heading
        lines = ("|" + block[1]).split("\n\n", 1)[0].splitlines() if len(block) > 1 else []
        if not names or len(lines) < 3:
            continue
        header = cells(lines[0])
        rows = []
        for line in lines[2:]:
            row = dict(zip(header, cells(line), strict=True))
            m = FIELD.match(row["field"])
            assert m, f"docs/ledger.md {names}: field cell {row['field']!r} is not `name`"
            row["name"], row["optional"] = m.group(1), "yes" if m.group(2) else ""
            rows.append(row)
        for name in names:
            out[name] = rows
    return out


def listed_files(text: str) -> set[str]:
    """The files of the table under "## The files"."""
    section = text.split("## The files", 1)[1].split("\n## ", 1)[0]
    return {m for line in section.splitlines() if line.startswith("| `")
            for m in re.findall(r"^\| `([^`]+)`", line)}


def pattern(name: str) -> tuple[str, ...]:
    return tuple(name.split("."))


def matches(pat: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """``path`` (keys) fits ``pat`` (``<x>`` matches any one key)."""
    return len(pat) == len(path) and all(
        p == k or (p.startswith("<") and p.endswith(">")) for p, k in zip(pat, path, strict=True))


def leaves(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The key paths of a JSON object down to every value that is not an object."""
    if isinstance(obj, dict) and (obj or not prefix):
        return [p for k, v in obj.items() for p in leaves(v, (*prefix, k))]
    return [prefix]


def _kind_seen(file: str, field: dict[str, str], rows: list[dict[str, Any]]) -> bool:
    """A chaos.jsonl field documented for some kinds only is demanded "written at all" when
    a line of those kinds is there (a blackhole's ``what``: on a busy machine no request may
    meet the run's half-second outage); on the lines of its kinds it is always demanded."""
    if file != "chaos.jsonl" or field.get("kinds", "all") == "all":
        return True
    kinds = {k.strip() for k in field["kinds"].split(",")}
    return any(r.get("kind") in kinds for r in rows)


def problems(file: str, rows: list[dict[str, Any]], fields: list[dict[str, str]]) -> list[str]:
    """Where ``rows`` of ``file`` and its documented ``fields`` disagree."""
    out = []
    pats = {pattern(f["name"]): f for f in fields}
    seen: set[tuple[str, ...]] = set()
    for row in rows:
        paths = leaves(row)
        for path in paths:
            hit = [p for p in pats if matches(p, path)]
            if not hit:
                out.append(f"{file}: field {'.'.join(path)} is written but not documented")
            for p in hit:
                seen.add(p)
            for n in range(1, len(path)):  # an object documented as a field of its own
                seen.update(p for p in pats if matches(p, path[:n]))
        kind = row.get("kind") if file == "chaos.jsonl" else None
        for p, f in pats.items():
            if f["optional"] or len(p) > 1 or p[0].startswith("<"):
                continue  # nested and wildcard fields: only "written at all" is checked
            if kind is not None and f["kinds"] != "all" and kind not in (
                    k.strip() for k in f["kinds"].split(",")):
                if p[0] in row:
                    out.append(f"{file}: {kind} line has {p[0]}, documented for {f['kinds']}")
                continue
            if p[0] not in row:
                out.append(f"{file}: documented field {p[0]} missing from a row {row}")
    for p, f in pats.items():
        key = (file, f["name"])
        occurred = OCCASION.get(key, lambda _rows: True)(rows) and _kind_seen(file, f, rows)
        if p not in seen and key not in NEVER_HERE and occurred:
            out.append(f"{file}: documented field {f['name']} never written")
    return sorted(set(out))


def rows_of(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return jsonl(path)
    return [json.loads(path.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Path:
    """The ``ledger/`` folder of one short load run with chaos and a crash-restart."""
    p, run = load_run(tmp_path_factory.mktemp("ledgerdoc"), *ARGS, scenario=SCENARIO,
                      timeout_s=120.0)
    assert run is not None and (run / "ledger" / "gather.json").exists(), p.stderr
    return run / "ledger"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_file_of_a_load_run_is_documented(ledger: Path, doc: str) -> None:
    tables = doc_tables(doc)
    written = {p.name for p in ledger.iterdir()}
    assert {"chaos.jsonl", "restarts.jsonl", "witness.jsonl"} <= written  # the run is rich
    assert written - set(tables) == set()
    assert set(tables) - written == set(NOT_WRITTEN)
    assert listed_files(doc) == set(tables)  # the overview lists every section's file


def test_every_field_written_is_documented_and_every_documented_one_written(
        ledger: Path, doc: str) -> None:
    tables = doc_tables(doc)
    found = []
    for path in sorted(ledger.iterdir()):
        found += problems(path.name, rows_of(path), tables[path.name])
    assert found == []


def test_optional_fields_are_the_ones_the_test_knows_why(doc: str) -> None:
    marked = {(file, f["name"]) for file, fields in doc_tables(doc).items() for f in fields
              if f["optional"]}
    assert marked == set(OPTIONAL)
    assert set(NEVER_HERE) <= marked and set(OCCASION) <= marked


def test_a_field_of_chance_is_demanded_when_its_event_happened() -> None:
    """A WebSocket drop line without ``in_flight`` fails; no WebSocket drop, no demand."""
    fields = [{"name": "kind", "optional": "", "kinds": "all"},
              {"name": "binding", "optional": "", "kinds": "all"},
              {"name": "in_flight", "optional": "yes", "kinds": "drop"}]
    ws_drop = {"kind": "drop", "binding": "ws"}
    assert problems("chaos.jsonl", [ws_drop], fields) == [
        "chaos.jsonl: documented field in_flight never written"]
    assert problems("chaos.jsonl", [{**ws_drop, "in_flight": 1}], fields) == []
    assert problems("chaos.jsonl", [{"kind": "drop", "binding": "sse"}], fields) == []


def test_chaos_kinds_written_are_documented(ledger: Path, doc: str) -> None:
    fields = {f["name"]: f for f in doc_tables(doc)["chaos.jsonl"]}
    kinds = set(re.findall(r"`([a-z-]+)`", fields["kind"]["meaning"]))
    written = {r["kind"] for r in jsonl(ledger / "chaos.jsonl")}
    assert written - kinds == set()
    # the faults the scenario asks for all fired (a run that injected less proves less)
    assert {"duplicate", "reorder", "drop", "outage-start", "outage-end"} <= written


def test_the_check_column_is_what_the_checker_reads(doc: str) -> None:
    tables = doc_tables(doc)
    for name, schema in SCHEMAS.items():
        fields = tables[f"{name}.jsonl"]
        assert {f["name"] for f in fields if f["check"] in ("key", "reads")} == set(schema), name
    assert {f["name"] for f in tables["attempts.jsonl"] if f["check"] == "key"} == set(
        ATTEMPT_KEYS)


def test_the_parser_sees_a_missing_and_an_undocumented_field() -> None:
    doc = ("### `x.jsonl`\n\n| field | meaning |\n| --- | --- |\n"
           "| `a` | one |\n| `b` (optional) | two |\n| `c.<k>.d` | three |\n")
    fields = doc_tables(doc)["x.jsonl"]
    assert problems("x.jsonl", [{"a": 1, "c": {"p": {"d": 2}}}], fields) == [
        "x.jsonl: documented field b never written"]
    assert problems("x.jsonl", [{"b": 1, "e": 2, "c": {"p": {"d": 2, "f": 3}}}], fields) == [
        "x.jsonl: documented field a missing from a row {'b': 1, 'e': 2, 'c': {'p': {'d': 2, "
        "'f': 3}}}", "x.jsonl: documented field a never written",
        "x.jsonl: field c.p.f is written but not documented",
        "x.jsonl: field e is written but not documented"]


def test_a_field_of_some_kinds_is_demanded_exactly_when_such_a_line_is_there(doc: str) -> None:
    """No blackhole line (no request met the outage): its ``what`` is not demanded; a
    blackhole line without it is a problem; with it, none (no server run needed)."""
    fields = doc_tables(doc)["chaos.jsonl"]
    base = {"t": 0.5, "kind": "reorder", "binding": "sse", "request_guid": "g", "rpc_id": "1"}
    rows = [{k: v for k, v in base.items()
             if k in {f["name"] for f in fields if f["kinds"] in ("all",) or
                      "reorder" in f["kinds"]}}]
    assert not [m for m in problems("chaos.jsonl", rows, fields) if " what " in m + " "]
    hole = dict(rows[0], kind="blackhole")
    assert any("documented field what missing" in m
               for m in problems("chaos.jsonl", [*rows, hole], fields))
    assert not [m for m in problems("chaos.jsonl", [*rows, dict(hole, what="request")], fields)
                if "what" in m]
