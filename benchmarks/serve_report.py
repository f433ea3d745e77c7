"""The serve bench's records and report: samples, per-store summaries, the table and the
paired ratios against ``none`` (the arithmetic ``tests/serve/test_bench.py`` checks).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rtalab.benchmarks.util import Measurement, host_line

RATIO_TARGET = 0.9  # store throughput (and CPU-per-turn equivalent) >= 0.9 x none
MIN_CPU_S = 1.0  # CPU time below which a per-turn CPU figure is too coarse to print (10 ms ticks)
SLOW_REMEDY = ("remedy: time the store's calls inside the server with time.thread_time() "
               "(SqliteStore.claim/complete/bind, SessionRegistry.admit, "
               "ProfileRequestHandler._settle; cProfile cannot dump: uvicorn re-raises SIGTERM), "
               "check that the -wal file stays small, and count store transactions per turn.")


# --------------------------------------------------------------------------- records


@dataclass
class Sample:
    """One measurement: ``turns`` turns against one store in one round."""

    store: str
    round: int
    turns: int
    wall_s: float
    server_cpu_s: float | None  # the Reasoner's process group
    helper_cpu_s: float | None  # redis-server (redis only)
    client_cpu_s: float
    latencies_s: list[float]  # the timed turns at --concurrency
    probe_latencies_s: list[float] = field(default_factory=list)  # the probe at concurrency 1
    probe_server_cpu_s: float | None = None  # the Reasoner (+ store server) during the probe
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def turns_per_s(self) -> float:
        """Completed turns per second of wall time."""
        return len(self.latencies_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def server_cpu_per_turn_s(self) -> float | None:
        """CPU seconds of the Reasoner plus its store server per completed turn."""
        if self.server_cpu_s is None or not self.latencies_s:
            return None
        return (self.server_cpu_s + (self.helper_cpu_s or 0.0)) / len(self.latencies_s)

    def as_json(self) -> dict[str, Any]:
        """Raw figures of this sample (latencies in ms)."""
        return {"store": self.store, "round": self.round, "turns": self.turns,
                "completed": len(self.latencies_s), "errors": dict(self.errors),
                "wall_s": self.wall_s, "turns_per_s": self.turns_per_s,
                "server_cpu_s": self.server_cpu_s, "store_server_cpu_s": self.helper_cpu_s,
                "client_cpu_s": self.client_cpu_s,
                "latencies_ms": [round(x * 1e3, 3) for x in self.latencies_s],
                "probe_server_cpu_s": self.probe_server_cpu_s,
                "probe_latencies_ms": [round(x * 1e3, 3) for x in self.probe_latencies_s]}


@dataclass
class StoreSummary:
    """The samples of one store, summarised across rounds."""

    store: str
    samples: list[Sample]

    @property
    def throughput(self) -> Measurement:
        """Turns/s per round."""
        return Measurement(f"{self.store} turns/s", "turns",
                           tuple(s.turns_per_s for s in self.samples), self.samples[0].turns)

    @property
    def cpu_ms_per_turn(self) -> list[float]:
        """Server CPU milliseconds per turn, per round (empty where /proc is unavailable)."""
        values = [s.server_cpu_per_turn_s for s in self.samples]
        return [v * 1e3 for v in values if v is not None]

    @property
    def cpu_ms(self) -> float | None:
        """Median server CPU ms per turn."""
        v = self.cpu_ms_per_turn
        return statistics.median(v) if v else None

    def percentile_ms(self, q: float, probe: bool = False) -> float:
        """The ``q`` quantile (0..1, nearest rank) in ms of the turn latency at
        ``--concurrency`` (or of the concurrency-1 probe), all rounds pooled; NaN if none."""
        lat = sorted(x for s in self.samples
                     for x in (s.probe_latencies_s if probe else s.latencies_s))
        if not lat:
            return float("nan")
        return lat[min(len(lat) - 1, max(0, round(q * len(lat)) - 1))] * 1e3

    @property
    def errors(self) -> Counter[str]:
        """Errors of every round, by kind."""
        total: Counter[str] = Counter()
        for s in self.samples:
            total.update(s.errors)
        return total

    @property
    def client_cpu_ms(self) -> float:
        """Median load-generator CPU ms per turn."""
        return statistics.median(s.client_cpu_s / max(1, len(s.latencies_s)) * 1e3
                                 for s in self.samples)

    def as_json(self) -> dict[str, Any]:
        """The summary figures."""
        m = self.throughput
        return {"turns_per_s_median": m.median, "turns_per_s": list(m.rates),
                "spread": m.spread, "server_cpu_ms_per_turn_median": self.cpu_ms,
                "server_cpu_ms_per_turn": self.cpu_ms_per_turn,
                "p50_ms": self.percentile_ms(0.50), "p99_ms": self.percentile_ms(0.99),
                "probe_p50_ms": self.percentile_ms(0.50, probe=True),
                "probe_p99_ms": self.percentile_ms(0.99, probe=True),
                "probe_server_cpu_ms_per_turn": self.probe_cpu_ms,
                "errors": sum(self.errors.values()), "client_cpu_ms_per_turn": self.client_cpu_ms}

    @property
    def probe_cpu_ms(self) -> float | None:
        """Server CPU ms per turn during the concurrency-1 probes (all rounds); None if they
        used less than :data:`MIN_CPU_S` (the /proc clock ticks every 10 ms)."""
        cpu = [s.probe_server_cpu_s for s in self.samples if s.probe_server_cpu_s is not None]
        n = sum(len(s.probe_latencies_s) for s in self.samples
                if s.probe_server_cpu_s is not None)
        return sum(cpu) / n * 1e3 if n and sum(cpu) >= MIN_CPU_S else None


# --------------------------------------------------------------------------- report


def versions_line() -> str:
    """``host:`` line with the versions that shape the figures."""
    import sqlite3
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    import platform
    return host_line({"Python": platform.python_version(), "a2a-sdk": version("a2a-sdk"),
                      "uvicorn": version("uvicorn"), "uvloop": version("uvloop"),
                      "httptools": version("httptools"), "redis-py": version("redis"),
                      "SQLite": sqlite3.sqlite_version})


def _fmt_ms(v: float | None) -> str:
    """A millisecond figure, or n/a."""
    return "n/a" if v is None else f"{v:.2f}"


def table(summaries: Sequence[StoreSummary], concurrency: int) -> list[str]:
    """One row per store: median turns/s, spread, per-round turns/s, server CPU ms per turn
    (median), p50/p99 latency at ``concurrency`` and in the concurrency-1 probe, errors."""
    loaded, probe = f"c={concurrency}", "c=1"
    rows = [f"{'store':<7} {'turns/s':>8} {'spread':>6}  {'per round':<30} {'CPU ms/turn':>11} "
            f"{'p50 ' + loaded:>9} {'p99 ' + loaded:>9} {'p50 ' + probe:>8} "
            f"{'p99 ' + probe:>8} {'errors':>6}"]
    for s in summaries:
        m = s.throughput
        per_round = " ".join(f"{r:,.0f}" for r in m.rates)
        rows.append(f"{s.store:<7} {m.median:>8,.1f} {m.spread:>6.1%}  {per_round:<30} "
                    f"{_fmt_ms(s.cpu_ms):>11} {s.percentile_ms(0.5):>9.1f} "
                    f"{s.percentile_ms(0.99):>9.1f} {s.percentile_ms(0.5, True):>8.2f} "
                    f"{s.percentile_ms(0.99, True):>8.2f} {sum(s.errors.values()):>6}")
    helper = " (+ redis-server for redis)" if any(x.store == "redis" for x in summaries) else ""
    rows.append(f"(turns/s: median of the rounds; spread: (max - min) / median; CPU: the "
                f"Reasoner process{helper} per turn, median; latencies in ms, rounds pooled)")
    return rows


def paired_ratios(base: StoreSummary, other: StoreSummary) -> tuple[list[float], list[float]]:
    """Per round: ``other`` turns/s ÷ ``base`` turns/s, and ``base`` CPU per turn ÷ ``other``
    CPU per turn (both >= 1 when ``other`` is cheaper).  The two measurements of a round ran
    back to back, so their ratio is immune to slow drifts of the machine's load."""
    tp: list[float] = []
    cpu: list[float] = []
    for b, o in zip(base.samples, other.samples, strict=False):
        if b.turns_per_s > 0:
            tp.append(o.turns_per_s / b.turns_per_s)
        bc, oc = b.server_cpu_per_turn_s, o.server_cpu_per_turn_s
        if bc is not None and oc:
            cpu.append(bc / oc)
    return tp, cpu


def ratios(base: StoreSummary, other: StoreSummary) -> dict[str, Any]:
    """Median paired throughput and CPU-per-turn ratios (per round too) and added latencies."""
    tp, cpu = paired_ratios(base, other)
    return {"throughput_ratio": statistics.median(tp) if tp else None,
            "cpu_per_turn_ratio": statistics.median(cpu) if cpu else None,
            "throughput_ratio_per_round": tp, "cpu_per_turn_ratio_per_round": cpu,
            "p50_added_ms": other.percentile_ms(0.5) - base.percentile_ms(0.5),
            "p99_added_ms": other.percentile_ms(0.99) - base.percentile_ms(0.99),
            "probe_p50_added_ms": (other.percentile_ms(0.5, True)
                                   - base.percentile_ms(0.5, True)),
            "probe_p99_added_ms": (other.percentile_ms(0.99, True)
                                   - base.percentile_ms(0.99, True))}


def _ratio_text(label: str, v: float | None, per_round: Sequence[float],
                judged: bool) -> tuple[str, str | None]:
    """``label 0.95x [0.93..0.97]`` plus the PASS/WARN verdict against the target if ``judged``."""
    if v is None:
        return f"{label} n/a", None
    text = f"{label} {v:.2f}x"
    if len(per_round) > 1:
        text += f" [rounds {min(per_round):.2f}..{max(per_round):.2f}]"
    if not judged:
        return text, None
    verdict = "PASS" if v >= RATIO_TARGET else "WARN"
    return f"{text} (target >= {RATIO_TARGET:g}x: {verdict})", verdict


def comparison_lines(base: StoreSummary, others: Sequence[StoreSummary], concurrency: int
                     ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The ratio and added-latency lines of each store against ``none``."""
    lines: list[str] = []
    figures: dict[str, dict[str, Any]] = {}
    for s in others:
        r = ratios(base, s)
        judged = s.store == "sqlite"  # the throughput target is stated for the SQLite store
        tp_text, tp_verdict = _ratio_text("throughput ratio", r["throughput_ratio"],
                                          r["throughput_ratio_per_round"], judged)
        cpu_text, cpu_verdict = _ratio_text("CPU-per-turn ratio", r["cpu_per_turn_ratio"],
                                            r["cpu_per_turn_ratio_per_round"], judged)
        lines.append(f"{s.store} vs none: {tp_text}, {cpu_text}")
        if "WARN" in (tp_verdict, cpu_verdict):
            lines.append(f"  {SLOW_REMEDY}")
        figures[s.store] = {**r, "throughput_verdict": tp_verdict,
                            "cpu_per_turn_verdict": cpu_verdict}
    added = ", ".join(f"{s.store} {figures[s.store]['p99_added_ms']:+.1f} ms" for s in others)
    lines.append(f"p99 added latency vs none at concurrency {concurrency} (saturated, mostly "
                 f"queueing): {added}")
    if any(s.probe_latencies_s for s in base.samples):
        added = ", ".join(f"{s.store} {figures[s.store]['probe_p99_added_ms']:+.2f} ms "
                          f"(p50 {figures[s.store]['probe_p50_added_ms']:+.2f} ms)"
                          for s in others)
        lines.append(f"p99 added latency vs none at concurrency 1 (the store's own cost): "
                     f"{added}")
    return lines, figures
