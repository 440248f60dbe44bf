"""Drive JupyterLab in headless Chromium: run a notebook, then use one of its widgets.

    python tests/browser_session.py URL SCREENSHOT SCENARIO

SCENARIO "hints" (notebook 07): click the hint widget through to the solution.
SCENARIO "playground" (notebook 00): press Train in the spirals playground, see it redraw.

Run as its own process by test_browser.py, which kills it (and its Chromium) past a time
limit: a browser that hangs must fail the test, not stall the suite.
"""

import re
import shutil
import sys

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

HINTS = 4  # 07.rmsnorm_norm has four hints
FIRST_CHECK = {"hints": "[07.rmsnorm_norm] passed", "playground": "[00.neuron] passed"}


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def click_hints_then_solution(page) -> None:
    hint = page.locator("button", has_text="Hint (").first
    for _ in range(HINTS):
        hint.click()
    page.get_by_text(f"Hint {HINTS}:").first.wait_for()
    page.locator("button", has_text="Show solution").first.click()
    page.get_by_text("Reference solution:").first.wait_for()


def train_in_playground(page) -> None:
    """Press Train twice: each press retrains and replaces the figure and the accuracy line."""
    summary = page.get_by_text(re.compile(r"held-out accuracy \d\.\d+, trained in"))
    train = page.locator("button", has_text="Train").first
    for _ in range(2):
        train.click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.widget-output')].some("
            "o => o.querySelector('img') && /trained in/.test(o.textContent))",
            timeout=60_000,
        )
        summary.first.wait_for(timeout=60_000)


SCENARIOS = {"hints": click_hints_then_solution, "playground": train_in_playground}


def main(url: str, screenshot: str, scenario: str) -> None:
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
            passed = page.get_by_text(FIRST_CHECK[scenario]).first
            try:
                passed.wait_for(timeout=60_000)
            except PlaywrightTimeout:
                run_all(page)  # the first request raced the kernel's start
                passed.wait_for(timeout=90_000)
            SCENARIOS[scenario](page)
        finally:
            page.screenshot(path=screenshot)
            browser.close()
    print(f"browser session passed: {scenario}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
