"""rtalab.sim.shared.agreement.run_interval: the one-run prediction interval (issue 28, point 1).

Planted bugs these tests were watched failing on: the CI of the mean instead of the
prediction interval (no ``sqrt(1 + 1/n)``, ``s / sqrt(n)``: coverage ~40 % with 10
replications), the normal quantile instead of Student's (no widening with few
replications), order statistics 0..n (the sample range: over-covers) and the
empirical 5 %/95 % quantiles of the replications with few of them (under-covers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtalab.sim.shared.agreement import interval_scale, run_interval, t_quantile


def test_t_interval_by_hand() -> None:
    # identity scale, n = 5: mean 3, s = sqrt(2.5), half = t(0.95, 4) * s * sqrt(1.2)
    iv = run_interval([1, 2, 3, 4, 5], level=0.90)
    half = t_quantile(0.95, 4) * math.sqrt(2.5) * math.sqrt(1.2)
    assert t_quantile(0.95, 4) == pytest.approx(2.131847, abs=1e-5)
    assert (iv.low, iv.high) == pytest.approx((3 - half, 3 + half), abs=1e-9)
    assert iv.method == "t on the identity scale, n = 5"
    assert iv.centre == pytest.approx(3.0)
    assert run_interval([1.0]) is None
    assert run_interval([1.0, None, math.nan]) is None


def test_order_statistics_with_enough_replications() -> None:
    x = list(range(1, 20))  # n = 19: [x_(1), x_(19)] holds one more draw 18/20 = 90 %
    iv = run_interval(x, level=0.90)
    assert (iv.low, iv.high) == (1, 19)
    assert iv.method == "order statistics 1..19 of 19"
    iv = run_interval(list(range(1, 40)), level=0.90)  # n = 39: j = 2
    assert (iv.low, iv.high) == (2, 38)


@pytest.mark.parametrize("values", [[0.8, 1.1, 0.9, 1.3], list(np.linspace(1, 3, 25)),
                                    [2.0, 2.0, 2.0]])
def test_interval_contains_its_estimate(values: list[float]) -> None:
    for metric in (None, "completion_s.p99", "success_rate"):
        vals = [min(v, 1.0) for v in values] if metric == "success_rate" else values
        iv = run_interval(vals, metric=metric)
        assert iv.low <= iv.centre <= iv.high
        assert iv.contains(iv.centre)
        assert not iv.contains(None)


def test_scales() -> None:
    assert interval_scale("completion_s.p99") == "log"
    assert interval_scale("ttfc_s.p50") == "log"
    assert interval_scale("success_rate") == "sqrt(1 - x)"
    assert interval_scale("attempts_per_turn") == "identity"
    iv = run_interval([1.0, 2.0, 4.0], metric="completion_s.p99")
    assert iv.low > 0  # a time's interval stays positive
    assert iv.centre == pytest.approx(2.0)  # geometric mean
    assert "log" in iv.method


def _coverage(draw, n: int, trials: int, metric: str | None, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        iv = run_interval(list(draw(rng, n)), level=0.90, metric=metric)
        hits += iv.contains(float(draw(rng, 1)[0]))
    return hits / trials


@pytest.mark.parametrize("n", [3, 5, 10, 19, 40])
def test_coverage_from_a_known_distribution(n: int) -> None:
    """Normal values, identity scale (t interval exact below 19, order statistics from 19 on):
    a 90 % interval holds 90 % of the time.  2000 trials: sd of the rate 0.7 %."""
    cov = _coverage(lambda r, k: r.normal(5.0, 2.0, k), n, 2000, None, seed=n)
    assert 0.87 <= cov <= 0.93, cov


def test_coverage_of_a_skewed_time_on_the_log_scale() -> None:
    """Lognormal per-run p99 values (right-skewed): the log scale keeps 90 %."""
    cov = _coverage(lambda r, k: r.lognormal(0.0, 0.6, k), 10, 2000, "completion_s.p99", 7)
    assert 0.87 <= cov <= 0.93, cov


def test_widening_with_few_replications() -> None:
    """Same sample mean and spread: fewer replications, wider interval (t quantile and
    sqrt(1 + 1/n)); the interval is wider than the CI of the mean would be."""
    base = np.array([-1.0, 1.0])
    widths = []
    for n in (3, 5, 10, 18):
        x = np.resize(base, n) + 0.0
        x = (x - x.mean()) / x.std(ddof=1)  # mean 0, s = 1 whatever n
        iv = run_interval(list(x), level=0.90)
        widths.append(iv.high - iv.low)
        ci_half = t_quantile(0.95, n - 1) / math.sqrt(n)
        assert iv.high - iv.low > 2 * ci_half * math.sqrt(n)  # > the mean's CI, by sqrt(n+1)
    assert widths == sorted(widths, reverse=True)
    assert widths[-1] > 2 * 1.6448536  # never narrower than the known-law interval


def test_resolution_keeps_agreeing_replications_from_excluding_one_step() -> None:
    """Every replication succeeded completely (300 turns): a run with one failed turn is
    still inside; two failed turns are not."""
    iv = run_interval([1.0] * 10, metric="success_rate", resolution=1 / 300,
                      bounds=(0.0, 1.0))
    assert iv.high == 1.0
    assert iv.contains(1 - 1 / 300)
    assert not iv.contains(1 - 2 / 300)
    assert run_interval([1.0] * 10, metric="success_rate").contains(1.0)


def test_bad_level() -> None:
    with pytest.raises(ValueError, match="level"):
        run_interval([1, 2, 3], level=1.0)


def test_one_run_intervals_of_a_summary() -> None:
    from rtalab.sim.shared.agreement import one_run_intervals

    summary = {"metrics": {
        "success_rate": {"values": [0.99, 1.0, 0.98, 0.995]},
        "completion_s.p99": {"values": [1.2, 1.5, 1.1]},
        "caller_completion_s.p99": {"values": [1.0, None, 2.0]},  # infinite in one: none
        "turns": {"values": [100.0]}}}
    out = one_run_intervals(summary)
    assert set(out) == {"success_rate", "completion_s.p99"}
    assert out["success_rate"]["high"] <= 1.0  # clipped to the metric's domain
    assert out["completion_s.p99"]["level"] == 0.90
    assert "log" in out["completion_s.p99"]["method"]


def _folder(tmp, name: str, metrics: dict, kind: str | None, duration_s: float):
    import json

    d = tmp / name
    d.mkdir()
    summary = {"metrics": {k: {"mean": (None if any(v is None for v in vs) else
                                        sum(vs) / len(vs)), "values": vs}
                           for k, vs in metrics.items()}, "warmup_s": 10.0}
    if kind:
        summary["kind"] = kind
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "scenario.toml").write_text(f"[run]\nduration_s = {duration_s}\n")
    return d


SIM_REPS = {"completion_s.p50": [1.0, 1.1, 0.9, 1.05, 0.95],
            "completion_s.p99": [3.0, 3.3, 2.8, 3.1, 2.9],
            "caller_completion_s.p99": [None, 5.0, None, 6.0, None],  # an outage: often inf
            "success_rate": [0.98, 0.985, 0.975, 0.99, 0.98]}


def test_compare_of_a_prediction_and_a_measurement(tmp_path, capsys) -> None:
    """`rtalab compare SIM LOAD`: the verdict per metric is the 90 % one-run interval, the
    accuracy targets are applied on a 300-s run (said "not judged" on a 90-s one), and the
    caller-perceived p99 under an outage is shown (∞), not "–" (issue 28)."""
    from rtalab.sim.cli import main
    from rtalab.sim.shared.compare import load_run, prediction_rows

    sim = _folder(tmp_path, "sim", SIM_REPS, None, 300)
    load = _folder(tmp_path, "load", {"completion_s.p50": [1.3], "completion_s.p99": [3.2],
                                      "caller_completion_s.p99": [None],
                                      "success_rate": [0.982]}, "load", 300)
    rows = {r["metric"]: r for r in prediction_rows(load_run(sim), load_run(load))}
    assert rows["completion_s.p50"]["verdict"] == "outside"  # 1.3 vs ~[0.83, 1.2]
    assert rows["completion_s.p50"]["accuracy"] == "beyond"  # +30 % > 20 %
    assert rows["completion_s.p99"]["verdict"] == "inside"
    assert rows["completion_s.p99"]["accuracy"] == "within"
    cp = rows["caller_completion_s.p99"]
    assert cp["measured"] == math.inf and cp["high"] == math.inf and cp["verdict"] == "inside"
    assert rows["success_rate"]["verdict"] == "inside"
    # either order
    assert prediction_rows(load_run(load), load_run(sim)) == list(rows.values())
    rc = main(["compare", str(sim), str(load), "--no-plot"])
    out = capsys.readouterr().out
    assert rc == 0
    # a row is its label, then its figures wrapped at 80 columns (indented)
    rows_text = out.replace("\n      ", " ").replace("\n  ", "\n  ")
    line = next(x for x in rows_text.splitlines() if "caller" in x and "p99" in x and "∞" in x)
    assert "inside" in line and "3 of 5" in line
    assert "accuracy beyond" in out and "90 % one-run prediction interval" in out
    short = _folder(tmp_path, "short", {"completion_s.p50": [1.3]}, "load", 90)
    rows = prediction_rows(load_run(sim), load_run(short))
    assert rows[0]["accuracy"] == "not judged (run < 300 s)"
    main(["compare", str(sim), str(short), "--no-plot"])
    assert "NOTE the simulated replications are 300 s, the load run 90 s" in (
        capsys.readouterr().out)
