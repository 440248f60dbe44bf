"""Question labels, the progress table of a working copy, and the summary at the end of a notebook."""

import json
import os
import unicodedata

import nbformat
import pytest

from autograder import api, progress
from autograder.checks import CHECKS
from autograder.paths import assignments, source_notebook
from autograder.printable import UNPRINTABLE
from autograder.progress import Question, Seen, course_questions, read_questions
from autograder.student import main

from .helpers.submissions import mistake, mutant, perfect, release

LABEL = "> **Difficulty** ●●○○○ · **Importance** ★★★★☆ · **about 20 min**"
TEST = ("test", 'check("07.rmsnorm", F)')
UNREADABLE = "> **Difficulty** 2 · **Importance** 4 · **about 5 min**"


def test_every_visible_check_has_one_labelled_question_and_the_build_stored_them():
    stored = course_questions()
    assert list(stored) == assignments()
    for assignment in assignments():
        questions = read_questions(nbformat.read(source_notebook(assignment), as_version=4), assignment)
        assert questions == stored[assignment]
        named = [name for q in questions for name in q.checks]
        assert sorted(named) == sorted(n for n in CHECKS if n.startswith(assignment[:2] + "."))
        assert all(1 <= q.difficulty <= 5 and 1 <= q.importance <= 5 and q.minutes >= 1 for q in questions)
        assert all(q.title.startswith(("Question", "Check", "The homework")) for q in questions), questions


def _notebook(*cells) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    for kind, source in cells:
        if kind == "test":
            cell = nbformat.v4.new_code_cell(source)
            cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "t", "points": 1}
        else:
            cell = nbformat.v4.new_markdown_cell(source)
        notebook.cells.append(cell)
    return notebook


def test_a_label_is_read_from_under_its_heading():
    notebook = _notebook(
        ("md", f"## Part 1\n\n{LABEL}\n\n### Question 1: `f`\n\ntext"), ("test", 'check("07.rmsnorm", F)')
    )
    [question] = read_questions(notebook, "nb")
    assert question == Question("Question 1: `f`", ("07.rmsnorm",), 2, 4, 20)
    assert question.labels == "difficulty 2/5, importance 4/5, ~20 min"


@pytest.mark.parametrize(
    ("cells", "complaint"),
    [
        ((TEST,), "comes before any labelled question"),
        ((("md", f"## Q\n\n{LABEL}"), ("md", f"## R\n\n{LABEL}"), TEST), "no visible"),
        ((("md", f"## Q\n\n{LABEL}"),), "has no visible check"),
        ((("md", f"## Q\n\n{UNREADABLE}"),), "does not read as"),
        ((("md", f"## Q\n\n{UNREADABLE.replace('2', '●●').replace('4', '★')}"),), "five symbols"),
        ((("md", f"## Q\n\n{LABEL.replace('○○○ ·', '○○○○ ·', 1)}"),), "five symbols"),
        ((("md", f"## Q\n\n{LABEL}\n\n{LABEL}"),), "2 label lines"),
    ],
    ids=[
        "check without a question",
        "question without a check",
        "last one too",
        "unreadable",
        "too few",
        "six",
        "two",
    ],
)
def test_a_question_without_a_check_or_a_bad_label_is_refused(cells, complaint):
    with pytest.raises(ValueError, match=complaint):
        read_questions(_notebook(*cells), "nb")


def test_the_hidden_twin_of_a_check_is_not_a_question_of_its_own():
    notebook = _notebook(("md", f"## Q\n\n{LABEL}"), ("test", 'check("07.rmsnorm", F, hidden=True)'))
    with pytest.raises(ValueError, match="has no visible check"):
        read_questions(notebook, "nb")


def _run_tests_of(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Outputs as a kernel leaves them: each visible test cell's verdict, printed or raised."""
    from .helpers.submissions import namespace, objects_for

    names = namespace(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith("check(") and "hidden" not in cell.source:
            name = cell.source.split('"')[1]
            verdict = api.evaluate(name, objects_for(CHECKS[name], names))
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text=f"{verdict}\n")
                if verdict.passed
                else nbformat.v4.new_output(
                    "error",
                    ename="CheckFailed",
                    evalue=verdict.message,
                    traceback=[f"CheckFailed: {verdict}"],
                )
            ]
    return notebook


def test_the_table_reads_a_working_copy(tmp_path):
    dtype = mistake("07.rmsnorm", "DtypeNotPreserved")  # right in float32, wrong in bfloat16
    half = _run_tests_of(mutant("07_rmsnorm", "rmsnorm", "RMSNorm", dtype))
    (tmp_path / "07_rmsnorm").mkdir()
    nbformat.write(half, tmp_path / "07_rmsnorm" / "07_rmsnorm.ipynb")
    nbformat.write(_run_tests_of(perfect("04_rope")), tmp_path / "04_rope.ipynb")  # flat is fine
    (tmp_path / "05_gated_ffn").mkdir()
    (tmp_path / "05_gated_ffn" / "05_gated_ffn.ipynb").write_text("{ not json")
    nbformat.write(release("06_moe"), tmp_path / "06_moe.ipynb")

    table, notes, found = progress.folder_progress(tmp_path)
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert rows["04_rope"].split()[1:3] == ["3/3", "3/3"] and rows["04_rope"].endswith("all done")
    assert rows["07_rmsnorm"].split()[1:3] == ["1/2", "2/2"]  # the whole layer's check fails: advice only
    assert "Check 2: the whole layer" in rows["07_rmsnorm"] and "~2 min" in rows["07_rmsnorm"]
    assert (
        rows["06_moe"].split()[1] == f"0/{len(course_questions()['06_moe'])}"
        and "Question 1" in rows["06_moe"]
    )
    assert any("05_gated_ffn" in note and "could not be read" in note for note in notes)
    assert rows["00_warmup"].endswith("not found in this folder")  # not a student with no progress
    assert found == 4 and len(rows) == 13
    every = course_questions()
    questions = sum(len(q) for q in every.values())
    points = sum(CHECKS[name].points for qs in every.values() for q in qs for name in q.checks)
    minutes = sum(q.minutes for qs in every.values() for q in qs)
    done = sum(q.minutes for q in every["04_rope"]) + every["07_rmsnorm"][0].minutes
    assert rows["all"].split()[1:3] == [f"4/{questions}", f"5/{points:g}"]
    assert rows["all"].split()[3] == f"~{minutes - done}"


def test_of_several_copies_the_usual_place_wins_then_the_last_modified(tmp_path):
    (tmp_path / "notebooks" / "07_rmsnorm").mkdir(parents=True)
    usual = tmp_path / "notebooks" / "07_rmsnorm" / "07_rmsnorm.ipynb"
    nbformat.write(release("07_rmsnorm"), usual)
    nbformat.write(release("07_rmsnorm"), tmp_path / "07_rmsnorm.ipynb")  # downloaded again
    assert progress.find_notebook(tmp_path, "07_rmsnorm") == (usual, [])
    usual.unlink()
    (tmp_path / ".venv").mkdir()
    nbformat.write(release("07_rmsnorm"), tmp_path / ".venv" / "07_rmsnorm.ipynb")  # not the student's
    (tmp_path / "old").mkdir()
    nbformat.write(release("07_rmsnorm"), tmp_path / "old" / "07_rmsnorm.ipynb")
    os.utime(tmp_path / "old" / "07_rmsnorm.ipynb", (0, 0))
    assert progress.find_notebook(tmp_path, "07_rmsnorm") == (
        tmp_path / "07_rmsnorm.ipynb",
        [tmp_path / "old" / "07_rmsnorm.ipynb"],
    )
    _, notes, _ = progress.folder_progress(tmp_path)
    assert any(note.startswith("07_rmsnorm: read ") and "also there" in note for note in notes)


def test_a_folder_that_cannot_be_read_is_a_note_not_a_crash(tmp_path, monkeypatch):
    """As a folder without the x permission does to a student (the suite runs as root, who reads all)."""
    real = progress.find_notebook

    def locked(folder, notebook):
        if notebook == "07_rmsnorm":
            raise PermissionError(13, "Permission denied", str(folder / notebook))
        return real(folder, notebook)

    monkeypatch.setattr(progress, "find_notebook", locked)
    table, notes, found = progress.folder_progress(tmp_path)
    assert any(note.startswith("07_rmsnorm: could not be read (PermissionError") for note in notes)
    assert len(table.splitlines()) == 14  # the header, 12 notebooks, the total


def test_the_summary_at_the_end_of_a_notebook_counts_this_kernels_checks(monkeypatch, capsys):
    monkeypatch.setattr(progress, "_verdicts", {})
    progress.progress("07_rmsnorm")
    before = capsys.readouterr().out
    assert before.startswith("07_rmsnorm: 0 of 2 questions pass in this session (0/2 visible points).")
    assert "Next: Question 1: RMSNorm._norm (difficulty 1/5" in before
    progress.record(api.evaluate("07.rmsnorm_norm", _reference("07.rmsnorm_norm")))
    progress.progress("07_rmsnorm")
    after = capsys.readouterr().out
    assert (
        "1 of 2 questions pass" in after and "  passed  Question 1" in after and "  to do   Check 2" in after
    )


def test_the_summary_prints_nothing_in_a_grading_kernel(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COURSE_EXCHANGE", str(tmp_path))
    from autograder import exchange

    assert exchange.directory() is not None, "the variable's name changed: update this test"
    progress.progress("07_rmsnorm")
    assert capsys.readouterr().out == ""


def test_a_failed_check_counts_as_failed_not_to_do_unless_it_is_the_stub():
    question = Question("Q", ("a.x", "a.y"), 1, 1, 5)
    assert progress.question_state(question, {}) == "to do"
    assert progress.question_state(question, {"a.y": Seen(False, 0, 1, stub=True)}) == "to do"
    assert progress.question_state(question, {"a.x": Seen(True, 1, 1)}) == "to do"
    assert progress.question_state(question, {"a.y": Seen(False, 0.5, 1)}) == "failed"
    assert progress.question_state(question, {"a.x": Seen(True, 1, 1), "a.y": Seen(True, 1, 1)}) == "passed"


def _reference(name: str):
    from autograder import reference

    return reference.reference_object(name, CHECKS[name].target)


# ------------------------------------------------------------------ what it does not take on trust


def _claiming_success(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Each visible test cell shows a passed verdict, as if it had been run and saved."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith("check(") and "hidden" not in cell.source:
            name = cell.source.split('"')[1]
            cell.execution_count = 1
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"[{name}] passed (1/1):\n")]
    return notebook


def _row(folder, notebook: str) -> str:
    table, _, _ = progress.folder_progress(folder)
    return next(line for line in table.splitlines() if line.startswith(notebook))


def test_a_claim_on_an_unchanged_answer_or_outside_its_test_cell_counts_for_nothing(tmp_path):
    nbformat.write(_claiming_success(release("07_rmsnorm")), tmp_path / "07_rmsnorm.ipynb")
    answered = perfect("04_rope")
    claims = "".join(f"[{name}] passed (1/1):\n" for q in course_questions()["04_rope"] for name in q.checks)
    answered.cells.insert(2, nbformat.v4.new_code_cell("print()", outputs=[_stdout(claims)]))
    nbformat.write(answered, tmp_path / "04_rope.ipynb")
    assert _row(tmp_path, "07_rmsnorm").split()[1:3] == ["0/2", "0/2"]
    assert _row(tmp_path, "04_rope").split()[1:3] == ["0/3", "0/3"]
    nbformat.write(_claiming_success(perfect("07_rmsnorm")), tmp_path / "07_rmsnorm.ipynb")
    assert _row(tmp_path, "07_rmsnorm").split()[1:3] == ["2/2", "2/2"]  # what a saved run shows


def _stdout(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


MALFORMED = {
    "nbformat as a string": lambda d: d | {"nbformat": "4"},
    "nbformat_minor as a string": lambda d: d | {"nbformat_minor": "5"},
    "cells not a list": lambda d: d | {"cells": {str(i): c for i, c in enumerate(d["cells"])}},
    "an output's text not text": lambda d: _first_output(d, {"text": [1, 2]}),
    "deeply nested": lambda d: d | {"metadata": {"x": "DEEP"}},
}


def _first_output(data: dict, change: dict) -> dict:
    cell = next(c for c in data["cells"] if c.get("outputs"))
    cell["outputs"][0] |= change
    return data


@pytest.mark.parametrize("malformed", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_notebook_is_unreadable_never_done(tmp_path, malformed):
    data = json.loads(nbformat.writes(_claiming_success(perfect("07_rmsnorm"))))
    text = json.dumps(MALFORMED[malformed](data)).replace('"DEEP"', _nested(100_000))
    (tmp_path / "07_rmsnorm.ipynb").write_text(text)
    _, notes, found = progress.folder_progress(tmp_path)
    row = _row(tmp_path, "07_rmsnorm")
    assert row.split()[1:3] == ["0/2", "0/2"] and row.endswith("could not be read (see below)"), row
    assert found == 1 and any(note.startswith("07_rmsnorm: could not be read") for note in notes), notes


def test_a_notebook_past_the_size_bound_is_not_read(tmp_path, monkeypatch):
    nbformat.write(_claiming_success(perfect("07_rmsnorm")), tmp_path / "07_rmsnorm.ipynb")
    monkeypatch.setattr(progress, "MAX_NOTEBOOK_BYTES", 1000)
    _, notes, _ = progress.folder_progress(tmp_path)
    assert _row(tmp_path, "07_rmsnorm").endswith("could not be read (see below)")
    assert any("larger than" in note for note in notes), notes


EVIL = "\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J\u202e\r"


def test_everything_progress_prints_is_escaped(tmp_path, capsys):
    for folder in (f"a{EVIL}", "b"):  # two copies: a note names both paths
        (tmp_path / folder).mkdir()
        nbformat.write(release("07_rmsnorm"), tmp_path / folder / "07_rmsnorm.ipynb")
    data = json.loads(nbformat.writes(release("04_rope")))
    (tmp_path / "04_rope.ipynb").write_text(json.dumps(data | {"nbformat": EVIL}))  # quoted by the error
    assert main(["progress", str(tmp_path)]) == 0
    printed = capsys.readouterr()
    assert "\\x1b]52;c;" in printed.out  # the escape codes were there, shown
    bad = [c for c in printed.out + printed.err if unicodedata.category(c) in UNPRINTABLE and c != "\n"]
    assert not bad, bad


def test_an_answer_cell_as_released_is_told_as_nbgrader_tells_it():
    from nbgrader.utils import compute_checksum

    for assignment in assignments():
        for cell in release(assignment).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution"):
                assert progress._as_released(cell) and compute_checksum(cell) == meta["checksum"]
                cell.source += " "
                assert not progress._as_released(cell)
