"""A JupyterLab server for the browser tests: on a free local port, with a token, stopped by its
process group however the test ends; and the browser session that drives it, as its own process."""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SESSION_LIMIT = 300  # seconds for a whole browser session
BROWSER_SESSION = Path(__file__).with_name("browser_session.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """End a process started in its own session, and everything it started."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def running_lab(
    root: Path, python: Path = Path(sys.executable), cwd: Path | None = None
) -> Iterator[tuple[str, str]]:
    """JupyterLab serving `root`, run by `python` (its kernel is that environment's), from `cwd`
    (nbgrader's formgrader reads nbgrader_config.py there); yields (base URL, token)."""
    port, token = free_port(), secrets.token_hex(16)
    command = [
        str(python),
        "-m",
        "jupyterlab",  # not `jupyter lab`, which may find another environment's script on PATH
        "--no-browser",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--allow-root",
    ]
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    server = subprocess.Popen(
        command,
        cwd=cwd or root,
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
        yield base, token
    finally:
        stop(server)


def browse(url: str, screenshot: Path, scenario: str) -> tuple[int, str]:
    """Run a scenario of browser_session.py on `url`; (exit status, its output). A browser that hangs
    is killed at SESSION_LIMIT and fails (status -1)."""
    session = subprocess.Popen(
        [sys.executable, str(BROWSER_SESSION), url, str(screenshot), scenario],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = session.communicate(timeout=SESSION_LIMIT)
    except subprocess.TimeoutExpired:
        stop(session)
        return -1, f"the browser session ran past {SESSION_LIMIT} s (screenshot: {screenshot})"
    return session.returncode, output
