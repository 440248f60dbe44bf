"""Open HTML pages in headless Chromium and print, per page, what its canary says.

    python tests/canary.py PAGE [PAGE ...]

The red team's payloads set `window.PWNED` to a number naming the attack that ran; a page
where no script of a student ran leaves it undefined (printed as null). Run as its own
process by the tests, which kill it past a time limit: a browser that hangs fails the test.
"""

import json
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright


def main(pages: list[str]) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    canaries = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page()
        for path in pages:
            page.goto(Path(path).resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(300)  # onload and onerror handlers of images run after the load
            canaries[path] = page.evaluate("() => window.PWNED ?? null")
        browser.close()
    print(json.dumps(canaries))


if __name__ == "__main__":
    main(sys.argv[1:])
