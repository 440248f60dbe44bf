"""JupyterLab serves the notebooks and the self-study widget works, in a real headless Chromium."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from .submissions import perfect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a copy of a completed notebook 07; yields the notebook's URL."""
    nbformat.write(perfect("07_rmsnorm"), tmp_path / "07_rmsnorm.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp_path}",
        "--allow-root",
    ]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("JupyterLab did not start") from None
                time.sleep(0.5)
        yield f"{base}/lab/tree/07_rmsnorm.ipynb?token={token}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_notebook_runs_and_hint_widget_reveals_hints_then_solution(lab, tmp_path):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(lab)
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            hint = page.locator("button", has_text="Hint (").first
            hint.wait_for(timeout=120_000)
            assert page.get_by_text("[07.rmsnorm_norm] passed").first.is_visible()
            for _ in range(4):
                hint.click()
            page.get_by_text("Hint 4:").first.wait_for(timeout=10_000)
            page.locator("button", has_text="Show solution").first.click()
            page.get_by_text("Reference solution:").first.wait_for(timeout=10_000)
        finally:
            page.screenshot(path=str(tmp_path / "lab.png"), full_page=False)
            browser.close()
