"""The reference notebooks keep full marks on a loaded machine: every guard that depends on time or
load (a training step's wall-clock limit, the cell and notebook time limits, a trained model's
accuracy) must hold for correct code while the grading batch shares each core with another busy
process, two gradings per core, as in a class's batch beside other work."""

import csv
import os

import nbformat
import pytest

from autograder.checks import CHECKS
from autograder.reference import assignment_of
from grader.cli import main

from .helpers.machine import busy_processes, needs_sandbox
from .helpers.submissions import perfect

pytestmark = pytest.mark.whole_machine  # make test runs it alone, after the others

# The notebooks whose checks have load-sensitive guards (00: a training's accuracy; 08: a training
# step's wall-clock limit), and an ordinary one.
NOTEBOOKS = ["00_warmup", "08_transformer", "07_rmsnorm"]
CORES = os.cpu_count() or 1
BATCH_SEED = 20261122


def full_marks(assignment: str) -> float:
    return sum(c.points + c.hidden_points for name, c in CHECKS.items() if assignment_of(name) == assignment)


@pytest.fixture
def busy_cores():
    """One process spinning on each core for as long as the test runs; each is killed at the end,
    whatever happens to the test."""
    with busy_processes(CORES):
        yield CORES


@needs_sandbox
def test_reference_notebooks_keep_full_marks_on_a_loaded_machine(busy_cores, tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    for assignment in NOTEBOOKS:
        path = submissions / "perfect" / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(perfect(assignment), path)
    (out / "work").mkdir(parents=True)
    (out / "work" / "case_seed").write_text(str(BATCH_SEED))
    # The course's own time limits (the grader's defaults), one grading per core beside each spinner.
    assert main(["grade", str(submissions), "--out", str(out), "--jobs", str(busy_cores)]) == 0
    with (out / "grades.csv").open() as f:
        rows = {r["notebook"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(NOTEBOOKS)
    for assignment, row in rows.items():
        assert (row["status"], row["reason"]) == ("graded", ""), row
        assert float(row["score"]) == full_marks(assignment), row
