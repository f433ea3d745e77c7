"""From observations to scenario values: service, network, queueing, capacity, errors.

:func:`calibrate` is the library function (no files, no CLI): it takes
:class:`~rtalab.sim.calibrate.observations.Observations` and a base scenario (whose
``[workload]``, ``[live]``, ``[run]`` and ``[load]`` are the *client's* settings — the
load offered, not a property of the deployment — and are kept), and returns a
:class:`Calibration`: one :class:`Value` per scenario key it could identify (value,
where it came from, CI, fit quality) and the keys it could not (left at the
simulator's defaults, with the reason).  docs/calibration.md states every method.

Separation of what the caller saw (per attempt, on the client's clock):

* **with the server's per-turn timings** (``server_*_s``): service = ``server_service_s``
  (reasoning on turns without a tool; reasoning + tool on side-effect turns), first-chunk
  delay = ``server_first_chunk_delay_s``, queue wait = ``server_queue_wait_s``; what is
  left of the time to the first event, ``first_response − send − queue wait``, is the
  round trip (network + HTTP + event loop): its part before the queue, ``intake``, and half
  of the rest go to the uplink latency, the other half to the downlink;
* **with the server's histograms only**: service and first-chunk delay are the
  histograms themselves (``dist = "histogram"``);
* **from the client alone**: in the least-loaded fifth of the run (attempts sent when the
  fewest attempts were in flight) queueing is taken as nil, so the time to the first event
  there is the round trip; service + first-chunk delay = first chunk − first event (the
  progress directive is sent when a worker starts), so the two are not told apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from rtalab.sim.calibrate.censored import fit_buckets
from rtalab.sim.calibrate.fit import Fit, fit_duration
from rtalab.sim.calibrate.observations import HISTOGRAMS, Observations
from rtalab.sim.config import to_plain
from rtalab.sim.dist import Histogram, LogNormal
from rtalab.sim.policy.codes import ALL_CODES
from rtalab.sim.scenario import ReasonerConfig, Scenario, from_dict
from rtalab.sim.shared.stats import wilson

WAITED_S = 0.002  # a queue wait counts as "every worker was busy" above this and above
WAITED_SERVICE_SHARE = 0.2  # this share of the mean service (a broker's round trip is not)
MIN_WAITED = 5  # waited attempts (per process) needed to read the capacity off the concurrency
LEAST_LOADED_SHARE = 0.2
FREED_JITTER_S = 0.01
CLIPPED = "cv clipped to 0"  # said with a value whose variance estimate came out negative
# codes the model produces itself (capacity refusals, the tool's timeout): not injected errors
EMERGENT_CODES = {"rate-limited": "capacity refusals (queue_limit / queue_timeout_s)",
                  "upstream-timeout": "the tool's timeout (upstream_timeout_s)",
                  "session-not-found": "an expired handoff (handoff_timeout_s)"}


@dataclass
class Value:
    """One calibrated scenario key."""

    key: str  # dotted, e.g. "reasoner.reasoning_time_s"
    value: Any  # TOML-ready
    source: str
    ci: str = ""
    quality: str = ""

    def comment(self) -> str:
        return "; ".join(p for p in (self.source, self.ci, self.quality) if p)


@dataclass
class Calibration:
    """The outcome of :func:`calibrate`."""

    values: list[Value]
    unidentified: list[tuple[str, str]]  # (key, why it could not be identified)
    fits: dict[str, Fit]
    figures: dict[str, Any]
    method: str  # "server-timings", "server-histograms" or "client-only"
    base: Scenario = field(default_factory=Scenario)
    network_from_base: bool = False  # server telemetry only: [network] is the base's

    def value(self, key: str) -> Any:
        """The calibrated value of ``key`` (KeyError if not identified)."""
        for v in self.values:
            if v.key == key:
                return v.value
        raise KeyError(key)

    def scenario_data(self) -> dict[str, Any]:
        """The calibrated scenario as plain data: the base's client sections, the deployment's
        sections at the simulator's defaults with every identified key set."""
        data = to_plain(self.base)
        data["reasoner"] = to_plain(ReasonerConfig())
        data["network"] = to_plain(self.base.network if self.network_from_base
                                   else Scenario().network)
        for v in self.values:
            node = data
            *path, last = v.key.split(".")
            for p in path:
                node = node.setdefault(p, {})
            node[last] = v.value
        return cast("dict[str, Any]", data)

    def scenario(self) -> Scenario:
        """The calibrated scenario, validated."""
        return from_dict(self.scenario_data())


def _in_flight_at(send: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Attempts in flight when each attempt was sent (itself excluded)."""
    end = np.where(np.isfinite(end), end, np.inf)
    s, e = np.sort(send), np.sort(end)
    return np.searchsorted(s, send, side="left") - np.searchsorted(e, send, side="right")


def _fit_value(key: str, fit: Fit, source: str) -> Value:
    return Value(key, fit.dist.to_toml(), source, quality=fit.comment())


def _wilson(k: int, n: int) -> tuple[float, float]:
    """95 % Wilson interval of a proportion (:func:`rtalab.sim.shared.stats.wilson`, z = 1.96)."""
    return wilson(k, n, 1.96)


def _count_at_waits(s: np.ndarray, e: np.ndarray, wt: np.ndarray,
                    jitter_s: float = 0.0) -> dict[str, Any]:
    """Services in progress when each waited service started (one pool of workers)."""
    ss, es = np.sort(s), np.sort(e)
    # a service starting as another ends may have taken its worker: on the client's clock
    # the two carry independent jitter, so a service ending up to FREED_JITTER_S later is
    # taken as the one that freed it (not as still running) -- at a waited start, and in the
    # largest count seen at once, the lower bound without waits (else a pool of 6 whose
    # worker changed hands reads "at least 7")
    tol = max(FREED_JITTER_S, jitter_s)
    conc = np.searchsorted(ss, s, side="right") - np.searchsorted(es, s + tol, side="right")
    at_wait = conc[wt]
    top = int(conc.max()) if len(conc) else 0
    if len(at_wait) >= MIN_WAITED:
        c = int(np.median(at_wait))
        return {"capacity": c, "identified": True, "waited": len(at_wait),
                "max_concurrency": top, "agreement": float(np.mean(at_wait == c))}
    return {"capacity": top, "identified": False, "waited": len(at_wait),
            "max_concurrency": top, "agreement": 0.0}


def waited_threshold_s(queue_wait: np.ndarray, mean_service_s: float) -> tuple[float, float]:
    """(threshold above which a queue wait means "every worker was busy", the queue's own
    overhead).  The threshold is :data:`WAITED_SERVICE_SHARE` of the mean service (at
    least :data:`WAITED_S`): a queue's own overhead — a capacity broker's round trip,
    event-loop lag, a few ms — stays below it, a real wait for a worker mostly exceeds it
    (turns that waited less are merely not used).  The overhead is the median of the
    waits below the threshold."""
    q = queue_wait[np.isfinite(queue_wait)]
    thr = max(WAITED_S, WAITED_SERVICE_SHARE * mean_service_s)
    low = q[q <= thr]
    return thr, float(np.median(low)) if len(low) else 0.0


def capacity_from_concurrency(start: np.ndarray, end: np.ndarray, waited: np.ndarray,
                              worker: np.ndarray, jitter_s: float = 0.0) -> dict[str, Any]:
    """Concurrent turns, read where a turn had to wait for a worker.

    A turn that waited found every worker of its pool busy and took the one just freed,
    so the number of services in progress at its start (itself included; services ending
    within :data:`FREED_JITTER_S` after it counted as ended: the client's clock jitters)
    is the pool's capacity: its median over the waited turns is the estimate
    (``identified``; with fewer than :data:`MIN_WAITED` waited turns the largest count
    seen is only a lower bound).  Two layouts are tried: one pool shared by every server
    process, or one pool per process (summed); the layout whose counts at the waits agree
    most often with their median is the deployment's (``layout``).
    """
    pooled = _count_at_waits(start, end, waited, jitter_s)
    per = {str(w): _count_at_waits(start[worker == w], end[worker == w], waited[worker == w],
                                   jitter_s) for w in np.unique(worker)}
    per_ok = bool(per) and all(p["identified"] for p in per.values())
    per_agree = float(np.mean([p["agreement"] for p in per.values()])) if per else 0.0
    # without an identified per-process estimate the pooled count stands: identified, or the
    # largest number of services seen at once, a lower bound whatever the layout (the sum of
    # per-process maxima reached at different times is not one for a shared pool)
    if len(per) <= 1 or not per_ok or (pooled["identified"]
                                       and pooled["agreement"] >= per_agree):
        return {"workers": pooled["capacity"], "identified": pooled["identified"],
                "layout": "one pool" if len(per) <= 1 else "one pool shared by the processes",
                "pooled": pooled, "per_process": per}
    return {"workers": sum(p["capacity"] for p in per.values()), "identified": per_ok,
            "layout": "one pool per process", "pooled": pooled, "per_process": per}


def capacity_from_probe(obs: Observations, mean_service_s: float) -> dict[str, Any] | None:
    """Saturation throughput × mean service time (Little's law at the knee of a step-load):
    the step with the most turns in service (throughput × its own mean service), since past
    the knee a busier server may serve slower and complete fewer turns per second."""
    if not obs.probe:
        return None
    best = max(obs.probe, key=lambda p: p.completed_turns_per_s * (
        p.mean_service_s if math.isfinite(p.mean_service_s) else mean_service_s))
    saturated = best.completed_turns_per_s < 0.9 * best.offered_turns_per_s or any(
        p.completed_turns_per_s < 0.9 * p.offered_turns_per_s for p in obs.probe)
    svc = best.mean_service_s if math.isfinite(best.mean_service_s) else mean_service_s
    if not math.isfinite(svc):
        return None
    return {"workers": max(1, round(best.completed_turns_per_s * svc)),
            "identified": saturated, "throughput_per_s": best.completed_turns_per_s,
            "mean_service_s": svc}


@dataclass
class _Columns:
    """The attempts' columns :func:`calibrate` reads, as arrays."""

    send: np.ndarray
    first: np.ndarray
    chunk: np.ndarray
    side: np.ndarray
    svc: np.ndarray
    qwait: np.ndarray
    intake: np.ndarray
    fcd: np.ndarray
    worker: np.ndarray
    completed: np.ndarray
    has_first: np.ndarray
    timed: np.ndarray

    @classmethod
    def of(cls, a: Any) -> _Columns:
        """The columns of the attempts table ``a``."""
        send, first, chunk = (a[c].to_numpy() for c in ("send_s", "first_response_s",
                                                        "first_chunk_s"))
        svc = a["server_service_s"].to_numpy()
        return cls(send=send, first=first, chunk=chunk, side=a["side_effect"].to_numpy(),
                   svc=svc, qwait=a["server_queue_wait_s"].to_numpy(),
                   intake=a["server_intake_s"].to_numpy(),
                   fcd=a["server_first_chunk_delay_s"].to_numpy(),
                   worker=a["worker"].to_numpy(),
                   completed=a["outcome"].to_numpy() == "completed",
                   has_first=np.isfinite(first) & np.isfinite(send), timed=np.isfinite(svc))


@dataclass
class _Found:
    """What :func:`calibrate` collects: the values, the keys not identified (with why), the
    fits and the figures."""

    seed: int
    values: list[Value] = field(default_factory=list)
    unident: list[tuple[str, str]] = field(default_factory=list)
    fits: dict[str, Fit] = field(default_factory=dict)
    fig: dict[str, Any] = field(default_factory=dict)


# the keys no method observes: reported as such unless a value or a reason names them
_UNOBSERVED = ("reasoner.queue_limit", "reasoner.queue_timeout_s", "reasoner.load_latency_k_s",
               "reasoner.upstream_timeout_s", "reasoner.context_rate_per_s",
               "reasoner.dedup_window_s", "network.uplink.loss", "network.downlink.loss")


def calibrate(obs: Observations, base: Scenario | None = None, seed: int = 0) -> Calibration:
    """Identify the deployment's scenario keys from ``obs`` (see the module docstring)."""
    base = base or Scenario()
    a = obs.attempts
    found = _Found(seed, fig={"attempts": len(a), "duration_s": obs.duration_s,
                              "source": obs.source, "turns_per_s": obs.turns_per_s})
    values, unident, fig = found.values, found.unident, found.fig
    c = _Columns.of(a)
    fig["progress_share"] = float(np.mean((c.first < c.chunk - 1e-3)[c.completed & c.has_first])) \
        if (c.completed & c.has_first).any() else math.nan

    cap: dict[str, Any] | None = None
    if c.timed.any():
        method = "server-timings"
        cap = _from_server_timings(c, found)
    elif HISTOGRAMS["service"] in obs.server_histograms:
        method = "server-histograms"
        _from_histograms(obs, values, unident, fig, seed)
        if len(a):
            _client_network(a, values, unident, found.fits, fig, seed)
        else:
            unident.append(("network", "server telemetry only: the network between the callers "
                            "and the server is not seen, so [network] is the base scenario's"))
    else:
        method = "client-only"
        _from_client(a, c, found)
    fig["method"] = method
    _capacity(obs, values, unident, fig, cap)
    offered_utilisation(fig, values, base)
    _chunks(obs, a, values, unident, fig)
    _errors(a, values, unident, fig, c.timed, obs)
    if fig.get("progress_share", 0) == fig.get("progress_share") and \
            fig["progress_share"] < 0.5:
        values.append(Value("reasoner.progress_directive", False,
                            "no progress event before the first chunk on most turns"))
    listed = {v.key for v in values} | {k for k, _ in unident}
    for key in _UNOBSERVED:
        if key not in listed and not (key.startswith("network.") and "network" in listed):
            unident.append((key, "not observable in these runs (simulator default kept)"))
    return Calibration(values, unident, found.fits, fig, method, base,
                       network_from_base=method == "server-histograms" and not len(a))


def _from_server_timings(c: _Columns, found: _Found) -> dict[str, Any]:
    """Reasoning, first chunk, tool, network and capacity from the server's per-turn
    timings; the capacity estimate (:func:`capacity_from_concurrency`)."""
    values, unident, fits, fig, seed = (found.values, found.unident, found.fits, found.fig,
                                        found.seed)
    timed, svc, side = c.timed, c.svc, c.side
    src = "server per-turn timings (server_service_s) of turns without a tool call"
    f = fit_duration("reasoning_time_s", svc[timed & ~side], seed)
    if f:
        fits["reasoning_time_s"] = f
        values.append(_fit_value("reasoner.reasoning_time_s", f, src))
    else:
        unident.append(("reasoner.reasoning_time_s", "fewer than 10 timed turns"))
    f = fit_duration("first_chunk_s", c.fcd[timed & c.completed & np.isfinite(c.fcd)], seed)
    if f:
        fits["first_chunk_s"] = f
        values.append(_fit_value("reasoner.first_chunk_s", f,
                                 "server per-turn timings (server_first_chunk_delay_s)"))
    _tool_latency(svc[timed & side], svc[timed & ~side], values, unident)
    # the round trip: the time to the first event not spent queueing
    ok = timed & c.has_first & np.isfinite(c.qwait)
    pre = c.first[ok] - c.send[ok] - c.qwait[ok]
    ink = np.where(np.isfinite(c.intake[ok]), c.intake[ok], 0.0)
    pre = np.maximum(pre, ink)
    net = pre - ink
    down = float(np.median(net) / 2) if len(net) else 0.0
    up = np.maximum(pre - down, 0.0)
    fig.update(rtt_median_s=float(np.median(pre)) if len(pre) else math.nan,
               intake_median_s=float(np.median(ink)) if len(ink) else math.nan)
    _network(values, unident, fits, up, down, seed,
             "first event − send − server queue wait (incl. server intake "
             f"{fig['intake_median_s'] * 1e3:.2f} ms median)")
    # capacity: concurrency of the services, per server process
    st = c.send + np.where(np.isfinite(c.intake), c.intake, 0.0) + np.where(
        np.isfinite(c.qwait), c.qwait, 0.0)
    thr, floor = waited_threshold_s(c.qwait[timed], float(svc[timed].mean()))
    waited = np.nan_to_num(c.qwait[timed]) > thr
    # the overhead is paid when a worker is taken and again when it is handed back
    cap = capacity_from_concurrency(st[timed], st[timed] + svc[timed], waited,
                                    c.worker[timed], jitter_s=floor)
    cap.update(waited_threshold_s=thr, queue_overhead_s=floor)
    fig["capacity"] = cap
    fig["queue_wait_share"] = float(np.mean(waited))
    fig["mean_service_s"] = float(svc[timed].mean())
    return cap


def _tool_latency(s_se: np.ndarray, s_ns: np.ndarray, values: list[Value],
                  unident: list[tuple[str, str]]) -> None:
    """The tool's latency: side-effect service = reasoning + tool (independent), so its
    moments by difference of the side-effect turns' (``s_se``) and the others' (``s_ns``)."""
    if len(s_se) < 10 or len(s_ns) < 10:
        unident.append(("reasoner.tool_latency_s", "fewer than 10 side-effect turns timed"))
        return
    m = float(s_se.mean() - s_ns.mean())
    se = math.sqrt(s_se.var(ddof=1) / len(s_se) + s_ns.var(ddof=1) / len(s_ns))
    var = float(s_se.var(ddof=1) - s_ns.var(ddof=1))
    if m - 1.96 * se > 0:
        cv = math.sqrt(max(var, 0.0)) / m
        values.append(Value(
            "reasoner.tool_latency_s", LogNormal(m, cv).to_toml(),
            "side-effect turns' service minus the others' (moments; lognormal assumed)",
            f"mean {m:.4g} s [{m - 1.96 * se:.4g}, {m + 1.96 * se:.4g}]",
            f"n = {len(s_se)} / {len(s_ns)}" + (
                "" if var >= 0 else f"; {CLIPPED}: the variance by difference was "
                f"negative ({var:.3g} s^2, noise), so the tool's spread is not "
                "identified and a constant tool time is assumed")))
    else:  # measured: no slower (the simulator's default would add a tool that is not)
        values.append(Value(
            "reasoner.tool_latency_s", 0.0,
            "side-effect turns are not measurably slower than the others: 0",
            f"difference of means {m:.4g} s [{m - 1.96 * se:.4g}, {m + 1.96 * se:.4g}]",
            f"n = {len(s_se)} / {len(s_ns)}"))


def _from_client(a: Any, c: _Columns, found: _Found) -> None:
    """Network and reasoning time from what the callers saw alone (no server timings)."""
    values, unident, fig = found.values, found.unident, found.fig
    rtt = _client_network(a, values, unident, found.fits, fig, found.seed)
    ok = c.completed & c.has_first & ~c.side & (c.first < c.chunk - 1e-3)
    f = fit_duration("reasoning_time_s", c.chunk[ok] - c.first[ok], found.seed)
    if f:
        found.fits["reasoning_time_s"] = f
        values.append(_fit_value(
            "reasoner.reasoning_time_s", f,
            "client: first chunk − first event (progress directive at service start) of "
            "turns without a tool; includes the first-chunk delay"))
        fig["mean_service_s"] = f.mean
    else:
        unident.append(("reasoner.reasoning_time_s",
                        "no progress directive before the first chunk"))
    unident.append(("reasoner.first_chunk_s", "not separable from the reasoning time "
                    "without server timings (folded into it)"))
    unident.append(("reasoner.tool_latency_s", "not separable without server timings"))
    fig["rtt_median_s"] = rtt


def _from_histograms(obs: Observations, values: list[Value], unident: list[tuple[str, str]],
                     fig: dict[str, Any], seed: int) -> None:
    """Service and first-chunk delay from the server's histograms: interval-censored fits
    (:mod:`rtalab.sim.calibrate.censored`), the histogram itself where no family fits."""
    fig["bucket_fits"] = {}
    for key, role, what in (("reasoner.reasoning_time_s", "service", "all turns, tool included"),
                            ("reasoner.first_chunk_s", "first_chunk_delay", "")):
        name = HISTOGRAMS[role]
        if name not in obs.server_histograms:
            unident.append((key, f"no histogram {name}"))
            continue
        le, counts = obs.server_histograms[name]
        f = fit_buckets(key.split(".")[-1], le, counts, seed)
        if f is None:
            unident.append((key, f"fewer than 10 observations in {name}"))
            continue
        fig["bucket_fits"][key] = f.summary()
        values.append(Value(key, f.dist.to_toml(), f"server histogram {name}"
                            + (f" ({what})" if what else ""), quality=f.comment()))
        if role == "service":
            fig["mean_service_s"] = f.mean
    values.append(Value("reasoner.tool_latency_s", 0.0, "folded into reasoning_time_s: the "
                        "service histogram holds the tool turns' service too"))
    if HISTOGRAMS["queue_wait"] in obs.server_histograms:
        le, counts = obs.server_histograms[HISTOGRAMS["queue_wait"]]
        if counts[-1] > 0:
            fig["queue_wait_mean_s"] = Histogram(le, counts).mean


def capacity_from_gauges(gauges: list[tuple[float, float, float]]) -> dict[str, Any] | None:
    """Workers from scrapes of the busy-workers and queued-turns gauges: a scrape that found
    turns queued found every worker busy, so its busy count is the capacity (the median over
    those scrapes, at least :data:`MIN_WAITED`); otherwise the most seen busy is a lower bound."""
    if not gauges:
        return None
    busy = np.asarray([g[1] for g in gauges])
    queued = np.asarray([g[2] for g in gauges])
    at_queue = busy[queued > 0]
    top = int(busy.max())
    if len(at_queue) >= MIN_WAITED:
        c = int(np.median(at_queue))
        return {"workers": c, "identified": True, "scrapes": len(gauges),
                "queued_scrapes": len(at_queue), "agreement": float(np.mean(at_queue == c)),
                "max_busy": top}
    return {"workers": top, "identified": False, "scrapes": len(gauges),
            "queued_scrapes": len(at_queue), "max_busy": top}


def _network(values: list[Value], unident: list[tuple[str, str]], fits: dict[str, Fit],
             up: np.ndarray, down: float, seed: int, how: str) -> None:
    """Uplink latency as a fitted law, downlink as a constant half of the wire time."""
    f = fit_duration("uplink_latency_s", up, seed)
    if f is None:
        unident.append(("network.uplink.latency_s", "fewer than 10 round trips"))
        return
    fits["uplink_latency_s"] = f
    values.append(_fit_value("network.uplink.latency_s", f, f"round trip: {how}; uplink = "
                             "intake + half of the rest"))
    values.append(Value("network.downlink.latency_s", round(down, 6),
                        "half of the round trip's wire time (median), as a constant"))


def _client_network(a: Any, values: list[Value], unident: list[tuple[str, str]],
                    fits: dict[str, Fit], fig: dict[str, Any], seed: int) -> float:
    """Round trip from the least-loaded fifth of the run, split evenly; returns its median."""
    send, first, end = (a[c].to_numpy() for c in ("send_s", "first_response_s", "end_s"))
    ok = np.isfinite(send) & np.isfinite(first)
    if ok.sum() < 10:
        unident.append(("network.uplink.latency_s", "fewer than 10 answered attempts"))
        return math.nan
    load = _in_flight_at(send, end)[ok]
    pre = (first - send)[ok]
    cut = np.quantile(load, LEAST_LOADED_SHARE)
    quiet = pre[load <= cut]
    rtt = float(np.median(quiet))
    fig.update(least_loaded_in_flight_max=int(cut), least_loaded_attempts=len(quiet))
    _network(values, unident, fits, quiet - rtt / 2, rtt / 2, seed,
             f"first event − send of the {len(quiet)} attempts sent with <= {int(cut)} in "
             "flight (the least-loaded fifth: queueing taken as nil)")
    return rtt


def _capacity(obs: Observations, values: list[Value], unident: list[tuple[str, str]],
              fig: dict[str, Any], from_timings: dict[str, Any] | None) -> None:
    _capacity_value(obs, values, unident, fig, from_timings)
    workers = [v.value for v in values if v.key == "reasoner.workers"]
    svc = fig.get("mean_service_s", math.nan)
    if workers and obs.duration_s > 0 and math.isfinite(svc):
        rate = len(obs.attempts) / obs.duration_s if len(obs.attempts) else obs.turns_per_s
        fig["utilisation"] = rate * svc / workers[0]


def offered_utilisation(fig: dict[str, Any], values: list[Value], base: Scenario) -> None:
    """``fig["offered_utilisation"]``: the model's utilisation at the scenario's rate, calls/s ×
    mean turns per call × calibrated mean service / workers (deterministic given the
    calibration; ``fig["utilisation"]`` is the run's *measured busy share*, which moves with
    the run's random arrivals).  Not set when the capacity is not identified."""
    workers = [v.value for v in values if v.key == "reasoner.workers"]
    svc = fig.get("mean_service_s", math.nan)
    if workers and math.isfinite(svc) and workers[0] > 0:
        rate = float(base.workload.calls_per_s) * float(base.workload.turns_per_call.mean)
        fig["offered_utilisation"] = rate * svc / workers[0]


def _capacity_value(obs: Observations, values: list[Value], unident: list[tuple[str, str]],
                    fig: dict[str, Any], from_timings: dict[str, Any] | None) -> None:
    if obs.capacity is not None:
        values.append(Value("reasoner.workers", int(obs.capacity), obs.capacity_source))
        return
    probe = capacity_from_probe(obs, fig.get("mean_service_s", math.nan))
    if probe and probe["identified"]:
        fig["capacity_probe"] = probe
        values.append(Value(
            "reasoner.workers", probe["workers"],
            f"step-load knee: {probe['throughput_per_s']:.3g} turns/s at saturation × "
            f"mean service {probe['mean_service_s']:.3g} s (Little's law)"))
        return
    gauge = capacity_from_gauges(obs.gauges)
    if gauge is not None:
        fig["capacity_gauges"] = gauge
        if gauge["identified"]:
            values.append(Value(
                "reasoner.workers", gauge["workers"],
                f"busy workers at the {gauge['queued_scrapes']} of {gauge['scrapes']} scrapes "
                "that found turns queued (median)",
                quality=f"{gauge['agreement']:.0%} of them agree"))
            return
        from_timings = from_timings or {"workers": gauge["workers"]}
    if from_timings and from_timings.get("identified"):
        per, pooled = from_timings["per_process"], from_timings["pooled"]
        values.append(Value(
            "reasoner.workers", from_timings["workers"],
            "services in progress when a queued turn got a worker "
            f"({from_timings['layout']}, {len(per)} server process(es))",
            quality=f"pooled: {pooled['capacity']} ({pooled['agreement']:.0%} of "
                    f"{pooled['waited']} waits agree); " + "; ".join(
                        f"process {w}: {p['capacity']} ({p['agreement']:.0%} of {p['waited']})"
                        for w, p in per.items())))
        return
    lower = from_timings["workers"] if from_timings else None
    seen = "no scrape found a turn queued" if gauge is not None else "no turn waited for a worker"
    why = (f"{seen}: at least {lower} concurrent turns (run `rtalab load probe`)" if lower else
           "no server timings and no step-load (run `rtalab load probe`)")
    unident.append(("reasoner.workers", why))


def _chunks(obs: Observations, a: Any, values: list[Value], unident: list[tuple[str, str]],
            fig: dict[str, Any]) -> None:
    if len(obs.chunks):
        n = int(np.bincount(obs.chunks).argmax())
        values.append(Value("reasoner.chunks", n, "spoken chunks per completed attempt (mode)",
                            quality=f"n = {len(obs.chunks)}"))
    elif math.isfinite(obs.chunks_per_completed) and obs.chunks_per_completed > 0:
        values.append(Value("reasoner.chunks", max(1, round(obs.chunks_per_completed)),
                            "server counter: spoken chunks / completed turns",
                            quality=f"{obs.chunks_per_completed:.3f} per completed turn"))
    else:
        unident.append(("reasoner.chunks", "no event ledger"))
    gaps = obs.chunk_gaps_s[np.isfinite(obs.chunk_gaps_s)]
    if len(gaps) >= 10:
        med = float(np.median(gaps))
        lo, hi = np.quantile(gaps, [0.25, 0.75])
        values.append(Value("reasoner.chunk_interval_s", round(med, 6),
                            "median gap between spoken chunks at the client",
                            f"interquartile [{lo:.4g}, {hi:.4g}] s", f"n = {len(gaps)}"))
    elif HISTOGRAMS["chunk_interval"] in obs.server_histograms and \
            obs.server_histograms[HISTOGRAMS["chunk_interval"]][1][-1] >= 10:
        h = Histogram(*obs.server_histograms[HISTOGRAMS["chunk_interval"]])
        lo, med, hi = (float(x) for x in h.quantile(np.array([0.25, 0.5, 0.75])))
        values.append(Value("reasoner.chunk_interval_s", round(med, 6),
                            f"server histogram {HISTOGRAMS['chunk_interval']} (median, "
                            "interpolated in its bucket)", f"interquartile [{lo:.4g}, {hi:.4g}] s",
                            f"n = {h.counts[-1]:g}"))
    else:
        unident.append(("reasoner.chunk_interval_s", "fewer than 10 chunk gaps"))


def _errors(a: Any, values: list[Value], unident: list[tuple[str, str]], fig: dict[str, Any],
            timed: np.ndarray, obs: Observations | None = None) -> None:
    """Injected failure probability per code, per execution; emergent codes reported apart."""
    outcome, code = a["outcome"].to_numpy(), a["error_code"].to_numpy()
    if len(a) == 0 and obs is not None and obs.server_turns:  # the server's turn counter
        n = round(sum(obs.server_turns.values()))
        counts = {c: round(sum(v for (o, k), v in obs.server_turns.items()
                               if o == "failed" and k == c)) for c in ALL_CODES}
        how = "FAILED turns per code / turns answered (server counter, Wilson 95 % CI)"
    else:
        answered = np.isfinite(a["first_response_s"].to_numpy())
        executed = timed if timed.any() else answered
        n = int(executed.sum())
        failed = outcome == "failed"
        counts = {c: int((failed & (code == c)).sum()) for c in ALL_CODES}
        how = "FAILED states per code / executions (Wilson 95 % CI)"
    errors: dict[str, float] = {}
    report: dict[str, dict[str, Any]] = {}
    for c in ALL_CODES:
        k = counts[c]
        if not k or not n:
            continue
        lo, hi = _wilson(k, n)
        report[c] = {"count": k, "per_execution": k / n, "ci": [lo, hi],
                     "emergent": c in EMERGENT_CODES}
        if c not in EMERGENT_CODES:
            errors[c] = round(k / n, 6)
    fig["errors"] = report
    fig["executions"] = n
    text = ", ".join(f"{c} {r['count']}/{n} [{r['ci'][0]:.2%}, {r['ci'][1]:.2%}]"
                     for c, r in report.items() if not r["emergent"])
    values.append(Value("reasoner.errors", errors, how,
                        text or f"no injected failure in {n} executions"))
    emergent = {c: r for c, r in report.items() if r["emergent"]}
    if emergent:
        fig["emergent_errors"] = emergent
    ra = a["retry_after_ms"].to_numpy()
    ra = ra[np.isfinite(ra) & (code == "rate-limited")]
    if len(ra):
        values.append(Value("reasoner.retry_after_ms", int(np.median(ra)),
                            "retryAfterMs of rate-limited answers (median)",
                            quality=f"n = {len(ra)}, range [{ra.min():g}, {ra.max():g}]"))
    else:
        unident.append(("reasoner.retry_after_ms", "no rate-limited answer seen"))


__all__ = ["Calibration", "Value", "calibrate", "capacity_from_concurrency"]
