"""The sandbox's bounds, one by one: where a kernel can write, how many processes and how much
memory it can hold, and what of its outputs may reach an instructor's page."""

import json
import os
import subprocess
import sys
import time

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output, new_raw_cell

from autograder import cgroup
from autograder.sandbox import LAYOUT, SHM_BYTES, TMP_BYTES, bwrap_command, prepare_root, write_font_list
from grader.notebook.clean import CleanMetadata, FenceStudentMarkdown, clean_cell, clean_output

from .helpers.machine import needs_sandbox

pytestmark = pytest.mark.whole_machine  # make test runs it alone, after the others

GROUPS_MISSING = cgroup.unavailable_reason()
needs_groups = pytest.mark.skipif(bool(GROUPS_MISSING), reason=f"no process groups here: {GROUPS_MISSING}")


@needs_sandbox
def test_every_place_a_kernel_can_write_is_bounded(tmp_path):
    """Each writable mount is a tmpfs of a stated size, or one of the two folders the grader
    reads (on disk, each file capped by RLIMIT_FSIZE). bwrap's own /dev was a writable tmpfs of
    half the host's memory; the tmpfs hiding the expected outputs was writable too."""
    root = tmp_path / "root"
    prepare_root(root)
    probe = (
        "for mount in $(awk '$4 ~ /^rw/ {print $2}' /proc/mounts); do "
        "touch $mount/.probe 2>/dev/null && echo $mount $(df -B1 --output=size $mount | tail -1); done"
    )
    font_list = write_font_list(tmp_path)  # read-only where it lands, in the private /tmp
    done = subprocess.run(
        [*bwrap_command(root, 1, font_list), "/bin/sh", "-c", probe], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    writable = dict(line.split() for line in done.stdout.splitlines())
    grader_reads = {str(root.resolve() / sub) for sub, access in LAYOUT.items() if access == "writable"}
    assert set(writable) == {"/tmp", "/dev/shm", str(root.resolve() / "home"), *grader_reads}
    assert int(writable["/dev/shm"]) <= SHM_BYTES
    assert int(writable["/tmp"]) <= TMP_BYTES and int(writable[str(root.resolve() / "home")]) <= TMP_BYTES


DRAWS_TEXT = """
import logging
logging.basicConfig(level=logging.INFO)  # matplotlib says "generated new fontManager" when it lists the fonts
import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt
plt.title("text needs a font")
plt.savefig("/tmp/figure.png")
"""


@needs_sandbox
def test_a_kernel_reads_the_workers_font_list_instead_of_listing_the_fonts(tmp_path, monkeypatch):
    """A kernel's matplotlib starts from the font list its worker wrote (0.17 s less of each start),
    which holds only fonts the sandbox can see: where one of its fonts is missing, matplotlib lists
    them all again."""
    root, scratch = tmp_path / "root", tmp_path / "scratch"
    prepare_root(root)
    scratch.mkdir()
    font_list = write_font_list(scratch)
    assert font_list is not None and write_font_list(scratch) == font_list  # once per folder
    for given, lists_again in ((font_list, False), (None, True)):
        done = subprocess.run(
            [*bwrap_command(root, 1, given), sys.executable, "-c", DRAWS_TEXT], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert ("generated new fontManager" in done.stderr) == lists_again, done.stderr

    from matplotlib import font_manager

    unseen = font_manager.FontEntry(fname=str(tmp_path / "private.ttf"), name="Private")
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [*font_manager.fontManager.ttflist, unseen])
    other = tmp_path / "other"
    other.mkdir()
    listed = json.loads(write_font_list(other).read_text())["ttflist"]
    assert listed and "Private" not in {font["name"] for font in listed}


@needs_groups
def test_a_process_group_stops_forks_and_memory_at_its_own_limits():
    group = cgroup.ProcessGroup.create(cgroup.Limits(processes=20, memory_bytes=200 * 2**20))
    try:
        forks = subprocess.run(  # bounded: 60 children at most, each gone after 3 s
            [sys.executable, "-c", FORKS], preexec_fn=group.join, capture_output=True, text=True, timeout=60
        )
        assert 5 < int(forks.stdout) < 20, forks
        hog = subprocess.run(
            [sys.executable, "-c", "b = b'x' * (400 * 2**20)"], preexec_fn=group.join, timeout=60
        )
        assert hog.returncode == -9
        events = " ".join(group.events())
        assert "refused" in events and "ran out of memory: 1 of its processes" in events
        sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=group.join, start_new_session=True)
        start = time.monotonic()
        assert group.kill_all() and group.processes() == set()
        assert sleeper.wait(timeout=10) == -9 and time.monotonic() - start < 5
    finally:
        group.kill_all()
        group.remove()
    assert not any(folder.exists() for folder in group.folders.values())


@needs_groups
def test_a_sandbox_of_many_sessions_gets_no_more_processor_than_one_of_a_single_process():
    """Eight spinning processes, each in a session of its own, in one group; one in another. The
    scheduler gives each session an equal share (autogroups), so without groups the single one
    would get 2/9 of this 2-core machine's time; with them each group gets the same share."""
    crowd = cgroup.ProcessGroup.create(cgroup.Limits(processes=64, memory_bytes=2**30))
    alone = cgroup.ProcessGroup.create(cgroup.Limits(processes=64, memory_bytes=2**30))
    spinners = []
    try:
        if cgroup.SHARES not in crowd.folders:
            pytest.skip("this machine's cgroups have no cpu controller")
        spin = [sys.executable, "-c", SPIN.format(4)]
        spinners = [subprocess.Popen(spin, preexec_fn=crowd.join) for _ in range(8)]
        single = subprocess.Popen(
            [sys.executable, "-c", SPIN.format(3)], preexec_fn=alone.join, stdout=subprocess.PIPE, text=True
        )
        used = float(single.communicate(timeout=30)[0])
        assert used > 1.2, f"the single process had {used:.2f} s of processor time in 3 s"
    finally:
        for group in (crowd, alone):
            group.kill_all()
            group.remove()
        for process in spinners:
            process.wait()


SPIN = """
import os, time
os.setsid()
end = time.time() + {}
while time.time() < end:
    pass
print(time.process_time())
"""


@needs_groups
def test_a_batch_removes_the_groups_a_killed_worker_left_with_their_processes():
    """A worker killed midway never ends its sandbox: the batch that made the group does."""
    batch = f"course-batch-test{os.getpid()}"
    assert cgroup.start_batch(batch)
    groups = [cgroup.ProcessGroup.create(cgroup.Limits(16, 2**28), batch) for _ in range(2)]
    sleepers = [subprocess.Popen(["sleep", "60"], preexec_fn=g.join, start_new_session=True) for g in groups]
    assert cgroup.end_batch(batch) == 2
    assert [s.wait(timeout=10) for s in sleepers] == [-9, -9]
    assert not any(folder.exists() for g in groups for folder in g.folders.values())
    assert not any(folder.parent.exists() for g in groups for folder in g.folders.values())


FORKS = """
import os, time
children = []
for _ in range(60):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    children.append(pid)
print(len(children))
"""

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def test_outputs_are_reduced_to_what_renders_safely():
    image = new_output(
        "display_data",
        data={"image/png": PNG, "text/html": "<script>x</script>", "image/jpeg": "iVBORw0K"},
        metadata={"image/png": {"width": "1 onload=alert(1)", "height": 7}, "filenames": {"image/png": "x"}},
    )
    clean = clean_output(image)
    assert clean.data == {"image/png": PNG} and clean.metadata == {"image/png": {"height": 7}}
    only_html = {"output_type": "execute_result", "data": {"text/html": "<b>x</b>"}, "execution_count": "1"}
    clean = clean_output(only_html)
    assert clean.data == {"text/plain": "[an output of type text/html: not shown in grading]"}
    assert clean.execution_count is None
    assert clean_output({"output_type": "update_display_data", "data": {}}) is None
    assert clean_output({"output_type": "stream", "name": "<x>", "text": ["a", "b"]}) == {
        "output_type": "stream",
        "name": "stdout",
        "text": "ab",
    }
    error = clean_output({"output_type": "error", "ename": 3, "evalue": "v" * 10**5, "traceback": "tb"})
    assert error.ename == "3" and len(error.evalue) == 4000 and error.traceback == []
    oversized = new_output("display_data", data={"image/png": PNG}, metadata={"image/png": {"width": 10**6}})
    assert clean_output(oversized).metadata == {}


def test_student_cells_keep_nothing_but_nbgrader_metadata_and_raw_cells_become_text():
    nb = new_notebook(
        cells=[
            new_raw_cell("<script>x</script>", metadata={"raw_mimetype": "text/html"}),
            new_code_cell("1", metadata={"tags": ['x" onclick="y'], "nbgrader": {"grade_id": "a"}}),
        ],
        metadata={
            "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}},
            "title": "</title><script>x</script>",
            "language_info": {"name": "python", "pygments_lexer": "evil"},
            "kernelspec": {"name": "python3", "display_name": "Python 3", "env": {"X": "1"}},
        },
    )
    nb, _ = FenceStudentMarkdown().preprocess(nb, {})
    nb, _ = CleanMetadata().preprocess(nb, {})
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert nb.cells[0].source.startswith("```text\n<script>") and nb.cells[0].metadata == {}
    assert nb.cells[1].metadata == {"nbgrader": {"grade_id": "a"}}
    assert nb.metadata == {
        "language_info": {"name": "python"},
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
    }


def test_a_cell_keeps_only_valid_outputs_and_a_numeric_execution_count():
    cell = new_code_cell("1")
    cell.execution_count = "<b>1</b>"
    cell.outputs = [
        {"output_type": "stream", "name": "stdout", "text": "ok"},
        {"output_type": "widget", "data": {}},
        {"output_type": "error", "ename": "E" * 10**6, "evalue": "v", "traceback": []},
    ]
    assert clean_cell(cell) == ["widget"]
    assert cell.execution_count is None and len(cell.outputs) == 2 and len(cell.outputs[1].ename) == 200
