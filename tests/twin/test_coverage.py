"""Coverage of the 90 % one-run prediction interval on the embedded deployment (issue 28).

The round trip, repeated: a known scenario (``baseline`` at its own load) -> the simulator's
replications of a WINDOW-second run -> each replication's metrics
(:func:`rtalab.sim.calibrate.validate.window_metrics`) -> the 90 % one-run interval of each metric
(:func:`rtalab.sim.shared.agreement.run_interval`, order statistics of :data:`REPLICATIONS`: exact
90 % for any law) -> a measured run on the embedded deployment.  One load run of
``WARMUP + ROUND_TRIPS x WINDOW`` seconds gives the ROUND_TRIPS measured runs: its
consecutive windows after the warm-up, each measured exactly as a replication is (the
turns that started in the window); the simulated replications run past their window, as
the load does, so no window sees the arrivals stop.

Per metric family (latency percentiles; rates: success, attempts per turn, goodput) the
share of (metric, window) pairs inside must be >= 80 %, "at least 8 of 10" (measured: 95 %
and 93 %, docs/benchmarks.md "Prediction-interval coverage").  Planted bugs on a measured
run: the 95 % CI of the replications' mean as the interval (34 % / 52 % inside), the
simulation at 1.5 x the load (71 % / 77 %): both fail it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from rtalab.sim.calibrate.validate import window_metrics
from rtalab.sim.runner import run_once
from rtalab.sim.scenario import load_scenario, resolve_path
from rtalab.sim.shared.agreement import run_interval
from tests.load.conftest import load_run

ROUND_TRIPS, WINDOW_S, WARMUP_S, DRAIN_S = 20, 4.0, 12.0, 15.0
# baseline with shorter calls (think 1 s: a call lasts ~7 s), so a 12-s warm-up reaches
# the steady state in both worlds
OVERRIDES = ("workload.think_time_s={dist='exp', mean=1.0}",)
REPLICATIONS = 39  # order statistics 2..38 of 39: P(inside) = 36/40 = 90 % exactly
SIM_SEED = 2028
FAMILIES = {"latency percentiles": ("ttfc_s.p50", "ttfc_s.p99", "completion_s.p50",
                                    "completion_s.p99"),
            "rates": ("success_rate", "attempts_per_turn", "goodput_turns_per_s")}
MIN_INSIDE = 0.8


def _sim_windows(ref: str) -> list[dict[str, float]]:
    sc = load_scenario(ref, list(OVERRIDES)).with_overrides({
        "run.duration_s": WARMUP_S + WINDOW_S + 10.0,
                                            "run.warmup_s": WARMUP_S, "run.drain_s": DRAIN_S})
    return [window_metrics(run_once(sc, SIM_SEED, i).turns, WARMUP_S, WARMUP_S + WINDOW_S)
            for i in range(REPLICATIONS)]


def coverage(tmp: Path, ref: str) -> dict[str, list[tuple[str, int, bool, float, Any]]]:
    """(metric, window, inside, measured, interval) per family, and the table printed."""
    reps = _sim_windows(ref)
    duration = WARMUP_S + ROUND_TRIPS * WINDOW_S
    sets = [a for o in OVERRIDES for a in ("--set", o)]
    p, run = load_run(tmp, "--duration", str(duration), "--drain", str(DRAIN_S), "--set",
                      f"run.warmup_s={WARMUP_S}", *sets, scenario=resolve_path(ref).read_text(),
                      timeout_s=duration + DRAIN_S + 120.0)
    assert run is not None and (run / "turns.parquet").is_file(), p.stderr[-2000:]
    turns = pd.read_parquet(run / "turns.parquet")
    out: dict[str, list] = {f: [] for f in FAMILIES}
    for family, names in FAMILIES.items():
        for name in names:
            iv = run_interval([r[name] for r in reps], 0.90, metric=name)
            for k in range(ROUND_TRIPS):
                a = WARMUP_S + k * WINDOW_S
                m = window_metrics(turns, a, a + WINDOW_S)[name]
                out[family].append((name, k, iv.contains(m), m, iv))
    for family, rows in out.items():
        inside = sum(r[2] for r in rows)
        print(f"\n{ref}: {family}: {inside}/{len(rows)} inside the 90 % one-run interval")
        for name in FAMILIES[family]:
            mine = [r for r in rows if r[0] == name]
            iv = mine[0][4]
            print(f"  {name:<20} [{iv.low:.4f}, {iv.high:.4f}] ({iv.method}): "
                  + " ".join(f"{r[3]:.4f}{'' if r[2] else '*'}" for r in mine))
    return out


def test_one_run_interval_holds_about_90_percent_of_the_time(tmp_path: Path) -> None:
    out = coverage(tmp_path, "baseline")
    for family, rows in out.items():
        share = sum(r[2] for r in rows) / len(rows)
        assert share >= MIN_INSIDE, (family, share, [r[:4] for r in rows if not r[2]])
