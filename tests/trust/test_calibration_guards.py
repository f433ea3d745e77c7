"""Calibration statistics, expected values written out: capacity read at a wait under the
client's clock jitter, error rates per execution (not per attempt)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rtalab.sim.calibrate.estimate import _errors, capacity_from_concurrency


def test_capacity_counts_the_service_that_freed_the_worker_as_ended_despite_jitter() -> None:
    """Two workers; in each of 6 cycles A runs [b, b + 1.004], B [b, b + 2], and C waits and
    starts at b + 1.0 on the worker A freed — on the client's clock A ended 4 ms later
    (jitter). At C's start A, B and C have started and A has ended: 2 workers, not 3."""
    start, end, waited = [], [], []
    for k in range(6):
        b = 10.0 * k
        start += [b, b, b + 1.0]
        end += [b + 1.004, b + 2.0, b + 1.5]
        waited += [False, False, True]
    r = capacity_from_concurrency(np.array(start), np.array(end), np.array(waited),
                                  np.zeros(18, dtype=int))
    assert (r["workers"], r["identified"]) == (2, True)


def test_per_process_capacity_needs_every_process_identified() -> None:
    """Two processes with a pool each: process a (3 workers) waits in every cycle, so its
    count at the waits says 3; process b never waits (1, 2 or 0 services beside a's): its
    largest count, 2, is only a lower bound.  The per-process layout would sum 3 + 2 and
    call it identified; with b unidentified the pooled reading stands instead -- never "one
    pool per process, identified"."""
    start, end, waited, proc = [], [], [], []
    for k in range(9):
        b = 10.0 * k
        start += [b, b, b, b + 1.0]  # a: three busy, a fourth waits for the first to end
        end += [b + 1.0, b + 1.5, b + 1.5, b + 2.0]
        waited += [False, False, False, True]
        proc += ["a"] * 4
        for j in range(k % 3):  # b: 0, 1 or 2 services running across a's wait
            start.append(b + 0.2 + 0.1 * j)
            end.append(b + 1.8)
            waited.append(False)
            proc.append("b")
    r = capacity_from_concurrency(np.array(start), np.array(end), np.array(waited),
                                  np.array(proc))
    per = r["per_process"]
    assert (per["a"]["capacity"], per["a"]["identified"]) == (3, True)
    assert (per["b"]["capacity"], per["b"]["identified"]) == (2, False)
    assert r["layout"] != "one pool per process", r
    assert r["workers"] == r["pooled"]["capacity"]


def test_error_rates_are_per_execution() -> None:
    """100 attempts, 50 executed (server timings), 5 of those FAILED internal: 10 % per
    execution (5 % per attempt would halve the injected rate)."""
    n = 100
    outcome = np.array(["completed"] * n, dtype=object)
    code = np.array([None] * n, dtype=object)
    outcome[:5], code[:5] = "failed", "internal"
    outcome[50:] = "failed"  # refused before execution: no server timing, no code
    a = pd.DataFrame({"outcome": outcome, "error_code": code,
                      "first_response_s": np.arange(n, dtype=float), "retry_after_ms": np.nan})
    timed = np.arange(n) < 50
    values: list = []
    fig: dict = {}
    _errors(a, values, [], fig, timed)
    rep = fig["errors"]["internal"]
    assert fig["executions"] == 50
    assert rep["per_execution"] == pytest.approx(0.1)
    assert rep["ci"][0] <= 0.1 <= rep["ci"][1]
    assert values[0].value == {"internal": 0.1}


def test_emergent_codes_are_reported_not_injected() -> None:
    """rate-limited (capacity refusals) is the model's own: 4 of 50 executions are reported
    with their rate and interval, marked emergent, and not written as an injected error."""
    n = 50
    outcome = np.array(["completed"] * n, dtype=object)
    code = np.array([None] * n, dtype=object)
    outcome[:5], code[:5] = "failed", "internal"
    outcome[5:9], code[5:9] = "failed", "rate-limited"
    a = pd.DataFrame({"outcome": outcome, "error_code": code,
                      "first_response_s": np.arange(n, dtype=float), "retry_after_ms": np.nan})
    values: list = []
    fig: dict = {}
    _errors(a, values, [], fig, np.ones(n, dtype=bool))
    assert values[0].value == {"internal": 0.1}
    rl = fig["errors"]["rate-limited"]
    assert (rl["count"], rl["emergent"]) == (4, True)
    assert rl["per_execution"] == pytest.approx(0.08)
    assert fig["errors"]["internal"]["emergent"] is False


def test_negative_and_infinite_durations_are_not_fitted() -> None:
    """A clock step gives negative durations; they are no duration and are left out: 40 of
    the 50 values are fitted, and the fitted mean is theirs."""
    import numpy as np

    from rtalab.sim.calibrate.fit import fit_duration

    good = np.random.default_rng(4).gamma(4.0, 0.1, 40)
    x = np.concatenate([good, -np.abs(good[:8]), [np.inf, np.nan]])
    f = fit_duration("reasoning_time_s", x, seed=1)
    assert f is not None and f.n == 40
    assert f.mean == pytest.approx(float(good.mean()), rel=1e-9)


def test_tool_latency_interval_weighs_each_sample_by_its_own_size() -> None:
    """The difference of two means has se^2 = var_se/n_se + var_ns/n_ns: 10 side-effect
    turns (sd 0.01 s) against 1,000 others (sd 2 s) give se = 0.0633 s, so a 0.5 s tool is
    identified (a se taking the others' variance over 10 would be 0.63 s: "not slower")."""
    from rtalab.sim.calibrate.estimate import Value, _tool_latency

    s_se = 1.0 + 0.01 * np.array([-1.5, -1.0, -0.5, -0.2, 0.0, 0.0, 0.2, 0.5, 1.0, 1.5])
    z = np.random.default_rng(3).standard_normal(1000)
    s_ns = 0.5 + 2.0 * (z - z.mean()) / z.std(ddof=1)  # mean 0.5 s, sd 2 s exactly
    values: list[Value] = []
    _tool_latency(s_se, s_ns, values, [])
    (v,) = values
    assert v.value != 0.0 and v.ci == "mean 0.5 s [0.3759, 0.6241]", v


def test_tool_latency_not_slower_when_its_interval_holds_zero() -> None:
    from rtalab.sim.calibrate.estimate import Value, _tool_latency

    s = np.linspace(0.9, 1.1, 20)
    values: list[Value] = []
    _tool_latency(s + 0.001, s, values, [])
    assert [v.value for v in values] == [0.0]
