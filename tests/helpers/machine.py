"""What this machine can do for the tests: some need the grading sandbox; some load its cores."""

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from autograder.sandbox import unavailable_reason

SANDBOX_MISSING = unavailable_reason()
needs_sandbox = pytest.mark.skipif(
    bool(SANDBOX_MISSING),
    reason=f"no grading sandbox here: {SANDBOX_MISSING} (docs/instructors.md, 'Install')",
)


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[None]:
    """n processes spinning on the CPU while the block runs; killed however it ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
