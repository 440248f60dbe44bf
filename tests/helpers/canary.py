"""Open HTML pages in headless Chromium and print, per page, what its canary says.

    python tests/helpers/canary.py [--read] [--screenshots=DIR] PAGE [PAGE ...]

The red team's payloads set `window.PWNED` to a number naming the attack that ran; a page
where no script of a student ran leaves it undefined (printed as null). With --read, each
page's entry also says what its reader sees, in a window 1280 pixels wide: {"pwned": ...,
"maths": its formulas ({"formulas": n, "drawn": n, "raw": markdown cells that still show
LaTeX}), "scrolling": outputs too wide for their box (they
scroll sideways), "images": {"shown": n, "broken": n} (an image that did not decode is broken),
"outside": the URLs the page asked for beyond the disk}. Nothing leaves
the machine: requests over the network are refused. With --screenshots, each page is saved as
DIR/<n>-<page's file name>.png, as its reader sees it. Run as its own process by the tests,
which kill it past a time limit: a browser that hangs fails the test.
"""

import json
import re
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

# The page's formulas, written as MathML (feedback.py): how many there are, how many the browser
# drew (a box with a width: a browser without MathML shows the text flat, a zero-size <math> is
# not drawn), and how many pieces of markdown text still hold LaTeX (a formula left as "$...$").
MATHS = r"""() => ({
  formulas: document.querySelectorAll("math").length,
  drawn: [...document.querySelectorAll("math")].filter(m => m.getBoundingClientRect().width > 0).length,
  raw: [...document.querySelectorAll(".text_cell_render")]
    .filter(cell => /\$[^$]+\$|\\(frac|sum|mathbb|text)\b/.test(cell.innerText)).length,
})"""
SCROLLING = """() => [...document.querySelectorAll("div.output_area pre")]
  .filter(pre => pre.scrollWidth > pre.clientWidth + 1).length"""
IMAGES = """() => ({shown: document.images.length,
  broken: [...document.images].filter(img => !img.complete || img.naturalWidth === 0).length})"""
LOCAL = ("file:", "data:", "about:", "blob:")


def main(pages: list[str], read: bool, screenshots: Path | None) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    canaries = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        outside = []

        def note(request) -> None:
            if not request.url.startswith(LOCAL):
                outside.append(request.url)

        page.on("request", note)
        page.route(re.compile(r"^(?!file:|data:|about:|blob:)"), lambda route: route.abort())
        for path in pages:
            outside.clear()
            page.goto(Path(path).resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(300)  # onload and onerror handlers of images run after the load
            pwned = page.evaluate("() => window.PWNED ?? null")
            if read:
                maths = page.evaluate(MATHS)
                scrolling = page.evaluate(SCROLLING)
                images = page.evaluate(IMAGES)
                seen = {"maths": maths, "scrolling": scrolling, "images": images, "outside": outside[:]}
                canaries[path] = {"pwned": pwned, **seen}
            else:
                canaries[path] = pwned
            if screenshots:
                page.screenshot(path=screenshots / f"{len(canaries)}-{Path(path).stem}.png", full_page=True)
        browser.close()
    print(json.dumps(canaries))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    folder = next((Path(a.split("=", 1)[1]) for a in arguments if a.startswith("--screenshots=")), None)
    main([a for a in arguments if not a.startswith("--")], "--read" in arguments, folder)
