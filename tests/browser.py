"""Headless Chromium through Playwright (Debian's ``/usr/bin/chromium``, no browser download).

:func:`inspect_pages` opens each HTML file in one browser session at 1280 px and reports
what a person would notice: console errors, images that did not decode, horizontal
overflow, and whether the answer block comes before the first figure.  Used by
``tests/test_report_browser.py`` and by ``make report-screenshots``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("RTALAB_CHROMIUM", "/usr/bin/chromium")
WIDTH = 1280
# flags for a sandboxed machine without network (docs/guide.md, reports)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]

PAGE_FACTS_JS = """() => {
  const imgs = Array.from(document.images);
  const answers = Array.from(document.querySelectorAll('[data-role=answer]'));
  const figs = Array.from(document.querySelectorAll('section figure'));
  const anyFig = Array.from(document.querySelectorAll('figure'));
  const top = el => el.getBoundingClientRect().top + window.scrollY;
  const bottom = el => el.getBoundingClientRect().bottom + window.scrollY;
  return {
    height: document.documentElement.scrollHeight,
    title: document.title,
    leadFigureBottom: anyFig.length ? bottom(anyFig[0]) : null,
    leadFigureTop: anyFig.length ? top(anyFig[0]) : null,
    answerBottom: answers.length ? bottom(answers[0]) : null,
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    sections: document.querySelectorAll('section.section').length,
    answers: answers.length,
    answerTop: answers.length ? top(answers[0]) : null,
    firstFigureTop: figs.length ? top(figs[0]) : null,
    answerText: answers.map(a => a.innerText),
  };
}"""


# What a reader of a table sees, with every fold opened: cells narrower than their longest
# word (a label wrapped letter by letter; a line may break after a hyphen, as browsers do)
# and tables wider than the viewport (text off the right edge, or a scroll bar to find it).
# Words are measured in the cell's own font.
LAYOUT_FACTS_JS = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const ctx = document.createElement('canvas').getContext('2d');
  const view = document.documentElement.clientWidth;
  const narrow = [], wide = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const st = getComputedStyle(cell);
    if (cell.offsetParent === null) continue;
    ctx.font = `${st.fontStyle} ${st.fontWeight} ${st.fontSize} ${st.fontFamily}`;
    const inner = cell.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
    let longest = '', w = 0;
    for (const word of cell.innerText.split(/\\s+|(?<=[a-z]-)/)) {
      const ww = ctx.measureText(word).width;
      if (ww > w) { w = ww; longest = word; }
    }
    if (w > inner + 1) narrow.push(`${longest} (${Math.round(w)} px in ${Math.round(inner)} px)`);
  }
  for (const t of document.querySelectorAll('table')) {
    if (t.offsetParent === null) continue;
    const r = t.getBoundingClientRect();
    if (r.width > view + 1 || r.right > view + 1)
      wide.push(`${(t.querySelector('th, td') || {innerText: '?'}).innerText}: `
                + `${Math.round(r.width)} px`);
  }
  return {narrowCells: narrow, wideTables: wide, viewport: view,
          unfoldedHeight: document.documentElement.scrollHeight};
}"""


def available() -> str | None:
    """Why the browser cannot run here (None if it can)."""
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} not found (make system-deps installs Debian's chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@contextmanager
def browser_page(tmp: Path) -> Iterator[Any]:
    """A Playwright page in a fresh headless Chromium profile; network requests are refused."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": WIDTH, "height": 900})
        try:
            ctx.route("http*://**/*", lambda route: route.abort())
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()


def inspect_pages(files: Sequence[Path], tmp: Path, screenshots: Path | None = None
                  ) -> dict[str, dict[str, Any]]:
    """Facts of each page (see :data:`PAGE_FACTS_JS`, then :data:`LAYOUT_FACTS_JS` with
    every fold opened) plus its console errors and failed requests; with ``screenshots``, a
    PNG of each page's top (1280 × 900, folds as the reader finds them) there."""
    out: dict[str, dict[str, Any]] = {}
    with browser_page(tmp) as page:
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
        for f in files:
            errors.clear()
            page.goto(Path(f).resolve().as_uri(), wait_until="load")
            facts = page.evaluate(PAGE_FACTS_JS)
            facts["console_errors"] = list(errors)
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshots / (Path(f).stem + ".png")))
            facts.update(page.evaluate(LAYOUT_FACTS_JS))  # opens the folds: after the shot
            out[str(f)] = facts
    return out
