"""What a run exercised: one count per class of delivery bug, so a PASS says what it proved.

A rule that passed on a workload that never provoked its bug proves nothing.
Each class below is counted from the ledgers as the number of times this run
gave a Reasoner the chance to get it wrong *where the verdict could see it*.
The dedup classes count only requests with a side effect, because a broken
dedup shows only in the witness ledger: without a witness they are "not
observable", never "exercised".  A class counted 0 is "not exercised".

========================  ==================================================================
class                     counted
========================  ==================================================================
duplicate-while-running   copies of a side-effect request (same requestGuid: client-injected
                          ``concurrent``/``resend`` copies, proxy duplicates) sent while the
                          original was still in flight
duplicate-before-original such copies sent BEFORE their original (``concurrent`` copies sent
                          first, ``load.concurrent_first_share``; proxy duplicates sent first)
resend-after-completion   such copies sent after the original's answer ended, with no
                          restart in between; the longest gap is the dedup window the run
                          demanded of the server (``min_dedup_window_s``)
(any of these)            a copy sent while the server was down (during a restart) reached
                          no Reasoner: it counts in no class
resend-across-restart     such copies whose original was sent before a restart and the copy
                          after it (``ledger/restarts.jsonl``)
turn-id-reused            side-effect turns whose ``turnId`` another call used too
                          (``load.turn_ids = "per_call"``: across contexts and principals)
continuation-twice        second continuations of an INPUT_REQUIRED side-effect turn
                          (``load.continuation_duplicate_share``)
reordering                streams whose events arrived out of ``sequenceId`` order
outage                    requests or connections held, swallowed or refused in an outage
                          window of the chaos proxy
restart                   restarts of the Reasoner while the load ran
non-retryable             attempts answered FAILED with a non-retryable code
rate-limited              attempts answered FAILED ``rate-limited``
========================  ==================================================================
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from rtalab.sim.policy.codes import RETRYABLE_CODES
from rtalab.sim.vocab import AttemptOutcome as A

CoverageStatus = Literal["exercised", "not exercised", "not observable"]
CLASSES = {
    "duplicate-while-running": "duplicate while the original runs",
    "duplicate-before-original": "duplicate before its original",
    "resend-after-completion": "resend after completion",
    "resend-across-restart": "resend across a restart",
    "turn-id-reused": "turnId reused across contexts/principals",
    "continuation-twice": "continuation answered twice",
    "reordering": "reordering",
    "outage": "outage",
    "restart": "restart",
    "non-retryable": "non-retryable codes",
    "rate-limited": "rate limiting",
}
OUTAGE_KINDS = ("blackhole", "swallowed", "refused")


@dataclass(frozen=True)
class Exercise:
    """How often one class of bug was exercised."""

    name: str
    title: str
    count: int
    status: CoverageStatus
    detail: str = ""
    # resend-after-completion only: the longest time after an original's end that a copy
    # of it was sent (the dedup window a server needs to pass this run), seconds
    min_dedup_window_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``min_dedup_window_s`` only where it applies)."""
        d = asdict(self)
        if d["min_dedup_window_s"] is None:
            del d["min_dedup_window_s"]
        return d


def _exercise(name: str, count: int, detail: str, observable: bool = True,
              window_s: float | None = None) -> Exercise:
    status: CoverageStatus = ("not observable" if not observable
                              else "exercised" if count else "not exercised")
    return Exercise(name, CLASSES[name], int(count) if observable else 0, status, detail,
                    window_s if observable and count else None)


def read_restarts(run_dir: Path) -> pd.DataFrame:
    """``ledger/restarts.jsonl`` (start_unix, end_unix per restart); empty if none."""
    path = run_dir / "ledger" / "restarts.jsonl"
    rows = []
    if path.exists():
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    return pd.DataFrame(rows, columns=["start_unix", "end_unix"]).astype("float64")


def _spans_restart(before: np.ndarray, after: np.ndarray, restarts: pd.DataFrame) -> np.ndarray:
    """True where some restart started after ``before`` and ended before ``after``."""
    out = np.zeros(len(before), dtype=bool)
    for start, end in zip(restarts["start_unix"], restarts["end_unix"], strict=True):
        out |= (before < start) & (after > end)
    return out


def turns_across_restarts(a: pd.DataFrame, n_turns: int, restarts: pd.DataFrame) -> np.ndarray:
    """Turns (by ``tkey``) with an own attempt in flight while a restart ran (from its start
    until the server answered again): the availability gate does not judge them, the
    server was down on purpose."""
    out = np.zeros(n_turns, dtype=bool)
    if not len(restarts) or not len(a):
        return out
    real = a.loc[~a["inj"].to_numpy()]
    send = real["send_s"].to_numpy(dtype=np.float64)
    end = real["end_s"].to_numpy(dtype=np.float64)
    hit = np.zeros(len(real), dtype=bool)
    for start, stop in zip(restarts["start_unix"], restarts["end_unix"], strict=True):
        hit |= (send <= stop) & ~(end < start)
    out[real["tkey"].to_numpy()[hit].astype(np.int64)] = True
    return out


def _during_restart(t: np.ndarray, restarts: pd.DataFrame) -> np.ndarray:
    """True where ``t`` falls inside a restart (the server was down: a copy sent then
    never reached it)."""
    out = np.zeros(len(t), dtype=bool)
    for start, end in zip(restarts["start_unix"], restarts["end_unix"], strict=True):
        out |= (t >= start) & (t <= end)
    return out


def _cut_by_restart(send: np.ndarray, end: np.ndarray, restarts: pd.DataFrame) -> np.ndarray:
    """True where an attempt was in flight when a restart began."""
    out = np.zeros(len(send), dtype=bool)
    for start in restarts["start_unix"]:
        out |= (send < start) & ~(end < start)
    return out


def coverage(a: pd.DataFrame, chaos: pd.DataFrame | None, witness: bool, restarts: pd.DataFrame,
             streams_out_of_order: int) -> list[Exercise]:
    """The coverage of one run from its attempts (``inj`` column: injected copy), the proxy's
    injections, whether a witness ledger exists, the restarts and the reordered streams."""
    inj = a["inj"].to_numpy(dtype=bool)
    side = a["side_effect"].fillna(False).astype(bool).to_numpy()
    kind = a["injected"].fillna("").astype(str).to_numpy()
    originals = a.loc[~inj & side].drop_duplicates("request_guid").set_index("request_guid")
    client = _client_copies(a, inj & side & np.isin(kind, ("concurrent", "resend")),
                            originals, restarts)
    proxy = _proxy_duplicates(chaos, originals)
    no_w = "no witness ledger: a dedup bug would not be visible"
    real = a.loc[~inj]
    out = _dedup_exercises(client, proxy, len(restarts), witness, no_w)
    out.append(_turn_id_reuse(real, witness, no_w))
    out.append(_continuation_twice(a, real, inj & side & (kind == "continuation-dup"), witness,
                                   no_w))
    out.append(_exercise("reordering", streams_out_of_order,
                         "streams received out of sequenceId order"))
    held = 0
    if chaos is not None and len(chaos):
        held = int(chaos["kind"].isin(OUTAGE_KINDS).sum())
    out.append(_exercise("outage", held, "requests/connections held, swallowed or refused"))
    out.append(_exercise("restart", len(restarts), "restarts while the load ran"))
    code = real["error_code"]
    failed = real["outcome"].eq("failed")
    nonretry = failed & code.notna() & ~code.isin(RETRYABLE_CODES)
    names = code[nonretry].value_counts()
    out.append(_exercise("non-retryable", int(nonretry.sum()),
                         ", ".join(f"{c}: {n}" for c, n in names.items())))
    out.append(_exercise("rate-limited", int((failed & code.eq("rate-limited")).sum()),
                         "FAILED rate-limited answers"))
    return out


@dataclass(frozen=True)
class _Copies:
    """Duplicates of side-effect requests by when they reached the Reasoner: before the
    original, while it ran, after it ended (with the gaps after), across a restart."""

    before: int
    running: int
    after: int
    across: int = 0
    gaps: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _client_copies(a: pd.DataFrame, same: np.ndarray, originals: pd.DataFrame,
                   restarts: pd.DataFrame) -> _Copies:
    """The client's copies (``same``: same requestGuid as their original) by timing."""
    copies = a.loc[same, ["request_guid", "send_s"]]
    orig = originals.reindex(copies["request_guid"])
    c_send = copies["send_s"].to_numpy(dtype=np.float64)
    o_send = orig["send_s"].to_numpy(dtype=np.float64)
    o_end = orig["end_s"].to_numpy(dtype=np.float64)
    # only an original the Reasoner executed gives a copy something to deduplicate (a
    # refused or unanswered one does not); across a restart, also one the restart cut off
    o_done = orig["outcome"].eq("completed").to_numpy()
    # a copy sent while the server was down (a restart) reached no Reasoner: it counts nowhere
    known = ~np.isnan(o_send) & ~_during_restart(c_send, restarts)
    across = known & _spans_restart(o_send, c_send, restarts) & (
        o_done | _cut_by_restart(o_send, o_end, restarts))
    before = known & o_done & (c_send < o_send) & ~across
    running = known & o_done & (c_send >= o_send) & (c_send < o_end) & ~across
    after = known & o_done & (c_send >= o_end) & ~across
    return _Copies(int(before.sum()), int(running.sum()), int(after.sum()), int(across.sum()),
                   c_send[after] - o_end[after])


def _proxy_duplicates(chaos: pd.DataFrame | None, originals: pd.DataFrame) -> _Copies:
    """The chaos proxy's duplicates by timing (``first``: sent before the original)."""
    if chaos is None or not len(chaos):
        return _Copies(0, 0, 0)
    dup = chaos[chaos["kind"].eq("duplicate")]
    po = originals.reindex(dup["request_guid"])
    took = (po["end_s"] - po["send_s"]).where(po["outcome"].eq("completed")).to_numpy(
        dtype=np.float64)
    delay = dup["delay_s"].fillna(0.0).to_numpy(dtype=np.float64)
    first = (dup["first"].eq(True).to_numpy(dtype=bool) if "first" in dup
             else np.zeros(len(dup), dtype=bool))
    seen = ~np.isnan(took)
    late = seen & ~first & (delay >= took)
    return _Copies(int((seen & first).sum()), int((seen & ~first & (delay < took)).sum()),
                   int(late.sum()), gaps=delay[late] - took[late])


def _dedup_exercises(client: _Copies, proxy: _Copies, restarts: int, witness: bool,
                     no_w: str) -> list[Exercise]:
    """The four duplicate timings, client copies and proxy duplicates together."""
    gap = np.concatenate([client.gaps, proxy.gaps])
    window = float(np.max(gap)) if len(gap) else None
    return [
        _exercise("duplicate-while-running", client.running + proxy.running,
                  f"{client.running} client copies, {proxy.running} proxy duplicates"
                  if witness else no_w, witness),
        _exercise("duplicate-before-original", client.before + proxy.before,
                  f"{client.before} client copies sent first, {proxy.before} proxy "
                  "duplicates sent first" if witness else no_w, witness),
        _exercise("resend-after-completion", client.after + proxy.after,
                  (f"{client.after} client resends, {proxy.after} proxy duplicates"
                   + (f"; up to {window:.3g} s after the original ended: the gate demands a "
                      f"dedup window >= {window:.3g} s (errors.md leaves it to the server)"
                      if window is not None else "")) if witness else no_w, witness,
                  round(window, 3) if window is not None else None),
        _exercise("resend-across-restart", client.across,
                  f"{restarts} restarts" if witness else no_w, witness),
    ]


def _turn_id_reuse(real: pd.DataFrame, witness: bool, no_w: str) -> Exercise:
    """Side-effect turns whose turnId several calls used (executed or replayed)."""
    done = real[real["outcome"].isin((A.COMPLETED, A.INPUT_REQUIRED))]  # executed or replayed
    calls_per_id = done.groupby("turn_id")["call_id"].nunique()
    shared = calls_per_id.index[calls_per_id.to_numpy() > 1]
    se_turns = done.loc[done["side_effect"].fillna(False).astype(bool)
                        & done["turn_id"].isin(shared), ["call_id", "turn_index"]]
    return _exercise("turn-id-reused", len(se_turns.drop_duplicates()),
                     f"{len(shared)} turnIds used by several calls" if witness else no_w,
                     witness)


def _continuation_twice(a: pd.DataFrame, real: pd.DataFrame, dups: np.ndarray, witness: bool,
                        no_w: str) -> Exercise:
    """Second continuations (``dups``) whose pause was answered: the copy or the
    continuation it copied completed (a refused or cut-off pair gave the Reasoner nothing to
    claim twice)."""
    pair = ["call_id", "turn_index", "attempt"]
    cdup = a.loc[dups & a["task_id"].notna().to_numpy(), [*pair, "outcome"]]
    main_done = real.loc[real["phase"].eq("continuation") & real["outcome"].eq("completed"),
                         pair].drop_duplicates().assign(main_done=True)
    cdup = cdup.merge(main_done, on=pair, how="left")
    cont = int((cdup["outcome"].eq("completed") | cdup["main_done"].eq(True)).sum())
    return _exercise("continuation-twice", cont,
                     "second continuations sent at once" if witness else no_w, witness)


def coverage_text(items: list[dict[str, Any]]) -> list[str]:
    """The coverage section of verdict.txt (rows of :meth:`Exercise.to_dict`)."""
    if not items:
        return ["coverage: nothing measured"]
    width = max(len(e["title"]) for e in items)
    done = sum(e["status"] == "exercised" for e in items)
    lines = [f"coverage ({done} of {len(items)} bug classes exercised; a PASS proves nothing "
             "about the others):"]
    for e in items:
        count = str(e["count"]) if e["status"] == "exercised" else e["status"]
        lines.append(f"  {e['title']:<{width}}  {count:>14}  {e['detail']}".rstrip())
    return lines


__all__ = ["CLASSES", "Exercise", "coverage", "coverage_text", "read_restarts"]
