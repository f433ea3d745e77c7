"""Write a :class:`~rtalab.sim.calibrate.estimate.Calibration`: commented TOML, JSON, QQ plots.

``write(cal, "calibrated.toml")`` writes

* ``calibrated.toml`` — a complete scenario; above each calibrated key a comment says
  where the value came from, its CI and the fit quality; the header lists the keys left
  at the simulator's defaults and why;
* ``calibrated.samples/<key>.csv`` — the observed values of a quantity no family fitted
  (``dist = "empirical"`` names the file, relative to the TOML);
* ``calibrated.calibration.json`` — every figure (fits, capacity evidence, error counts);
* ``calibrated.qq.png`` — one QQ panel per fitted quantity.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from rtalab.sim.calibrate.estimate import Calibration
from rtalab.sim.calibrate.fit import FAMILIES, KS_TOLERANCE, qq_plot

CRITERION = (f"lowest AIC among {', '.join(FAMILIES)} (MLE, location 0); the empirical "
             f"distribution instead when that law's KS distance exceeds max(1.63/sqrt(n), "
             f"{KS_TOLERANCE})")


def paths(out: Path) -> dict[str, Path]:
    """The files :func:`write` produces for ``out``."""
    stem = out.with_suffix("")
    return {"toml": out, "json": Path(f"{stem}.calibration.json"),
            "qq": Path(f"{stem}.qq.png"), "samples": Path(f"{stem}.samples")}


def jsonable(x: Any) -> Any:
    """Plain JSON data: numpy numbers as Python's, NaN/inf as None."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    return x


def write(cal: Calibration, out: str | Path, plots: bool = True) -> dict[str, Path]:
    """Write the calibration next to ``out`` (see the module docstring); returns the paths."""
    out = Path(out)
    p = paths(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = cal.scenario_data()
    comments: dict[str, str] = {}
    for v in cal.values:
        comments[v.key] = v.comment()
        if isinstance(v.value, dict) and v.value.get("dist") == "empirical" \
                and "values" in v.value:
            p["samples"].mkdir(exist_ok=True)
            name = v.key.replace(".", "_")
            csv = p["samples"] / f"{name}.csv"
            csv.write_text("value\n" + "\n".join(repr(x) for x in v.value["values"]) + "\n")
            node = data
            *path, last = v.key.split(".")
            for k in path:
                node = node[k]
            node[last] = {"dist": "empirical", "file": f"{p['samples'].name}/{csv.name}",
                          "column": "value"}
    header = [
        f"# Calibrated by `rtalab calibrate` from: {cal.figures.get('source', '')}",
        f"# Method: {cal.method} (docs/calibration.md). Distributions: {CRITERION}.",
        "# [workload], [live], [run], [load]: the client's settings of the run (the load",
        "# offered), not estimated. [reasoner], [network]: estimated where commented,",
        "# otherwise the simulator's defaults.",
        "# Not identified (defaults kept):",
        *[f"#   {k}: {why}" for k, why in cal.unidentified],
        "",
    ]
    body = _annotate(tomli_w.dumps(data), comments)
    out.write_text("\n".join(header) + body, encoding="utf-8")
    report = {"method": cal.method, "criterion": CRITERION,
              "values": [{"key": v.key, "value": v.value if not (
                  isinstance(v.value, dict) and "values" in v.value) else "(samples file)",
                          "source": v.source, "ci": v.ci, "quality": v.quality}
                         for v in cal.values],
              "unidentified": [{"key": k, "why": w} for k, w in cal.unidentified],
              "fits": {k: f.summary() for k, f in cal.fits.items()},
              "figures": cal.figures}
    p["json"].write_text(json.dumps(jsonable(report), indent=2) + "\n", encoding="utf-8")
    if plots and cal.fits:
        qq_plot(list(cal.fits.values()), p["qq"])
    return p


_HEADER = re.compile(r"^\[(?P<name>[^\]]+)\]\s*$")
_KEY = re.compile(r"^(?P<key>[A-Za-z0-9_\-]+)\s*=")


def _annotate(text: str, comments: dict[str, str]) -> str:
    """Put each key's comment on the line above it (wrapped at ~95 characters)."""
    section, out = "", []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            section = m["name"]
            if section in comments:  # a distribution written as a sub-table
                out.extend(_wrap(comments[section]))
        else:
            k = _KEY.match(line)
            full = f"{section}.{k['key']}" if k and section else (k["key"] if k else "")
            if full in comments:
                out.extend(_wrap(comments[full]))
        out.append(line)
    return "\n".join(out) + "\n"


def _wrap(text: str, width: int = 95) -> list[str]:
    lines, cur = [], "#"
    for word in text.split():
        if len(cur) + 1 + len(word) > width and cur != "#":
            lines.append(cur)
            cur = "#  "
        cur += " " + word
    lines.append(cur)
    return lines
