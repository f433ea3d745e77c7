"""``make demo``: calibrate near the knee, predict, measure
(``python -m rtalab.loadtests.loadrun.demo``).

One ``rtalab predict`` of ``docs/examples/calibration_deployment.toml`` (the embedded
reference Reasoner, 2 worker processes sharing a pool of 8 concurrent turns, a Weibull
reasoning time the calibration is not told):

1. a load run at A = 2.6 calls/s for 40 s (about 70 % utilisation: turns wait for a worker,
   so the calibration identifies the capacity; if it does not, the step-load probe runs,
   bounded by 60 s);
2. calibrate a scenario on it;
3. B = 85 % utilisation of the calibrated model: 20 simulated replications of one measured
   window, then the load run at B;
4. the same with a 10-s outage in the middle of the window;
5. one HTML report (:mod:`rtalab.loadtests.loadrun.demo_report`) and, on screen, one paragraph:
   what was predicted for one run (the 90 % one-run prediction interval), what was measured
   (its 95 % CI), and whether the prediction held.

``predict``'s progress line per step, its comparison at 80 columns (``--table short``), then
the paragraph.  ``--small`` is the size the tests use.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import time
from pathlib import Path

DEPLOYMENT = Path(__file__).resolve().parents[2] / "docs" / "examples" / \
    "calibration_deployment.toml"
# A: calls/s and seconds of arrivals (~70 % of the deployment's 8 workers: turns queue);
# B: the calibrated utilisation; every window: seconds of arrivals, warm-up, drain; the
# outage; simulator replications per case (20: the 90 % one-run interval from order
# statistics, no normal assumption); the probe's bound if A leaves the capacity unidentified
SIZES = {
    "full": {"rate_a": 2.6, "duration_a": 40, "util_b": 0.85, "duration": 40, "warmup": 10,
             "drain": 10, "outage": 10, "reps": 20, "probe_s": 60},
    "small": {"rate_a": 2.6, "duration_a": 10, "util_b": 0.85, "duration": 10, "warmup": 3,
              "drain": 6, "outage": 3, "reps": 5, "probe_s": 30},
}


def predict_argv(size: dict[str, float], deployment: str, out: Path) -> list[str]:
    """The ``rtalab predict`` command line of the demo."""
    return ["predict", deployment, "--calibrate-rate", f"{size['rate_a']:g}",
            "--calibrate-duration", f"{size['duration_a']:g}",
            "--predict-utilisation", f"{size['util_b']:g}", "--outage", f"{size['outage']:g}",
            "--duration", f"{size['duration']:g}", "--warmup", f"{size['warmup']:g}",
            "--drain", f"{size['drain']:g}", "--workers", "2",
            "--replications", f"{size['reps']:g}", "--probe", "auto",
            "--probe-seconds", f"{size['probe_s']:g}", "--table", "short", "--out", str(out)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rtalab.loadtests.loadrun.demo")
    p.add_argument("--out", default="results", help="results root")
    p.add_argument("--small", action="store_true", help="the size of the tests")
    p.add_argument("--deployment", default=str(DEPLOYMENT), help="scenario of the deployment")
    args = p.parse_args(argv)
    size = SIZES["small" if args.small else "full"]
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"demo [{time.monotonic() - t0:6.1f} s] {text}", flush=True)

    # lazy: +566 ms (pandas, pyarrow) off importing demo
    from rtalab.loadtests.loadrun import demo_report
    from rtalab.sim.cli import main as rtalab

    say(f"load A = {size['rate_a']:g} calls/s for {size['duration_a']:g} s, calibrate, predict"
        f" B = {size['util_b'] * 100:.0f} % utilisation and B + {size['outage']:g}-s outage "
        f"({size['reps']:g} replications each), measure both (rtalab predict) ...")
    before = set(root.glob("*-predict-*"))
    rc = rtalab(predict_argv(size, args.deployment, root))
    if rc:
        return rc
    found = [f for f in root.glob("*-predict-*") if f not in before]
    if not found:
        print(f"demo: rtalab predict wrote no folder under {root}", file=sys.stderr)
        return 1
    pred = max(found, key=lambda f: f.stat().st_mtime)
    say("writing the report ...")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    report = root / f"{stamp}-demo-report.html"
    report.write_text(demo_report.render(pred), encoding="utf-8")
    width = min(100, shutil.get_terminal_size((80, 24)).columns)
    print()
    for line in demo_report.screen(demo_report.load(pred), width=width):
        print(line)
    print()
    say(f"done in {time.monotonic() - t0:.0f} s: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
