"""One self-contained HTML report of any folder rtalab writes, the answer first.

``rtalab report PATH...`` reads every kind of results folder (:func:`folder_kind`):
a simulated run, a load run, a sweep, and the answers ``capacity``, ``tune`` and
``storm``.  Each section opens with its answer (the verdict and its rules for a load
run, the key figures for a run, the metrics that differ significantly between the
points of a sweep, the capacity table and sentence, the recommendation and its
evidence, recovered/metastable per strategy), then a few figures chosen for that
question, then the full tables; a sweep's plot of every metric sits in a collapsed
appendix (inline SVG, cheap to draw).  Every figure is embedded
(``data:image/png;base64`` or inline SVG) and the page loads nothing from the network,
so it opens offline and can be mailed.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rtalab.sim.report.runs import run_section, runs_comparison
from rtalab.sim.report.sweeps import capacity_section, storm_section, sweep_section, tune_section
from rtalab.sim.shared.compare import RunFolder, RunFolderError, folder_kind, load_run
from rtalab.sim.shared.results import package_versions

TEMPLATE = "report.html.j2"

# --------------------------------------------------------------------------- entry point


def _kinds_title(sections: Sequence[dict[str, Any]]) -> str:
    """``run baseline`` for one folder; ``a run, 2 load runs`` for several (their names are
    in the legend, not in the title)."""
    if len(sections) == 1:
        return f"{sections[0]['kind']} {sections[0]['label']}"
    counts: dict[str, int] = {}
    for s in sections:
        counts[s["kind"]] = counts.get(s["kind"], 0) + 1
    return ", ".join(f"{n} {k} folders" if n > 1 else f"a {k} folder" for k, n in counts.items())


def section(path: Path) -> tuple[dict[str, Any], RunFolder | None]:
    """The report section of one folder (and its RunFolder when it is a run)."""
    kind = folder_kind(path)
    if kind in ("run", "load"):
        run = load_run(path)
        return run_section(run, kind), run
    build = {"sweep": sweep_section, "capacity": capacity_section, "tune": tune_section,
             "storm": storm_section}[kind]
    return build(path), None


def render_report(paths: Sequence[str | Path], progress: bool = False,
                  lead: dict[str, Any] | None = None, title: str | None = None,
                  fold: bool = False, comparison: bool = True) -> str:
    """The HTML text of a report on ``paths`` (any folder kinds rtalab writes).

    With ``progress``, a line on stderr once rendering has taken a second, and the time
    taken at the end.  ``lead`` puts an answer of the whole report first (keys ``status``,
    ``headline``, ``lines``, ``figure`` ({caption, data}: a base64 PNG), ``tables``,
    ``html``); ``title`` replaces the generated title; ``fold`` folds every folder's
    section under a one-line summary (its headline); ``comparison=False`` leaves out the
    comparison of the runs with the first (runs at different loads, compared otherwise)."""
    if not paths:
        raise RunFolderError("report needs at least one folder")
    t0 = time.perf_counter()
    timer = threading.Timer(1.0, lambda: print(
        f"rtalab report: rendering {len(paths)} folder(s) ...", file=sys.stderr, flush=True))
    timer.daemon = True
    if progress:
        timer.start()
    try:
        return _render(paths, t0, progress, lead, title, fold, comparison)
    finally:
        timer.cancel()


def _render(paths: Sequence[str | Path], t0: float, progress: bool,
            lead: dict[str, Any] | None, title: str | None, fold: bool,
            comparison: bool = True) -> str:
    # lazy: +50 ms (jinja2) off importing render
    import jinja2

    sections, runs = [], []
    for p in map(Path, paths):
        try:
            s, run = section(p)
        except (KeyError, TypeError, AttributeError, IndexError) as e:
            raise RunFolderError(f"{p}: unexpected content ({type(e).__name__}: {e}); "
                                 "was it written by this version of rtalab?") from None
        sections.append(s)
        if run is not None:
            runs.append(run)
    env = jinja2.Environment(loader=jinja2.PackageLoader("rtalab.sim.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    if title is None:
        title = f"rtalab report: {_kinds_title(sections)}"
    if lead is not None:
        lead = {"status": "info", "headline": "", "lines": [], "figure": None, "tables": [],
                "html": "", **lead}
    text = env.get_template(TEMPLATE).render(
        title=title, sections=sections, lead=lead, fold=fold,
        comparison=runs_comparison(runs) if comparison and len(runs) >= 2 else None,
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        version=package_versions().get("rtalab"))
    if progress and time.perf_counter() - t0 > 1.0:
        print(f"rtalab report: rendered in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
              flush=True)
    return text
