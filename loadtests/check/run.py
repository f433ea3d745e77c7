"""``check_run(run_dir) -> Verdict``: the one verdict of a load run.

Reads ``RUN_DIR/ledger/*.jsonl`` (docs/ledger.md), ``RUN_DIR/scenario.toml`` (the
Live policy whose attempt limits ``retry-limit`` applies) and what the load run
wrote besides (:mod:`rtalab.loadtests.check.integrity`), evaluates every rule set of
:data:`RULE_SETS` and writes ``verdict.json`` + ``verdict.txt`` into the run
folder.  ``rtalab load run``, ``rtalab load summarize`` and ``rtalab check`` all
call this, so they give the same verdict.  Raises
:class:`~rtalab.loadtests.check.ledger.LedgerError` on unusable input.

Extending the verdict: append a function ``(ctx: Context) -> list[RuleResult]`` to
:data:`RULE_SETS` (more named rules), or set :data:`COVERAGE` to a function
``(ctx: Context) -> list[dict]`` (the verdict's ``coverage`` table).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rtalab.loadtests.check import equivalence as E
from rtalab.loadtests.check import integrity as I
from rtalab.loadtests.check import rules as R
from rtalab.loadtests.check.coverage import coverage, read_restarts, turns_across_restarts
from rtalab.loadtests.check.ledger import Ledgers, read_ledgers
from rtalab.loadtests.check.verdict import RuleResult, Verdict
from rtalab.sim.config import ConfigError, build
from rtalab.sim.policy.config import LivePolicyConfig
from rtalab.sim.policy.decide import RetryPolicy


def load_policy(run_dir: Path) -> tuple[RetryPolicy | None, str]:
    """The run's ``RetryPolicy`` from the ``[live]`` table of ``scenario.toml``, or why not.

    Only ``[live]`` is read, so sections this build does not know (added by
    other tools) never hide the policy.
    """
    path = Path(run_dir) / "scenario.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return RetryPolicy(build(LivePolicyConfig, data.get("live", {}), "live")), ""
    except FileNotFoundError:
        return None, "no scenario.toml: retry policy unknown"
    except (ConfigError, OSError, ValueError) as e:  # TOMLDecodeError is a ValueError
        return None, f"scenario.toml unusable ({e}): retry policy unknown"


def _stats(led: Ledgers, p: R.Prepared) -> dict[str, Any]:
    """Counts that explain the verdict (what was injected, what was absorbed)."""
    a = p.a
    stats: dict[str, Any] = {
        "turns": p.n_turns, "attempts": len(a), "rows": led.rows,
        "client_injected_copies": int(a["inj"].sum()),
        "events": None if led.events is None else len(led.events),
        "witness_executions": None if p.w is None else len(p.w),
    }
    dup_guids = [a.loc[a["inj"], "request_guid"]]
    if led.chaos is not None:
        kinds = led.chaos["kind"].value_counts()
        stats["proxy_injections"] = {str(k): int(v) for k, v in kinds.items()}
        dup_guids.append(led.chaos.loc[led.chaos["kind"].eq("duplicate"), "request_guid"])
    if led.events is not None and len(led.events):
        stats["streams_received_out_of_order"] = len(R.stream_order(led.events, played=False))
    if p.w is not None:
        copies = pd.concat(dup_guids, ignore_index=True).dropna()
        runs = p.w["requestGuid"].dropna().value_counts()
        executed = copies.map(runs).fillna(0).to_numpy()
        se_guids = set(a.loc[R._truthy(a["side_effect"]), "request_guid"].dropna())
        is_se = copies.isin(se_guids).to_numpy()
        stats["duplicates_of_side_effect_requests"] = int(is_se.sum())
        stats["duplicates_absorbed"] = int((is_se & (executed == 1)).sum())
    return stats


@dataclass
class Context:
    """Everything a rule set may read: the ledgers, their joins, the policy, the run's files."""

    led: Ledgers
    p: R.Prepared
    seq: pd.DataFrame
    policy: RetryPolicy | None
    policy_problem: str
    limits: dict[str, float]
    files: I.RunFiles
    extra: dict[str, Any] = field(default_factory=dict)


def delivery_rules(ctx: Context) -> list[RuleResult]:
    """The delivery rules of errors.md (:mod:`rtalab.loadtests.check.rules`), in RULE_NAMES
    order."""
    p, seq, limits, policy, why = ctx.p, ctx.seq, ctx.limits, ctx.policy, ctx.policy_problem
    # the rules without the events ledger first: its parse may still be running
    lost, duplicated, ghost = R.rule_lost(p), R.rule_duplicated(p), R.rule_ghost(p, limits)
    reexecuted, sessions = R.rule_reexecuted(p, limits), R.rule_sessions(p, limits)
    unexpected = R.rule_unexpected(p)
    incomplete = R.rule_incomplete(p, ctx.files.interrupted)
    non_retryable = R.rule_non_retryable(p, seq)
    retry_limit = R.rule_retry_limit(p, seq, policy, why)
    retry_after = R.rule_retry_after(seq, policy, why)
    echo = R.rule_echo(p)
    task_kept = R.rule_task_id_kept(seq, policy)
    return [lost, duplicated, ghost, reexecuted, sessions, unexpected, incomplete,
            R.rule_ordering(p, ctx.led.events), non_retryable, retry_limit, retry_after, echo,
            R.rule_sequence_id(p, ctx.led.events), R.rule_continuation_twice(p),
            R.rule_cross_session(p), task_kept, R.rule_foreign_task(p)]


def _sub_context(led: Ledgers, ctx: Context) -> Context:
    """A Context over part of the run's ledgers (one binding's share), same policy and files."""
    p = R.prepare(led)
    return Context(led=led, p=p, seq=R._attempt_sequence(p), policy=ctx.policy,
                   policy_problem=ctx.policy_problem, limits=ctx.limits, files=ctx.files)


def _indeterminate(ctx: Context) -> np.ndarray:
    """Turns that are not judged: cut off by the stop or open across a restart."""
    out: np.ndarray = R.indeterminate_turns(ctx.p, ctx.files.interrupted) | turns_across_restarts(
        ctx.p.a, ctx.p.n_turns, read_restarts(ctx.files.run_dir))
    return out


def equivalence_rules(ctx: Context) -> list[RuleResult]:
    """``transport-equivalence`` (:mod:`rtalab.loadtests.check.equivalence`): the delivery rules on
    each binding's share, success and latency compared; per-binding figures in
    ``ctx.extra["by_binding"]``."""
    led, p = ctx.led, ctx.p
    names = E.bindings_of(led)
    if len(names) < 2:
        return [E.rule(led, names, {}, {}, pd.DataFrame())[0]]
    a = p.a
    tkey = a["tkey"].to_numpy()
    binding = np.full(p.n_turns, None, dtype=object)
    binding[tkey] = a["binding"].to_numpy()
    call = np.full(p.n_turns, None, dtype=object)
    call[tkey] = a["call_id"].to_numpy()
    wb = None
    if p.w is not None:
        wk = p.w["tkey"].to_numpy(dtype=float)
        wb = np.full(len(wk), None, dtype=object)
        ok = np.isfinite(wk)
        wb[ok] = binding[wk[ok].astype(np.int64)]
    per, turns = {}, {}
    for b in names:
        sub = _sub_context(E.split(led, b, wb), ctx)
        per[b], turns[b] = delivery_rules(sub), sub.p.n_turns
    latency = None
    if led.turns is not None and len(led.turns) and "completion_s" in led.turns:
        keys = a.drop_duplicates(R.TURN_COLS)[[*R.TURN_COLS, "tkey"]]
        t = led.turns.assign(turn_index=pd.to_numeric(led.turns["turn_index"],
                                                      errors="coerce").astype("float64"))
        t = t.merge(keys, on=R.TURN_COLS, how="inner").drop_duplicates("tkey")
        latency = t.set_index("tkey")[["ttfc_s", "completion_s"]]
    frame = E.judged_frame(led, _indeterminate(ctx), p.turns, binding, call, latency)
    result, figures = E.rule(led, names, per, turns, frame)
    ctx.extra["by_binding"] = figures
    return [result]


def integrity_rules(ctx: Context) -> list[RuleResult]:
    """Named run-integrity checks (ledger gathered; server and witness agree)."""
    return [I.rule_ledger_gathered(ctx.files), I.rule_server_agrees(ctx.files, ctx.led.attempts),
            I.rule_witness_agrees(ctx.files, ctx.led.witness)]


def gate_rules(ctx: Context) -> list[RuleResult]:
    """Release gates: auth, availability (without --slo) and one rule per --slo."""
    cut = _indeterminate(ctx)
    return [I.rule_auth(ctx.led.attempts),
            I.rule_availability(ctx.files, ctx.p.turns["outcome"], cut, ctx.led.attempts),
            *I.slo_rules(ctx.files)]


def coverage_table(ctx: Context) -> list[dict[str, Any]]:
    """The verdict's coverage section (:mod:`rtalab.loadtests.check.coverage`)."""
    stats_reordered = 0
    if ctx.led.events is not None and len(ctx.led.events):
        stats_reordered = len(R.stream_order(ctx.led.events, played=False))
    items = coverage(ctx.p.a, ctx.led.chaos, ctx.p.w is not None,
                     read_restarts(ctx.files.run_dir), stats_reordered)
    return [e.to_dict() for e in items]


RuleSet = Callable[[Context], list[RuleResult]]
RULE_SETS: list[RuleSet] = [delivery_rules, equivalence_rules, integrity_rules, gate_rules]
COVERAGE: Callable[[Context], list[dict[str, Any]]] | None = coverage_table


def evaluate(led: Ledgers, policy: Any | None,
             hazard_limits: Mapping[str, float] | None = None,
             policy_problem: str = "no retry policy given",
             files: I.RunFiles | None = None) -> Verdict:
    """Every rule set over already-read ledgers (``files``: what the load run wrote)."""
    p = R.prepare(led)
    files = files or I.RunFiles(run_dir=Path("."))
    ctx = Context(led=led, p=p, seq=R._attempt_sequence(p), policy=policy,
                  policy_problem=policy_problem, limits=dict(hazard_limits or {}), files=files)
    results: list[RuleResult] = []
    for rule_set in RULE_SETS:
        results += rule_set(ctx)
    v = Verdict(rules=results, stats=_stats(led, p), run_status=files.status,
                indeterminate=R.indeterminate(p, files.restarts, files.interrupted),
                warnings=[*I.tls_warnings(files), *R.handoff_warnings(p, led.turns)],
                figures=I.figures(files))
    if ctx.extra.get("by_binding"):
        v.stats["by_binding"] = ctx.extra["by_binding"]
    if COVERAGE is not None:
        v.coverage = COVERAGE(ctx)
    return v


def check_run(run_dir: str | Path, hazard_limits: Mapping[str, float] | None = None, *,
              write: bool = True) -> Verdict:
    """The verdict of ``run_dir`` (written to verdict.json / verdict.txt unless ``write=False``)."""
    run = Path(run_dir)
    files = I.RunFiles.read(run)
    led = read_ledgers(run, witness_since=witness_mark(files))
    policy, problem = load_policy(run)
    verdict = evaluate(led, policy, hazard_limits, problem, files)
    verdict.run_dir = str(run)
    try:
        before = Verdict.read(run)
    except (OSError, ValueError, KeyError, TypeError):  # an unreadable old verdict: replaced
        before = None
    if before is not None:  # measured by the load run, not by the checker: kept
        verdict.overhead = before.overhead
    if write:
        verdict.write(run)
    return verdict


def witness_mark(files: I.RunFiles) -> int:
    """The witness ledger's last id before this run started (``counts.json``
    ``witness_since``): rows up to it belong to earlier runs of a reused witness."""
    return int((files.counts or {}).get("witness_since") or 0)


__all__ = ["COVERAGE", "RULE_SETS", "Context", "check_run", "evaluate", "load_policy"]
