"""What this machine can do for the tests: some need the grading sandbox; some load its cores."""

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder import cgroup
from autograder.sandbox import LAUNCHER, unavailable_reason

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


@contextlib.contextmanager
def batch_scratch(prefix: str) -> Iterator[Path]:
    """A folder for a batch's sandboxes (its TMPDIR), removed afterwards: what its kernels leave is
    told from other batches' on the machine by it. Short, for the kernels' Unix sockets."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def running(*fragments: str) -> list[str]:
    """The command lines of this machine's processes that hold any of `fragments` (a kernel's
    scratch folder, a marker a submission's processes carry)."""
    # -ww: whole lines (without a terminal, ps cuts them at 80 characters, before the folder)
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in ps if any(fragment in line for fragment in fragments)]


def kernels_in(scratch: Path) -> list[str]:
    """Grading kernels of the batches whose sandboxes are made in `scratch` (their TMPDIR), still running."""
    return [line for line in running(f"{scratch}/") if LAUNCHER in line]


def leftover_groups() -> list[Path]:
    """Process groups of sandboxes and batches still there (each goes with its kernel or batch)."""
    try:
        parents, _ = cgroup._parents()
    except LookupError:
        return []
    return [group for parent in parents.values() for group in parent.glob("course-*")]
