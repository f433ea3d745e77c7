"""Run-integrity checks, release gates, the indeterminate executions and the key figures.

These read what a load run wrote next to its ledgers (all optional, so ``rtalab check``
works on a bare ``ledger/`` folder too):

* ``meta.json`` -- the run's status (``interrupted``: open turns are indeterminate);
* ``ledger/gather.json`` -- did every Locust process deliver its ledger;
* ``ledger/counts.json`` -- the server's ``/metrics`` and the witness's row count;
* ``ledger/gates.json`` -- ``{"slo": [...], "availability_min": x}`` from ``load run --slo``;
* ``ledger/restarts.jsonl`` -- ``{"t": unix_s, ...}`` for each restart of the server;
* ``summary.json`` -- the key figures and the SLO metrics (after the warm-up).

Executions whose request never completed are never violations by themselves: they are
classified (:func:`indeterminate`) as *cut off by the stop*, *in flight at a restart*,
*ghost success* (the caller was told the turn failed) or *slow success* (the request's
own answer never came, e.g. it timed out, but its side effect ran).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rtalab.loadtests.check.verdict import (
    FAIL,
    INTERRUPTED,
    KEY_FIGURES,
    NOT_CHECKED,
    PASS,
    Kind,
    RuleResult,
    Status,
    examples_of,
)
from rtalab.loadtests.common.tls import INSECURE_WARNING
from rtalab.sim.answers.slo import SloError, metric_value, parse_slo
from rtalab.sim.vocab import AttemptOutcome as A

INTEGRITY = "run integrity"
AVAILABILITY_MIN = 0.9  # default availability gate: share of judged turns that completed
ANSWERED = (A.COMPLETED, A.FAILED, A.INPUT_REQUIRED, A.CANCELLED)
HTTP_ANSWERED = (200, 101)  # statuses the Reasoner counts (a refused request is not a turn)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class RunFiles:
    """What a load run wrote besides the ledgers (each None when absent)."""

    run_dir: Path
    meta: dict[str, Any] | None = None
    gather: dict[str, Any] | None = None
    counts: dict[str, Any] | None = None
    gates: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    restarts: list[float] = field(default_factory=list)

    @classmethod
    def read(cls, run_dir: str | Path) -> RunFiles:
        """Read every optional file of ``run_dir``."""
        run = Path(run_dir)
        led = run / "ledger" if (run / "ledger").is_dir() else run
        restarts = []
        rpath = led / "restarts.jsonl"
        if rpath.is_file():
            for line in rpath.read_text(encoding="utf-8").splitlines():
                try:
                    restarts.append(float(json.loads(line)["t"]))
                except (ValueError, KeyError, TypeError):
                    continue
        return cls(run_dir=run, meta=_read_json(run / "meta.json"),
                   gather=_read_json(led / "gather.json"), counts=_read_json(led / "counts.json"),
                   gates=_read_json(led / "gates.json") or {},
                   summary=_read_json(run / "summary.json"), restarts=restarts)

    @property
    def status(self) -> str | None:
        """meta.json's status (None without meta.json)."""
        return None if self.meta is None else self.meta.get("status")

    @property
    def interrupted(self) -> bool:
        """True when the run was stopped by a signal."""
        return self.status == INTERRUPTED


def _rule(name: str, section: str, kind: Kind, status: Status, count: int = 0,
          examples: tuple[str, ...] = (), detail: str = "") -> RuleResult:
    return RuleResult(name=name, section=section, kind=kind, status=status,
                      count=int(count), examples=examples, detail=detail)


# ------------------------------------------------------------------------------ integrity


def rule_ledger_gathered(f: RunFiles) -> RuleResult:
    """Every Locust process delivered all its ledger batches (``gather.json``)."""
    name = "ledger-gathered"
    if f.gather is None:
        why = ("run interrupted before the ledger was gathered" if f.interrupted
               else "no ledger/gather.json (not gathered by rtalab load run)")
        return _rule(name, INTEGRITY, "integrity", NOT_CHECKED, detail=why)
    procs = f.gather.get("processes") or {}
    short = [p for p, v in procs.items()
             if v.get("announced") is None or v.get("batches_received", 0)
             < (v.get("announced") or {}).get("batches", 0)]
    missing = max(0, int(f.gather.get("expected_processes", 0)) - len(procs))
    # complete, and nothing in the report contradicts it (a short or missing process fails)
    ok = bool(f.gather.get("complete")) and not short and missing == 0
    drained = f.gather.get("drained")
    detail = (f"{len(procs)} of {f.gather.get('expected_processes', '?')} processes delivered"
              f"; drained: {drained}" + ("" if ok else
                                         f"; incomplete: {', '.join(short) or missing}"))
    return _rule(name, INTEGRITY, "integrity", PASS if ok else FAIL, len(short) + missing,
                 examples_of(short), detail)


def rule_server_agrees(f: RunFiles, attempts: pd.DataFrame) -> RuleResult:
    """The server answered every request the ledger saw answered, and at most the
    unanswered ones more (a request cut off by the stop or a timeout may still have been
    answered after the client stopped listening)."""
    name = "server-ledger-agree"
    c = f.counts or {}
    if "server_turns_answered" not in c:
        return _rule(name, INTEGRITY, "integrity", NOT_CHECKED,
                     detail="no server /metrics in ledger/counts.json")
    if not c.get("comparable", True):
        return _rule(name, INTEGRITY, "integrity", NOT_CHECKED,
                     detail="chaos proxy or restarts: the server saw other requests (or reset "
                            "its counters)")
    http = pd.to_numeric(attempts["http_status"], errors="coerce") if "http_status" in \
        attempts else pd.Series(np.nan, index=attempts.index)
    counted = http.isna() | http.isin(HTTP_ANSWERED)
    answered = int((attempts["outcome"].isin(ANSWERED) & counted).sum())
    open_ = int((~attempts["outcome"].isin(ANSWERED) & counted).sum())
    server = float(c["server_turns_answered"])
    ok = answered <= server <= answered + open_
    detail = (f"server answered {server:g}; ledger: {answered} answered + {open_} without an "
              f"answer (timed out, lost or cut off: the server may have answered them)")
    return _rule(name, INTEGRITY, "integrity", PASS if ok else FAIL,
                 0 if ok else int(abs(server - answered)), (), detail)


def rule_witness_agrees(f: RunFiles, witness: pd.DataFrame | None) -> RuleResult:
    """The witness rows saved for this run are the ones the checker read."""
    name = "witness-ledger-agree"
    c = f.counts or {}
    if witness is None or "witness_rows" not in c:
        return _rule(name, INTEGRITY, "integrity", NOT_CHECKED,
                     detail="no witness row count in ledger/counts.json")
    saved, read = int(c["witness_rows"]), len(witness)
    ok = saved == read
    return _rule(name, INTEGRITY, "integrity", PASS if ok else FAIL, abs(saved - read), (),
                 f"{saved} executions saved from the witness for this run, {read} read; "
                 "executions whose request never completed are classified under "
                 "indeterminate")


# ------------------------------------------------------------------------------ gates


def _judged_turns(turns: pd.Series, indeterminate: np.ndarray) -> tuple[int, int]:
    """(turns that succeeded, turns judged): cancelled (barge-in) and indeterminate turns
    are not judged."""
    out = turns.to_numpy()
    judged = ~indeterminate & (out != "cancelled") & ~pd.isna(out)
    return int((judged & (out == "completed")).sum()), int(judged.sum())


def refused_statuses(attempts: pd.DataFrame | None) -> str:
    """What the server answered instead of a stream, as sent: ``; answers: HTTP 503 x40,
    no connection x2`` (the real requests that got a non-2xx status or none), or ``""``."""
    if attempts is None or "http_status" not in attempts or not len(attempts):
        return ""
    real = attempts[attempts["injected"].fillna("").astype(str).eq("")] if "injected" in \
        attempts else attempts
    http = pd.to_numeric(real["http_status"], errors="coerce")
    bad = http[http.isna() | (http < 200) | (http >= 300)]
    bad = bad[~bad.isin([101])]  # an open WebSocket
    if not len(bad):
        return ""
    counts = bad.fillna(0).astype(int).value_counts()
    parts = [f"{'no connection' if code == 0 else f'HTTP {code}'} x{n}"
             for code, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return f"; {len(bad)} of {len(real)} requests answered: {', '.join(parts)}"


def rule_availability(f: RunFiles, outcome: pd.Series, indeterminate: np.ndarray,
                      attempts: pd.DataFrame | None = None) -> RuleResult:
    """A share of judged turns at least ``availability_min`` completed (default 0.9); a
    failure says what the requests were answered (the status as sent)."""
    name = "availability"
    section = "release gate (docs/check.md: availability)"
    if f.gates.get("slo"):
        return _rule(name, section, "gate", NOT_CHECKED, detail="--slo given: the SLOs decide")
    lim = float(f.gates.get("availability_min", AVAILABILITY_MIN))
    ok_n, n = _judged_turns(outcome, indeterminate)
    if n == 0 and (outcome.to_numpy() == "cancelled").any():
        return _rule(name, section, "gate", NOT_CHECKED,
                     detail="every judged turn was cancelled by the caller (barge-in)")
    share = ok_n / n if n else 0.0
    passed = n > 0 and share >= lim
    return _rule(name, section, "gate", PASS if passed else FAIL, n - ok_n, (),
                 f"{ok_n} of {n} judged turns completed ({share:.1%}; needs >= {lim:.0%})"
                 + ("" if passed else refused_statuses(attempts)))


def rule_auth(attempts: pd.DataFrame) -> RuleResult:
    """Requests refused with ``auth`` (HTTP 401/403, a refused WebSocket upgrade, or a
    FAILED state with errorCode auth): the run's credentials were not accepted."""
    real = attempts[attempts["injected"].fillna("").astype(str).eq("")]
    bad = real[real["error_code"].eq("auth")]
    return _rule("auth", "errors.md §2 auth (credentials refused; never retried)", "gate",
                 FAIL if len(bad) else PASS, len(bad), examples_of(bad["request_guid"][:5]),
                 f"{len(bad)} of {len(real)} requests refused with auth (check --token)")


def slo_rules(f: RunFiles) -> list[RuleResult]:
    """One ``slo`` rule per ``--slo``: the run's measured value (after the warm-up) against
    its target (a load run is one replication: no CI)."""
    out = []
    for text in f.gates.get("slo") or []:
        name = f"slo {text}"
        section = "release gate (--slo)"
        try:
            slo = parse_slo(text)
        except SloError as e:
            out.append(_rule(name, section, "gate", FAIL, 1, (), str(e)))
            continue
        if f.summary is None:
            out.append(_rule(name, section, "gate", NOT_CHECKED, detail="no summary.json"))
            continue
        v = metric_value(f.summary, slo.metric)
        ok = v is not None and slo._meets(v)
        out.append(_rule(name, section, "gate", PASS if ok else FAIL, 0 if ok else 1, (),
                         f"{slo.metric} = {'undefined' if v is None else f'{v:.4g}'} "
                         f"(target {slo.op} {slo.target:g})"))
    return out


# ------------------------------------------------------------------------------ figures


def tls_warnings(files: RunFiles) -> list[str]:
    """The run's clients did not verify certificates (``meta.json`` ``tls_insecure``): a
    PASS then says nothing of who answered."""
    if not (files.meta or {}).get("tls_insecure"):
        return []

    return [f"TLS NOT VERIFIED: {INSECURE_WARNING}"]


def figures(f: RunFiles) -> dict[str, Any]:
    """Key figures from summary.json (means; None when undefined)."""
    if f.summary is None:
        return {}

    out: dict[str, Any] = {k: metric_value(f.summary, k) for k, _, _ in KEY_FIGURES}
    hz = [metric_value(f.summary, k) for k in f.summary.get("metrics", {})
          if k.startswith("hazard.")]
    vals = [v for v in hz if v is not None and math.isfinite(v)]
    out["hazards_per_1k_turns"] = sum(vals) if vals else None
    return out
