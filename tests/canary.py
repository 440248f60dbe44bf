"""Open HTML pages in headless Chromium and print, per page, what its canary says.

    python tests/canary.py [--read] [--screenshots=DIR] PAGE [PAGE ...]

The red team's payloads set `window.PWNED` to a number naming the attack that ran; a page
where no script of a student ran leaves it undefined (printed as null). With --read, each
page's entry also says what its reader sees, in a window 1280 pixels wide: {"pwned": ...,
"maths": what MathJax made of the page once it finished ({"typeset": n, "drawn": n,
"errors": n}; null without MathJax), "scrolling": outputs too wide for their box (they
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

MATHJAX_LIMIT_MS = 20_000
# Once MathJax 2 has started and typeset the page: how many formulas it typeset, how many it
# drew (its MathML output is one <math> each), how many it could not.
TYPESET = f"""() => new Promise(resolve => {{
  if (!window.MathJax || !MathJax.Hub) {{ resolve(null); return; }}
  const done = () => resolve({{
    typeset: MathJax.Hub.getAllJax().length,
    drawn: document.querySelectorAll("math").length,
    errors: document.querySelectorAll(".MathJax_Error, merror").length,
  }});
  MathJax.Hub.Register.StartupHook("End", () => MathJax.Hub.Queue(done));
  setTimeout(() => resolve("MathJax did not finish within {MATHJAX_LIMIT_MS} ms"), {MATHJAX_LIMIT_MS});
}})"""
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
                typeset = page.evaluate(TYPESET)
                scrolling = page.evaluate(SCROLLING)
                images = page.evaluate(IMAGES)
                seen = {"maths": typeset, "scrolling": scrolling, "images": images, "outside": outside[:]}
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
