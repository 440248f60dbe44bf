"""Kernels started ahead (grader/notebook/kernels.py): a worker's next kernel starts while a notebook
runs, and nothing of one student's kernel is visible to another's."""

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_core.utils import run_sync
from nbformat.v4 import new_code_cell

from grader.grading import grade
from grader.notebook.kernels import KernelsAhead

from .helpers.machine import needs_sandbox
from .helpers.submissions import perfect, solution_sources, with_answer

pytestmark = pytest.mark.whole_machine  # make test runs it alone, after the others

# The first student's notebook leaves what it can behind: files wherever it may write, an
# environment variable, module state, a process that outlives its cell. It also looks for the
# kernel started for the next notebook, which runs beside it: that kernel must be invisible.
PLANTS = r"""
import glob, os, pathlib, subprocess, sys, torch
exchange = pathlib.Path(os.environ["COURSE_EXCHANGE"])
scratch = exchange.parents[1]  # the batch's folder of sandboxes, as this one sees it
for folder in ["/tmp", os.environ["HOME"], "/dev/shm", os.getcwd(), scratch, *scratch.glob("k-*")]:
    try:
        pathlib.Path(folder, "planted-by-the-first").write_text("a")
    except OSError:
        pass
os.environ["PLANTED_BY_THE_FIRST"] = "1"
torch.planted_by_the_first = True
sys.modules["planted_by_the_first"] = type(sys)("planted_by_the_first")
quiet = subprocess.DEVNULL
subprocess.Popen(["sleep", "600"], stdout=quiet, stderr=quiet, start_new_session=True)
argvs = [pathlib.Path(p).read_bytes().split(b"\0") for p in glob.glob("/proc/[0-9]*/cmdline")]
kernels = [a for a in argvs if b"autograder.kernel_launcher" in a and not a[0].endswith(b"bwrap")]
"""
ALONE = "assert len(kernels) == 1, f'this kernel sees {len(kernels)} kernels'\n"

# The second student's notebook looks for all of it before its answer, which stands only if it
# found nothing (so its score says so, and its log says what was found).
SEEKS = r"""
import glob, os, pathlib, sys, torch
exchange = pathlib.Path(os.environ["COURSE_EXCHANGE"])
places = ["/tmp", os.environ["HOME"], "/dev/shm", os.getcwd(), str(exchange.parents[1])]
found = [p for place in places for p in glob.glob(place + "/**/planted-by-the-first", recursive=True)]
found += [name for name in os.environ if name.startswith("PLANTED")]
found += ["torch attribute"] * hasattr(torch, "planted_by_the_first")
found += ["module"] * ("planted_by_the_first" in sys.modules)
found += [p for p in glob.glob("/proc/[0-9]*/cmdline") if pathlib.Path(p).read_bytes().startswith(b"sleep")]
"""
NOTHING_FOUND = "assert not found, f'found what the first kernel left: {found}'\n"


def _sleepers() -> list[str]:
    """Processes of this machine running `sleep 600` (the first notebook's)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == b"sleep\x00600\x00":
                found.append(cmdline.parent.name)
        except OSError:  # gone meanwhile
            continue
    return found


@needs_sandbox
def test_the_next_kernel_starts_ahead_and_sees_nothing_of_the_one_before(tmp_path):
    answer = solution_sources("07_rmsnorm")["rmsnorm"]
    for student, probe, check in (("a-first", PLANTS, ALONE), ("b-second", SEEKS, NOTHING_FOUND)):
        notebook = with_answer(perfect("07_rmsnorm"), "rmsnorm", check + answer)
        notebook.cells.insert(2, new_code_cell(probe))  # after the imports, before the answer
        (tmp_path / "in" / student).mkdir(parents=True)
        nbformat.write(notebook, tmp_path / "in" / student / "07_rmsnorm.ipynb")

    rows = {r.student: r for r in grade(tmp_path / "in", tmp_path / "out", jobs=1)}

    logs = {s: (tmp_path / "out" / "logs" / s / "07_rmsnorm.log").read_text() for s in rows}
    assert "[course] kernel: started ahead" in logs["b-second"], logs["b-second"]
    for student, row in rows.items():
        assert (row.status, row.score) == ("graded", 6.0), (student, row, logs[student])
    assert not _sleepers(), "a process of the first notebook outlived its grading"


def test_the_probe_finds_what_is_left_where_it_can_see_it(tmp_path):
    """The second notebook's probe, run in the same process as the first's, finds every trace
    (so the test above fails where a kernel could see another's)."""
    root = tmp_path / "course-probe" / "k-probe"
    (root / "exchange").mkdir(parents=True)
    env = {**os.environ, "HOME": str(tmp_path), "COURSE_EXCHANGE": str(root / "exchange")}
    code = PLANTS + SEEKS + "print(repr(found))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    try:
        assert done.returncode == 0, done.stderr
        found = ast.literal_eval(done.stdout.strip())
        assert {"PLANTED_BY_THE_FIRST", "torch attribute", "module"} <= set(found)
        assert any(f.endswith("/planted-by-the-first") for f in found)
        assert any(f.startswith("/proc/") for f in found)  # the `sleep 600`
    finally:
        for pid in _sleepers():
            os.kill(int(pid), signal.SIGKILL)
        for folder in ("/tmp", "/dev/shm"):
            Path(folder, "planted-by-the-first").unlink(missing_ok=True)


class _StartsBadly:
    """A kernel manager whose kernel cannot start (no room left in its root, say)."""

    def __init__(self, root: Path):
        self.root = str(root)

    async def start_kernel(self, **_):
        raise OSError("No space left on device")

    async def shutdown_kernel(self, now=False):
        raise RuntimeError("never started")

    def end_process_group(self):
        pass


def test_a_kernel_that_cannot_start_ahead_costs_the_notebook_now_nothing(tmp_path, caplog):
    """Starting the next kernel is the grader's business: its failure is logged, and the
    notebook being graded goes on (the next one starts its kernel itself)."""
    ahead = KernelsAhead()
    root = tmp_path / "k-root"
    root.mkdir()
    run_sync(ahead.start_next)("settings", lambda: _StartsBadly(root))
    assert ahead.take("settings") is None and not root.exists()  # its root removed
    assert "could not start ahead: No space left on device" in caplog.text
