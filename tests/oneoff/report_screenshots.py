"""``make report-screenshots``: a screenshot of the top of each report kind for the README.

Builds one small folder of each kind (run, sweep, capacity, tune, storm, load), renders
each report and photographs its first 1280 × 900 px in headless Chromium, into the
folder given (default ``docs/screenshots``).  About a minute on two cores.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sim.shared.report import render_report
from tests import browser
from tests.kinds import make_folders


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
        facts = browser.inspect_pages(pages, Path(tmp), screenshots=dest)
    for page in pages:
        f = facts[str(page)]
        print(f"{dest / (page.stem + '.png')}: {f['images']} images, console errors "
              f"{len(f['console_errors'])}, width {f['scrollWidth']} px")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
