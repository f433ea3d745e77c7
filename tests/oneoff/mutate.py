"""One-off: plant realistic bugs one at a time in a copy of the tree and report which ones
the area's tests catch (red = caught, green = survived), per area.

Not part of ``make test``.  Each mutation is (area, file, old text, new text, test files):
the old text must occur exactly once in the file (tests/trust/test_mutation_list.py checks
that the list stays valid as the code moves).  The tree is copied once to a temporary
folder (no .git, .venv, results), each mutation applied there, the area's tests run with
``-x -q`` (the copy first on PYTHONPATH), the file restored.  CPU-heavy: run it nice'd, on a
few areas at a time.

    nice -n 10 .venv/bin/python tests/oneoff/mutate.py [--area AREA ...] [--match TEXT] [--list]
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


T_UNC = ("tests/trust/test_load_uncertainty.py", "tests/test_resample.py")
T_COV = ("tests/trust/test_interval_coverage.py",)
T_MC = ("tests/trust/test_multiple_comparisons.py",)
T_TUNE = ("tests/trust/test_tune_guards.py", "tests/trust/test_multiple_comparisons.py")
T_CAL = ("tests/trust/test_calibration_guards.py", "tests/trust/test_interval_coverage.py",
         "tests/test_calibrate.py")
T_GATE = ("tests/trust/test_gates.py", "tests/check/test_verdict.py",
          "tests/check/test_coverage.py")
T_STORE = ("tests/trust/test_stores.py", "tests/serve/test_dedup_store.py")
T_INTAKE = ("tests/trust/test_intake.py",)
T_CHAOS = ("tests/trust/test_chaos_faults.py", "tests/chaos/test_units.py")
T_VJA = ("tests/trust/test_verdict_junit.py", "tests/test_junit.py", "tests/test_agreement.py")
T_PLAY = ("tests/trust/test_playback.py", "tests/load/test_live_units.py")

MUTATIONS: tuple[Mutation, ...] = (
    # ---------------------------------------------------------------- intervals
    Mutation("intervals", "loadtests/loadrun/resample.py",
             "ID_COLUMNS = (S.CALL_ID, S.INTERACTION_ID, S.REQUEST_GUID, S.TASK_ID, S.CONTEXT_ID)",
             "ID_COLUMNS = (S.CALL_ID,)", T_UNC, "only the call id made unique per drawn copy"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "float(np.quantile(x, 0.025))", "float(np.quantile(x, 0.05))", T_UNC,
             "a 90 % lower end"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "draw = rng.integers(0, len(calls), size=len(calls))",
             "draw = rng.integers(0, len(calls), size=2 * len(calls))", T_UNC,
             "twice as many calls drawn (sqrt 2 too narrow)"),
    Mutation("intervals", "loadtests/loadrun/resample.py",
             "return replace(new, timeseries=self.series(new, self.end_s))", "return new", T_UNC,
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
    Mutation("multiple comparisons", "sim/shared/report.py",
             "rejected = benjamini_hochberg([p for _, p, _ in tested])",
             "rejected = [p < 0.05 for _, p, _ in tested]", T_MC,
             "sweep answers without Benjamini-Hochberg"),
    Mutation("multiple comparisons", "sim/shared/stats.py",
             "if p_values[i] <= q * rank / m:", "if p_values[i] <= q / m:", T_MC,
             "Benjamini-Hochberg with Bonferroni's threshold"),
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
    # ---------------------------------------------------------------- calibration (more)
    Mutation("calibration", "sim/calibrate/estimate.py", "c = int(np.median(at_wait))",
             "c = int(np.max(at_wait))", T_CAL, "capacity from the largest count at a wait"),
    Mutation("calibration", "sim/calibrate/estimate.py",
             "np.searchsorted(es, s + tol, side=\"right\")",
             "np.searchsorted(es, s, side=\"right\")", T_CAL,
             "capacity without the clock-jitter tolerance"),
    Mutation("calibration", "sim/calibrate/estimate.py",
             "f = fit_duration(\"reasoning_time_s\", svc[timed & ~side], seed)",
             "f = fit_duration(\"reasoning_time_s\", svc[timed], seed)", T_CAL,
             "reasoning time fitted with the tool latency in it"),
    Mutation("calibration", "sim/calibrate/estimate.py",
             "report[c] = {\"count\": k, \"per_execution\": k / n,",
             "report[c] = {\"count\": k, \"per_execution\": k / len(a),", T_CAL,
             "error rate per attempt, not per execution"),
    # ---------------------------------------------------------------- gates
    Mutation("gates", "loadtests/check/integrity.py",
             "ok = bool(f.gather.get(\"complete\")) and not short and missing == 0",
             "ok = bool(f.gather.get(\"complete\"))", T_GATE,
             "ledger-gathered trusts the complete flag alone"),
    Mutation("gates", "loadtests/check/integrity.py",
             "judged = ~indeterminate & (out != \"cancelled\") & ~pd.isna(out)",
             "judged = ~indeterminate & ~pd.isna(out)", T_GATE,
             "barge-in turns counted against availability"),
    Mutation("gates", "loadtests/check/integrity.py",
             "judged = ~indeterminate & (out != \"cancelled\") & ~pd.isna(out)",
             "judged = (out != \"cancelled\") & ~pd.isna(out)", T_GATE,
             "turns cut by the stop or a restart counted against availability"),
    Mutation("gates", "loadtests/check/integrity.py", "ok = v is not None and slo._meets(v)",
             "ok = v is None or slo._meets(v)", T_GATE, "a null SLO value passes"),
    Mutation("gates", "loadtests/check/integrity.py", "passed = n > 0 and share >= lim",
             "passed = n > 0 and share > lim", T_GATE, "availability threshold exclusive"),
    Mutation("gates", "loadtests/check/coverage.py",
             "known = ~np.isnan(o_send) & ~_during_restart(c_send, restarts)",
             "known = ~np.isnan(o_send)", T_GATE, "copies sent while the server was down count"),
    Mutation("gates", "loadtests/check/coverage.py",
             "nonretry = failed & code.notna() & ~code.isin(RETRYABLE_CODES)",
             "nonretry = failed & code.notna()", T_GATE,
             "retryable failures counted as non-retryable handling"),
    Mutation("gates", "loadtests/check/coverage.py",
             "o_done = orig[\"outcome\"].eq(\"completed\").to_numpy()",
             "o_done = np.ones(len(orig), dtype=bool)", T_GATE,
             "resends of refused originals counted"),
    Mutation("gates", "sim/shared/junit.py",
             "status = {\"pass\": \"pass\", \"fail\": \"fail\"}.get(str(r.get(\"status\")), "
             "\"skipped\")",
             "status = {\"pass\": \"pass\", \"fail\": \"fail\"}.get(str(r.get(\"status\")), "
             "\"pass\")", (*T_GATE, "tests/test_junit.py"), "an unchecked rule shown as passed"),
    # ---------------------------------------------------------------- stores
    Mutation("stores", "loadtests/dedup/sqlite.py", "\"WHERE bindings.t + ? < ?\")",
             "\"WHERE bindings.t + ? > ?\")", T_STORE, "sqlite: a live binding taken over"),
    Mutation("stores", "loadtests/dedup/sqlite.py", "(lw, now_s)).rowcount",
             "(w, now_s)).rowcount", T_STORE, "sqlite: in-flight rows purged before their lease"),
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "_ABANDON = \"DELETE FROM dedup WHERE context_id = ? AND key = ? AND state = "
             "'in_flight'\"",
             "_ABANDON = \"DELETE FROM dedup WHERE context_id = ? AND key = ?\"", T_STORE,
             "sqlite: abandon deletes a finished entry"),
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "\"AND state = 'in_flight' AND owner = ?\")  # in flight",
             "\"AND owner = ?\")  # in flight", T_STORE,
             "sqlite: progress overwrites a stored outcome"),
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "\"WHERE context_id = ? AND key = ? AND owner = ?\")",
             "\"WHERE context_id = ? AND key = ? AND (owner = ? OR 1)\")", T_STORE,
             "sqlite: a stale owner's late complete accepted"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "_ESCAPES = str.maketrans({\"%\": \"%25\", \":\": \"%3A\", \"{\": \"%7B\", "
             "\"}\": \"%7D\"})",
             "_ESCAPES = str.maketrans({\"%\": \"%25\", \"{\": \"%7B\", \"}\": \"%7D\"})",
             T_STORE, "redis: ':' not escaped (context a:b + key c = context a + key b:c)"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "if e[1] ~= 'i' or e[2] ~= ARGV[1] then return 0 end",
             "if e[2] ~= ARGV[1] then return 0 end", T_STORE,
             "redis: progress overwrites a stored outcome"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "if ARGV[1] ~= '' and e[2] ~= ARGV[1] then return 0 end\nredis.call('DEL'",
             "redis.call('DEL'", T_STORE, "redis: abandon by another owner"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "self._done_ttl_ms = max(1, int(self.window_s * 1000))",
             "self._done_ttl_ms = max(1, int(self.window_s * 100))", T_STORE,
             "redis: done entries expire after a tenth of the window"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "if now > tonumber(e[4]) + tonumber(ARGV[5]) then",
             "if now > tonumber(e[3]) + tonumber(ARGV[5]) then", T_STORE,
             "redis: window counted from the claim, not the completion"),
    # ---------------------------------------------------------------- Reasoner validation
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "size = len(part.text.encode(\"utf-8\"))", "size = len(part.text)", T_INTAKE,
             "text bound in characters, not bytes"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if not isinstance(v, str) or not v or len(v) > b.id_chars:",
             "if not isinstance(v, str) or len(v) > b.id_chars:", T_INTAKE,
             "empty identifiers accepted"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if not isinstance(v, bool):", "if not isinstance(v, bool | float):", T_INTAKE,
             "1/0 accepted as flags"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if not active and any(keys.is_profile_key(k) for k in meta):", "if False:",
             T_INTAKE, "profile keys accepted without the extension"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "not math.isfinite(delay) or not 0 <= delay <= b.max_test_delay_s",
             "not math.isfinite(delay) or not delay <= b.max_test_delay_s", T_INTAKE,
             "negative test delay accepted"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py", "        total += size\n",
             "        total = size\n", T_INTAKE, "message bound not summed over parts"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "unknown = sorted(set(v) - set(DIRECTIVES))", "unknown: list[str] = []", T_INTAKE,
             "unknown directive types accepted"),
    # ---------------------------------------------------------------- chaos proxy
    Mutation("chaos proxy", "loadtests/chaos/config.py", "lost=bool(u[1] < link.loss)",
             "lost=bool(u[0] < link.loss)", T_CHAOS, "loss drawn from the reorder draw"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "dup = duplicable and u[2] < link.duplication", "dup = u[2] < link.duplication",
             T_CHAOS, "non-message requests duplicated"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "first = bool(dup and first_share > 0 and rng.random() < first_share)",
             "first = bool(first_share > 0 and rng.random() < first_share)", T_CHAOS,
             "copy-first set on requests that are not duplicated"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "o.direction in (direction, \"both\")", "o.direction == direction", T_CHAOS,
             "an outage on both directions covers neither"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "if o.start_s <= t_s < o.start_s + o.duration_s",
             "if o.start_s <= t_s <= o.start_s + o.duration_s", T_CHAOS,
             "outage window end inclusive"),
    # ---------------------------------------------------------------- playback
    Mutation("playback", "loadtests/live/playback.py",
             "now_s - min(e[3] for e in heap) >= self.hold_s)",
             "now_s - heap[0][3] >= self.hold_s)", T_PLAY,
             "hold counted from the lowest number's arrival"),
    Mutation("playback", "loadtests/live/playback.py",
             "if nxt is not None and seq < nxt:", "if nxt is not None and seq < nxt - 1:",
             T_PLAY, "a late event just below the expected one played"),
    Mutation("playback", "loadtests/live/playback.py",
             "if is_chunk and math.isnan(self.first_chunk_s):", "if is_chunk:", T_PLAY,
             "first chunk time overwritten by later chunks"),
    Mutation("playback", "loadtests/live/playback.py",
             "            out.append(self._play(n, seq, is_chunk, now_s))\n"
             "            self._next = seq + 1",
             "            out.append(self._play(n, seq, is_chunk, now_s))\n"
             "            self._next = (self._next or 0) + 1", T_PLAY,
             "a skipped gap does not move the expected number"),
    Mutation("playback", "loadtests/live/playback.py",
             "ok = end or seq <= 0 or now_s - self._first_arrival_s >= self.hold_s",
             "ok = end or seq <= 0", T_PLAY, "a stream starting above 0 held to its end"),
    # ---------------------------------------------------------------- verdict, JUnit, agreement
    Mutation("verdict, JUnit, agreement", "loadtests/check/verdict.py",
             "return not self.interrupted and not any(r.status == FAIL for r in self.rules)",
             "return not any(r.status == FAIL for r in self.rules)", T_VJA,
             "an interrupted run passes"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "failures=str(sum(c.status == \"fail\" for c in cases))",
             "failures=str(sum(c.status != \"pass\" for c in cases))", T_VJA,
             "skipped cases counted as failures"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "cases.append(Case(name, \"rtalab.capacity\", \"skipped\",",
             "cases.append(Case(name, \"rtalab.capacity\", \"pass\",", T_VJA,
             "capacity with no value meeting the SLO shown as passed"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "cases.append(Case(str(s), \"rtalab.tune\", \"skipped\",",
             "cases.append(Case(str(s), \"rtalab.tune\", \"pass\",", T_VJA,
             "tune without a recommendation shown as passed"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py", "    d = load - m\n",
             "    d = m - load\n", T_VJA, "agreement difference of the wrong sign"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "        if name in EXTENSIVE:\n            continue\n", "", T_VJA,
             "counts of turns and calls compared across runs of other lengths"),
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


def run(areas: list[str] | None, match: str | None = None
        ) -> dict[str, list[tuple[Mutation, bool, float]]]:
    chosen = [m for m in MUTATIONS if (not areas or m.area in areas)
              and (not match or match in m.what)]
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
    ap.add_argument("--match", help="only the mutations whose description contains this")
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
    results = run(args.area, args.match)
    print("\n| area | planted | caught | score |\n| --- | --- | --- | --- |")
    for area, rows in results.items():
        k = sum(c for _, c, _ in rows)
        print(f"| {area} | {len(rows)} | {k} | {k / len(rows):.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
