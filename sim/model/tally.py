"""Every metric of a replication, folded in as its record rows are written: bounded memory.

With ``[run] records = "sample:P"`` or ``"none"`` the record tables do not keep their rows:
each compacted chunk of columns goes to :class:`Tally` (``Table(sink=...)``), which
folds it into exact counts, sums and per-second counts and into latency sketches
(:class:`rtalab.sim.shared.sketch.Sketch`), and hands back only the rows of the sampled calls.
:meth:`Tally.metrics` returns the same dict as
:func:`rtalab.sim.shared.summary.replication_metrics` on the full records: every count and
hazard exactly, the percentiles within the sketch's stated error (tests/test_records_mode.py
checks both on every preset).

What is kept grows only with rare events and by a few bytes per id: the timed-out attempts
(for spurious timeouts); executions are buffered only while their turn is open (an attempt
timing out later may still need them).  The hazards are folded as the side-effect
executions come (:class:`Hazards`): a byte per requestGuid (executed yet?), a byte per turn
(distinct requestGuids executed, saturating at 2; failed?) and, once there are any, four
bytes per call for its extra executions and one for degraded calls — numpy arrays indexed
by the dense ids the model mints: exact counts, a late duplicate executing after its turn
ended included, and nothing to join at the end.  Which rows count (warm-up removal) uses
the same rules as the exact path: a turn counts when it started at or after the warm-up,
an attempt, execution or side effect when its turn counts — turn ids grow with start
time, so that is ``interaction_id >= `` the first counted turn's id, which the Live layer
notes (``LiveLayer.first_counted_uid``).
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from rtalab.sim.model.intsets import IntCounts
from rtalab.sim.shared import schema as S
from rtalab.sim.shared.sketch import Sketch
from rtalab.sim.shared.summary import _ratio, counter_metrics, recovery_metrics, timeseries_metrics
from rtalab.sim.vocab import AttemptOutcome as A
from rtalab.sim.vocab import CallEndReason, Decision, values

_U64 = np.uint64


def sample_mask(call_ids: np.ndarray, share: float, key: int) -> np.ndarray:
    """True for the rows of the sampled calls: a seeded hash (splitmix64 of the call id and
    ``key``) below ``share`` — the same calls in every table, the same set for the same key."""
    if share >= 1.0:
        return np.ones(len(call_ids), dtype=bool)
    if share <= 0.0:
        return np.zeros(len(call_ids), dtype=bool)
    with np.errstate(over="ignore"):
        z = call_ids.astype(np.uint64) + _U64(key) * _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        z = z ^ (z >> _U64(31))
    return (z >> _U64(11)).astype(np.float64) * 2.0**-53 < share


def _codes(kind: tuple[str, ...], *values: str) -> list[int]:
    return [kind.index(v) for v in values]


def _spec(table: Sequence[S.ColumnSpec]) -> dict[str, int]:
    return {name: j for j, (name, _) in enumerate(table)}


_TU, _AT, _CA, _EX, _SE = (_spec(S.TURNS_TABLE), _spec(S.ATTEMPTS_TABLE), _spec(S.CALLS_TABLE),
                           _spec(S.EXECUTIONS_TABLE), _spec(S.SIDE_EFFECTS_TABLE))
T_OUT = {o: i for i, o in enumerate(S.TURN_OUTCOMES)}
T_REASON = {o: i for i, o in enumerate(S.END_REASONS)}
A_OUT = {o: i for i, o in enumerate(S.ATTEMPT_OUTCOMES)}
C_REASON = {o: i for i, o in enumerate(S.CALL_END_REASONS)}
DISP = {o: i for i, o in enumerate(S.DISPOSITIONS)}
STATUS = {o: i for i, o in enumerate(S.STATUSES)}
REASONS = values(Decision)[1:]  # the refusals
REJECTIONS = ("rate-limited", "queue-full", "session-not-found", "queue-timeout")


def _tp(task: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """(task, phase) as one integer key (phase code -1..1)."""
    return task.astype(np.int64) * 4 + (phase.astype(np.int64) + 1)


class Window:
    """Zero-initialised values by dense non-negative id, in two parts: the ids from ``lo`` on
    in a numpy array (grown to any id it is asked to hold), the settled ids below ``lo`` in
    zlib-compressed blocks of ``BLOCK`` ids (:meth:`settle`).  A settled id can still be
    read and changed (:meth:`get`, :meth:`put`: its block is decompressed, changed and
    compressed again), so every value stays exact however late an id comes back; what a
    settled block costs is its compressed size (runs of the same few values: a few KiB)."""

    BLOCK = 1 << 16

    __slots__ = ("a", "blocks", "dtype", "lo", "top")

    def __init__(self, dtype: type[np.generic]) -> None:
        self.dtype = np.dtype(dtype)
        self.a = np.zeros(0, dtype)
        self.lo = 0  # the first id of ``a`` (a multiple of BLOCK)
        self.blocks: dict[int, bytes] = {}  # block number -> its compressed values
        self.top = 0  # one past the highest id asked for

    def _hold(self, top: int) -> None:
        """Make ``a`` reach id ``top - 1``: by a quarter (or 64 Ki ids), few copies."""
        need = top - self.lo
        if need > len(self.a):
            grown = np.zeros(max(need + (1 << 16), len(self.a) + len(self.a) // 4), self.dtype)
            grown[:len(self.a)] = self.a
            self.a = grown

    def _block(self, b: int) -> np.ndarray:
        data = self.blocks.get(b)
        if data is None:
            return np.zeros(self.BLOCK, self.dtype)
        return np.frombuffer(zlib.decompress(data), self.dtype).copy()

    def _late(self, ids: np.ndarray, values: np.ndarray | None) -> np.ndarray:
        """Read (``values`` None) or write the settled ids ``ids`` (each once)."""
        out = np.empty(len(ids), self.dtype)
        blk = ids // self.BLOCK
        for b in np.unique(blk).tolist():
            sel = blk == b
            vals = self._block(b)
            off = ids[sel] - b * self.BLOCK
            if values is None:
                out[sel] = vals[off]
            else:
                vals[off] = values[sel]
                self.blocks[b] = zlib.compress(vals.tobytes(), 1)
        return out

    def get(self, ids: np.ndarray) -> np.ndarray:
        """The values of ``ids`` (int64, non-negative)."""
        if not len(ids):
            return np.zeros(0, self.dtype)
        if int(ids.min()) < 0:
            raise ValueError("dense ids are non-negative")
        top = int(ids.max()) + 1
        if top > self.top:
            self.top = top
            self._hold(top)
        live = ids >= self.lo
        if live.all():
            got: np.ndarray = self.a[ids - self.lo]
            return got
        out = np.empty(len(ids), self.dtype)
        out[live] = self.a[ids[live] - self.lo]
        out[~live] = self._late(ids[~live], None)
        return out

    def put(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Set the values of ``ids`` (distinct, non-negative; read with :meth:`get` first)."""
        if not len(ids):
            return
        live = ids >= self.lo
        if live.all():
            self.a[ids - self.lo] = values
            return
        self.a[ids[live] - self.lo] = values[live]
        self._late(ids[~live], values[~live])

    def settle(self, below: int) -> None:
        """Compress the whole blocks of ids below ``below`` that are still in the array."""
        b0, b1 = self.lo // self.BLOCK, max(0, below) // self.BLOCK
        if b1 <= b0:
            return
        self._hold(b1 * self.BLOCK)
        for b in range(b0, b1):
            vals = self.a[(b - b0) * self.BLOCK:(b - b0 + 1) * self.BLOCK]
            if vals.any():
                self.blocks[b] = zlib.compress(vals.tobytes(), 1)
        self.a = self.a[(b1 - b0) * self.BLOCK:].copy()
        self.lo = b1 * self.BLOCK

    def chunks(self, n_blocks: int | None = None) -> Iterator[np.ndarray]:
        """Every value in id order, a block at a time (``n_blocks``: at least that many)."""
        top = self.lo // self.BLOCK + -(-len(self.a) // self.BLOCK)
        for b in range(max(top, n_blocks or 0)):
            if b * self.BLOCK >= self.lo:
                v = self.a[b * self.BLOCK - self.lo:(b + 1) * self.BLOCK - self.lo]
                yield np.pad(v, (0, self.BLOCK - len(v)))
            else:
                yield self._block(b)

    def n_blocks(self) -> int:
        """Blocks spanned so far (settled and live)."""
        return self.lo // self.BLOCK + -(-len(self.a) // self.BLOCK)

    def nbytes(self) -> int:
        """Bytes held (the array and the compressed blocks)."""
        return self.a.nbytes + sum(len(v) for v in self.blocks.values())


class Hazards:
    """The three hazards of the side-effect executions (and ghost successes), folded chunk
    by chunk in execution order: exactly what ``replication_metrics`` counts on the whole
    ledger.  An execution of a requestGuid already executed is an extra one, charged to its
    call (the calls degraded by the end are left out: no requestGuid was on the wire); a
    turn's first two distinct requestGuids make it re-executed; a failed turn with any
    execution is a ghost success.  A requestGuid belongs to one turn of one call.

    The ids settle (:meth:`settle`): each :class:`Window` keeps in its array only the ids
    above the highest one it had seen ``SETTLE_LAG`` settles ago; older ones are compressed,
    still exact if a late execution (a duplicate the network held, a retry past the dedup
    window) comes back to them."""

    TURN_GUIDS, TURN_FAILED = 3, 4  # the turn byte: distinct guids (0, 1, 2 = two or more)
    SETTLE_LAG = 30  # settles (World folds every 10 simulated s: 300 s)

    def __init__(self) -> None:
        self.guid_run = Window(np.uint8)    # requestGuid -> executed yet
        self.turn = Window(np.uint8)        # turn -> TURN_GUIDS count | TURN_FAILED
        self.call_extra = Window(np.int32)  # call -> extra executions of its requestGuids
        self.call_degraded = Window(np.uint8)
        self.executions = 0
        self.reexecuted = 0
        self._marks: deque[tuple[int, ...]] = deque()  # each window's top id, per settle

    def executed(self, guids: np.ndarray, turns: np.ndarray, calls: np.ndarray) -> None:
        """Side-effect executions, in the order they ran."""
        self.executions += len(guids)
        uniq, first = np.unique(guids, return_index=True)
        ran = self.guid_run.get(uniq)
        new = np.zeros(len(guids), dtype=bool)
        new[first[ran == 0]] = True  # a requestGuid's first execution ever
        self.guid_run.put(uniq[ran == 0], np.ones(int((ran == 0).sum()), np.uint8))
        again = calls[~new]  # the calls of the extra executions (none: no array)
        if len(again):
            c, k = np.unique(again, return_counts=True)
            self.call_extra.put(c, self.call_extra.get(c) + k.astype(np.int32))
        t, n = np.unique(turns[new], return_counts=True)
        state = self.turn.get(t)
        before = state & self.TURN_GUIDS
        after = np.minimum(before + n, 2).astype(np.uint8)
        self.reexecuted += int(((before < 2) & (after == 2)).sum())
        self.turn.put(t, (state & ~np.uint8(self.TURN_GUIDS)) | after)

    def failed(self, turns: np.ndarray) -> None:
        """Counted turns that failed."""
        t = np.unique(turns)
        self.turn.put(t, self.turn.get(t) | np.uint8(self.TURN_FAILED))

    def degraded(self, calls: np.ndarray) -> None:
        """Calls degraded (their row: the call has ended)."""
        c = np.unique(calls)
        self.call_degraded.get(c)  # (grows the array to them)
        self.call_degraded.put(c, np.ones(len(c), np.uint8))

    def _windows(self) -> tuple[Window, ...]:
        return self.guid_run, self.turn, self.call_extra, self.call_degraded

    def settle(self) -> None:
        """Note each window's top id; settle the ids below the tops of ``SETTLE_LAG`` ago."""
        self._marks.append(tuple(w.top for w in self._windows()))
        if len(self._marks) > self.SETTLE_LAG:
            old = self._marks.popleft()
            for w, top in zip(self._windows(), old, strict=True):
                w.settle(top)

    def extra(self) -> int:
        """Extra executions of a requestGuid, the degraded calls' left out."""
        n = max(self.call_extra.n_blocks(), self.call_degraded.n_blocks())
        total = 0
        for extra, deg in zip(self.call_extra.chunks(n), self.call_degraded.chunks(n),
                              strict=True):
            total += int(extra[deg == 0].sum(dtype=np.int64))
        return total

    def ghosts(self) -> int:
        """Failed turns whose side effect ran."""
        return sum(int(np.count_nonzero(((s & self.TURN_FAILED) != 0)
                                        & ((s & self.TURN_GUIDS) != 0)))
                   for s in self.turn.chunks())

    def nbytes(self) -> int:
        """Bytes held."""
        return sum(w.nbytes() for w in self._windows())


class Tally:
    """Folds one replication's record chunks into its metrics."""

    def __init__(self, warmup_s: float, duration_s: float, end_s: float, n_bins: int,
                 sample_share: float, sample_key: int,
                 first_counted_uid: Callable[[], int]) -> None:
        self.warmup_s, self.duration_s, self.end_s, self.n_bins = (
            warmup_s, duration_s, end_s, n_bins)
        self.share, self.key = sample_share, sample_key
        self._first_uid = first_counted_uid
        self.c: dict[str, float] = {}  # exact counts and sums
        self.ttfc, self.comp, self.wait = Sketch(), Sketch(), Sketch()
        self.rates = {name: np.zeros(n_bins, dtype=np.int64) for name in S.TIMESERIES_RATES}
        self.hazards = Hazards()
        self.first_counted_call = math.inf
        # spurious timeouts: timed-out attempts (kept), executions of open turns (buffered)
        self.to_guid: list[np.ndarray] = []
        self.to_tp: list[np.ndarray] = []
        self.to_guids: set[int] = set()
        self.to_tps: set[int] = set()
        self.ok_guids: set[int] = set()      # of timed-out guids: an ok execution seen
        self.joined_guids: set[int] = set()  # of timed-out guids: a joined execution seen
        self.ok_tps: set[int] = set()        # of timed-out (task, phase): an ok execution seen
        self.buf_uid = np.empty(0, np.int64)
        self.buf_ok_guid = np.empty(0, np.int64)   # -1 where the row is not ok
        self.buf_join_guid = np.empty(0, np.int64)  # -1 where the row is not joined
        self.buf_ok_tp = np.empty(0, np.int64)     # min int64 where not ok
        self.sinks = {"turns": self._turns, "attempts": self._attempts, "calls": self._calls,
                      "executions": self._executions, "side_effects": self._side_effects}

    # ------------------------------------------------------------------ helpers

    def add(self, name: str, v: float) -> None:
        self.c[name] = self.c.get(name, 0) + v

    def _bin(self, name: str, times: np.ndarray) -> None:
        t = times[np.isfinite(times)]
        k = np.floor(t).astype(np.int64)
        k = k[(k >= 0) & (k < self.n_bins)]
        if len(k):
            self.rates[name] += np.bincount(k, minlength=self.n_bins)

    def _counted(self, uid: np.ndarray) -> np.ndarray:
        first = self._first_uid()
        if first < 0:
            return np.zeros(len(uid), dtype=bool)
        return uid >= first

    def _sample(self, cols: list[np.ndarray], call_col: int) -> list[np.ndarray] | None:
        if self.share <= 0.0:
            return None
        keep = sample_mask(cols[call_col], self.share, self.key)
        return [c[keep] for c in cols]

    # ------------------------------------------------------------------ sinks

    def _turns(self, cols: list[np.ndarray]) -> list[np.ndarray] | None:
        start, end, out = cols[_TU[S.START_S]], cols[_TU[S.END_S]], cols[_TU[S.OUTCOME]]
        self._bin(S.OFFERED_TURNS_PER_S, start)
        self._bin(S.COMPLETED_TURNS_PER_S, end[out == T_OUT["completed"]])
        self._bin(S.FAILED_TURNS_PER_S, end[out == T_OUT["failed"]])
        keep = start >= self.warmup_s
        out = out[keep]
        completed = out == T_OUT["completed"]
        failed = out == T_OUT["failed"]
        self.add("n", int(keep.sum()))
        for o, i in T_OUT.items():
            self.add("out." + o, int((out == i).sum()))
        reason = cols[_TU[S.END_REASON]][keep]
        for r in REASONS:
            self.add("reason." + r, int(((reason == T_REASON[r]) & failed).sum()))
        code = cols[_TU[S.ERROR_CODE]][keep]
        for j, c in enumerate(S.ERROR_CODES):
            self.add("code." + c, int(((code == j) & failed).sum()))
        self.add("code.none", int(((code < 0) & failed).sum()))
        ttfc = cols[_TU[S.TTFC_S]][keep][completed]
        comp = cols[_TU[S.COMPLETION_S]][keep][completed]
        fin_ttfc, fin_comp = ttfc[np.isfinite(ttfc)], comp[np.isfinite(comp)]
        self.ttfc.add(fin_ttfc)
        self.comp.add(fin_comp)
        offered = out != T_OUT["cancelled"]
        self.add("offered", int(offered.sum()))
        self.add("not_served", int((offered & ~completed).sum()))
        # caller-perceived: not served = +inf; a completed turn's NaN TTFC = +inf too,
        # a completed turn's NaN completion is left out (as percentile_served does)
        self.add("caller_ttfc_inf", int(offered.sum()) - len(fin_ttfc))
        self.add("caller_comp_inf", int((offered & ~completed).sum())
                 + int(np.isinf(comp).sum()))
        self.add("attempts", int(cols[_TU[S.ATTEMPTS]][keep].sum()))
        self.add("retries", int(cols[_TU[S.RETRIES]][keep].sum()))
        self.add("se_turns", int(cols[_TU[S.SIDE_EFFECT]][keep].sum()))
        if failed.any():
            self.hazards.failed(cols[_TU[S.INTERACTION_ID]][keep][failed])
        return self._sample(cols, _TU[S.CALL_ID])

    def _calls(self, cols: list[np.ndarray]) -> list[np.ndarray] | None:
        arr = cols[_CA[S.ARRIVAL_S]]
        keep = arr >= self.warmup_s
        deg = cols[_CA[S.DEGRADED]]
        if deg.any():
            self.hazards.degraded(cols[_CA[S.CALL_ID]][deg])
        ids = cols[_CA[S.CALL_ID]][keep]
        if len(ids):
            self.first_counted_call = min(self.first_counted_call, int(ids.min()))
        self.add("calls", int(keep.sum()))
        self.add("calls_degraded", int(deg[keep].sum()))
        reason = cols[_CA[S.END_REASON]][keep]
        for r, i in C_REASON.items():
            self.add("call_end." + r, int((reason == i).sum()))
        planned = cols[_CA[S.TURNS_PLANNED]][keep]
        started = cols[_CA[S.TURNS_STARTED]][keep]
        self.add("planned", int(planned.sum()))
        self.add("escalated_removed",
                 int((planned - started)[reason == C_REASON[CallEndReason.ESCALATED]].sum()))
        return self._sample(cols, _CA[S.CALL_ID])

    def _attempts(self, cols: list[np.ndarray]) -> list[np.ndarray] | None:
        send = cols[_AT[S.SEND_S]]
        self._bin(S.ATTEMPTS_PER_S, send)
        self._bin(S.RETRIES_PER_S, send[cols[_AT[S.ATTEMPT]] > 1])
        keep = self._counted(cols[_AT[S.INTERACTION_ID]])
        out = cols[_AT[S.OUTCOME]][keep]
        self.add("n_att", int(keep.sum()))
        for o, i in A_OUT.items():
            self.add("att." + o, int((out == i).sum()))
        timed = (out == A_OUT[A.TIMEOUT]) | (out == A_OUT[A.TOTAL_TIMEOUT])
        if timed.any():
            guid = cols[_AT[S.REQUEST_GUID]][keep][timed]
            tp = _tp(cols[_AT[S.TASK_ID]][keep][timed], cols[_AT[S.PHASE]][keep][timed])
            self.to_guid.append(guid)
            self.to_tp.append(tp)
            self.to_guids.update(guid.tolist())
            self.to_tps.update(tp.tolist())
            # executions already seen of these (still open) turns
            self.ok_guids.update(guid[np.isin(guid, self.buf_ok_guid)].tolist())
            self.joined_guids.update(guid[np.isin(guid, self.buf_join_guid)].tolist())
            self.ok_tps.update(tp[np.isin(tp, self.buf_ok_tp)].tolist())
        return self._sample(cols, _AT[S.CALL_ID])

    def _executions(self, cols: list[np.ndarray]) -> list[np.ndarray] | None:
        arr = cols[_EX[S.ARRIVAL_S]]
        start = cols[_EX[S.SERVICE_START_S]]
        disp = cols[_EX[S.DISPOSITION]]
        self._bin(S.SERVER_REQUESTS_PER_S, arr)
        self._bin(S.SERVER_EXECUTIONS_PER_S, start)
        self._tally_queue(arr, start, disp)
        uid = cols[_EX[S.INTERACTION_ID]]
        keep = self._counted(uid)
        d = disp[keep]
        self.add("executed", int((d == DISP["executed"]).sum()))
        self.add("rejections", int(np.isin(d, _codes(S.DISPOSITIONS, *REJECTIONS)).sum()))
        self.add("shed", int((d == DISP["queue-timeout"]).sum()))
        for c in S.CANCEL_DISPOSITIONS:
            self.add("disp." + c, int((d == DISP[c]).sum()))
        # spurious timeouts: successful executions and joins of the counted turns
        status = cols[_EX[S.STATUS]][keep]
        ok = (d == DISP["executed"]) & ((status == STATUS["completed"])
                                        | (status == STATUS[A.INPUT_REQUIRED]))
        joined = d == DISP["joined"]
        if ok.any() or joined.any():
            rel = ok | joined
            guid = cols[_EX[S.REQUEST_GUID]][keep]
            tp = _tp(cols[_EX[S.TASK_ID]][keep], cols[_EX[S.PHASE]][keep])
            if self.to_guids:
                self.ok_guids.update(g for g in guid[ok].tolist() if g in self.to_guids)
                self.joined_guids.update(g for g in guid[joined].tolist() if g in self.to_guids)
                self.ok_tps.update(k for k in tp[ok].tolist() if k in self.to_tps)
            self.buf_uid = np.concatenate([self.buf_uid, uid[keep][rel]])
            self.buf_ok_guid = np.concatenate([self.buf_ok_guid, np.where(ok, guid, -1)[rel]])
            self.buf_join_guid = np.concatenate([self.buf_join_guid,
                                                 np.where(joined, guid, -1)[rel]])
            self.buf_ok_tp = np.concatenate([self.buf_ok_tp,
                                             np.where(ok, tp, np.iinfo(np.int64).min)[rel]])
        return self._sample(cols, _EX[S.CALL_ID])

    def _tally_queue(self, arr: np.ndarray, start: np.ndarray, disp: np.ndarray) -> None:
        lo, hi, run_end = self.warmup_s, self.duration_s, self.end_s
        admitted = (disp == DISP["executed"]) | (disp == DISP["unserved"])
        a = arr[admitted]
        s = start[admitted]
        s = np.where(np.isnan(s), run_end, s)
        inside = (a >= lo) & (a < hi)
        wait = s[inside] - a[inside]
        self.add("q.inside", int(inside.sum()))
        self.add("q.wait_sum", float(wait.sum()))
        self.add("q.waited", int((wait > 0).sum()))
        overlap = np.clip(np.minimum(s, hi) - np.maximum(a, lo), 0.0, None)
        self.add("q.overlap", float(overlap.sum()))
        self.add("q.served", int(((s >= lo) & (s < hi) & (s < run_end)).sum()))
        ran = disp == DISP["executed"]
        r_arr = arr[ran]
        self.wait.add((start[ran] - r_arr)[(r_arr >= lo) & (r_arr < hi)])

    def _side_effects(self, cols: list[np.ndarray]) -> list[np.ndarray] | None:
        uid = cols[_SE[S.INTERACTION_ID]]
        keep = self._counted(uid)
        if keep.any():
            self.hazards.executed(cols[_SE[S.REQUEST_GUID]][keep], uid[keep],
                                  cols[_SE[S.CALL_ID]][keep])
        return self._sample(cols, _SE[S.CALL_ID])

    def settle(self, open_uids: np.ndarray) -> None:
        """Drop the buffered executions of turns that have ended (every row written so far
        has been folded in): no attempt of theirs can time out any more.  Settle the
        hazards' old ids (:meth:`Hazards.settle`)."""
        self.hazards.settle()
        if len(self.buf_uid):
            keep = np.isin(self.buf_uid, open_uids)
            if not keep.all():
                self.buf_uid, self.buf_ok_guid, self.buf_join_guid, self.buf_ok_tp = (
                    self.buf_uid[keep], self.buf_ok_guid[keep], self.buf_join_guid[keep],
                    self.buf_ok_tp[keep])

    # ------------------------------------------------------------------ the metrics

    def sketches(self) -> dict[str, Sketch]:
        """The latency sketches by metric prefix (completed turns' TTFC and completion, the
        queue wait of executed requests), for pooling across replications."""
        return {S.M_TTFC_PREFIX: self.ttfc, S.M_COMPLETION_PREFIX: self.comp,
                S.M_QUEUE_WAIT_PREFIX: self.wait}

    def state_bytes(self) -> int:
        """Bytes held for the joins and the hazards (rare events; a few bytes per id)."""
        arrays = [*self.to_guid, *self.to_tp,
                  self.buf_uid, self.buf_ok_guid, self.buf_join_guid, self.buf_ok_tp]
        return sum(a.nbytes for a in arrays) + self.hazards.nbytes()

    def metrics(self, sessions_opened: IntCounts, timeseries: Any,
                counters: dict[str, Any]) -> dict[str, float | None]:
        """The replication's metrics, named and ordered as ``replication_metrics``'."""
        c = self.c.get
        n = int(c("n", 0))
        m: dict[str, float | None] = {}
        m[S.M_TURNS] = float(n)
        m[S.M_CALLS] = float(c("calls", 0))
        m[S.M_DEGRADED_CALL_SHARE] = _ratio(c("calls_degraded", 0), c("calls", 0))
        m[S.M_SUCCESS_RATE] = _ratio(c("out.completed", 0), n)
        m[S.M_FAILED_SHARE] = _ratio(c("out.failed", 0), n)
        m[S.M_ABANDONED_SHARE] = _ratio(c("out.abandoned", 0), n)
        m[S.M_UNFINISHED_SHARE] = _ratio(c("out.unfinished", 0), n)
        m[S.M_CANCELLED_SHARE] = _ratio(c("out.cancelled", 0), n)
        for r in REASONS:
            m[S.M_FAILED_BY_REASON_PREFIX + r] = _ratio(c("reason." + r, 0), n)
        for code in S.ERROR_CODES:
            m[S.M_FAILURE_RATE_PREFIX + code] = _ratio(c("code." + code, 0), n)
        m[S.M_FAILURE_RATE_PREFIX + "none"] = _ratio(c("code.none", 0), n)
        for q in S.PERCENTILES:
            m[f"{S.M_TTFC_PREFIX}p{q}"] = self.ttfc.percentile(q)
            m[f"{S.M_COMPLETION_PREFIX}p{q}"] = self.comp.percentile(q)
        m[S.M_NOT_SERVED_SHARE] = _ratio(c("not_served", 0), c("offered", 0))
        for q in S.PERCENTILES:
            m[f"{S.M_CALLER_TTFC_PREFIX}p{q}"] = self.ttfc.percentile(
                q, served=True, n_inf=int(c("caller_ttfc_inf", 0)))
            m[f"{S.M_CALLER_COMPLETION_PREFIX}p{q}"] = self.comp.percentile(
                q, served=True, n_inf=int(c("caller_comp_inf", 0)))
        m[S.M_ATTEMPTS_PER_TURN] = c("attempts", 0) / n if n else None
        m[S.M_RETRIES_PER_TURN] = c("retries", 0) / n if n else None
        n_calls = int(c("calls", 0))
        for r in S.CALL_END_REASONS:
            m[S.M_CALL_END_PREFIX + r + "_share"] = _ratio(c("call_end." + r, 0), n_calls)
        m[S.M_ESCALATED_TURNS_REMOVED] = _ratio(c("escalated_removed", 0), c("planned", 0))
        n_att = int(c("n_att", 0))
        for o in S.ATTEMPT_OUTCOMES:
            m[S.M_ATTEMPT_OUTCOME_PREFIX + o] = _ratio(c("att." + o, 0), n_att)
        m[S.M_LOAD_AMPLIFICATION] = _ratio(c("executed", 0), n)
        m[S.M_REJECTIONS_PER_TURN] = _ratio(c("rejections", 0), n)
        m[S.M_SHED_PER_1K] = _ratio(1000.0 * c("shed", 0), n)
        for d in S.CANCEL_DISPOSITIONS:
            m[S.M_CANCEL_PREFIX + d[len("cancel-"):].replace("-", "_") + "_per_1k_turns"] = (
                _ratio(1000.0 * c("disp." + d, 0), n))
        spurious, timed_out = self._spurious()
        m[S.M_SPURIOUS_TIMEOUTS_PER_1K] = _ratio(1000.0 * spurious, n)
        m[S.M_SPURIOUS_TIMEOUT_SHARE] = _ratio(spurious, timed_out)
        m.update(self._hazards(n, sessions_opened))
        m.update(timeseries_metrics(timeseries, self.warmup_s, self.duration_s))
        m.update(counter_metrics(counters))
        m.update(recovery_metrics(timeseries, counters, self.warmup_s, self.duration_s))
        span = self.duration_s - self.warmup_s
        inside = int(c("q.inside", 0))
        lam = inside / span if span > 0 else None
        mean_wait = c("q.wait_sum", 0.0) / inside if inside else None
        m.update({
            S.M_QUEUE_WAIT_PREFIX + "p50": self.wait.percentile(50),
            S.M_QUEUE_WAIT_PREFIX + "p99": self.wait.percentile(99),
            S.M_QUEUE_ARRIVAL_RATE: lam,
            S.M_QUEUE_THROUGHPUT: float(c("q.served", 0) / span) if span > 0 else None,
            S.M_QUEUE_MEAN_WAIT: mean_wait,
            S.M_QUEUE_P_WAIT: c("q.waited", 0) / inside if inside else None,
            S.M_QUEUE_MEAN_LENGTH: float(c("q.overlap", 0.0) / span) if span > 0 else None,
            S.M_QUEUE_LITTLE_LAMBDA_W: (lam * mean_wait if lam is not None
                                        and mean_wait is not None else None),
        })
        return m

    def _spurious(self) -> tuple[int, int]:
        if not self.to_guid:
            return 0, 0
        guid = np.concatenate(self.to_guid)
        tp = np.concatenate(self.to_tp)
        by_guid = np.isin(guid, np.fromiter(self.ok_guids, np.int64, len(self.ok_guids)))
        joined = np.isin(guid, np.fromiter(self.joined_guids, np.int64,
                                           len(self.joined_guids))) & ~by_guid
        by_task = joined & np.isin(tp, np.fromiter(self.ok_tps, np.int64, len(self.ok_tps)))
        return int((by_guid | by_task).sum()), len(guid)

    def _hazards(self, n: int, sessions_opened: IntCounts) -> dict[str, float | None]:
        h = self.hazards
        first_call = self.first_counted_call
        dup_sessions = sum(1 for k, v in sessions_opened.items() if v > 1 and k >= first_call)
        return {
            S.M_DUP_GUID_PER_1K: _ratio(1000.0 * h.extra(), n),
            S.M_REEXEC_TURN_PER_1K: _ratio(1000.0 * h.reexecuted, n),
            S.M_DUP_SESSION_PER_1K: _ratio(1000.0 * dup_sessions, n),
            S.M_GHOST_PER_1K: _ratio(1000.0 * h.ghosts(), n),
            S.M_SIDE_EFFECTS_PER_SE_TURN: _ratio(h.executions, self.c.get("se_turns", 0)),
        }
