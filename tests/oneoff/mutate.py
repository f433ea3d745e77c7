"""One-off: plant realistic bugs one at a time in a copy of the tree and report which ones
the area's tests catch (red = caught, green = survived), per area.

Not part of ``make test``.  Each mutation is (area, file, old text, new text, test files):
the old text must occur exactly once in the file (tests/trust/test_mutation_list.py checks
that the list stays valid as the code moves).  The tree is copied once to a temporary
folder (no .git, .venv, results), each mutation applied there, the area's tests run with
``-x -q`` (the copy first on PYTHONPATH), the file restored.  CPU-heavy: run it nice'd, on a
few areas at a time.

    nice -n 10 .venv/bin/python tests/oneoff/mutate.py [--area AREA ...] [--list]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


@dataclass(frozen=True)
class Mutation:
    area: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


T_UNC = ("tests/trust/test_load_uncertainty.py",)
T_COV = ("tests/trust/test_interval_coverage.py",)
T_MC = ("tests/trust/test_multiple_comparisons.py",)
T_TUNE = ("tests/trust/test_tune_guards.py", "tests/trust/test_multiple_comparisons.py")
T_CAL = ("tests/test_calibrate.py", "tests/trust/test_interval_coverage.py")

MUTATIONS: tuple[Mutation, ...] = (
    # ---------------------------------------------------------------- intervals
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "ID_COLUMNS = (S.CALL_ID, S.INTERACTION_ID, S.REQUEST_GUID, S.TASK_ID, S.CONTEXT_ID)",
             "ID_COLUMNS = (S.CALL_ID,)", T_UNC, "only the call id made unique per drawn copy"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "float(np.quantile(x, 0.025))", "float(np.quantile(x, 0.05))", T_UNC,
             "a 90 % lower end"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "draw = rng.integers(0, len(calls), size=len(calls))",
             "draw = rng.integers(0, len(calls), size=2 * len(calls))", T_UNC,
             "twice as many calls drawn (sqrt 2 too narrow)"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "return replace(new, timeseries=series(new, end))", "return new", T_UNC,
             "the time series not resampled"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "        if note is None and min(xs) == max(xs):\n            note = NOTE_CONSTANT\n",
             "", T_UNC, "a zero-width interval printed for a figure without spread"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "            m[\"ci_note\"] = NOTE_WIDENED\n", "", T_UNC,
             "widened interval without a note"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "m[\"ci_low\"], m[\"ci_high\"] = min(b[\"ci_low\"], m[\"mean\"]), max(b[\"ci_high\"], "
             "m[\"mean\"])", "pass", T_UNC, "an interval left excluding its estimate"),
    Mutation("intervals", "sim/calibrate/intervals.py",
             "half = t_quantile_975(n - 1) * float(np.std(x, ddof=1))",
             "half = 1.959963984540054 * float(np.std(x, ddof=1))", T_COV,
             "z instead of Student t on a small sample"),
    Mutation("intervals", "sim/calibrate/intervals.py",
             "    tail = (1 - level) / 2\n", "    tail = 1 - level\n", T_COV,
             "order-statistic interval at 90 %"),
    Mutation("intervals", "sim/calibrate/intervals.py",
             "return math.ceil(math.log((1 - level) / 2) / math.log(q))",
             "return math.ceil(math.log(1 - level) / math.log(q))", T_COV,
             "minimum n of the p99 interval from a one-sided 5 % (299)"),
    Mutation("intervals", "sim/calibrate/intervals.py",
             "adj = stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))",
             "adj = stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) * 0 + [0.05, 0.95]",
             T_COV, "BCa replaced by a 90 % percentile interval"),
    Mutation("intervals", "sim/shared/summary.py",
             "half = t_quantile_975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))",
             "half = t_quantile_975(len(x) - 1) * float(x.std(ddof=1)) / len(x)", T_COV,
             "replication CI sqrt(n) too narrow"),
    Mutation("intervals", "sim/shared/stats.py",
             "            1.0 if k >= n else min(1.0, max(p, mid + half)))",
             "            min(1.0, mid + half))", T_COV, "Wilson's upper end below k/n at k = n"),
    Mutation("intervals", "sim/shared/agreement.py",
             "var = var_s / n + se * se if se is not None else var_s * (1.0 + 1.0 / n)",
             "var = var_s / n + se * se if se is not None else var_s / n", T_COV,
             "a single run judged against the CI of the mean"),
    Mutation("intervals", "sim/shared/stats.py",
             "    half = t_quantile_975(n - 1) * se\n    return Difference(m, m - half",
             "    half = 1.0 * se\n    return Difference(m, m - half", T_COV,
             "paired interval at ~68 %"),
    # ---------------------------------------------------------------- multiple comparisons
    Mutation("multiple comparisons", "sim/shared/agreement.py",
             "rejected = holm([t[4][3] for t in tested], alpha)",
             "rejected = [t[4][3] < alpha for t in tested]", T_MC,
             "agreement without Holm"),
    Mutation("multiple comparisons", "sim/answers/tune.py",
             "rejected = holm([p for _, _, p, _ in tests], ALPHA) if tests else []",
             "rejected = [p < ALPHA for _, _, p, _ in tests]", T_MC, "tune without Holm"),
    Mutation("multiple comparisons", "sim/shared/stats.py",
             "if p_values[i] > alpha / (m - rank):", "if p_values[i] > alpha / m:", T_MC,
             "Bonferroni instead of Holm's step-down"),
    Mutation("multiple comparisons", "sim/shared/stats.py",
             "        if p_values[i] > alpha / (m - rank):\n            break",
             "        if p_values[i] > alpha / (m - rank):\n            continue", T_MC,
             "Holm that does not stop at the first non-rejection"),
    Mutation("multiple comparisons", "sim/shared/compare.py",
             "rejected = holm([p for _, p in tested])",
             "rejected = [p < 0.05 for _, p in tested]", T_MC, "compare without Holm"),
    # ---------------------------------------------------------------- tune
    Mutation("tune", "sim/answers/tune.py",
             "return bool(change is not None and p is not None and change < 0 and p < ALPHA)",
             "return bool(change is not None and p is not None and change > 0 and p < ALPHA)",
             T_TUNE, "success guard on the wrong side"),
    Mutation("tune", "sim/answers/tune.py",
             "return bool(change is not None and p is not None and change < 0 and p < ALPHA)",
             "return bool(change is not None and p is not None and change < 0 and p <= ALPHA)",
             T_TUNE, "success guard at p <= alpha"),
    Mutation("tune", "sim/answers/tune.py",
             "good = diff < 0 if o.direction == \"minimize\" else diff > 0",
             "good = diff > 0 if o.direction == \"minimize\" else diff < 0", T_TUNE,
             "objective direction reversed"),
    Mutation("tune", "sim/answers/tune.py",
             "        worse[i] = worse[i] or not good\n", "", T_TUNE,
             "a second objective made worse ignored"),
    Mutation("tune", "sim/answers/slo.py",
             "return m.get(\"ci_high\" if self.upper else \"ci_low\")",
             "return m.get(\"mean\")", T_TUNE, "constraints judged on the mean, not the CI"),
    Mutation("tune", "sim/answers/slo.py",
             "return b is not None and math.isfinite(b) and self._meets(float(b))",
             "return b is None or self._meets(float(b))", T_TUNE,
             "a constraint without a CI holds"),
    Mutation("tune", "sim/answers/tune.py",
             "and (any(a < b for a, b in zip(vals[j], vals[i], strict=True)) or j < i)",
             "and any(a < b for a, b in zip(vals[j], vals[i], strict=True))", T_TUNE,
             "ties both kept on the Pareto front"),
    # ---------------------------------------------------------------- calibration
    Mutation("calibration", "sim/calibrate/estimate.py", "return wilson(k, n, 1.96)",
             "return wilson(k, n, 1.645)", T_CAL, "error-rate interval at 90 %"),
    Mutation("calibration", "sim/calibrate/fit.py",
             "    p99_ci, note = quantile_ci(x, 0.99)\n    return {",
             "    p99_ci, note = quantile_ci(x, 0.95)\n    return {", T_CAL,
             "p99 interval of the wrong quantile"),
    Mutation("calibration", "sim/calibrate/fit.py",
             "cv_ci = (min(cv0, cv0 - (c0 - lo) * scale), max(cv0, cv0 + (hi - c0) * scale))",
             "cv_ci = (lo, hi)", T_CAL, "cv interval that may miss its estimate"),
    Mutation("calibration", "sim/calibrate/fit.py",
             "sample=x, cv_ci_note=\"a constant: no spread to resample\"",
             "sample=x, cv_ci_note=\"\"", T_CAL, "a constant's missing cv interval unexplained"),
    Mutation("calibration", "sim/calibrate/fit.py", "if n < 10:\n        return None",
             "if n < 2:\n        return None", T_CAL, "fits of fewer than 10 values"),
    Mutation("calibration", "sim/calibrate/fit.py", "if best.ks > max(crit, KS_TOLERANCE):",
             "if best.ks > crit:", T_CAL, "KS criterion without the 3-point floor"),
)


def validate(mutations: tuple[Mutation, ...] = MUTATIONS, root: Path = ROOT) -> list[str]:
    """Problems with the list: an old text that does not occur exactly once in its file,
    a missing test file, a no-op mutation."""
    problems = []
    for m in mutations:
        path = root / m.file
        if not path.exists():
            problems.append(f"{m.file}: no such file ({m.what})")
            continue
        n = path.read_text(encoding="utf-8").count(m.old)
        if n != 1:
            problems.append(f"{m.file}: old text found {n} times ({m.what})")
        if m.old == m.new:
            problems.append(f"{m.file}: mutation changes nothing ({m.what})")
        problems += [f"{t}: no such test file ({m.what})" for t in m.tests
                     if not (root / t).exists()]
    return problems


def _copy_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns(".git", ".venv", "results", "__pycache__", ".pytest_cache",
                                    ".ruff_cache", "*.pyc", ".hypothesis")
    shutil.copytree(ROOT, dst, ignore=ignore, dirs_exist_ok=True)


def run(areas: list[str] | None) -> dict[str, list[tuple[Mutation, bool, float]]]:
    chosen = [m for m in MUTATIONS if not areas or m.area in areas]
    results: dict[str, list[tuple[Mutation, bool, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="rtalab-mutate-") as tmp:
        copy = Path(tmp) / "tree"
        _copy_tree(copy)
        env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
        py = str(ROOT / ".venv" / "bin" / "python")
        for m in chosen:
            path = copy / m.file
            orig = path.read_text(encoding="utf-8")
            path.write_text(orig.replace(m.old, m.new, 1), encoding="utf-8")
            t0 = time.monotonic()
            try:
                r = subprocess.run([py, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                    *m.tests], cwd=copy, env=env, capture_output=True,
                                   timeout=TIMEOUT_S, check=False)
                caught = r.returncode != 0
            except subprocess.TimeoutExpired:
                caught = True  # a hang is a failing suite
            finally:
                path.write_text(orig, encoding="utf-8")
            dt = time.monotonic() - t0
            results[m.area].append((m, caught, dt))
            print(f"{'caught  ' if caught else 'SURVIVED'} {dt:5.1f} s  [{m.area}] {m.file}: "
                  f"{m.what}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--area", action="append", help="only this area (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutations and stop")
    args = ap.parse_args(argv)
    problems = validate()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.list:
        for m in MUTATIONS:
            print(f"[{m.area}] {m.file}: {m.what}")
        return 0
    results = run(args.area)
    print("\n| area | planted | caught | score |\n| --- | --- | --- | --- |")
    for area, rows in results.items():
        k = sum(c for _, c, _ in rows)
        print(f"| {area} | {len(rows)} | {k} | {k / len(rows):.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
