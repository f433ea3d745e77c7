"""One-off: plant realistic bugs one at a time in a copy of the tree and report which ones
the area's tests catch (red = caught, green = survived), per area.

Not part of ``make test``.  Each mutation is (area, file, old text, new text, test files):
the old text must occur exactly once in the file (tests/trust/test_mutation_list.py checks
that the list stays valid as the code moves).  The tree is copied once to a temporary
folder (no .git, .venv, results), each mutation applied there, the area's tests run with
``-x -q`` (the copy first on PYTHONPATH), the file restored.  CPU-heavy: run it nice'd, on a
few areas at a time.

    nice -n 10 .venv/bin/python tests/oneoff/mutate.py [--area AREA ...] [--match TEXT]
        [--first N] [--list]
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
T_PUNC = ("tests/test_calibrate_uncertainty.py",)
T_OTLP = ("tests/test_calibrate_otlp.py",)
T_MC = ("tests/trust/test_multiple_comparisons.py",)
T_TLS = ("tests/serve/test_tls_servers.py", "tests/serve/test_wire_fuzz.py")
T_EQ = ("tests/check/test_equivalence.py",)
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
T_PRED = ("tests/trust/test_predict_guards.py", "tests/test_calibrate_validate.py",
          "tests/test_prediction_interval.py")
T_CALLER = ("tests/test_summary.py", "tests/trust/test_summary_intervals.py")
T_RULE = ("tests/serve/test_dedup_fingerprint.py", "tests/serve/test_dedup_rule_parity.py",
          "tests/test_side_effect_rule.py", "tests/test_model_dedup.py",
          "tests/trust/test_fingerprint.py")
T_CHECK = ("tests/check/test_rules.py",)
T_CONN = ("tests/serve/test_pending_eviction.py", "tests/trust/test_conn_limits.py")
T_STORE2 = (*T_STORE, "tests/serve/test_dedup_rule_parity.py")
T_FP = (*T_STORE2, "tests/serve/test_dedup_fingerprint.py")
T_HELD = ("tests/serve/test_dedup_fingerprint.py", "tests/serve/test_store_faults.py")

MUTATIONS: tuple[Mutation, ...] = (
    # ---------------------------------------------------------------- intervals
    Mutation("intervals", "sim/calibrate/uncertainty.py",
             "(math.log(hi) - math.log(lo)) / (2 * Z95)", "(math.log(hi) - math.log(lo)) / 2",
             T_PUNC, "a parameter draw's spread from the half-width, not its sd (x 1.96)"),
    Mutation("intervals", "sim/calibrate/uncertainty.py",
             "k + 0.5, n - k + 0.5, code", "k + 0.5, n + 0.5, code", T_PUNC,
             "the error rate's Beta counts every execution as a success"),
    Mutation("intervals", "sim/calibrate/uncertainty.py",
             "np.random.SeedSequence([seed, STREAM, i])", "np.random.SeedSequence([seed, STREAM])",
             T_PUNC, "every replication draws the same parameters"),
    Mutation("intervals", "sim/stream.py", "yield run_once(scenarios[k], seed, rep, sub)",
             "yield run_once(scenarios[0], seed, rep, sub)", T_PUNC,
             "every replication runs the first draw"),
    Mutation("intervals", "loadtests/loadrun/predict.py",
             'sim_turns = _simulate(pred_sc, args.replications, folder / f"sim-{tag}", draws)',
             'sim_turns = _simulate(pred_sc, args.replications, folder / f"sim-{tag}")', T_PUNC,
             "predict draws the parameters but simulates the point estimates"),
    Mutation("calibration", "sim/calibrate/telemetry.py",
             "start = max(s[0][0] for s in series.values())",
             "start = min(s[0][0] for s in series.values())", T_OTLP,
             "OTLP: the window starts before every process has exported"),
    Mutation("calibration", "sim/calibrate/telemetry.py", "                acc += c\n",
             "                acc = c\n", T_OTLP,
             "OTLP: bucket counts taken as cumulative (they are per bucket)"),
    Mutation("calibration", "sim/calibrate/telemetry.py",
             "                samples += latest[-1][1]", "                samples += latest[0][1]",
             T_OTLP, "OTLP: a process's first export instead of its latest"),
    Mutation("intervals", "sim/shared/stats.py", "lo = float(chi2.ppf(a / 2, 2 * k)) / (2 * t)",
             "lo = float(chi2.ppf(a, 2 * k)) / (2 * t)", T_COV,
             "the Poisson rate's lower end at 5 %, not 2.5 %"),
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
    Mutation("stores", "loadtests/reasoner/storeguard.py",
             "            if conflicts(held[1], fingerprint):",
             "            if False:", T_HELD, "held outcome: a reuse by another request replayed"),
    Mutation("stores", "loadtests/reasoner/storeguard.py",
             "time.time(),\n                                              fingerprint=fingerprint)",
             "time.time())", T_HELD, "held outcome written without its fingerprint"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "redis.call('HSET', KEYS[1], 'f', ARGV[5])", "redis.call('HSET', KEYS[1], 'f', '')",
             T_HELD, "redis: an unowned complete drops the fingerprint"),
    Mutation("stores", "loadtests/dedup/memory.py",
             "now_s)\n        row.fingerprint = row.fingerprint or fingerprint",
             "now_s)\n        row.fingerprint = row.fingerprint", T_HELD,
             "memory: an unowned complete drops the fingerprint"),
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "WHEN '' THEN excluded.fingerprint ELSE dedup.fingerprint END",
             "WHEN '' THEN '' ELSE excluded.fingerprint END", T_HELD,
             "sqlite: an unowned complete loses or replaces the fingerprint"),
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
    # ================================================================ round 3 (2026-12-03):
    # a fresh set, written as a hostile reviewer would, across every area of issue 31
    # ---------------------------------------------------------------- intervals (round 3)
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "result[name] = {\"se\": float(x.std(ddof=1)),",
             "result[name] = {\"se\": float(x.std(ddof=1)) / math.sqrt(len(x)),", T_UNC,
             "bootstrap se divided by sqrt(resamples)"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "NOT_RESAMPLED = {S.M_CALLS: NOTE_FIXED, S.M_CONCURRENT_CALLS_PEAK: NOTE_PEAK}",
             "NOT_RESAMPLED = {S.M_CALLS: NOTE_FIXED}", T_UNC, "a peak given a bootstrap interval"),
    Mutation("intervals", "loadtests/loadrun/uncertainty.py",
             "note = NOT_RESAMPLED.get(name) or (NOTE_COUNTER if name in counters else None)",
             "note = NOT_RESAMPLED.get(name)", T_UNC, "whole-run counters resampled"),
    Mutation("intervals", "loadtests/loadrun/resample.py",
             "frame[col] = frame[col].to_numpy() + copy * m",
             "frame[col] = frame[col].to_numpy() + copy", T_UNC,
             "a drawn copy's ids offset by its copy number (collide with other calls' ids)"),
    Mutation("intervals", "sim/calibrate/intervals.py",
             "half = t_quantile_975(n - 1) * float(np.std(x, ddof=1)) / math.sqrt(n)",
             "half = t_quantile_975(n - 1) * float(np.std(x)) / math.sqrt(n)", T_COV,
             "calibration mean CI with the ddof-0 sd"),
    Mutation("intervals", "sim/calibrate/intervals.py",
             "return (min(float(s[lo_rank - 1]), est), max(float(s[hi_rank - 1]), est)), \"\"",
             "return (min(float(s[lo_rank - 1]), est), max(float(s[hi_rank - 2]), est)), \"\"",
             T_COV, "off-by-one upper rank of the p99 interval"),
    Mutation("intervals", "sim/shared/agreement.py",
             "half = t_quantile((1.0 + level) / 2.0, n - 1) * s * math.sqrt(1.0 + 1.0 / n)",
             "half = t_quantile(level, n - 1) * s * math.sqrt(1.0 + 1.0 / n)", T_COV,
             "one-run interval at 80 % (one-sided quantile)"),
    Mutation("intervals", "sim/shared/agreement.py",
             "j = math.floor((n + 1) * (1.0 - level) / 2.0 + 1e-9)",
             "j = math.floor((n + 1) * (1.0 - level) + 1e-9)", T_COV,
             "one-run order-statistic interval at 80 %"),
    Mutation("intervals", "sim/shared/stats.py",
             "    se = math.sqrt(var / n)\n    half = t_quantile_975(n - 1) * se",
             "    se = math.sqrt(var / n)\n    half = t_quantile_975(n) * se", T_COV,
             "paired interval with n, not n - 1, degrees of freedom"),
    # ---------------------------------------------------------------- multiple comparisons (3)
    Mutation("multiple comparisons", "sim/shared/stats.py",
             "for rank, i in enumerate(order, start=1):",
             "for rank, i in enumerate(order):", T_MC, "Benjamini-Hochberg ranks from 0"),
    Mutation("multiple comparisons", "sim/shared/stats.py",
             "        if p_values[i] <= q * rank / m:\n            cut = rank\n",
             "        if p_values[i] <= q * rank / m:\n            cut = rank\n        else:\n"
             "            break\n", T_MC, "Benjamini-Hochberg step-down instead of step-up"),
    Mutation("multiple comparisons", "sim/shared/stats.py",
             "        if p_values[i] > alpha / (m - rank):\n            break\n        rejected",
             "        if p_values[i] >= alpha / (m - rank):\n            break\n        rejected",
             T_MC, "Holm refuses a p-value at its threshold"),
    # ---------------------------------------------------------------- tune (round 3)
    Mutation("tune", "sim/answers/tune.py", "    return d is None or d.p_value >= ALPHA",
             "    return d is None or d.p_value < ALPHA", T_TUNE,
             "indistinguishable ranges: the test reversed"),
    Mutation("tune", "sim/answers/tune.py",
             "                p_values.append(1.0 if d is None else d.p_value)",
             "                p_values.append(0.0 if d is None else d.p_value)", T_TUNE,
             "an untestable candidate counted as significant"),
    Mutation("tune", "sim/answers/slo.py",
             "return {\"<=\": value <= self.target, \"<\": value < self.target,",
             "return {\"<=\": value < self.target, \"<\": value < self.target,", T_TUNE,
             "an SLO 'x <= target' failing at its target"),
    # ---------------------------------------------------------------- calibration (round 3)
    Mutation("calibration", "sim/calibrate/estimate.py", "errors[c] = round(k / n, 6)",
             "errors[c] = round(k / len(a), 6)", T_CAL,
             "injected error rate written per attempt, not per execution"),
    Mutation("calibration", "sim/calibrate/estimate.py",
             "        if c not in EMERGENT_CODES:\n            errors[c]",
             "        if True:\n            errors[c]", T_CAL,
             "emergent codes injected as configured failures"),
    Mutation("calibration", "sim/calibrate/fit.py",
             "scale = math.sqrt(len(sub) / len(x))", "scale = 1.0", T_CAL,
             "a subsample's cv interval not narrowed to the full sample"),
    Mutation("calibration", "sim/calibrate/fit.py", "x = x[np.isfinite(x) & (x >= 0)]",
             "x = x[np.isfinite(x)]", T_CAL, "negative durations fitted"),
    Mutation("calibration", "sim/calibrate/estimate.py",
             "per_ok = bool(per) and all(p[\"identified\"] for p in per.values())",
             "per_ok = bool(per) and any(p[\"identified\"] for p in per.values())", T_CAL,
             "per-process capacity with one process identified"),
    # ---------------------------------------------------------------- predict
    Mutation("predict", "loadtests/loadrun/predict.py",
             "return math.isfinite(cpu_share) and cpu_share > lim",
             "return math.isfinite(cpu_share) and cpu_share >= lim", T_PRED,
             "void at exactly 90 % of a core"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "return math.isfinite(cpu_share) and cpu_share > lim",
             "return not cpu_share <= lim",  # (`cpu_share > lim` alone was equivalent: nan > x
             T_PRED, "an unknown CPU share (NaN) taken as saturated"),  # is False)
    Mutation("predict", "loadtests/loadrun/predict.py",
             "return rate_a * predict_utilisation / offered_util_a, None",
             "return predict_utilisation / offered_util_a, None", T_PRED,
             "B in multiples of A, not calls/s"),
    Mutation("predict", "sim/calibrate/estimate.py",
             "rate = float(base.workload.calls_per_s) * float(base.workload.turns_per_call.mean)",
             "rate = float(base.workload.calls_per_s)", T_PRED,
             "offered utilisation per call, not per turn"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "if j < i and t1 - samples[j][0] >= window_s / 2:",
             "if j < i:", T_PRED, "a CPU share read over less than half a window"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "best = share if not best >= share else best", "best = share", T_PRED,
             "the last window's CPU share, not the busiest"),
    Mutation("predict", "sim/shared/agreement.py",
             "return \"within\" if abs(error) <= tol else \"beyond\"",
             "return \"within\" if error <= tol else \"beyond\"", T_PRED,
             "an under-prediction always within its target"),
    Mutation("predict", "sim/calibrate/validate.py",
             "err = (m - p) / p if p and math.isfinite(p) and math.isfinite(m) else math.nan",
             "err = (m - p) / m if m and math.isfinite(p) and math.isfinite(m) else math.nan",
             T_PRED, "relative error over the measured value"),
    Mutation("predict", "sim/calibrate/validate.py",
             "step = 1.0 / turns if k == \"success_rate\" and turns else 0.0", "step = 0.0",
             T_PRED, "success-rate interval without its one-turn resolution"),
    # ---------------------------------------------------------------- caller-perceived latency
    Mutation("caller-perceived latency", "sim/shared/summary.py",
             "    offered = ~_is(outcome, \"cancelled\")[keep]",
             "    offered = np.ones(n, dtype=bool)", T_CALLER,
             "barge-in (cancelled) turns counted as not served"),
    Mutation("caller-perceived latency", "sim/shared/summary.py",
             "    c_ttfc[np.isnan(c_ttfc)] = math.inf\n", "", T_CALLER,
             "a completed turn that never played a chunk left out of the caller's TTFC"),
    Mutation("caller-perceived latency", "sim/shared/summary.py",
             "    x = x[~np.isnan(x)]\n    if not len(x):",
             "    x = x[np.isfinite(x)]\n    if not len(x):", T_CALLER,
             "turns not served dropped from the caller's percentile"),
    Mutation("caller-perceived latency", "sim/shared/summary.py",
             "m[S.M_NOT_SERVED_SHARE] = _ratio(not_served.sum(), offered.sum())",
             "m[S.M_NOT_SERVED_SHARE] = _ratio(not_served.sum(), n)", T_CALLER,
             "not-served share over every turn, barge-ins included"),
    Mutation("caller-perceived latency", "sim/shared/summary.py",
             "    if any(v is None or not math.isfinite(v) for v in values):",
             "    if all(v is None or not math.isfinite(v) for v in values):", T_CALLER,
             "a mean of the finite replications when one is infinite"),
    Mutation("caller-perceived latency", "sim/shared/summary.py",
             "PERCENTILE_METHOD: Final = \"inverted_cdf\"", "PERCENTILE_METHOD: Final = \"linear\"",
             T_CALLER,
             "interpolated percentiles (not an observed value)"),
    # ---------------------------------------------------------------- dedup rule, fingerprints
    Mutation("dedup rule, fingerprints", "sim/shared/dedup_rule.py",
             "    return now_s > expires_at_s", "    return now_s >= expires_at_s", T_RULE,
             "window open at its end (expired at completed + window)"),
    Mutation("dedup rule, fingerprints", "sim/shared/dedup_rule.py",
             "    return now_s - claimed_at_s > lease_s",
             "    return now_s - claimed_at_s >= lease_s", T_RULE,
             "lease stale at exactly its length"),
    Mutation("dedup rule, fingerprints", "sim/shared/dedup_rule.py",
             "return bool(stored) and bool(presented) and stored != presented",
             "return stored != presented", T_RULE, "an empty fingerprint conflicts"),
    Mutation("dedup rule, fingerprints", "sim/shared/dedup_rule.py",
             "    if conflicts(row.fingerprint, fingerprint):\n        return \"conflict\"\n"
             "    if stale(", "    if stale(", T_RULE,
             "a reused key of a crashed owner handed its lost outcome"),
    Mutation("dedup rule, fingerprints", "sim/shared/dedup_rule.py",
             "return \"not-run\" if witnessed is False or not has_ledger else \"unknown\"",
             "return \"not-run\"", T_RULE, "'nothing ran' without the ledger's word"),
    Mutation("dedup rule, fingerprints", "loadtests/reasoner/idempotency.py",
             "for field_ in (method, msg.task_id, repr(side_effect), repr(handoff)):",
             "for field_ in (method, msg.task_id, repr(side_effect)):", T_RULE,
             "fingerprint without the handoff flag"),
    Mutation("dedup rule, fingerprints", "loadtests/reasoner/idempotency.py",
             "for field_ in (method, msg.task_id, repr(side_effect), repr(handoff)):",
             "for field_ in (method, repr(side_effect), repr(handoff)):", T_RULE,
             "fingerprint without the taskId"),
    Mutation("dedup rule, fingerprints", "loadtests/reasoner/idempotency.py",
             "        h.update(len(data).to_bytes(8, \"big\") + data)\n    for part",
             "        h.update(data)\n    for part", T_RULE,
             "fingerprint fields not length-prefixed (\"Send\"+\"t\" = \"Sendt\"+\"\")"),
    # ---------------------------------------------------------------- stores (round 3)
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "n = db.execute(\"DELETE FROM dedup WHERE state = 'done' AND t + ? < ?\",",
             "n = db.execute(\"DELETE FROM dedup WHERE state = 'done' AND t + ? <= ?\",",
             T_STORE2, "sqlite: done rows purged at the window's last instant"),
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "            if db.execute(_INSERT, (context_id, key, owner, now_s, now_s,\n"
             "                                    fingerprint)).rowcount == 1:",
             "            if db.execute(_INSERT, (context_id, key, owner, now_s, now_s,\n"
             "                                    \"\")).rowcount == 1:", T_FP,
             "sqlite: a claim's fingerprint not stored"),
    Mutation("stores", "loadtests/dedup/sqlite.py",
             "\"outcome = NULL, fingerprint = CASE fingerprint WHEN '' THEN ? ELSE fingerprint "
             "END \"",
             "\"outcome = outcome, fingerprint = CASE fingerprint WHEN '' THEN ? ELSE fingerprint "
             "END \"", T_STORE2, "sqlite: a reclaimed entry keeps the dead owner's progress"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "  if now > tonumber(e[4]) + tonumber(ARGV[5]) then\n    if peek",
             "  if now >= tonumber(e[4]) + tonumber(ARGV[5]) then\n    if peek", T_STORE2,
             "redis: window open at its end"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "if now - tonumber(e[3]) > tonumber(ARGV[4]) or",
             "if now - tonumber(e[3]) >= tonumber(ARGV[4]) or", T_STORE2,
             "redis: lease stale at exactly its length"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "self._inflight_ttl_ms = max(1, int((self.lease_s + self.window_s) * 1000))",
             "self._inflight_ttl_ms = max(1, int(self.lease_s * 1000))", T_STORE2,
             "redis: in-flight TTL without the window"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "  redis.call('PEXPIRE', KEYS[1], ARGV[8])\n  redis.call('ZREM', KEYS[2], KEYS[1])\n"
             "  return {'lost'",
             "  redis.call('ZREM', KEYS[2], KEYS[1])\n  return {'lost'", T_STORE2,
             "redis: a lost outcome stored without its TTL"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "redis.call('HSET', KEYS[1], 'f', f ~= '' and f or ARGV[10])",
             "redis.call('HSET', KEYS[1], 'f', ARGV[10])", T_FP,
             "redis: a reclaim replaces the stored fingerprint"),
    Mutation("stores", "loadtests/dedup/redis.py",
             "cutoff = now_s - self.window_s - self.lease_s", "cutoff = now_s - self.lease_s",
             T_STORE2, "redis: index entries dropped after the lease alone"),
    # ---------------------------------------------------------------- Reasoner validation (3)
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if len(msg.parts) > b.max_parts:", "if len(msg.parts) >= b.max_parts:", T_INTAKE,
             "exactly max_parts parts refused"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "problem = _check_ids(msg, bounds) or _check_parts(msg, bounds)",
             "problem = _check_parts(msg, bounds)", T_INTAKE, "core identifiers not bounded"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if msg.role != Role.ROLE_USER:", "if msg.role == Role.ROLE_AGENT:", T_INTAKE,
             "an unspecified role accepted"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if force is not None and force not in ALL_CODES:", "if False:", T_INTAKE,
             "an unknown forced error code accepted"),
    Mutation("reasoner validation", "loadtests/reasoner/intake.py",
             "if problem is None and _compact_len(meta) > bounds.metadata_bytes:",
             "if problem is None and len(meta) > bounds.metadata_bytes:", T_INTAKE,
             "metadata bound in keys, not bytes"),
    # ---------------------------------------------------------------- chaos proxy (round 3)
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "        delay += sample(link.reorder_delay_s, rng)",
             "        delay = sample(link.reorder_delay_s, rng)", T_CHAOS,
             "a reordered request loses its latency"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "    return max(0.0, float(dist.sample(rng)))", "    return float(dist.sample(rng))",
             T_CHAOS, "negative delays from a law with a negative tail"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "return tuple(sorted(self.network.outages + self.extra_outages, key=lambda o: "
             "o.start_s))", "return tuple(self.network.outages)", T_CHAOS,
             "outages given on the command line ignored"),
    Mutation("chaos proxy", "loadtests/chaos/config.py",
             "dup_delay = sample(link.duplicate_delay_s, rng) if dup else 0.0",
             "dup_delay = 0.0", T_CHAOS, "a duplicate's delay ignored"),
    # ---------------------------------------------------------------- playback (round 3)
    Mutation("playback", "loadtests/live/playback.py",
             "            if seq < self.last_played:\n                self.order_violations += 1",
             "            if seq <= self.last_played:\n                self.order_violations += 1",
             T_PLAY, "a repeated sequence number counted as out of order"),
    Mutation("playback", "loadtests/live/playback.py",
             "ok = end or seq <= self._next or (", "ok = end or seq < self._next or (", T_PLAY,
             "the expected event held until the timeout"),
    Mutation("playback", "loadtests/live/playback.py",
             "        if seq > self.last_played:\n            self.last_played = seq",
             "        if True:\n            self.last_played = seq", T_PLAY,
             "a late event lowers the highest number played"),
    # ---------------------------------------------------------------- gates (round 3)
    Mutation("gates", "loadtests/check/integrity.py",
             "ok = answered <= server <= answered + open_", "ok = answered <= server", T_GATE,
             "server answering more than it was sent passes"),
    Mutation("gates", "loadtests/check/integrity.py", "ok = saved == read",
             "ok = saved >= read", T_GATE, "fewer witness rows read than saved passes"),
    Mutation("gates", "loadtests/check/integrity.py",
             "lim = float(f.gates.get(\"availability_min\", AVAILABILITY_MIN))",
             "lim = AVAILABILITY_MIN", T_GATE, "the run's availability limit ignored"),
    Mutation("gates", "loadtests/check/integrity.py",
             "    real = attempts[attempts[\"injected\"].fillna(\"\").astype(str).eq(\"\")]\n"
             "    bad = real[real[\"error_code\"].eq(\"auth\")]",
             "    real = attempts\n    bad = real[real[\"error_code\"].eq(\"auth\")]", T_GATE,
             "client-injected copies counted by the auth gate"),
    Mutation("gates", "loadtests/check/coverage.py",
             "window = float(np.max(gap)) if len(gap) else None",
             "window = float(np.min(gap)) if len(gap) else None", T_GATE,
             "the dedup window exercised read from the shortest gap"),
    Mutation("gates", "loadtests/check/coverage.py",
             "done = real[real[\"outcome\"].isin((A.COMPLETED, A.INPUT_REQUIRED))]",
             "done = real[real[\"outcome\"].isin((A.COMPLETED,))]", T_GATE,
             "turns paused for input not counted as executed"),
    Mutation("gates", "loadtests/check/coverage.py",
             "proxy_running = int((seen & ~first & (delay < took)).sum())",
             "proxy_running = int((seen & ~first & (delay <= took)).sum())", T_GATE,
             "a proxy copy landing at the original's end counted as concurrent"),
    # ---------------------------------------------------------------- agreement, JUnit, more
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "    df = var * var / (sim_part * sim_part / (n - 1)) if sim_part > 0 else 1e9\n",
             "    df = float(n - 1)\n", T_VJA,
             "agreement: degrees of freedom without the load run's share (no Welch)"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "    half = t_quantile(0.975, df) * math.sqrt(var)",
             "    half = t_quantile(0.95, df) * math.sqrt(var)", T_VJA,
             "agreement: a 90 % interval of the difference labelled 95 %"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "        return d, d, d, 0.0 if d != 0.0 else 1.0",
             "        return d, d, d, 1.0", T_VJA,
             "agreement: identical replications never differ from the load run"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "        return self.t_run <= self.t_star", "        return self.t_run < self.t_star",
             T_VJA, "twin check: a run tied with the most extreme replication fails"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "            if y is None or y_run is None:\n                t_rep[j] = math.inf",
             "            if y is None or y_run is None:\n                t_rep[j] = 0.0",
             T_VJA, "twin check: a replication missing a metric narrows the check"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "    return 0.5 / math.sqrt(sum(turns) / len(turns)) if turns else 0.0",
             "    return 0.0", T_VJA, "twin check: the success rate's spread without its floor"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "    lo, hi = lo - resolution, hi + resolution\n", "", T_VJA,
             "one-run interval: the metric's resolution not added"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "and self.low <= float(value) <= self.high)",
             "and self.low < float(value) < self.high)", T_VJA,
             "one-run interval: a value on its edge is outside"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "(name.startswith(INF_PREFIXES) and any(v is None for v in values))",
             "(name.startswith(INF_PREFIXES) and all(v is None for v in values))", T_VJA,
             "one-run interval of a percentile infinite in some replications"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "        if status == \"fail\" and examples:", "        if False:", T_VJA,
             "JUnit failure message without the example ids"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "\"pass\" if counts.get(\"ledger_complete\") else \"fail\",",
             "\"pass\",", T_VJA, "JUnit: an incomplete ledger shown as passed"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "        if c.status == \"fail\":\n", "        if c.status == \"failed\":\n",
             T_VJA, "JUnit: a failed case written without <failure>"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "rec = candidates[candidates[\"recommended\"]] if",
             "rec = candidates if", T_VJA,
             "JUnit: tune's constraints shown held at a candidate not recommended"),
    Mutation("verdict, JUnit, agreement", "loadtests/check/verdict.py",
             "return [r.name for r in self.rules if r.status == FAIL]",
             "return [r.name for r in self.rules if r.status != PASS]", T_VJA,
             "verdict: rules not checked listed as failed"),
    # ---------------------------------------------------------------- checker rules, more
    Mutation("checker rules", "loadtests/check/rules.py",
             "    un = p.w[unmatched & ~degraded]", "    un = p.w[unmatched]", T_CHECK,
             "unexpected: degraded calls' executions judged"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "    bad = np.flatnonzero(open_ & ~cut)", "    bad = np.flatnonzero(open_)", T_CHECK,
             "incomplete: turns cut off by the stop counted"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "http.between(200, 299) | http.eq(101)).to_numpy()",
             "http.between(200, 299)).to_numpy()", T_CHECK,
             "extension-echo: WebSocket (101) answers never judged"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "answered = (p.a[\"events\"].fillna(0).to_numpy() > 0) & accepted",
             "answered = accepted", T_CHECK,
             "extension-echo: attempts without any event judged"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "            & a[\"task_id\"].notna().to_numpy())", "            )", T_CHECK,
             "continuation-twice: a copy without taskId (a new task) counted"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "bad = a[judged & got_owner.notna() & got_owner.ne(a[\"call_id\"])]",
             "bad = a[judged & got_owner.ne(a[\"call_id\"])]", T_CHECK,
             "cross-session: a server-minted context counted as another call's"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "hit = seen[seen[\"task_id_answered\"].isin(shared)].sort_values(\"send_s\", "
             "kind=\"stable\")",
             "hit = seen[seen[\"task_id_answered\"].isin(shared)]", T_CHECK,
             "foreign-task: the owner by ledger order, not by who was answered first"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "        counted = ~f[\"task\"].to_numpy()\n",
             "        counted = np.ones(len(f), dtype=bool)\n", T_CHECK,
             "sequence-id: the Task event judged for a sequenceId"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "    judged = seq[\"outcome\"].isin(NO_ANSWER) & seq[\"has_next\"] & known.notna()",
             "    judged = seq[\"has_next\"] & known.notna()", T_CHECK,
             "task-id-kept: a retry after a FAILED answer judged"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "multi = nu.index[nu.to_numpy() > 1]", "multi = nu.index[nu.to_numpy() >= 1]",
             T_CHECK, "turn-re-executed: every executed turn counted"),
    # ---------------------------------------------------------------- TLS clients
    Mutation("TLS clients", "loadtests/loadrun/orchestrate.py",
             "timeout=10,\n                                    context=(tls or ClientTls())"
             ".context_for(url)) as r:",
             "timeout=10,\n                                    context=__import__('ssl')"
             "._create_unverified_context()) as r:", T_TLS,
             "a load run's /metrics scrape verifies nothing"),
    Mutation("TLS clients", "loadtests/loadrun/orchestrate.py",
             "timeout=10,\n                                    context=(tls or ClientTls())"
             ".context_for(url)) as r:",
             "timeout=10,\n                                    context=ClientTls()"
             ".context_for(url)) as r:", T_TLS,
             "a load run's /metrics scrape ignores --ca and the client certificate"),
    Mutation("TLS clients", "sim/calibrate/telemetry.py",
             "                                        context=tls.context_for(url)) as r:",
             "                                        context=None) as r:", T_TLS,
             "calibrate's prometheus:https:// scrape ignores --ca and the client certificate"),
    Mutation("TLS clients", "loadtests/common/wireclient.py",
             "        context = self.tls.context_for(self.ws_url) if self.tls is not None else "
             "None", "        context = None", T_TLS,
             "serve fuzz's WebSocket ignores --ca and the client certificate"),
    Mutation("TLS clients", "loadtests/common/wireclient.py",
             "        return self.tls.httpx_verify() if self.tls is not None else True",
             "        return False", T_TLS, "serve fuzz's HTTP clients verify nothing"),
    # ---------------------------------------------------------------- playback, more
    Mutation("playback", "loadtests/live/playback.py",
             "        return self._release(now_s, end=True)",
             "        return self._release(now_s, end=False)", T_PLAY,
             "the end of the stream leaves held events unplayed"),
    Mutation("playback", "loadtests/live/playback.py",
             "now_s - min(e[3] for e in heap) >= self.hold_s)",
             "now_s - max(e[3] for e in heap) >= self.hold_s)", T_PLAY,
             "a gap's hold counted from the newest arrival"),
    Mutation("playback", "loadtests/live/playback.py",
             "if not self._heap and (seq <= 0 if nxt is None else seq <= nxt):",
             "if not self._heap and (seq <= 1 if nxt is None else seq <= nxt):", T_PLAY,
             "a first event numbered 1 played before a 0 that comes next"),
    # ---------------------------------------------------------------- coverage, more
    Mutation("gates", "loadtests/check/coverage.py",
             "    before = known & o_done & (c_send < o_send) & ~across",
             "    before = known & (c_send < o_send) & ~across", T_GATE,
             "coverage: a copy sent first of a refused original counted"),
    Mutation("gates", "loadtests/check/coverage.py",
             "se_turns = done.loc[done[\"side_effect\"].fillna(False).astype(bool)\n"
             "                        & done[\"turn_id\"].isin(shared)",
             "se_turns = done.loc[done[\"turn_id\"].isin(shared)", T_GATE,
             "coverage: a reused turnId without a side effect counted"),
    Mutation("gates", "loadtests/check/coverage.py",
             "    cont = int((cdup[\"outcome\"].eq(\"completed\") | "
             "cdup[\"main_done\"].eq(True)).sum())",
             "    cont = len(cdup)", T_GATE,
             "coverage: a continuation copy of an unanswered pause counted"),
    Mutation("gates", "loadtests/check/coverage.py",
             "        held = int(chaos[\"kind\"].isin(OUTAGE_KINDS).sum())",
             "        held = len(chaos)", T_GATE,
             "coverage: every proxy action counted as an outage"),
    Mutation("gates", "loadtests/check/coverage.py",
             "    nonretry = failed & code.notna() & ~code.isin(RETRYABLE_CODES)",
             "    nonretry = code.notna() & ~code.isin(RETRYABLE_CODES)", T_GATE,
             "coverage: non-retryable codes of answers that did not fail counted"),
    # ---------------------------------------------------------------- predict, more
    Mutation("predict", "loadtests/loadrun/predict.py",
             "        return rate_a * predict_utilisation / offered_util_a, None",
             "        return rate_a * offered_util_a / predict_utilisation, None", T_PRED,
             "B at the inverse of the utilisation ratio"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "    if predict_rate:\n        return predict_rate, None\n", "", T_PRED,
             "--predict-rate ignored when a utilisation is known"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "    return offered_util_a * rate / rate_a if rate_a > 0 else math.nan",
             "    return offered_util_a * rate_a / rate if rate > 0 else math.nan", T_PRED,
             "offered utilisation at B inverse in the rate"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "        return value, f\"B = the peak: {value:g} calls/s (--peak)\"",
             "        return value * float(base.workload.calls_per_s), f\"B = the peak: "
             "{value:g} calls/s (--peak)\"", T_PRED,
             "--peak RATE read as a factor of A"),
    Mutation("predict", "loadtests/loadrun/predict.py",
             "lambda v: math.isfinite(v) and v > 0, \"must be a number > 0, got {text}\")",
             "lambda v: math.isfinite(v), \"must be a number > 0, got {text}\")", T_PRED,
             "--peak accepts zero or a negative rate"),
    # ---------------------------------------------------------------- connection limits, more
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "            return len(mine), -next(iter(mine.values()))[0]",
             "            return -len(mine), -next(iter(mine.values()))[0]", T_CONN,
             "eviction takes the peer holding the fewest pending connections"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "        while self.n_pending >= cap and self.pending:",
             "        if self.n_pending > cap and self.pending:", T_CONN,
             "one pending connection more than the cap"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "        self._unpend(transport, self.open.get(id(transport)))\n        peer = "
             "self.open.pop(id(transport), None)",
             "        peer = self.open.pop(id(transport), None)", T_CONN,
             "a released connection stays counted as pending"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "        if self.per_peer[peer] <= 0:\n            del self.per_peer[peer]\n", "",
             T_CONN, "per-client counts kept for peers that left (a leak)"),
    # ---------------------------------------------------------------- transport equivalence
    Mutation("gates", "loadtests/check/equivalence.py",
             "stats.binom.sf(k - 1, n,", "stats.binom.sf(k, n,", T_EQ,
             "equivalence: the binomial tail P(X > k), not P(X >= k)"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "var = m / (m - 1) * float(", "var = float(", T_EQ,
             "equivalence: the cluster variance without its small-sample factor"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "(abs(diff) - margin) / math.sqrt(var)", "abs(diff) / math.sqrt(var)", T_EQ,
             "equivalence: the practical margin ignored"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "if clusters < MIN_CALLS or not", "if clusters < 2 or not", T_EQ,
             "equivalence: a comparison made with too few calls"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "return float(stats.t.sf((abs(diff) - margin) / math.sqrt(var), clusters - 1))",
             "return float(stats.norm.sf((abs(diff) - margin) / math.sqrt(var)))", T_EQ,
             "equivalence: a normal tail where few calls need Student's t"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "good = frame[\"ok\"].to_numpy(dtype=bool) & np.isfinite(x) & (x > 0)",
             "good = np.isfinite(x) & (x > 0)", T_EQ,
             "equivalence: latency of failed turns compared"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "        if len(failing) == len(judged) or total <= 0:\n            continue\n",
             "        if total <= 0:\n            continue\n", T_EQ,
             "equivalence: a bug on every binding alike tested as a difference"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "judged = ~indeterminate & (out != \"cancelled\") & ~pd.isna(out)",
             "judged = ~indeterminate & ~pd.isna(out)", T_EQ,
             "equivalence: barge-in (cancelled) turns judged as failures"),
    Mutation("gates", "loadtests/check/equivalence.py",
             "rejected = holm([t.p_value for t in tests], ALPHA) if tests else []",
             "rejected = [t.p_value < ALPHA for t in tests]", T_EQ,
             "equivalence: comparisons judged without Holm's correction"),
    # ---------------------------------------------------------------- tune, more
    Mutation("tune", "sim/answers/tune.py",
             "    eligible = (df[\"constraints_hold\"] & df[\"significantly_better\"] & "
             "~df[\"significantly_worse\"]",
             "    eligible = (df[\"constraints_hold\"] & df[\"significantly_better\"]", T_TUNE,
             "a candidate significantly worse on another objective recommended"),
    Mutation("tune", "sim/answers/tune.py",
             "                & ~df[\"success_lower\"] & (df[\"candidate\"] != \"current\"))",
             "                & (df[\"candidate\"] != \"current\"))", T_TUNE,
             "a candidate with a lower success rate recommended"),
    Mutation("tune", "sim/answers/tune.py",
             "d = paired(replication_values(cur_summary, m), replication_values(summary, m))",
             "d = paired(replication_values(summary, m), replication_values(cur_summary, m))",
             T_TUNE, "confirmation difference current - candidate"),
    Mutation("tune", "sim/answers/tune.py",
             "plots=False, common_seeds=True)", "plots=False, common_seeds=False)", T_TUNE,
             "confirmation runs without common seeds (the pairing lost)"),
    Mutation("tune", "sim/answers/tune.py",
             "        better[i] = better[i] or good\n        worse[i] = worse[i] or not good",
             "        better[i] = good\n        worse[i] = not good", T_TUNE,
             "the last objective's test overwrites the others'"),
    Mutation("tune", "sim/answers/tune.py",
             "             else math.inf for s, o in zip(signs",
             "             else -math.inf for s, o in zip(signs", T_TUNE,
             "an unmeasured objective dominates the Pareto front"),
    # ---------------------------------------------------------------- checker rules
    Mutation("checker rules", "loadtests/check/rules.py", "    dup = vc[vc > 1]\n",
             "    dup = vc[vc > 2]\n", T_CHECK, "a requestGuid run twice not a duplicate"),
    Mutation("checker rules", "loadtests/check/rules.py", "extra = int((dup - 1).sum())",
             "extra = int(dup.sum())", T_CHECK, "duplicates counted with their first execution"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "lost = np.flatnonzero(acked & ~degraded & (_executions(p) == 0))",
             "lost = np.flatnonzero(acked & (_executions(p) == 0))", T_CHECK,
             "degraded turns judged lost"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "over = rate is not None and rate > limit",
             "over = rate is not None and rate >= limit", T_CHECK,
             "a hazard at exactly its limit fails"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "ghost = np.flatnonzero(untold & ~reported)", "ghost = np.flatnonzero(untold)",
             T_CHECK, "turns told 'it may have run' counted as ghosts"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "bad = seq[nonretry & seq[\"next_same_context\"]]",
             "bad = seq[nonretry & seq[\"has_next\"]]", T_CHECK,
             "a resend in a new session counted as an unmodified retry"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "bad = seq[judged & (seq[\"ordinal\"] >= limit)]",
             "bad = seq[judged & (seq[\"ordinal\"] > limit)]", T_CHECK,
             "one retry beyond the attempt limit allowed"),
    Mutation("checker rules", "loadtests/check/rules.py",
             "bad = seq[hinted & (wait < seq[\"retry_after_ms\"] / 1000.0 - RETRY_AFTER_SLACK_S)]",
             "bad = seq[hinted & (wait < seq[\"retry_after_ms\"] - RETRY_AFTER_SLACK_S)]",
             T_CHECK, "retryAfterMs compared with seconds"),
    # ---------------------------------------------------------------- connection limits
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "if self.per_peer[peer] >= self.limits.max_connections_per_client:",
             "if self.per_peer[peer] > self.limits.max_connections_per_client:", T_CONN,
             "one connection more per client than the limit"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "if len(self.open) >= self.limits.max_connections:",
             "if len(self.open) > self.limits.max_connections:", T_CONN,
             "one connection more in total than the limit"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "                   min(per_client, total), min(pending, total))",
             "                   per_client, min(pending, total))", T_CONN,
             "a per-client limit above the total"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "return max(16, limit - max(FD_RESERVE_MIN, limit // 10))",
             "return max(16, limit - FD_RESERVE_MIN)", T_CONN,
             "no 10 % reserve of open files"),
    Mutation("connection limits", "loadtests/reasoner/conns.py",
             "            return len(mine), -next(iter(mine.values()))[0]",
             "            return len(mine), next(iter(mine.values()))[0]", T_CONN,
             "eviction among equal peers takes the youngest"),
    # ---------------------------------------------------------------- verdict, JUnit (round 3)
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "errors=\"0\", skipped=str(sum(c.status == \"skipped\" for c in cases)))",
             "errors=\"0\", skipped=\"0\")", T_VJA, "suite counts no skipped case"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "cases.append(Case(label, cls, \"skipped\" if v is None else \"pass\" if v else "
             "\"fail\",",
             "cases.append(Case(label, cls, \"pass\" if v is None else \"pass\" if v else "
             "\"fail\",", T_VJA, "a count not comparable shown as passed"),
    Mutation("verdict, JUnit, agreement", "sim/shared/junit.py",
             "        elif c.status == \"skipped\":", "        elif c.status == \"skip\":", T_VJA,
             "skipped cases written without <skipped>"),
    Mutation("verdict, JUnit, agreement", "loadtests/check/verdict.py",
             "    return 1000.0 * float(count) / float(turns)",
             "    return 100.0 * float(count) / float(turns)", T_VJA,
             "hazard rates per 100 turns, not per 1,000"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "        se = lm.get(\"se\")\n", "        se = None\n", T_VJA,
             "the load run's own uncertainty ignored"),
    Mutation("verdict, JUnit, agreement", "sim/shared/agreement.py",
             "var_s = math.fsum((v - m) ** 2 for v in sim_values) / (n - 1)",
             "var_s = math.fsum((v - m) ** 2 for v in sim_values) / n", T_VJA,
             "simulated spread with the ddof-0 variance"),
)


#: index of the first mutation of round 3 (2026-12-03) in :data:`MUTATIONS`
ROUND3 = next(i for i, m in enumerate(MUTATIONS)
              if m.what == "bootstrap se divided by sqrt(resamples)")


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


def run(areas: list[str] | None, match: str | None = None, first: int = 0
        ) -> dict[str, list[tuple[Mutation, bool, float]]]:
    chosen = [m for m in MUTATIONS[first:] if (not areas or m.area in areas)
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
    ap.add_argument("--first", type=int, default=0,
                    help=f"start at this index of the list (e.g. {ROUND3}: round 3 only)")
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
    results = run(args.area, args.match, args.first)
    print("\n| area | planted | caught | score |\n| --- | --- | --- | --- |")
    for area, rows in results.items():
        k = sum(c for _, c, _ in rows)
        print(f"| {area} | {len(rows)} | {k} | {k / len(rows):.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
