"""A batch whose worker dies or hangs on one notebook: only that notebook fails, and the next run
grades it again; and no batch without a sandbox."""

import os
import time
from pathlib import Path

import nbformat
import pytest

import grader.dispatch.dispatch as dispatch
import grader.grading as grading

from .helpers.machine import needs_sandbox
from .helpers.submissions import release

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
