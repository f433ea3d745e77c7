"""The report of a fleet run shows each replica's load and the imbalance (issue 27 point 5):
a table whose numbers are summary.json's and one bar figure; a one-pool run has neither."""

from __future__ import annotations

import base64
import html as html_lib
import io
import json
import re
from pathlib import Path

import pytest

from rtalab.sim import cli
from rtalab.sim.report.render import render_report
from rtalab.sim.report.runs import fleet_load
from rtalab.sim.shared.fmt import fmt_ci, fmt_value

TINY = ["run.duration_s=60", "run.warmup_s=10", "run.drain_s=10"]
FLEET_TITLE = "Fleet: load per replica"


def _run(tmp: Path, *sets: str) -> Path:
    out = tmp / "runs"
    assert cli.main(["sim", "run", "baseline", "--set", *TINY, *sets, "--replications", "2",
                     "--results", str(out), "--no-plots", "-q"]) == 0
    return next(out.iterdir())


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("fleet"), "fleet.replicas=3",
                'fleet.balancer="random"')


def _fleet_rows(page: str) -> list[list[str]]:
    """The body rows (cell text) of the report's fleet table."""
    at = page.index(FLEET_TITLE)
    body = page[at:page.index("</table>", at)]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S):
        cells = [html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, flags=re.S)]
        if cells and cells[0]:
            rows.append(cells)
    return rows


def test_the_fleet_table_shows_summary_json_numbers(fleet_run: Path) -> None:
    summary = json.loads((fleet_run / "summary.json").read_text())
    met = summary["metrics"]
    page = render_report([fleet_run])
    assert "(3 replicas;" in page
    rows = {r[0]: r[1:] for r in _fleet_rows(page)}
    for r in range(3):
        u, s = met[f"fleet.replica_utilisation.r{r}"], met[f"fleet.replica_requests_share.r{r}"]
        cells = rows[f"replica {r}"]
        assert cells[0] == fmt_value(u["mean"], f"fleet.replica_utilisation.r{r}")
        assert cells[0].endswith("%")
        assert cells[1] == fmt_ci(None, u["ci_low"], u["ci_high"],
                                  f"fleet.replica_utilisation.r{r}").removeprefix("– ")
        assert cells[2] == fmt_value(s["mean"], f"fleet.replica_requests_share.r{r}")
    imb = met["fleet.utilisation_imbalance"]["mean"]
    assert rows["imbalance of utilisation (max / mean)"][0] == fmt_value(imb,
                                                                         "fleet.utilisation_imbalance")
    req = met["fleet.requests_imbalance"]["mean"]
    assert rows["imbalance of requests (max / mean)"][2] == fmt_value(req,
                                                                      "fleet.requests_imbalance")
    # the imbalance really is max / mean of the replicas (of each replication, then averaged)
    utils = [met[f"fleet.replica_utilisation.r{r}"]["values"] for r in range(3)]
    per_rep = [max(v) / (sum(v) / 3) for v in zip(*utils, strict=True)]
    assert imb == pytest.approx(sum(per_rep) / len(per_rep))


def test_the_fleet_figure_is_one_bar_per_replica_readable_at_1280(fleet_run: Path) -> None:
    from PIL import Image

    page = render_report([fleet_run])
    assert page.count("<figcaption>Worker utilisation of each replica") == 1
    caption = page.index("<figcaption>Worker utilisation of each replica")
    data = page[:caption].rsplit("data:image/png;base64,", 1)[1].split('"', 1)[0]
    img = Image.open(io.BytesIO(base64.b64decode(data)))
    assert 500 <= img.width <= 1280 and img.height <= 600
    fleet = fleet_load(json.loads((fleet_run / "summary.json").read_text()))
    assert fleet is not None and [r for r, _, _ in fleet["replicas"]] == [0, 1, 2]


def test_a_one_pool_run_has_no_fleet_section(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert fleet_load(json.loads((run / "summary.json").read_text())) is None
    page = render_report([run])
    assert FLEET_TITLE not in page and "Worker utilisation of each replica" not in page


def test_the_terminal_table_shows_each_replica_and_the_imbalance(
        fleet_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rtalab.sim.cli import print_summary
    from rtalab.sim.shared.fmt import fmt_kind

    summary = json.loads((fleet_run / "summary.json").read_text())
    meta = json.loads((fleet_run / "meta.json").read_text())
    print_summary(summary, fleet_run, meta)
    out = capsys.readouterr().out
    met = summary["metrics"]
    for r in range(3):
        for label, name in (("utilisation of replica", "replica_utilisation"),
                            ("requests to replica", "replica_requests_share")):
            line = next(x for x in out.splitlines() if f"{label} r{r} " in x)
            assert fmt_kind(met[f"fleet.{name}.r{r}"]["mean"], "%") in line, line
    line = next(x for x in out.splitlines() if "fleet utilisation imbalance" in x)
    assert fmt_kind(met["fleet.utilisation_imbalance"]["mean"], "x") in line
