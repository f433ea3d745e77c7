"""``make demo``: the whole story in one command (``python -m loadtests.loadrun.demo``).

1. simulate the ``baseline`` preset (a short run, 2 replications);
2. load-test the embedded deployment (``docs/examples/calibration_deployment.toml``: the
   reference Reasoner, 2 worker processes, SQLite dedup, a Weibull reasoning time the
   calibration is not told) at a low load A;
3. calibrate a scenario on that run;
4. simulate a higher load B with it (the prediction);
5. load-test B (the measurement) and compare, metric by metric;
6. one HTML report: the baseline simulation, both load runs, and the prediction section.

A progress line per step with the elapsed time; the key figures on screen.  Steps 2–5 are
``rtalab predict`` (loadtests/loadrun/predict.py).  ``--small`` is the size the tests use.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

DEPLOYMENT = Path(__file__).resolve().parents[2] / "docs" / "examples" / \
    "calibration_deployment.toml"
# seconds of arrivals, warm-up, drain; calls/s at A (~50 % utilisation of the deployment's
# 8 workers) and at B (~85 %: a 30-s run A has too few queued turns to read the capacity
# off, so B is given, not derived); simulator replications; the capacity probe (never: the
# demo keeps its 3-minute bound, and says on screen and in the report that the simulator's
# default capacity was kept and that `--probe` / `rtalab load probe` would measure it)
SIZES = {
    "full": {"duration": 30, "warmup": 5, "drain": 10, "rate_a": 1.8, "rate_b": 3.1,
             "reps": 3, "sim_s": 120, "probe": "never"},
    "small": {"duration": 8, "warmup": 2, "drain": 6, "rate_a": 1.8, "rate_b": 3.1, "reps": 2,
              "sim_s": 40, "probe": "never"},
}


def _newest(root: Path, pattern: str, before: set[Path]) -> Path:
    found = [p for p in root.glob(pattern) if p not in before]
    if not found:
        raise SystemExit(f"rtalab demo: no {pattern} under {root}")
    return max(found, key=lambda p: p.stat().st_mtime)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.loadrun.demo")
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

    from sim.cli import main as rtalab

    before = set(root.glob("*"))
    say(f"1/6 simulating baseline ({size['sim_s']} s x 2 replications) ...")
    rc = rtalab(["sim", "run", "baseline", "--replications", "2", "--set",
                 f"run.duration_s={size['sim_s']}", "--set", "run.warmup_s=10",
                 "--out", str(root), "--quiet", "--no-plots"])
    if rc:
        return rc
    sim_run = _newest(root, "*-sim-baseline-*", before)
    m = json.loads((sim_run / "summary.json").read_text())["metrics"]
    say(f"    baseline (simulated): success {m['success_rate']['mean']:.3f}, completion "
        f"p50 {m['completion_s.p50']['mean']:.2f} s, p99 {m['completion_s.p99']['mean']:.2f} s"
        f" -> {sim_run}")
    say("2-5/6 load A, calibrate, predict B, load B, compare (rtalab predict) ...")
    before = set(root.glob("*"))
    rc = rtalab(["predict", args.deployment, "--calibrate-rate", str(size["rate_a"]),
                 "--predict-rate", str(size["rate_b"]), "--outage", "0",
                 "--duration", str(size["duration"]), "--warmup", str(size["warmup"]),
                 "--drain", str(size["drain"]), "--workers", "2",
                 "--replications", str(size["reps"]), "--probe", size["probe"],
                 "--out", str(root)])
    if rc:
        return rc
    pred = _newest(root, "*-predict-*", before)
    say("6/6 writing one HTML report ...")
    from sim.shared.report import render_report

    runs = sorted((pred / "runs").glob("*-load-*"))
    html = render_report([sim_run, *runs])
    section = (pred / "prediction.section.html").read_text(encoding="utf-8")
    html = html.replace("</body>", section + "\n</body>", 1) if "</body>" in html \
        else html + section
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    report = root / f"{stamp}-demo-report.html"
    report.write_text(html, encoding="utf-8")
    res = json.loads((pred / "prediction.json").read_text())
    cap = res["capacity"]
    say(("    " if cap["identified"] else "    NOTE: ") + cap["text"])
    for case in res["cases"]:
        rows = {r["metric"]: r for r in case["rows"]}
        agree = sum(r["verdict"] == "inside" for r in case["rows"])
        c50, c99 = rows["completion_s.p50"], rows["completion_s.p99"]
        say(f"    {case['name']} at {case['rate_calls_per_s']:.3g} calls/s: completion p50 "
            f"predicted {c50['predicted']:.3f} s / measured {c50['measured']:.3f} s, p99 "
            f"{c99['predicted']:.3f} / {c99['measured']:.3f} s; {agree}/{len(rows)} inside the "
            "90 % one-run interval")
    say(f"done in {time.monotonic() - t0:.0f} s: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
