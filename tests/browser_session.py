"""Drive JupyterLab in headless Chromium: run a notebook, click the hint widget through.

    python tests/browser_session.py URL SCREENSHOT

Run as its own process by test_browser.py, which kills it (and its Chromium) past a time
limit: a browser that hangs must fail the test, not stall the suite.
"""

import shutil
import sys

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

HINTS = 4  # 07.rmsnorm_norm has four hints


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def main(url: str, screenshot: str) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        try:
            page.goto(url)
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            # The kernel is ready once the status bar says so; running earlier can be ignored.
            page.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=90_000)
            run_all(page)
            passed = page.get_by_text("[07.rmsnorm_norm] passed").first
            try:
                passed.wait_for(timeout=60_000)
            except PlaywrightTimeout:
                run_all(page)  # the first request raced the kernel's start
                passed.wait_for(timeout=90_000)
            hint = page.locator("button", has_text="Hint (").first
            for _ in range(HINTS):
                hint.click()
            page.get_by_text(f"Hint {HINTS}:").first.wait_for()
            page.locator("button", has_text="Show solution").first.click()
            page.get_by_text("Reference solution:").first.wait_for()
        finally:
            page.screenshot(path=screenshot)
            browser.close()
    print("browser session passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
