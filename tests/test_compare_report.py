"""``rtalab compare`` and ``rtalab report`` (issue 8, acceptance 3 and 4), and the statistics
behind them."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rtalab.sim import cli, sweep
from rtalab.sim.report.render import render_report
from rtalab.sim.scenario import load_scenario
from rtalab.sim.shared.compare import COMPARE_COLUMNS, compare_table, differing, load_run
from rtalab.sim.shared.stats import holm, t_two_sided_p, welch

REPO = Path(__file__).resolve().parents[1]
SHORT = ["run.duration_s=60", "run.warmup_s=10", "run.drain_s=20"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rtalab(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "rtalab.sim.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def sim_run(tmp: Path, *sets: str, seed: int, reps: int = 5, plots: bool = False) -> Path:
    out = tmp / f"runs-{len(list(tmp.glob('runs-*')))}"
    rc = cli.main(["sim", "run", "baseline", "--set", *SHORT, *sets, "--seed", str(seed),
                   "--replications", str(reps), "--quiet", "--out", str(out),
                   *([] if plots else ["--no-plots"])])
    assert rc == 0
    return next(out.iterdir())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    return {"w8_s1": sim_run(tmp, seed=1, plots=True),
            "w4_s2": sim_run(tmp, "reasoner.workers=4", seed=2, plots=True),
            **{f"w8_s{s}": sim_run(tmp, seed=s) for s in (3, 4, 5, 6, 7, 8)}}


# --------------------------------------------------------------------------- statistics


def test_welch_matches_scipy_and_holm_controls_the_family() -> None:
    rng = np.random.default_rng(3)
    for n_a, n_b, shift in ((5, 5, 0.0), (7, 12, 1.0), (3, 30, -2.0)):
        a, b = rng.normal(0, 1, n_a), rng.normal(shift, 2, n_b)
        d = welch(list(a), list(b))
        ref = sps.ttest_ind(b, a, equal_var=False)
        assert d is not None
        assert d.p_value == pytest.approx(ref.pvalue, rel=1e-9)
        assert d.diff == pytest.approx(b.mean() - a.mean())
        # CI uses floor(df): never narrower than the exact Welch CI
        ci = ref.confidence_interval()
        assert d.ci_low <= ci.low + 1e-12 and d.ci_high >= ci.high - 1e-12
        half_exact = (ci.high - ci.low) / 2
        assert (d.ci_high - d.ci_low) / 2 == pytest.approx(
            half_exact * sps.t.ppf(0.975, math.floor(d.df)) / sps.t.ppf(0.975, d.df), rel=1e-5)
    for t, df in ((0.3, 1.0), (2.5, 3.7), (10.0, 40.0)):
        assert t_two_sided_p(t, df) == pytest.approx(2 * sps.t.sf(t, df), rel=1e-9)
    assert welch([1.0], [1.0, 2.0]) is None
    same = welch([2.0, 2.0], [3.0, 3.0])
    assert same is not None and same.excludes_zero and same.p_value == 0.0
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.01 <= .05/3; 0.03 > .05/2
    assert holm([0.001, 0.02, 0.04]) == [True, True, True]


# --------------------------------------------------------------------------- acceptance 3


def test_compare_flags_a_real_capacity_difference(runs: dict[str, Path]) -> None:
    a, b = load_run(runs["w8_s1"]), load_run(runs["w4_s2"])
    table = compare_table([a, b])
    flagged = differing(table)
    # half the workers at the same load (utilisation ~0.6 -> overload): busier, waits appear
    for metric in ("worker_utilisation", "queue.p_wait"):
        row = table[(table["metric"] == metric) & (table["run"] == 1)].iloc[0]
        assert metric in flagged
        assert row["diff"] > 0 and row["diff_ci_low"] > 0
        assert row["p_value"] < 6e-5  # beyond 4 standard errors
    # and the caller hears it: turns take longer (the success rate's drop varies too much
    # between replications of an overloaded system to be a reliable signal at 3 replications)
    slower = table[(table["metric"] == "completion_s.p50") & (table["run"] == 1)].iloc[0]
    assert slower["ci_excludes_0"] and slower["diff_ci_low"] > 0


def test_compare_flags_nothing_between_seeds_of_one_scenario(runs: dict[str, Path]) -> None:
    for s1, s2 in ((3, 4), (5, 6), (7, 8)):
        table = compare_table([load_run(runs[f"w8_s{s1}"]), load_run(runs[f"w8_s{s2}"])])
        wide = table.pivot(index="metric", columns="run", values=["ci_low", "ci_high"])
        overlap = wide[(wide[("ci_low", 0)] <= wide[("ci_high", 1)])
                       & (wide[("ci_low", 1)] <= wide[("ci_high", 0)])].index
        assert len(overlap) > 20
        assert not set(differing(table)) & set(overlap), (s1, s2)


def test_compare_cli_csv_parses_and_works_on_sweep_points(runs: dict[str, Path],
                                                         tmp_path: Path) -> None:
    png = tmp_path / "cmp.png"
    r = rtalab("compare", str(runs["w8_s1"]), str(runs["w4_s2"]), "--csv", "--png", str(png))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(io.StringIO(r.stdout))
    assert list(df.columns) == list(COMPARE_COLUMNS)
    assert set(df["run"]) == {0, 1}
    assert df[df["run"] == 0]["diff"].isna().all()
    row = df[(df["metric"] == "worker_utilisation") & (df["run"] == 1)].iloc[0]
    assert bool(row["differs"]) and bool(row["ci_excludes_0"])
    assert png.read_bytes().startswith(PNG_MAGIC)

    text = rtalab("compare", str(runs["w8_s1"]), str(runs["w4_s2"]), "--no-plot")
    assert text.returncode == 0 and "differ: " in text.stdout
    assert "worker utilisation" in text.stdout.split("[1] vs [0]:")[1]  # labels, not keys
    assert "[1] vs [0]:" in text.stdout

    sc = load_scenario("baseline", ["run.duration_s=30", "run.warmup_s=5", "run.drain_s=5"])
    sweep.run_points(sc, [{"reasoner.workers": 3}, {"reasoner.workers": 12}], replications=3,
                     root_seed=1, out_dir=tmp_path / "sw", progress=False, plots=False)
    pts = tmp_path / "sw" / "points"
    r = rtalab("compare", str(pts / "p0000"), str(pts / "p0001"), "--csv", "--no-plot")
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(io.StringIO(r.stdout))
    assert "reasoner.workers=3" in df["label"][0]
    bad = rtalab("compare", str(tmp_path / "sw"), str(pts / "p0000"))
    assert bad.returncode == 2 and "is a sweep" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    missing = rtalab("compare", str(pts / "p0000"))
    assert missing.returncode == 2 and "at least two" in missing.stderr


# --------------------------------------------------------------------------- acceptance 4


class _Resources(HTMLParser):
    """Every src/href attribute of a page, and its <img> sources."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.refs.append(value)
                if tag == "img":
                    self.images.append(value)


def _check_self_contained(html: str) -> _Resources:
    page = _Resources()
    page.feed(html)
    assert "http://" not in html and "https://" not in html
    assert page.images and len(page.images) == len(page.refs)  # nothing but embedded images
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(PNG_MAGIC)
    return page


def test_report_of_a_run_and_a_sweep_is_one_self_contained_file(runs: dict[str, Path],
                                                                tmp_path: Path) -> None:
    run = runs["w8_s1"]
    (run / "verdict.json").write_text(json.dumps({"ok": False, "rules": [
        {"name": "no-ghost-success", "section": "errors.md §4", "status": "fail", "count": 2,
         "examples": ["t1"], "detail": "side effect ran, caller told failure"}]}))
    try:
        out = tmp_path / "out" / "report.html"
        r = rtalab("report", str(run), "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert [p.name for p in out.parent.iterdir()] == ["report.html"]
        html = out.read_text()
        page = _check_self_contained(html)
        assert len(page.images) == len(list(run.glob("*.png"))) == 2
        assert "no-ghost-success" in html and "FAIL" in html  # verdict lines
        assert "[reasoner]" in html and "workers = 8" in html  # resolved TOML
        assert "success rate" in html and "95 % CI" in html
    finally:
        (run / "verdict.json").unlink()

    sc = load_scenario("baseline", ["run.duration_s=30", "run.warmup_s=5", "run.drain_s=5"])
    sw = tmp_path / "sw"
    sweep.run_points(sc, sweep.expand_grid({"reasoner.workers": [3, 6, 12]},
                                           {"live.retry.max_attempts": [1, 3]}),
                     replications=2, root_seed=1, out_dir=sw, progress=False, plots=False)
    html = render_report([sw, runs["w8_s1"], runs["w4_s2"]])
    page = _check_self_contained(html)
    table = pd.read_parquet(sw / "sweep.parquet")
    plotted = table.groupby("metric")["mean"].apply(lambda s: s.notna().any()).sum()
    # the sweep's one figure of what differs + each run's PNGs + the comparison overlay; every
    # metric of the sweep as a small inline SVG in the appendix
    assert len(page.images) == 1 + 2 + 2 + 1
    assert html.count("<svg") == plotted
    assert "reasoner.workers" in html and "Comparison" in html

    bad = rtalab("report", str(tmp_path / "nothing-here"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
