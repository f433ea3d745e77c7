"""Dump every replication metric of a set of runs, to prove a change kept every number.

    .venv/bin/python tests/oneoff/metric_dump.py before.json     # on the old commit
    .venv/bin/python tests/oneoff/metric_dump.py after.json      # on the new one
    diff before.json after.json                                  # empty = the same numbers

Runs each scenario below at seed 3 with ``[run] records = "all"`` (the metrics computed
from the tables) and ``"none"`` (folded in while it runs), and writes every metric of each
(``repr`` of the float: bit for bit).  The scenarios: the presets, a retry storm with many
duplicate side effects (no dedup, a new requestGuid per attempt, degraded calls on a lossy
network), and a fleet (per-replica dedup state, random routing, a replica failure).
A few minutes on two cores.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MANY_DUPLICATES: dict[str, Any] = {  # no dedup, lost and duplicated uplink messages, degraded calls
    "reasoner.dedup": "none", "live.retry.new_request_guid": True,
    "network.uplink.loss": 0.05, "network.uplink.duplication": 0.1,
    "live.timeouts.negotiation_s": 0.1, "run.duration_s": 240.0}

RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    **{p: (p, {}) for p in ("baseline", "retry_storm", "lossy_network", "metastable_spike",
                            "release_gate")},
    "many_duplicates": ("retry_storm", MANY_DUPLICATES),
    "fleet": ("lossy_network", {
        "fleet.replicas": 3, "fleet.state": "per-replica", "fleet.balancer": "random",
        "fleet.failures": [{"replica": 1, "start_s": 60.0, "duration_s": 20.0}],
        "run.duration_s": 200.0}),
}


def dump() -> dict[str, dict[str, str]]:
    from rtalab.sim.runner import run_once
    from rtalab.sim.scenario import load_scenario
    from rtalab.sim.shared.summary import metrics_of

    out: dict[str, dict[str, str]] = {}
    for name, (preset, over) in RUNS.items():
        for records in ("all", "none"):
            sc = load_scenario(preset).with_overrides({**over, "run.records": records})
            m = metrics_of(run_once(sc, 3), sc.run.warmup_s)
            out[f"{name} records={records}"] = {k: repr(v) for k, v in m.items()}
            print(name, records, "done", file=sys.stderr, flush=True)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    Path(argv[0]).write_text(json.dumps(dump(), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
