"""Notebooks that run past a time limit in the sandbox: a cell that never returns is stopped and the
cells after it run; a notebook past its total limit keeps the points of the test cells that ran
before the time ran out, the reason says what stopped it, and the cells after it are counted as not
run. A batch of its own, with short limits: the class batch (tests/test_grading.py) grades under the
limits an instructor gets, which leave room for a perfect 08 on a busy machine."""

import csv

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from grader.cli import main

from .helpers.machine import needs_sandbox
from .helpers.submissions import grade_id, perfect, with_answer

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

# A perfect 07 runs in about 5 s and a perfect 04 in 6-8 s with the machine busy (benchmarks/README.md,
# "Notebooks on a loaded machine"): the looping 04 ends near 20 s, less than half the total limit.
CELL_TIMEOUT, NOTEBOOK_TIMEOUT, NAP = 10, 45, 5


def _naps(count: int) -> list:
    return [new_code_cell(f"import time\ntime.sleep({NAP})") for _ in range(count)]


@needs_sandbox
def test_notebooks_past_a_time_limit_keep_what_ran(tmp_path):
    too_slow = perfect("07_rmsnorm")
    too_slow.cells += _naps(NOTEBOOK_TIMEOUT // NAP + 2)  # every test cell ran before the naps
    too_slow_early = perfect("07_rmsnorm")
    at = [grade_id(c) for c in too_slow_early.cells].index("rmsnorm_norm_hidden")
    too_slow_early.cells[at:at] = _naps(NOTEBOOK_TIMEOUT // NAP + 1)  # past the limit on their own
    # Never returns, holding no core (the red team's loop spins): only the checks of its answer fail.
    looping = with_answer(
        perfect("04_rope"), "half_split_permutation", "import time\nwhile True:\n    time.sleep(1)\n"
    )
    submissions = {
        ("too-slow", "07_rmsnorm"): too_slow,
        ("too-slow-early", "07_rmsnorm"): too_slow_early,
        ("infinite-loop", "04_rope"): looping,
    }
    for (student, assignment), notebook in submissions.items():
        (tmp_path / "in" / student).mkdir(parents=True)
        nbformat.write(notebook, tmp_path / "in" / student / f"{assignment}.ipynb")
    limits = ["--cell-timeout", str(CELL_TIMEOUT), "--notebook-timeout", str(NOTEBOOK_TIMEOUT)]
    # One worker a notebook: they sleep, and none waits for another's naps.
    assert main(["grade", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--jobs", "3", *limits]) == 0
    with (tmp_path / "out" / "grades.csv").open() as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    expected = {
        "too-slow": ("6", "6", "total time limit"),
        "too-slow-early": ("2", "6", "3 test cells did not run"),
        "infinite-loop": ("6", "9", ""),  # its answer's checks failed: nothing else to say
    }
    for student, (score, full, reason) in expected.items():
        row = rows[student]
        assert (row["status"], row["score"], row["max_score"]) == ("graded", score, full), row
        assert reason in row["reason"], row
