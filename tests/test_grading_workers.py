"""A batch whose worker dies or hangs on one notebook: only that notebook fails, and the next run
grades it again; a batch killed midway resumes; and no batch without a sandbox."""

import csv
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import nbformat
import pytest

import grader.dispatch.dispatch as dispatch
import grader.grading as grading
from autograder.paths import REPO

from .helpers.machine import batch_scratch, kernels_in, leftover_groups, needs_sandbox
from .helpers.submissions import perfect, release

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches


REAL_GRADE_HERE = dispatch.grade_here


def _untouched_class(folder: Path, *students: str) -> None:
    """Each student hands in the untouched release of notebook 07."""
    for student in students:
        (folder / student).mkdir(parents=True)
        nbformat.write(release("07_rmsnorm"), folder / student / "07_rmsnorm.ipynb")


def _dies_on_crasher(task, start_next):
    """The worker's task, except that it kills its worker process for the student named crasher."""
    if task.student == "crasher":
        os._exit(1)
    return REAL_GRADE_HERE(task, start_next)


@needs_sandbox
def test_a_worker_that_dies_costs_only_its_own_notebook_and_no_grade(tmp_path, monkeypatch):
    """The grader's own failure is graded again by the next run, and never replaces a grade."""
    _untouched_class(tmp_path / "in", "crasher", "steady")
    out = tmp_path / "out"
    monkeypatch.setattr(dispatch, "grade_here", _dies_on_crasher)
    results = {r.student: r for r in grading.grade(tmp_path / "in", out, jobs=2)}
    assert (results["steady"].status, results["steady"].score) == ("graded", 0.0)
    assert (results["crasher"].status, results["crasher"].reason) == (
        "failed",
        "the grader's worker died on this notebook (out of memory?)",
    )
    monkeypatch.setattr(dispatch, "grade_here", REAL_GRADE_HERE)
    results = {r.student: r for r in grading.grade(tmp_path / "in", out, jobs=2)}
    assert results["crasher"].status == "graded"  # retried; steady's unchanged file was not
    monkeypatch.setattr(dispatch, "grade_here", _dies_on_crasher)
    results = {r.student: r for r in grading.grade(tmp_path / "in", out, jobs=2, again=True)}
    assert (results["crasher"].status, results["crasher"].score) == ("graded", 0.0)
    log = (out / "logs" / "crasher" / "07_rmsnorm.log").read_text()
    assert "gave nothing back (the grader's worker died" in log and "the outcome above stands" in log


def _hangs_on_hanger(task, start_next):
    """The worker's task, except that it never finishes for the student named hanger."""
    if task.student == "hanger":
        time.sleep(3600)
    return REAL_GRADE_HERE(task, start_next)


@needs_sandbox
def test_a_worker_that_hangs_is_killed_and_costs_only_its_own_notebook(tmp_path, monkeypatch):
    _untouched_class(tmp_path / "in", "hanger", "steady")
    monkeypatch.setattr(dispatch, "grade_here", _hangs_on_hanger)
    monkeypatch.setattr(dispatch, "WORKER_GRACE_S", 5)
    limits = grading.Limits(notebook_timeout=20)
    results = {r.student: r for r in grading.grade(tmp_path / "in", tmp_path / "out", jobs=2, limits=limits)}
    assert (results["steady"].status, results["steady"].score) == ("graded", 0.0)
    assert (results["hanger"].status, results["hanger"].reason) == (
        "failed",
        "grading this notebook did not finish within 25 s",
    )


def test_grading_refuses_without_a_sandbox(tmp_path, monkeypatch):
    monkeypatch.setattr(grading, "unavailable_reason", lambda: "bubblewrap (`bwrap`) is not installed")
    nbformat.write(release("07_rmsnorm"), (tmp_path / "ann_07_rmsnorm.ipynb"))
    with pytest.raises(SystemExit, match="--no-sandbox"):
        grading.grade(tmp_path, tmp_path / "out")


def _whether_it_starts_the_next_kernel(task, start_next):
    return start_next


def test_only_notebooks_a_worker_may_follow_start_a_kernel_ahead(tmp_path, monkeypatch):
    """Each of the last `jobs` notebooks of a batch may be its worker's last: none of them starts a
    kernel for a next notebook (kernels.py), which would be stopped unused."""
    monkeypatch.setattr(dispatch, "grade_here", _whether_it_starts_the_next_kernel)
    pool = dispatch.LocalPool(2, grading.Limits(), tmp_path, dispatch.Batch(str(tmp_path)))
    assert dict(pool.graded(list("abcde"))) == {"a": True, "b": True, "c": True, "d": False, "e": False}
    assert dict(pool.graded(["alone"])) == {"alone": False}


@pytest.fixture
def scratch():
    """The killed batch's folder of sandboxes."""
    with batch_scratch("killed-") as folder:
        yield folder


@needs_sandbox
def test_a_killed_batch_resumes_without_regrading(tmp_path, scratch):
    """Kill `course grade` midway (as a power cut would); the re-run finishes the rest only, and
    removes the process groups and sandboxes' folder the killed run left."""
    submissions, out = tmp_path / "in", tmp_path / "out"
    for student in ("a", "b", "c"):
        (submissions / student).mkdir(parents=True)
        nbformat.write(perfect("07_rmsnorm"), submissions / student / "07_rmsnorm.ipynb")
    command = [
        str(REPO / ".venv" / "bin" / "course"),
        "grade",
        str(submissions),
        "--out",
        str(out),
        "--jobs",
        "1",
    ]
    environment = {**os.environ, "TMPDIR": str(scratch)}
    batch = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment
    )
    results = out / "work" / "results"
    # Killed once a notebook is graded and a kernel of the batch is seen running (started ahead).
    while batch.poll() is None and not (list(results.rglob("*.json")) and kernels_in(scratch)):
        threading.Event().wait(0.2)
    os.killpg(batch.pid, 9)
    batch.wait()
    killed = json.loads((out / "work" / "batch.json").read_text())
    assert Path(killed["scratch"]).exists()
    finished = {p: p.stat().st_mtime_ns for p in results.rglob("*.json")}
    assert 1 <= len(finished) < 3
    rerun = subprocess.run(command, capture_output=True, text=True, env=environment)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert not Path(killed["scratch"]).exists() and not (out / "work" / "batch.json").exists()
    assert not killed["group"] or not any(g.name == killed["group"] for g in leftover_groups())
    assert all(p.stat().st_mtime_ns == t for p, t in finished.items())
    with (out / "grades.csv").open() as f:
        assert [r["score"] for r in csv.DictReader(f)] == ["6"] * 3
    assert kernels_in(scratch) == []
