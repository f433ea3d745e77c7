"""``check_run(run_dir) -> Verdict``: the Jepsen-style delivery verdict of one load run.

Reads ``RUN_DIR/ledger/*.jsonl`` (LEDGER.md) and ``RUN_DIR/scenario.toml`` (the
Live policy whose attempt limits ``retry-limit`` applies), evaluates every rule of
:mod:`loadtests.check.rules` and writes ``verdict.json`` + ``verdict.txt`` into
the run folder.  Raises :class:`~loadtests.check.ledger.LedgerError` on unusable
input.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.check import rules as R
from loadtests.check.coverage import coverage, read_restarts
from loadtests.check.ledger import Ledgers, read_ledgers
from loadtests.check.verdict import Verdict


def load_policy(run_dir: Path) -> tuple[Any | None, str]:
    """The run's ``RetryPolicy`` from the ``[live]`` table of ``scenario.toml``, or why not.

    Only ``[live]`` is read, so sections this build does not know (added by
    other tools) never hide the policy.
    """
    import tomllib

    from sim.config import ConfigError, build
    from sim.policy.config import LivePolicyConfig
    from sim.policy.decide import RetryPolicy

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


def evaluate(led: Ledgers, policy: Any | None,
             hazard_limits: Mapping[str, float] | None = None,
             policy_problem: str = "no retry policy given",
             restarts: pd.DataFrame | None = None) -> Verdict:
    """Every rule over already-read ledgers."""
    limits = dict(hazard_limits or {})
    p = R.prepare(led)
    seq = R._attempt_sequence(p)
    # the rules without the events ledger first: its parse may still be running
    lost, duplicated, ghost = R.rule_lost(p), R.rule_duplicated(p), R.rule_ghost(p, limits)
    reexecuted, sessions = R.rule_reexecuted(p, limits), R.rule_sessions(p, limits)
    unexpected, incomplete = R.rule_unexpected(p), R.rule_incomplete(p)
    non_retryable = R.rule_non_retryable(p, seq)
    retry_limit = R.rule_retry_limit(p, seq, policy, policy_problem)
    retry_after = R.rule_retry_after(seq, policy, policy_problem)
    echo = R.rule_echo(p)
    results = [lost, duplicated, ghost, reexecuted, sessions, unexpected, incomplete,
               R.rule_ordering(p, led.events), non_retryable, retry_limit, retry_after, echo,
               R.rule_sequence_id(p, led.events), R.rule_continuation_twice(p)]
    stats = _stats(led, p)
    exercised = coverage(p.a, led.chaos, p.w is not None,
                         restarts if restarts is not None else read_restarts(Path("-")),
                         int(stats.get("streams_received_out_of_order") or 0))
    return Verdict(rules=results, stats=stats, coverage=exercised)


def check_run(run_dir: str | Path, hazard_limits: Mapping[str, float] | None = None, *,
              write: bool = True) -> Verdict:
    """The verdict of ``run_dir`` (written to verdict.json / verdict.txt unless ``write=False``)."""
    run = Path(run_dir)
    led = read_ledgers(run)
    policy, problem = load_policy(run)
    verdict = evaluate(led, policy, hazard_limits, problem, read_restarts(run))
    verdict.run_dir = str(run)
    if write:
        verdict.write(run)
    return verdict


__all__ = ["check_run", "evaluate", "load_policy"]
