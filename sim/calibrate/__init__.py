"""Calibration: fit a scenario's deployment keys to observations of a real deployment.

``from_run_dir(path) -> Observations`` (or build :class:`Observations` from any source),
``calibrate(obs, base) -> Calibration``, ``write(cal, "calibrated.toml")``.  Method and
limits: docs/calibration.md.  Never imports the load-test code.  Names are imported on
first use (scipy is slow to import; ``rtalab`` registers ``calibrate`` without it).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Calibration": "estimate", "Value": "estimate", "calibrate": "estimate",
    "capacity_from_concurrency": "estimate", "Fit": "fit", "fit_duration": "fit",
    "ObservationError": "observations", "Observations": "observations", "Probe": "observations",
    "combine": "observations", "from_run_dir": "observations",
    "parse_histograms": "observations", "write": "output",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(name)
    # lazy: by name, on first use: `from rtalab.sim.calibrate import calibrate` is +1.6 s (scipy)
    return getattr(importlib.import_module(f"rtalab.sim.calibrate.{_WHERE[name]}"), name)
