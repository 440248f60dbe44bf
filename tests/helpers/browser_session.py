"""Drive JupyterLab in headless Chromium: run a notebook, then use one of its widgets.

    python tests/helpers/browser_session.py URL SCREENSHOT SCENARIO

SCENARIO "hints" (notebook 07): click the hint widget through to the solution.
SCENARIO "playground" (notebook 00): press Train in the spirals playground, see it redraw.
SCENARIO "release" (notebook 07 as released, answered with a known mistake): Run All stops at the
    first check, which names the mistake; run the hint widget's cell by hand, click through the
    hints, and Show solution says that the release holds none.
SCENARIO "formgrader" (URL: a graded course's /formgrader): the assignment and its student are listed.
SCENARIO "hand grade" (URL: formgrader's page of one submission, with no network beyond the server):
    MathJax loads from the server, a score of 1.5 goes into the first test cell and "see me" into
    the first comment; any script error or request beyond the server fails the session.

Run as its own process by test_browser.py, which kills it (and its Chromium) past a time
limit: a browser that hangs must fail the test, not stall the suite.
"""

import re
import shutil
import sys

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

HINTS = 4  # 07.rmsnorm_norm has four hints
# What the first test cell shows once Run All reached it.
FIRST_CHECK = {
    "hints": "[07.rmsnorm_norm] passed",
    "playground": "[00.neuron] passed",
    "release": "[07.rmsnorm_norm] FAILED",
}


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def click_hints_then_solution(page, solution: str = "Reference solution:") -> None:
    hint = page.locator("button", has_text="Hint (").first
    for _ in range(HINTS):
        hint.click()
    page.get_by_text(f"Hint {HINTS}:").first.wait_for()
    page.locator("button", has_text="Show solution").first.click()
    page.get_by_text(solution).first.wait_for()


def fail_then_study(page) -> None:
    """Run All stopped at the failing check, whose message names the mistake. Then the student runs
    the widget's cell by hand and asks for hints and the solution, which a release does not hold."""
    page.get_by_text("Looks like:").first.wait_for()
    cell = page.locator(".jp-CodeCell", has_text='study("07.rmsnorm_norm")').first
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    click_hints_then_solution(page, solution="not available in this copy of the course")


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


def formgrader(page, url: str, screenshot: str) -> None:
    """The graded class as formgrader lists it: the assignment with its one submission, the student."""
    page.goto(url)
    page.get_by_text("07_rmsnorm").first.wait_for(timeout=60_000)
    page.screenshot(path=screenshot.replace(".png", "-assignments.png"))
    page.goto(url.split("?")[0].rstrip("/") + "/manage_students")
    page.get_by_text("ann").first.wait_for(timeout=60_000)


def hand_grade(page, url: str, screenshot: str) -> None:
    """A score and a comment typed into formgrader as an instructor does, offline."""
    origin = re.match(r"https?://[^/]+", url).group()
    outside, errors = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.route(
        lambda address: not address.startswith(origin),
        lambda route: (outside.append(route.request.url), route.abort()),
    )
    token = re.search(r"token=(\w+)", url).group(1)
    page.goto(f"{origin}/formgrader?token={token}")  # logs in: formgrader's own requests carry no token
    page.goto(url)
    page.locator("input.score").first.wait_for(timeout=60_000)
    page.wait_for_load_state("networkidle")
    if page.evaluate("() => typeof window.MathJax") != "object":
        raise AssertionError("MathJax did not load from the server")
    page.locator("input.score").first.fill("1.5")
    page.keyboard.press("Tab")
    page.locator("textarea.comment").first.fill("see me")
    page.keyboard.press("Tab")
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)  # formgrader saves on change, by a request of its own
    if errors or outside:
        raise AssertionError(f"script errors {errors}, requests beyond the server {outside}")


SCENARIOS = {
    "hints": click_hints_then_solution,
    "playground": train_in_playground,
    "release": fail_then_study,
}


def run_notebook(page, url: str, scenario: str) -> None:
    page.goto(url)
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    # The kernel is ready once the status bar says so; running earlier can be ignored.
    page.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=90_000)
    run_all(page)
    first = page.get_by_text(FIRST_CHECK[scenario]).first
    try:
        first.wait_for(timeout=60_000)
    except PlaywrightTimeout:
        run_all(page)  # the first request raced the kernel's start
        first.wait_for(timeout=90_000)


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
            if scenario == "formgrader":
                formgrader(page, url, screenshot)
            elif scenario == "hand grade":
                hand_grade(page, url, screenshot)
            else:
                run_notebook(page, url, scenario)
                SCENARIOS[scenario](page)
            print(f"browser session passed: {scenario}")
        finally:
            page.screenshot(path=screenshot)
            browser.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
