"""``make report-screenshots``: a screenshot of the top of each report kind for the README.

Builds one small folder of each kind (run, sweep, capacity, tune, storm, load), renders
each report and photographs its first 1280 × 900 px in headless Chromium, into the
folder given (default ``docs/screenshots``).  ``demo.png`` is the report of ``make demo``:
of the newest demo under ``results/`` (its ``rtalab predict`` folder, rendered again), or
of a synthetic predict folder when there is none (said on screen).  About a minute on two
cores.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rtalab.loadtests.loadrun import demo_report
from rtalab.sim.report.render import render_report
from tests import browser
from tests.kinds import make_folders, make_predict_folder

DEMO_FOLDERS = "*-predict-calibration_deployment-*"  # what `make demo` writes under results/


def demo_folder(results: Path, tmp: Path) -> tuple[Path, str]:
    """The newest complete demo predict folder under ``results`` (or a synthetic one)."""
    done = [f for f in results.glob(DEMO_FOLDERS) if (f / "prediction.json").exists()]
    if done:
        newest = max(done, key=lambda f: f.name)
        try:
            demo_report.load(newest)
            return newest, f"the newest demo, {newest}"
        except ValueError:
            pass
    return make_predict_folder(tmp), "a synthetic predict folder (no demo under results/)"


def main(argv: list[str]) -> int:
    dest = Path(argv[0] if argv else "docs/screenshots")
    why = browser.available()
    if why:
        print(f"report-screenshots: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rtalab-shots-") as tmp:
        folders = make_folders(Path(tmp))
        pages = []
        for kind, path in folders.items():
            page = Path(tmp) / f"{kind}.html"
            page.write_text(render_report([path]), encoding="utf-8")
            pages.append(page)
        folder, origin = demo_folder(Path("results"), Path(tmp) / "demo")
        page = Path(tmp) / "demo.html"
        page.write_text(demo_report.render(folder), encoding="utf-8")
        pages.append(page)
        print(f"report-screenshots: demo.png from {origin}")
        facts = browser.inspect_pages(pages, Path(tmp), screenshots=dest)
    for page in pages:
        f = facts[str(page)]
        print(f"{dest / (page.stem + '.png')}: {f['images']} images, console errors "
              f"{len(f['console_errors'])}, width {f['scrollWidth']} px")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
