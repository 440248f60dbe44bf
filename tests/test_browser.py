"""JupyterLab serves the notebooks and their widgets work, in a real headless Chromium."""

import os
import secrets
import shutil
import signal
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
pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)"
)
SESSION_LIMIT = 300  # seconds for the whole browser session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """End a process started in its own session, and everything it started."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def lab(tmp_path, request):
    """A JupyterLab server on a copy of a completed notebook; yields the notebook's URL."""
    assignment = request.param
    nbformat.write(perfect(assignment), tmp_path / f"{assignment}.ipynb")
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
    server = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
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
        yield f"{base}/lab/tree/{assignment}.ipynb?token={token}"
    finally:
        _stop(server)


@pytest.mark.parametrize(
    ("lab", "scenario"),
    [("07_rmsnorm", "hints"), ("00_warmup", "playground")],
    ids=["hint widget reveals hints then solution", "spirals playground retrains and redraws"],
    indirect=["lab"],
)
def test_notebook_runs_and_its_widget_works(lab, scenario, tmp_path):
    script = Path(__file__).with_name("browser_session.py")
    session = subprocess.Popen(
        [sys.executable, str(script), lab, str(tmp_path / "lab.png"), scenario],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = session.communicate(timeout=SESSION_LIMIT)
    except subprocess.TimeoutExpired:
        _stop(session)
        pytest.fail(f"the browser session ran past {SESSION_LIMIT} s (screenshot: {tmp_path / 'lab.png'})")
    assert session.returncode == 0, output[-3000:]
