"""The rules of the delivery verdict, vectorised over the ledgers (pandas / numpy).

Keys (docs/ledger.md): a *logical turn* is ``(call_id, turn_index)`` of the attempts /
turns ledgers; an *attempt* is one request the Live layer sent (``request_guid``;
client-injected copies have ``injected != ""``); a witness row is one side-effect
execution.  A witness row belongs to the turn whose attempt carried its
``requestGuid``, else to the turn with its ``interactionId``; a row matching
neither was never sent (rule ``unexpected``).

Every rule returns a :class:`RuleResult`.  Side-effect rules need the witness
ledger: without it they are ``not-checked``, never ``pass``.  Hazards (ghost
successes, re-executions under new requestGuids, duplicate sessions) are rates
per 1,000 logical turns; they fail only above a limit given in ``hazard_limits``.
The definitions are in docs/check.md, one section per rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from rtalab.loadtests.check.ledger import Events, Ledgers
from rtalab.loadtests.check.verdict import (
    FAIL,
    NOT_CHECKED,
    PASS,
    Kind,
    RuleResult,
    Status,
    examples_of,
    per_1k,
)
from rtalab.sim.policy.codes import RETRYABLE_CODES
from rtalab.sim.policy.decide import RetryPolicy
from rtalab.sim.vocab import AttemptOutcome as A
from rtalab.sim.vocab import EndReason, TurnOutcome

TURN_COLS = ["call_id", "turn_index"]
SUCCESS_OUTCOMES = (A.COMPLETED,)
END_OF_RUN = EndReason.END_OF_RUN  # turns.end_reason of a turn cut by the end of the load run
# attempt outcomes that end without a terminal state from the server: judged as timeouts
NO_ANSWER = (A.TIMEOUT, A.RESPONSE_LOST, A.UNFINISHED, A.TOTAL_TIMEOUT)
FAILURE_OUTCOMES = (A.FAILED, A.TIMEOUT, A.TOTAL_TIMEOUT, A.RESPONSE_LOST)
NOT_FAILED = (A.COMPLETED, A.INPUT_REQUIRED, A.CANCELLED)
# attempts.side_effect_reported values by which the server told the caller that the side effect
# ran or may have run (rta/sideEffect, docs/reasoner.md): such a turn is not a ghost
SIDE_EFFECT_TOLD = ("rolled-forward", "unknown")

SECTIONS = {
    "lost": "errors.md §6 (at-least-once delivery)",
    "duplicated": "errors.md §4 (requestGuid replay MUST NOT re-execute), §6",
    "ghost-success": "errors.md §3, §6 (hazard)",
    "turn-re-executed": "errors.md §3, §4 (retry = new requestGuid; hazard)",
    "duplicate-session": "errors.md §4 (contextId scopes a session; hazard)",
    "unexpected": "errors.md §6 (executed but never sent)",
    "incomplete": "errors.md §6 (a terminal state ends every turn)",
    "ordering": "errors.md §6 (consumers MUST reorder by rta/sequenceId)",
    "retried-non-retryable": "errors.md §2, §3 (MUST NOT be retried unmodified)",
    "retry-limit": "errors.md §3 (bounded attempts: RetryPolicy.max_attempts_for)",
    "retry-after": "errors.md §3 (rate-limited: back off at least retryAfterMs)",
    "extension-echo": "errors.md §2 extension-inactive, §5 (A2A-Extensions echo)",
    "sequence-id": "errors.md §6 (ordering only via rta/sequenceId)",
    "continuation-answered-twice": "errors.md §4, docs/decisions.md D2 (one continuation per "
                                   "INPUT_REQUIRED pause executes; its copies replay it)",
    "cross-session-answer": "errors.md §4 (contextId scopes a session: replay detection "
                            "never crosses contexts)",
    "task-id-kept": "errors.md §3 (a retry after a timeout keeps the known taskId)",
    "foreign-task-answer": "errors.md §4 (a replay answers the same request only); A2A §3.1.1 "
                           "(a new turn is a new task)",
}
HAZARDS = ("ghost-success", "turn-re-executed", "duplicate-session")
RULE_NAMES = tuple(SECTIONS)


def _result(name: str, status: Status, count: int = 0, examples: tuple[str, ...] = (),
            detail: str = "", rate: float | None = None) -> RuleResult:
    """A RuleResult with the rule's section and kind."""
    kind: Kind = "hazard" if name in HAZARDS else "violation"
    return RuleResult(name=name, section=SECTIONS[name], kind=kind, status=status,
                      count=int(count), examples=examples, detail=detail,
                      rate_per_1k_turns=rate)


def _violation(name: str, count: int, examples: tuple[str, ...], detail: str,
               rate: float | None = None) -> RuleResult:
    """pass when ``count`` is 0, else fail."""
    return _result(name, FAIL if count else PASS, count, examples, detail, rate)


def _not_checked(name: str, why: str) -> RuleResult:
    """A rule that could not be judged, and why."""
    return _result(name, NOT_CHECKED, detail=why)


def _truthy(s: pd.Series) -> pd.Series:
    """True where a nullable bool column is True (null = False)."""
    if s.dtype == bool:
        return s
    return s.fillna(False).astype(bool)


@dataclass
class Prepared:
    """The ledgers with the join keys the rules share."""

    a: pd.DataFrame            # attempts, + tkey, inj
    turns: pd.DataFrame        # one row per logical turn (index tkey): side_effect, told, outcome
    w: pd.DataFrame | None     # witness, + tkey (NaN: unmatched)
    n_turns: int
    keys: pd.DataFrame         # (call_id, turn_index) rows the turn codes were made from
    first: np.ndarray          # tkey -> a row of ``keys``


def _first_rows(codes: np.ndarray, n: int) -> np.ndarray:
    """Index of the first row of each turn code (labels are built only for examples)."""
    first = np.full(n, -1, dtype=np.int64)
    uniq, idx = np.unique(codes, return_index=True)  # idx: first occurrence of each code
    first[uniq] = idx
    return first


def prepare(led: Ledgers) -> Prepared:
    """Join keys: logical turn of every attempt, turn row and witness row."""
    a = led.attempts.copy(deep=False)  # columns are replaced, never written into
    a["turn_index"] = pd.to_numeric(a["turn_index"], errors="coerce").astype("float64")
    a["inj"] = a["injected"].fillna("").astype(str).ne("").to_numpy()
    t = led.turns
    frames = [a[TURN_COLS]]
    if t is not None:
        t = t.copy(deep=False)
        t["turn_index"] = pd.to_numeric(t["turn_index"], errors="coerce").astype("float64")
        frames.append(t[TURN_COLS])
    keys = pd.concat(frames, ignore_index=True)
    codes = keys.groupby(TURN_COLS, sort=False, dropna=False).ngroup().to_numpy()
    n = int(codes.max()) + 1 if len(codes) else 0
    a["tkey"] = codes[:len(a)]

    # per-turn facts: side effect (any attempt or the turn row says so), what the caller was told
    se = np.zeros(n, dtype=bool)
    np.logical_or.at(se, a["tkey"].to_numpy(), _truthy(a["side_effect"]).to_numpy())
    told = np.full(n, "none", dtype=object)
    outcome = np.full(n, None, dtype=object)
    end_of_run = np.zeros(n, dtype=bool)
    if t is not None:
        tk = codes[len(a):]
        t["tkey"] = tk
        np.logical_or.at(se, tk, _truthy(t["side_effect"]).to_numpy())
        told[tk] = t["told_caller"].fillna("none").to_numpy()
        outcome[tk] = t["outcome"].to_numpy()
        cut = t["outcome"].eq(TurnOutcome.UNFINISHED) & t["end_reason"].eq(END_OF_RUN)
        end_of_run[tk[cut.to_numpy()]] = True
    else:
        real = a[~a["inj"]]
        ok = real.loc[real["outcome"].isin(SUCCESS_OUTCOMES), "tkey"].unique()
        last = real.sort_values("send_s", kind="stable").groupby("tkey")["outcome"].last()
        told[last.index[last.isin(FAILURE_OUTCOMES).to_numpy()]] = "failure"
        outcome[last.index] = last.to_numpy()
        told[ok] = "success"
        outcome[ok] = "completed"
    reported = np.zeros(n, dtype=bool)  # the server said the side effect ran or may have
    told_ran = a["side_effect_reported"].isin(SIDE_EFFECT_TOLD).to_numpy()
    np.logical_or.at(reported, a["tkey"].to_numpy()[told_ran], True)
    # degraded turns (core A2A after a failed negotiation: no rta/* metadata, so no
    # requestGuid, interactionId or sideEffect reaches the server): every attempt inactive
    active = np.zeros(n, dtype=bool)
    np.logical_or.at(active, a["tkey"].to_numpy(), ~a["active"].eq(False).to_numpy())
    turns = pd.DataFrame({"side_effect": se, "told": told, "outcome": outcome,
                          "end_of_run": end_of_run, "reported": reported,
                          "degraded": ~active})
    n_turns = n

    w = None
    if led.witness is not None:
        w = led.witness.copy()
        g2k = a.drop_duplicates("request_guid").set_index("request_guid")["tkey"]
        g2k = g2k[g2k.index.notna()]
        wkey = w["requestGuid"].map(g2k)
        inter = [a[["interaction_id", "tkey"]]]
        if t is not None:
            inter.append(t[["interaction_id", "tkey"]])
        i2k = (pd.concat(inter).dropna(subset=["interaction_id"])
               .drop_duplicates("interaction_id").set_index("interaction_id")["tkey"])
        missing = wkey.isna()
        if missing.any():
            wkey[missing] = w.loc[missing, "interactionId"].map(i2k)
        w["tkey"] = wkey
        # an execution without any of the profile's ids, in the context of a degraded call:
        # it cannot be attributed to a turn (reported, neither unexpected nor lost)
        inactive_ctx = set(a.loc[a["active"].eq(False).to_numpy(), "context_id"].dropna()) | set(
            a.loc[a["active"].eq(False).to_numpy(), "context_id_learned"].dropna())
        w["degraded"] = (wkey.isna() & w["requestGuid"].isna() & w["interactionId"].isna()
                         & w["contextId"].isin(inactive_ctx)).to_numpy()
    return Prepared(a=a, turns=turns, w=w, n_turns=n_turns, keys=keys,
                    first=_first_rows(codes, n))


def _labels(p: Prepared, tkeys: np.ndarray | pd.Index) -> tuple[str, ...]:
    """Example turn labels for some turn keys."""
    rows = p.keys.iloc[p.first[np.asarray(tkeys[:5], dtype=np.int64)]]
    return examples_of(f"{c}#{'' if t != t else int(t)}"
                       for c, t in zip(rows["call_id"], rows["turn_index"], strict=True))


def _executions(p: Prepared) -> np.ndarray:
    """Side-effect executions per turn key (witness rows matched to a turn)."""
    assert p.w is not None
    ex = np.zeros(p.n_turns, dtype=np.int64)
    k = p.w["tkey"].dropna().to_numpy(dtype=np.int64)
    np.add.at(ex, k, 1)
    return ex


NO_WITNESS = "no witness ledger (ledger/witness.jsonl): side effects not observable"


def rule_lost(p: Prepared) -> RuleResult:
    """Side-effect turns the caller was told COMPLETED whose side effect never executed."""
    if p.w is None:
        return _not_checked("lost", NO_WITNESS)
    degraded = p.turns["degraded"].to_numpy()
    acked = (p.turns["told"].to_numpy() == "success") & p.turns["side_effect"].to_numpy()
    lost = np.flatnonzero(acked & ~degraded & (_executions(p) == 0))
    return _violation("lost", len(lost), _labels(p, lost),
                      f"{int((acked & ~degraded).sum())} side-effect turns acknowledged "
                      f"COMPLETED, {len(lost)} with no execution in the witness ledger"
                      + (f"; {int((acked & degraded).sum())} degraded (no rta/* metadata: "
                         "the server decides side effects) not judged"
                         if (acked & degraded).any() else ""),
                      per_1k(len(lost), p.n_turns))


def rule_duplicated(p: Prepared) -> RuleResult:
    """One requestGuid whose side effect executed more than once."""
    if p.w is None:
        return _not_checked("duplicated", NO_WITNESS)
    vc = p.w["requestGuid"].dropna().value_counts()
    dup = vc[vc > 1]
    extra = int((dup - 1).sum())
    return _violation("duplicated", extra, examples_of(dup.index[:5]),
                      f"{len(dup)} requestGuids executed more than once ({extra} extra "
                      f"executions of {int(vc.sum())})", per_1k(extra, p.n_turns))


def _hazard(name: str, count: int, examples: tuple[str, ...], detail: str, n_turns: int,
            limits: Mapping[str, float]) -> RuleResult:
    """A hazard rate: fails only above its limit (if any)."""
    rate = per_1k(count, n_turns)
    limit = limits.get(name)
    if limit is None:
        return _result(name, PASS, count, examples, detail + " (hazard: no limit set)", rate)
    over = rate is not None and rate > limit
    return _result(name, FAIL if over else PASS, count, examples,
                   detail + f" (limit {limit:g}/1k turns)", rate)


def rule_ghost(p: Prepared, limits: Mapping[str, float]) -> RuleResult:
    """Turns whose side effect executed while the caller was told the turn failed or was
    cancelled, and the server never said the side effect ran or may have run."""
    if p.w is None:
        return _not_checked("ghost-success", NO_WITNESS)
    t = p.turns
    untold = ((t["told"].to_numpy() == "failure") | (t["outcome"].to_numpy() == "cancelled")) \
        & (_executions(p) > 0)
    reported = t["reported"].to_numpy()
    ghost = np.flatnonzero(untold & ~reported)
    cancelled = int((untold & ~reported & (t["outcome"].to_numpy() == "cancelled")).sum())
    return _hazard("ghost-success", len(ghost), _labels(p, ghost),
                   f"{len(ghost)} turns executed but told failed or cancelled ({cancelled} "
                   f"cancelled); {int((untold & reported).sum())} more were told by "
                   "rta/sideEffect that it ran or may have run (not counted)", p.n_turns,
                   limits)


def rule_reexecuted(p: Prepared, limits: Mapping[str, float]) -> RuleResult:
    """Logical turns whose side effect executed under more than one requestGuid."""
    if p.w is None:
        return _not_checked("turn-re-executed", NO_WITNESS)
    w = p.w.dropna(subset=["tkey", "requestGuid"])
    nu = w.groupby("tkey")["requestGuid"].nunique()
    multi = nu.index[nu.to_numpy() > 1].to_numpy(dtype=np.int64)
    return _hazard("turn-re-executed", len(multi), _labels(p, multi),
                   f"{len(multi)} turns executed under several requestGuids", p.n_turns, limits)


def _several_values(keys: pd.Series, values: pd.Series) -> pd.Index:
    """Keys (sorted) seen with more than one distinct value; rows with a null key or value
    are ignored (as ``dropna().groupby(keys)[values].nunique() > 1``, by integer codes)."""
    k, kn = pd.factorize(keys, sort=True)
    v, vn = pd.factorize(values)
    ok = (k >= 0) & (v >= 0)
    pairs = np.unique(k[ok].astype(np.int64) * (len(vn) + 1) + v[ok])
    per_key = np.bincount(pairs // (len(vn) + 1), minlength=len(kn))
    return cast("pd.Index", pd.Index(kn[per_key > 1]))


def rule_sessions(p: Prepared, limits: Mapping[str, float]) -> RuleResult:
    """Calls that opened more than one server-side session (contextId)."""
    a = p.a
    ctx = a["context_id_learned"].fillna(a["context_id"])
    pairs = [pd.DataFrame({"call": a["call_id"].to_numpy(), "ctx": ctx.to_numpy()})]
    if p.w is not None:
        w = p.w.dropna(subset=["tkey"])
        call_of_turn = p.a.drop_duplicates("tkey").set_index("tkey")["call_id"]
        pairs.append(pd.DataFrame({"call": w["tkey"].map(call_of_turn).to_numpy(),
                                   "ctx": w["contextId"].to_numpy()}))
    both = pd.concat(pairs, ignore_index=True)
    multi = _several_values(both["call"], both["ctx"])
    return _hazard("duplicate-session", len(multi), examples_of(multi[:5]),
                   f"{len(multi)} calls with more than one contextId", p.n_turns, limits)


def rule_unexpected(p: Prepared) -> RuleResult:
    """Witness executions no attempt of the ledger ever asked for."""
    if p.w is None:
        return _not_checked("unexpected", NO_WITNESS)
    unmatched = p.w["tkey"].isna().to_numpy()
    degraded = p.w["degraded"].to_numpy()
    un = p.w[unmatched & ~degraded]
    ids = un["requestGuid"].fillna(un["id"].astype(str))
    return _violation("unexpected", len(un), examples_of(ids[:5]),
                      f"{len(un)} of {len(p.w)} executions match no sent requestGuid or "
                      "interactionId" + (f"; {int((unmatched & degraded).sum())} without any "
                                         "profile id in a degraded call's context (not judged)"
                                         if (unmatched & degraded).any() else ""))


def rule_incomplete(p: Prepared, interrupted: bool = False) -> RuleResult:
    """Logical turns without a terminal outcome.

    A turn still in flight when the load run stopped (turn row ``outcome``
    ``unfinished`` with ``end_reason`` ``end-of-run``) is indeterminate, as in
    Jepsen: reported, not counted; so is every open turn of a run stopped by a
    signal (``interrupted``).  Every other turn without a terminal outcome
    — ``unfinished`` for another reason, or attempts without any turn row (a
    lost ledger row) — fails.
    """
    out = p.turns["outcome"].to_numpy()
    open_ = pd.isna(out) | (out == A.UNFINISHED)
    cut = indeterminate_turns(p, interrupted)
    bad = np.flatnonzero(open_ & ~cut)
    return _violation("incomplete", len(bad), _labels(p, bad),
                      f"{len(bad)} of {p.n_turns} turns never reached a terminal state; "
                      f"{int(cut.sum())} in flight when the run stopped (indeterminate, "
                      "not counted)", per_1k(len(bad), p.n_turns))


def indeterminate_turns(p: Prepared, interrupted: bool = False) -> np.ndarray:
    """Turns still in flight when the run stopped (by its end, or by a signal): their
    outcome is unknown, never a violation."""
    cut = p.turns["end_of_run"].to_numpy()
    if interrupted:
        out = p.turns["outcome"].to_numpy()
        cut = cut | pd.isna(out) | (out == A.UNFINISHED)
    return cut


def _decreasing(keys: np.ndarray, order_by: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Rows (in the given order) whose seq is below the max seen before in the same key."""
    idx = np.lexsort((order_by, keys))
    k, s = keys[idx], seq[idx]
    cm = pd.Series(s).groupby(k).cummax().to_numpy()
    prev = np.empty_like(cm)
    prev[0:1] = np.inf
    prev[1:] = cm[:-1]
    new_group = np.ones(len(k), dtype=bool)
    new_group[1:] = k[1:] != k[:-1]
    prev[new_group] = -np.inf
    bad = np.zeros(len(k), dtype=bool)
    bad[idx] = s < prev
    return bad


def stream_order(events: Events, played: bool) -> np.ndarray:
    """Codes of the streams whose events went backwards in sequenceId (play or receive order)."""
    f = events.frame
    order = f["played_index" if played else "recv_s"].to_numpy()
    seq = f["sequence_id"].to_numpy()
    stream = f["stream"].to_numpy()
    keep = ~np.isnan(seq) & ~np.isnan(order) & (stream >= 0)
    if not keep.any():
        return np.empty(0, dtype=np.int64)
    bad = _decreasing(stream[keep], order[keep], seq[keep])
    return np.unique(stream[keep][bad])


def rule_ordering(p: Prepared, events: Events | None) -> RuleResult:
    """Streams whose chunks were handed to playback out of rta/sequenceId order."""
    guids: set[str] = set()
    source = []
    if events is not None and events.frame["played_index"].notna().any():
        bad = stream_order(events, played=True)
        guids |= {str(n).split("#")[0] for n in events.names[bad]}
        source.append("events.played_index")
    ov = p.a["order_violations"]
    if ov.notna().any():
        flagged = p.a.loc[ov.fillna(0).to_numpy() > 0, "request_guid"]
        guids |= set(flagged.dropna().astype(str))
        source.append("attempts.order_violations")
    if not source:
        return _not_checked("ordering", "no played_index in events and no order_violations")
    ex = examples_of(sorted(guids)[:5])
    return _violation("ordering", len(guids), ex,
                      f"{len(guids)} streams played out of sequenceId order "
                      f"(from {', '.join(source)})")


def _attempt_sequence(p: Prepared) -> pd.DataFrame:
    """Non-injected attempts ordered per (turn, phase) with ordinal and has_next."""
    a = p.a.loc[~p.a["inj"], ["tkey", "phase", "send_s", "end_s", "request_guid",
                               "error_code", "retry_after_ms", "outcome", "decision",
                               "context_id", "task_id", "task_id_learned"]]
    phase = pd.factorize(a["phase"].fillna(""))[0]
    send = a["send_s"].to_numpy(dtype=np.float64)
    order = np.lexsort((np.nan_to_num(send, nan=np.inf), phase, a["tkey"].to_numpy()))
    a = a.iloc[order]
    g = a["tkey"].to_numpy() * 8 + phase[order]
    same_next = np.zeros(len(a), dtype=bool)
    same_next[:-1] = g[1:] == g[:-1]
    ctx = a["context_id"].fillna("").to_numpy()
    same_ctx = np.zeros(len(a), dtype=bool)
    same_ctx[:-1] = ctx[1:] == ctx[:-1]
    task = a["task_id"].fillna(a["task_id_learned"]).to_numpy(dtype=object)
    next_task = np.full(len(a), None, dtype=object)
    next_task[:-1] = a["task_id"].to_numpy(dtype=object)[1:]
    next_send = np.full(len(a), np.nan)
    next_send[:-1] = a["send_s"].to_numpy(dtype=np.float64)[1:]
    next_send[~same_next] = np.nan
    out = a.assign(has_next=same_next, next_same_context=same_next & same_ctx,
                   next_send_s=next_send, known_task=task, next_task_id=next_task)
    out["ordinal"] = out.groupby(g, sort=False).cumcount().to_numpy() + 1
    return out


def rule_non_retryable(p: Prepared, seq: pd.DataFrame) -> RuleResult:
    """Attempts failed with a non-retryable code that the Live layer retried unmodified.

    Judged from what was actually sent next in the same turn and phase (the ledger's
    next attempt), never from the client's own ``decision`` column.  A resend in
    another session (a new contextId: "start a new session" after
    ``session-not-found``) is a modified request and allowed.
    """
    code = seq["error_code"]
    nonretry = code.notna() & ~code.isin(RETRYABLE_CODES) & ~seq["outcome"].isin(NO_ANSWER)
    bad = seq[nonretry & seq["next_same_context"]]
    codes = bad["error_code"].value_counts()
    detail = (f"{len(bad)} of {int(nonretry.sum())} non-retryable failures were retried"
              + (f" ({', '.join(f'{c}: {n}' for c, n in codes.items())})" if len(codes) else ""))
    return _violation("retried-non-retryable", len(bad), examples_of(bad["request_guid"][:5]),
                      detail)


def rule_retry_limit(p: Prepared, seq: pd.DataFrame, policy: RetryPolicy | None,
                     why: str = "") -> RuleResult:
    """Retries beyond ``RetryPolicy.max_attempts_for`` of the code that failed."""
    if policy is None:
        return _not_checked("retry-limit", why or "retry policy unknown")
    limit_of = {c: policy.max_attempts_for(c) for c in RETRYABLE_CODES}
    timeout_limit = policy.max_attempts_for("upstream-timeout", timeout=True)
    code = seq["error_code"]
    # no answer (timeout, response-lost, total-timeout, cut off): the timeout limit, whatever
    # code the client wrote (the Live layer decides these as upstream-timeout, timeout=True)
    timeout_like = seq["outcome"].isin(NO_ANSWER) | (code.isna()
                                                       & ~seq["outcome"].isin(NOT_FAILED))
    limit = code.map(limit_of).astype("float64")
    limit = limit.where(~timeout_like, float(timeout_limit))
    judged = seq["has_next"] & limit.notna()
    bad = seq[judged & (seq["ordinal"] >= limit)]
    return _violation("retry-limit", len(bad), examples_of(bad["request_guid"][:5]),
                      f"{len(bad)} retries beyond the policy's attempt limit "
                      f"({int(judged.sum())} retries judged)")


RETRY_AFTER_SLACK_S = 0.001  # clock granularity of the ledger's unix times


def rule_retry_after(seq: pd.DataFrame, policy: RetryPolicy | None, why: str = "") -> RuleResult:
    """Retries of a ``rate-limited`` failure sent before its ``retryAfterMs`` hint elapsed."""
    if policy is None:
        return _not_checked("retry-after", why or "retry policy unknown")
    if not policy.cfg.retry.honour_retry_after:
        return _not_checked("retry-after", "the run's policy does not honour retryAfterMs "
                                           "(live.retry.honour_retry_after = false)")
    hinted = (seq["error_code"].eq("rate-limited") & seq["retry_after_ms"].notna()
              & seq["end_s"].notna() & seq["has_next"])
    wait = seq["next_send_s"] - seq["end_s"]
    bad = seq[hinted & (wait < seq["retry_after_ms"] / 1000.0 - RETRY_AFTER_SLACK_S)]
    return _violation("retry-after", len(bad), examples_of(bad["request_guid"][:5]),
                      f"{len(bad)} of {int(hinted.sum())} retries after rate-limited came "
                      "before retryAfterMs")


def rule_echo(p: Prepared) -> RuleResult:
    """Attempts answered with stream events but without the A2A-Extensions echo."""
    echo = p.a["echo"]
    if echo.isna().all():
        return _not_checked("extension-echo", "no echo column in the attempts ledger")
    http = pd.to_numeric(p.a["http_status"], errors="coerce")
    accepted = (http.isna() | http.between(200, 299) | http.eq(101)).to_numpy()
    # a refused request (401, 429, a refused upgrade ...) carries no echo by design
    answered = (p.a["events"].fillna(0).to_numpy() > 0) & accepted
    bad = p.a[answered & echo.eq(False).to_numpy()]
    return _violation("extension-echo", len(bad), examples_of(bad["request_guid"][:5]),
                      f"{len(bad)} of {int(answered.sum())} answered attempts lacked the echo")


def rule_continuation_twice(p: Prepared) -> RuleResult:
    """INPUT_REQUIRED pauses whose continuation executed twice: a ``continuation-dup`` copy
    (sent at the same time as the continuation, with its own requestGuid) and the
    continuation it copied both ran their side effect."""
    if p.w is None:
        return _not_checked("continuation-answered-twice", NO_WITNESS)
    a = p.a
    cont = a["phase"].eq("continuation").to_numpy()
    # a copy without taskId (the continuation was retried after FAILED: a new task) is a
    # new request, not a continuation of the pause
    copy = (cont & a["injected"].eq("continuation-dup").to_numpy()
            & a["task_id"].notna().to_numpy())
    executed = a["request_guid"].isin(set(p.w["requestGuid"].dropna())).to_numpy()
    pair = ["tkey", "attempt"]
    copies = a.loc[copy & executed, [*pair, "request_guid"]]
    mains = a.loc[cont & ~a["inj"].to_numpy() & executed, pair].drop_duplicates()
    both = copies.merge(mains, on=pair)
    n_checked = int(copy.sum())
    return _violation("continuation-answered-twice", len(both),
                      examples_of(both["request_guid"][:5]),
                      f"{len(both)} of {n_checked} continuation copies executed beside the "
                      "continuation they copied", per_1k(len(both), p.n_turns))


def rule_cross_session(p: Prepared) -> RuleResult:
    """Attempts answered with events of *another call's* session (a contextId that another
    call of the run sent): the server replayed or joined someone else's turn (e.g. dedup
    by turnId alone, when turnIds repeat across calls).  A server that answers in a
    context of its own making is not judged here (``duplicate-session`` counts that)."""
    a = p.a
    sent, got = a["context_id"], a["context_id_learned"]
    owner = (pd.DataFrame({"ctx": sent, "call": a["call_id"]}).dropna()
             .drop_duplicates("ctx").set_index("ctx")["call"])
    got_owner = got.map(owner)
    judged = got.notna()
    bad = a[judged & got_owner.notna() & got_owner.ne(a["call_id"])]
    return _violation("cross-session-answer", len(bad), examples_of(bad["request_guid"][:5]),
                      f"{len(bad)} of {int(judged.sum())} answered attempts carried another "
                      "call's contextId", per_1k(len(bad), p.n_turns))


def rule_foreign_task(p: Prepared) -> RuleResult:
    """Attempts answered with a taskId that attempts of *another logical turn* were answered
    with: the server replayed or joined someone else's stored turn (another call's, another
    principal's, or an earlier turn of the same call).  Unlike ``cross-session-answer`` it
    holds when the server rewrites the contextIds of what it replays, and it needs no side
    effect: the task is the identity of what was executed.  Retries, copies and the
    continuation of one turn share its task legitimately and are never judged."""
    a = p.a
    if "task_id_answered" not in a or not a["task_id_answered"].notna().any():
        return _not_checked("foreign-task-answer", "no attempts.task_id_answered (a ledger "
                                                   "written before rtalab recorded it)")
    seen = a.loc[a["task_id_answered"].notna(), ["task_id_answered", "tkey", "call_id",
                                                 "send_s", "request_guid"]]
    turns_per_task = seen.groupby("task_id_answered")["tkey"].nunique()
    shared = turns_per_task.index[turns_per_task.to_numpy() > 1]
    if not len(shared):
        return _violation("foreign-task-answer", 0, (), f"0 of {len(turns_per_task)} answered "
                          "taskIds were answered to more than one turn")
    # the turn that was answered with the task first owns it; the others were given it
    hit = seen[seen["task_id_answered"].isin(shared)].sort_values("send_s", kind="stable")
    owner = hit.drop_duplicates("task_id_answered").set_index("task_id_answered")["tkey"]
    bad = hit[hit["tkey"].to_numpy() != hit["task_id_answered"].map(owner).to_numpy()]
    owner_call = hit.drop_duplicates("task_id_answered").set_index("task_id_answered")["call_id"]
    other_call = int((bad["call_id"].to_numpy()
                      != bad["task_id_answered"].map(owner_call).to_numpy()).sum())
    return _violation("foreign-task-answer", len(bad), examples_of(bad["request_guid"][:5]),
                      f"{len(bad)} attempts were answered with the taskId of another turn "
                      f"({other_call} of another call); {len(shared)} taskIds shared",
                      per_1k(len(bad), p.n_turns))


def rule_sequence_id(p: Prepared, events: Events | None) -> RuleResult:
    """Stream events after the Task that carry no rta/sequenceId."""
    if events is not None and len(events):
        f = events.frame
        counted = ~f["task"].to_numpy()
        bad = counted & np.isnan(f["sequence_id"].to_numpy())
        codes = f["stream"].to_numpy()[bad][:50]
        return _violation("sequence-id", int(bad.sum()),
                          examples_of(events.names[codes[codes >= 0]]),
                          f"{int(bad.sum())} of {int(counted.sum())} events without sequenceId")
    col = p.a["events_without_seq"]
    if col.notna().any():
        flagged = p.a[col.fillna(0).to_numpy() > 0]
        n = int(col.fillna(0).sum())
        return _violation("sequence-id", n, examples_of(flagged["request_guid"][:5]),
                          f"{n} events without sequenceId (attempts.events_without_seq)")
    return _not_checked("sequence-id", "no events ledger and no events_without_seq")


def rule_task_id_kept(seq: pd.DataFrame, policy: RetryPolicy | None = None) -> RuleResult:
    """Retries after a timeout or a lost response (no FAILED state) of a request whose task
    was known that were sent without that taskId (errors.md §3: keep it; the Reasoner joins
    the running task instead of starting the turn again).  Not checked when the run's policy
    cancels the task on a timeout (``live.cancel_on_timeout``: the retry is a new task)."""
    if policy is not None and policy.cfg.cancel_on_timeout:
        return _not_checked("task-id-kept", "live.cancel_on_timeout = true: a retry after a "
                                            "timeout starts a new task")
    known = pd.Series(seq["known_task"].to_numpy(), index=seq.index)
    judged = seq["outcome"].isin(NO_ANSWER) & seq["has_next"] & known.notna()
    nxt = pd.Series(seq["next_task_id"].to_numpy(), index=seq.index)
    bad = seq[judged & nxt.ne(known)]
    return _violation("task-id-kept", len(bad), examples_of(bad["request_guid"][:5]),
                      f"{len(bad)} of {int(judged.sum())} retries after a timeout dropped or "
                      "changed the known taskId")


# ------------------------------------------------------------------------------ indeterminate

INDETERMINATE = {
    "cut-off-by-stop": "executions whose request was still open when the run stopped",
    "in-flight-at-restart": "executions whose request was open while the server restarted",
    "ghost-success": "executions of turns the caller was told failed (hazard ghost-success)",
    "slow-success": "executions whose request's own answer never came (timed out, lost or "
                    "cancelled), the side effect ran anyway",
}


def indeterminate(p: Prepared, restarts: list[float], interrupted: bool = False
                  ) -> dict[str, dict[str, object]]:
    """Executions whose request never completed, classified; and turns in flight at the stop."""
    cut = indeterminate_turns(p, interrupted)
    key = "turns-in-flight-at-interrupt" if interrupted else "turns-cut-off-by-stop"
    out: dict[str, dict[str, object]] = {key: {
        "count": int(cut.sum()), "examples": list(_labels(p, np.flatnonzero(cut))),
        "detail": "turns still open when the run stopped (outcome unknown)"}}
    if p.w is None:
        return out
    a = p.a
    # completed as far as the caller knows: a real (not client-injected) attempt completed
    done = set(a.loc[~a["inj"] & a["outcome"].isin((*SUCCESS_OUTCOMES, A.INPUT_REQUIRED)),
                     "request_guid"].dropna())
    main = a.sort_values("inj", kind="stable").drop_duplicates("request_guid")
    main = main.set_index("request_guid")
    w = p.w[p.w["requestGuid"].notna() & p.w["requestGuid"].isin(main.index)
            & ~p.w["requestGuid"].isin(done)]
    guids = w["requestGuid"].to_numpy()
    att = main.loc[guids]
    told = p.turns["told"].to_numpy()[att["tkey"].to_numpy(dtype=np.int64)]
    send = att["send_s"].to_numpy(dtype=np.float64)
    end = np.nan_to_num(att["end_s"].to_numpy(dtype=np.float64), nan=np.inf)
    at_restart = np.zeros(len(att), dtype=bool)
    for r in restarts:
        at_restart |= (send <= r) & (r <= end)
    cls = np.where(att["outcome"].eq(A.UNFINISHED).to_numpy()
                   | cut[att["tkey"].to_numpy(dtype=np.int64)], "cut-off-by-stop",
                   np.where(at_restart, "in-flight-at-restart",
                            np.where(told == "failure", "ghost-success", "slow-success")))
    for name, detail in INDETERMINATE.items():
        sel = cls == name
        out[name] = {"count": int(sel.sum()), "examples": list(examples_of(guids[sel][:5])),
                     "detail": detail}
    return out


def handoff_warnings(p: Prepared, turns: pd.DataFrame | None) -> list[str]:
    """A warning when handoff turns were answered without INPUT_REQUIRED (the server never
    asked for input: nothing to judge about continuations, never a loss)."""
    if turns is None or turns["input_required"].isna().all():
        return []
    h = _truthy(turns["handoff"])
    never = h & turns["input_required"].eq(False) & turns["outcome"].eq("completed")
    if not never.any():
        return []
    return [f"{int(never.sum())} of {int(h.sum())} handoff turns were answered COMPLETED "
            "without INPUT_REQUIRED: the server never asked for input (its continuation "
            "and side effect were not sent; handoff not exercised)"]
