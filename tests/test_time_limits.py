"""A notebook that runs past its total time limit in the sandbox: the test cells that ran before the
time ran out keep their points, the reason says what stopped it, and the cells after it are counted
as not run. A batch of its own, with short limits: in the class batch (tests/test_grading.py), whose
limits leave room for a perfect 08 on a busy machine, the two notebooks held both workers for 60 s."""

import csv

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from grader.cli import main

from .helpers.machine import needs_sandbox
from .helpers.submissions import grade_id, perfect

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

# A perfect 07 runs in about 5 s with the machine at load 2: 4x room before the total limit.
CELL_TIMEOUT, NOTEBOOK_TIMEOUT, NAP = 10, 20, 3


def _naps(count: int) -> list:
    return [new_code_cell(f"import time\ntime.sleep({NAP})") for _ in range(count)]


@needs_sandbox
def test_a_notebook_past_its_time_limit_keeps_what_ran(tmp_path):
    too_slow = perfect("07_rmsnorm")
    too_slow.cells += _naps(NOTEBOOK_TIMEOUT // NAP + 2)  # every test cell ran before the naps
    too_slow_early = perfect("07_rmsnorm")
    at = [grade_id(c) for c in too_slow_early.cells].index("rmsnorm_norm_hidden")
    too_slow_early.cells[at:at] = _naps(NOTEBOOK_TIMEOUT // NAP + 1)  # past the limit on their own
    for student, notebook in (("too-slow", too_slow), ("too-slow-early", too_slow_early)):
        (tmp_path / "in" / student).mkdir(parents=True)
        nbformat.write(notebook, tmp_path / "in" / student / "07_rmsnorm.ipynb")
    limits = ["--cell-timeout", str(CELL_TIMEOUT), "--notebook-timeout", str(NOTEBOOK_TIMEOUT)]
    assert main(["grade", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--jobs", "2", *limits]) == 0
    with (tmp_path / "out" / "grades.csv").open() as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    expected = {"too-slow": ("6", "total time limit"), "too-slow-early": ("2", "3 test cells did not run")}
    for student, (score, reason) in expected.items():
        row = rows[student]
        assert (row["status"], row["score"], row["max_score"]) == ("graded", score, "6"), row
        assert reason in row["reason"], row
