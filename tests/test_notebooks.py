"""The solution notebooks run, the derived files are current, and the release hides the answers."""

import tempfile
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from autograder import api
from autograder.cells import check_calls, grade_id, is_test_cell
from autograder.checks import CHECKS
from autograder.paths import IMAGES, NOTEBOOKS, assignments, source_notebook
from autograder.reference import is_reference_cell
from grader.build import build, same_picture, stale_files

from .helpers.submissions import answer_lines, release


def test_build_is_current_and_solution_notebooks_execute():
    """`course build` executes every solution notebook; what it derives must be committed as is."""
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp), checkpoint=False)
        assert stale_files(Path(tmp)) == []


@pytest.mark.parametrize("assignment", assignments())
def test_source_notebooks_are_stored_clean(assignment):
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    assert "widgets" not in notebook.metadata
    for cell in notebook.cells:
        assert not cell.get("outputs") and not cell.get("execution_count"), grade_id(cell)


@pytest.mark.parametrize("assignment", assignments())
def test_release_contains_no_answers_hidden_tests_outputs_or_instructor_files(assignment):
    notebook = release(assignment)
    text = (NOTEBOOKS / assignment / f"{assignment}.ipynb").read_text()
    for line in answer_lines(assignment):
        assert line not in text, f"answer line leaked into the release: {line}"
    assert "BEGIN HIDDEN TESTS" not in text and "hidden=True" not in text
    assert "widgets" not in notebook.metadata
    for cell in notebook.cells:
        assert not cell.get("outputs"), grade_id(cell)
    assert sorted(p.name for p in (NOTEBOOKS / assignment).iterdir()) == [f"{assignment}.ipynb"]


@pytest.mark.parametrize("assignment", assignments())
def test_every_check_has_its_cells_with_matching_points(assignment):
    """Each check of a notebook has an answer cell, a visible and a hidden test cell, a study cell."""
    number = assignment[:2]
    cells = {grade_id(c): c for c in nbformat.read(source_notebook(assignment), as_version=4).cells}
    checks = [c for name, c in CHECKS.items() if name.startswith(number + ".")]
    assert checks
    for check in checks:
        question = check.name.split(".", 1)[1]
        assert is_reference_cell(cells[check.answer_cell])
        visible, hidden = cells[f"{question}_test"], cells[f"{question}_hidden"]
        assert visible.source == f'check("{check.name}", {check.target_source})'
        assert f'check("{check.name}", {check.target_source}, hidden=True)' in hidden.source
        assert visible.metadata.nbgrader["points"] == check.points
        assert hidden.metadata.nbgrader["points"] == check.hidden_points
        assert cells[f"{question}_study"].source == f'study("{check.name}")'


@pytest.mark.parametrize("assignment", assignments())
def test_every_test_cell_is_judged_by_checks_worth_its_points(assignment):
    """At grading time a test cell earns what the judge gives its check() calls, nothing else."""
    for cell in nbformat.read(source_notebook(assignment), as_version=4).cells:
        if is_test_cell(cell):
            calls = check_calls(cell.source)
            assert calls, f"{grade_id(cell)} calls no check"
            points = sum(CHECKS[n].hidden_points if hidden else CHECKS[n].points for n, hidden in calls)
            assert cell.metadata.nbgrader["points"] == points, grade_id(cell)


def test_a_snapshot_is_stale_when_it_changes_not_when_a_cpu_rounds_otherwise(tmp_path):
    committed = api.snapshot_path("07.rmsnorm")
    y = torch.load(committed, weights_only=True)["expected"][0]["reference"]["y"]
    for name, moved in (
        ("rounded", y + 4 * torch.finfo(y.dtype).eps * y.abs().max()),
        ("changed", y * (1 + 1e-4)),
    ):
        snapshot = torch.load(committed, weights_only=True)
        snapshot["expected"][0]["reference"]["y"] = moved  # a few units in the last place, or a real change
        torch.save(snapshot, tmp_path / f"{name}.pt")
    assert api.same_snapshot(tmp_path / "rounded.pt", committed)
    assert not api.same_snapshot(tmp_path / "changed.pt", committed)


def test_a_figure_is_stale_when_it_changes_not_when_a_few_pixels_flip(tmp_path):
    from PIL import Image

    committed = IMAGES / "04_rope_score_vs_distance.png"
    pixels = np.asarray(Image.open(committed).convert("RGBA")).copy()
    flipped = pixels.copy()
    flipped.reshape(-1, 4)[::2000, :3] ^= 0xFF  # 0.05% of the pixels, as a boundary drawn on another CPU
    Image.fromarray(flipped).save(tmp_path / "flipped.png")
    redrawn = pixels.copy()
    redrawn[: pixels.shape[0] // 10] = 255  # a tenth of the figure blank: a title or a curve gone
    Image.fromarray(redrawn).save(tmp_path / "redrawn.png")
    assert same_picture(tmp_path / "flipped.png", committed)
    assert not same_picture(tmp_path / "redrawn.png", committed)
