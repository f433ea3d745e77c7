"""Distributions from telemetry: ``empirical`` from a samples file, ``histogram`` from Prometheus
buckets, ``weibull`` (issue 17, point 2): validated with one-line errors naming the key, sampled
as ``histogram_quantile`` interpolates, reproducible from the seed."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.config import ConfigError
from rtalab.sim.dist import DistError, Histogram, parse_dist
from rtalab.sim.model.rand import sampler
from rtalab.sim.scenario import dumps, from_dict, load_scenario

BUCKETS = {"dist": "histogram", "le": [0.1, 0.5, 1, 2.5, "+Inf"],
           "counts": [12, 340, 810, 990, 1000]}
# histogram_quantile of BUCKETS, worked out by hand: rank = q * 1000, the bucket holding the
# rank, linear inside it; the +Inf bucket answers the highest finite bound (2.5)
EXPECTED_QUANTILES = {
    0.006: 0.05,                              # first bucket [0, 0.1]: 0.1 * 6/12
    0.25: 0.1 + 0.4 * (250 - 12) / 328,       # 0.39024...
    0.5: 0.5 + 0.5 * (500 - 340) / 470,       # 0.67021...
    0.9: 1.0 + 1.5 * (900 - 810) / 180,       # 1.75
    0.995: 2.5,                               # inside +Inf: the highest finite bound
}


def test_histogram_quantile_is_prometheus_rule() -> None:
    h = parse_dist(BUCKETS)
    qs = sorted(EXPECTED_QUANTILES)
    assert h.quantile(np.array(qs)) == pytest.approx([EXPECTED_QUANTILES[q] for q in qs])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_histogram_samples_follow_the_buckets(seed: int) -> None:
    h = parse_dist(BUCKETS)
    x = np.array([h.sample(np.random.default_rng(seed + 100 * i)) for i in range(2000)]
                 + list(h.sample_n(np.random.default_rng(seed), 100_000)))
    for q, v in EXPECTED_QUANTILES.items():
        if q < 0.99:  # within ~6 sigma of a quantile estimate from 102k draws
            assert np.quantile(x, q) == pytest.approx(v, abs=0.01), q
    # the share of samples at or below each bound is the bucket's cumulative share
    for le, cum in zip([0.1, 0.5, 1, 2.5], [12, 340, 810, 990], strict=True):
        assert np.mean(x <= le - 1e-12) == pytest.approx(cum / 1000, abs=0.005), le
    assert np.mean(x == 2.5) == pytest.approx(0.01, abs=0.002)   # the +Inf bucket's mass
    assert x.min() >= 0.0 and x.max() <= 2.5
    # analytic moments of the piecewise-uniform law (written out): mean 0.7915
    assert h.mean == pytest.approx(0.7915)
    assert x.mean() == pytest.approx(0.7915, abs=0.01)
    assert x.var() == pytest.approx(h.variance, rel=0.03)


def test_same_seed_same_samples() -> None:
    for spec in (BUCKETS, {"dist": "weibull", "shape": 1.5, "scale": 0.9},
                 {"dist": "empirical", "values": [0.1, 0.2, 0.7]}):
        d = parse_dist(spec)
        a, b = sampler(d, np.random.default_rng(7)), sampler(d, np.random.default_rng(7))
        xa, xb = [a() for _ in range(3000)], [b() for _ in range(3000)]
        assert xa == xb
        c = sampler(d, np.random.default_rng(8))
        assert [c() for _ in range(3000)] != xa


def test_weibull_moments() -> None:
    w = parse_dist({"dist": "weibull", "shape": 2.0, "scale": 1.0})
    assert w.mean == pytest.approx(math.sqrt(math.pi) / 2)       # Gamma(1.5)
    assert w.variance == pytest.approx(1 - math.pi / 4)
    x = w.sample_n(np.random.default_rng(3), 200_000)
    assert x.mean() == pytest.approx(0.886227, abs=0.005)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_empirical_from_samples_file_relative_to_scenario(suffix: str, tmp_path: Path) -> None:
    frame = pd.DataFrame({"other": [9.0, 9.0, 9.0], "reasoning_s": [0.25, 0.5, 2.0]})
    sub = tmp_path / "data"
    sub.mkdir()
    path = sub / f"samples{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    sc = tmp_path / "s.toml"
    sc.write_text(f'[reasoner]\nreasoning_time_s = {{ dist = "empirical", '
                  f'file = "data/samples{suffix}", column = "reasoning_s" }}\n')
    s = load_scenario(sc)
    d = s.reasoner.reasoning_time_s
    assert d.values == (0.25, 0.5, 2.0)
    assert d.mean == pytest.approx(0.916666, abs=1e-5)
    # written back, the scenario names the file (absolute) and reads the same values again
    data = tomllib.loads(dumps(s))
    assert data["reasoner"]["reasoning_time_s"] == {
        "dist": "empirical", "file": str(path.resolve()), "column": "reasoning_s"}
    assert from_dict(data) == s


def test_histogram_round_trips_through_toml() -> None:
    s = from_dict({"reasoner": {"reasoning_time_s": BUCKETS}})
    text = dumps(s)
    assert '"+Inf"' in text
    assert from_dict(tomllib.loads(text)) == s
    assert isinstance(s.reasoner.reasoning_time_s, Histogram)
    # TOML's own inf is accepted too
    s2 = from_dict(tomllib.loads(
        '[reasoner]\nreasoning_time_s = { dist = "histogram", '
        'le = [0.1, 0.5, 1, 2.5, inf], counts = [12, 340, 810, 990, 1000] }'))
    assert s2 == s


BAD = [
    ({"dist": "histogram", "le": [0.1, 0.5], "counts": [1, 2]}, "'le' must end with \"+Inf\""),
    ({"dist": "histogram", "le": ["+Inf"], "counts": [1]}, "at least one finite upper bound"),
    ({"dist": "histogram", "le": [0.5, 0.1, "+Inf"], "counts": [1, 2, 3]}, "increase strictly"),
    ({"dist": "histogram", "le": [-1, 0.1, "+Inf"], "counts": [1, 2, 3]}, "must be >= 0"),
    ({"dist": "histogram", "le": [0.1, "+Inf", 1], "counts": [1, 2, 3]}, "must end with"),
    ({"dist": "histogram", "le": [0.1, 1, "+Inf"], "counts": [1, 2]}, "one cumulative count per"),
    ({"dist": "histogram", "le": [0.1, 1, "+Inf"], "counts": [5, 2, 9]}, "cumulative"),
    ({"dist": "histogram", "le": [0.1, 1, "+Inf"], "counts": [0, 0, 0]}, "total > 0"),
    ({"dist": "histogram", "le": [0.1, "x", "+Inf"], "counts": [0, 1, 2]}, "'le' must hold"),
    ({"dist": "histogram", "le": [0.1, 1, "+Inf"]}, "'counts' must list"),
    ({"dist": "histogram", "le": [0.1, 1, "+Inf"], "counts": [1, 2, 3], "sum": 3},
     "unknown key(s) ['sum']"),
    ({"dist": "weibull", "shape": 0, "scale": 1}, "'shape' must be > 0"),
    ({"dist": "weibull", "scale": 1}, "missing 'shape'"),
    ({"dist": "empirical", "file": "/nonexistent/x.csv", "column": "a"}, "does not exist"),
    ({"dist": "empirical", "file": "/tmp/x.csv"}, "'column' must name a column"),
    ({"dist": "empirical", "values": [1.0], "file": "a.csv", "column": "a"}, "not both"),
]


@pytest.mark.parametrize(("spec", "expected"), BAD)
def test_bad_specs_name_the_problem(spec: dict, expected: str) -> None:
    with pytest.raises(DistError) as e:
        parse_dist(spec)
    assert expected in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("content", "expected"), [
    ("a,b\n1,2\n", "'column' 'reasoning_s' is not in"),
    ("reasoning_s\n0.5\n-1\n", "row 2 is -1"),
    ("reasoning_s\n0.5\nslow\n", "row 2 is 'slow'"),
    ("reasoning_s\n", "is empty"),
])
def test_bad_samples_file_is_one_line_naming_the_key(content: str, expected: str,
                                                     tmp_path: Path) -> None:
    (tmp_path / "s.csv").write_text(content)
    sc = tmp_path / "sc.toml"
    sc.write_text('[reasoner]\nreasoning_time_s = { dist = "empirical", file = "s.csv", '
                  'column = "reasoning_s" }\n')
    with pytest.raises(ConfigError) as e:
        load_scenario(sc)
    assert e.value.key == "reasoner.reasoning_time_s"
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_histogram_drives_the_simulator() -> None:
    """A scenario whose reasoning time is a pasted histogram runs; its service times follow it."""
    from rtalab.sim.runner import run_once

    s = from_dict({"workload": {"calls_per_s": 1.0, "turns_per_call": 1, "side_effect_share": 0.0},
                   "reasoner": {"reasoning_time_s": BUCKETS, "workers": 64, "errors": {}},
                   "run": {"duration_s": 300, "warmup_s": 1, "drain_s": 30}})
    out = run_once(s, seed=5)
    ex = out.executions
    svc = (ex["service_end_s"] - ex["service_start_s"]).dropna().to_numpy()
    assert len(svc) > 200
    assert np.median(svc) == pytest.approx(EXPECTED_QUANTILES[0.5], abs=0.08)
    assert svc.max() <= 2.5 + 1e-9
