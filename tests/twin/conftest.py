"""Twin tests: one scenario, the simulator and the embedded deployment, one answer.

A load run (``rtalab load run``, real Reasoner, witness, chaos proxy for the
scenario's ``[network]``, Locust Live users) against ``TWIN_REPLICATIONS``
simulated replications with the load run's duration, warm-up and drain
(:mod:`rtalab.loadtests.loadrun.twin`).  The check is the simultaneous prediction of
:func:`rtalab.sim.shared.agreement.simultaneous_prediction`: a load run that is a twin of the
simulation fails it with probability <= 1/(R+1) (= 0.33 % per run, <= 1.3 % for
the four runs of this package).
"""

from __future__ import annotations

import json
from pathlib import Path

from rtalab.loadtests.loadrun.twin import TWIN_METRICS, report, simulate_like, twin_check
from rtalab.sim.scenario import load_scenario, resolve_path
from rtalab.sim.shared.agreement import TwinCheck
from tests.load.conftest import load_run

TWIN_REPLICATIONS = 300
SIM_SEED = 20211
OVERLOADED = str(Path(__file__).with_name("overloaded.toml"))


def simulate(ref: str, duration_s: float, warmup_s: float, drain_s: float,
             overrides: tuple[str, ...] = ()) -> list[dict[str, float | None]]:
    """The replications a load run of ``ref`` (with ``overrides``) is checked against."""
    return simulate_like(load_scenario(ref, list(overrides) or None), duration_s, warmup_s,
                         drain_s, TWIN_REPLICATIONS, SIM_SEED)


def twin(tmp: Path, ref: str, sim: list[dict[str, float | None]], *, binding: str,
         processes: int, duration_s: float, warmup_s: float, drain_s: float,
         overrides: tuple[str, ...] = ()) -> TwinCheck:
    """One load run of ``ref`` (with the ``overrides`` ``sim`` was made with) checked
    against ``sim``; the table is printed."""
    text = resolve_path(ref).read_text(encoding="utf-8")
    args = ["--binding", binding, "--workers", str(processes), "--duration", str(duration_s),
            "--drain", str(drain_s), "--set", f"run.warmup_s={warmup_s}"]
    for o in overrides:
        args += ["--set", o]
    p, run = load_run(tmp, *args, scenario=text, timeout_s=duration_s + drain_s + 120.0)
    assert run is not None and (run / "summary.json").is_file(), p.stderr[-2000:]
    # the delivery verdict is the checker's business (tests/load, tests/check); a run it
    # fails is still a measurement, and the reason is printed with the twin table
    verdict = "" if p.returncode == 0 else (
        f"\n  (load run exit {p.returncode}: {(run / 'verdict.txt').read_text()[:1500]}"
        f" counts {(run / 'ledger' / 'counts.json').read_text()})")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    check = twin_check(sim, summary, TWIN_METRICS)
    title = (f"{Path(ref).stem}{' ' + ' '.join(overrides) if overrides else ''}, {binding}, "
             f"{processes} Reasoner process(es), network {meta.get('network')}, "
             f"{duration_s:g} s load run")
    print("\n" + report(check, title) + verdict)
    return check
