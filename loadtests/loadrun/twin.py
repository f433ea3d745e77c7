"""Twin check: one scenario, the simulator's prediction and a load run's measurement.

:func:`simulate_like` simulates ``replications`` replications with exactly the load
run's duration, warm-up and drain (the load run is then one more draw of the same
experiment if the two worlds are twins); :func:`twin_check` says whether the
load run's :data:`TWIN_METRICS` lie inside the simulator's simultaneous
prediction intervals (:func:`rtalab.sim.shared.agreement.simultaneous_prediction`; false
failure <= 1/(R+1) for a twin).  ``tests/twin`` runs it on ``baseline`` and an overloaded scenario,
across bindings and Reasoner processes; docs/contracts.md says how each scenario
key is realised in the embedded deployment.
"""

from __future__ import annotations

from typing import Any

from rtalab.sim.runner import run_once
from rtalab.sim.scenario import Scenario
from rtalab.sim.shared.agreement import TwinCheck, simultaneous_prediction
from rtalab.sim.shared.summary import replication_metrics

# the caller-perceived metrics both worlds measure, checked by the twin tests
TWIN_METRICS = ("ttfc_s.p50", "ttfc_s.p99", "completion_s.p50", "completion_s.p99",
                "success_rate", "attempts_per_turn")


def like_load_run(sc: Scenario, duration_s: float, warmup_s: float, drain_s: float) -> Scenario:
    """``sc`` with the load run's duration, warm-up and drain."""
    return sc.with_overrides({"run.duration_s": duration_s, "run.warmup_s": warmup_s,
                              "run.drain_s": drain_s})


def simulate_like(sc: Scenario, duration_s: float, warmup_s: float, drain_s: float,
                  replications: int, seed: int) -> list[dict[str, float | None]]:
    """Per-replication metrics of the simulator for a run like the load run."""
    s = like_load_run(sc, duration_s, warmup_s, drain_s)
    return [replication_metrics(run_once(s, seed, i), warmup_s) for i in range(replications)]


def twin_check(sim_metrics: list[dict[str, float | None]], load_summary: dict[str, Any],
               metrics: tuple[str, ...] = TWIN_METRICS) -> TwinCheck:
    """The load run's ``summary.json`` values against the replications
    (:func:`rtalab.sim.shared.agreement.simultaneous_prediction`)."""
    run = {name: (load_summary["metrics"].get(name) or {}).get("mean") for name in metrics}
    return simultaneous_prediction(sim_metrics, run, metrics)


def report(check: TwinCheck, title: str) -> str:
    """The check as printed by the twin tests: one line per metric, then the verdict."""
    lines = [f"{title}: simultaneous prediction from {check.replications} replications "
             f"(false failure <= {check.false_failure_rate:.2%})"]
    for r in check.rows:
        value = "-" if r.value is None else f"{r.value:.4f}"
        lines.append(f"  {r.metric:<18} sim {r.sim_centre:.4f} [{r.low:.4f}, {r.high:.4f}]"
                     f"  load {value}  z {r.z:.2f}  {'inside' if r.inside else 'OUTSIDE'}")
    lines.append(f"  worst z {check.t_run:.2f} vs replications' {check.t_star:.2f}: "
                 + ("AGREES" if check.ok else "DIFFERS"))
    return "\n".join(lines)
