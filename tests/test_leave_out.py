"""Leaving out the questions added beyond the original homework (grader/leave_out.py): course.toml read
as hostile input, the cells a question takes with it, and the release, the grading template, the
output folder and `course list` under one setting."""

import copy
import csv
import json
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from nbgrader.api import Gradebook

from autograder.cells import grade_id
from autograder.checks import CHECKS
from autograder.paths import NOTEBOOKS, source_notebook
from autograder.reference import assignment_of
from grader import leave_out
from grader.build import INSTRUCTOR_ONLY, generate_release, read_all_questions
from grader.cli import main
from grader.notebook import autograde
from grader.notebook.autograde import LEFT_OUT, prepare_template
from grader.release import write_package

from .helpers.machine import needs_sandbox
from .helpers.submissions import digests, perfect

MERGE = "11.merge_softmax_states"
TILED = "11_tiled_attention"
ADDED = {name for name, check in CHECKS.items() if check.added}
# Notebook 11's Question 4, from its heading to "## Summary"
MERGE_CELLS = [
    "md_12",
    "code_state",
    "md_13",
    "merge_softmax_states",
    "code_merge",
    "merge_softmax_states_test",
    "merge_softmax_states_hidden",
    "merge_softmax_states_study",
]


def setting(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "course.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# ------------------------------------------------------------------------------ course.toml


def test_the_committed_setting_and_a_missing_file_leave_nothing_out(tmp_path):
    assert leave_out.left_out() == frozenset(), "the suite grades the whole course: course.toml as committed"
    assert leave_out.left_out(tmp_path / "course.toml") == frozenset()
    assert leave_out.SETTING.read_text().rstrip().endswith("leave_out = []")


def test_added_stands_for_every_question_marked_added_and_a_name_for_its_own(tmp_path):
    assert MERGE in ADDED
    assert leave_out.left_out(setting(tmp_path, 'leave_out = ["added"]')) == ADDED
    assert leave_out.left_out(setting(tmp_path, f'leave_out = ["{MERGE}", "{MERGE}"]')) == {MERGE}
    assert leave_out.left_out(setting(tmp_path, f'leave_out = ["{MERGE}", "added"]')) == ADDED
    assert leave_out.left_out(setting(tmp_path, "# nothing set\n")) == frozenset()


@pytest.mark.parametrize(
    "text, says",
    [
        ("leave_out = [", "could not be read as TOML"),
        (b'leave_out = ["\xff"]', "could not be read as TOML"),
        ("leave_out = []\nleave_in = []", "no setting 'leave_in': the only one is leave_out"),
        ("[leave_out]\nadded = true", "leave_out must be a list of quoted names"),
        ('leave_out = "added"', "leave_out must be a list of quoted names"),
        ("leave_out = [11]", "leave_out must be a list of quoted names"),
        ('leave_out = ["11.merge_softmax_state"]', "no question '11.merge_softmax_state'"),
        ('leave_out = ["Added"]', "no question 'Added'"),
        ('leave_out = ["07.rmsnorm_norm"]', "'07.rmsnorm_norm' is a question of the original homework"),
        ('leave_out = ["\\u001b[2J"]', "no question '\\x1b[2J'"),  # escaped, not sent to the terminal
    ],
)
def test_a_bad_setting_names_the_file_the_entry_and_what_may_be_left_out(tmp_path, text, says):
    path = setting(tmp_path, text)
    with pytest.raises(SystemExit) as stopped:
        leave_out.left_out(path)
    message = str(stopped.value)
    assert message.startswith(f"{path}: ") and says in message, message
    assert "What may be left out: 'added'" in message and repr(MERGE) in message, message
    assert "\x1b" not in message


def test_a_setting_that_is_a_folder_is_not_read_as_empty(tmp_path):
    (tmp_path / "course.toml").mkdir()
    with pytest.raises(SystemExit, match="could not be read"):
        leave_out.left_out(tmp_path / "course.toml")


# ------------------------------------------------------------------------------ the cells of a question


def question() -> nbformat.NotebookNode:
    """Notebook 11's layout in small: Question 3, Question 4 (its text, a given cell, a level-3
    heading), the summary."""
    cells = [
        ("md_07", "## Question 3: tiled attention"),
        ("tiled_attention", "def tiled_attention(): ..."),
        ("tiled_attention_test", 'check("11.tiled_attention", tiled_attention)'),
        ("tiled_attention_hidden", "# hidden"),
        ("tiled_attention_study", 'study("11.tiled_attention")'),
        ("md_12", "## Question 4: merging partial results\n\ntext"),
        ("code_state", "def attention_state(): ..."),
        ("md_13", "### Write `merge_softmax_states(a, b)`"),
        ("merge_softmax_states", "def merge_softmax_states(a, b): ..."),
        ("code_merge", "merge_softmax_states(x, y)"),
        ("md_note", "### A detail, below level 2"),
        ("merge_softmax_states_test", f'check("{MERGE}", merge_softmax_states)'),
        ("merge_softmax_states_hidden", "# hidden"),
        ("merge_softmax_states_study", f'study("{MERGE}")'),
        ("md_14", "## Summary"),
        ("progress", 'progress("11_tiled_attention")'),
    ]
    made = []
    for gid, source in cells:
        cell = new_markdown_cell(source) if gid.startswith("md_") else new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade_id": gid}
        made.append(cell)
    return new_notebook(cells=made)


def cell(notebook: nbformat.NotebookNode, gid: str):
    return next(c for c in notebook.cells if grade_id(c) == gid)


def test_a_question_is_its_heading_up_to_the_next_level_two_heading():
    notebook = question()
    span = leave_out.question_cells(notebook, CHECKS[MERGE])
    dropped = [grade_id(notebook.cells[i]) for i in span]
    assert dropped == MERGE_CELLS[:5] + ["md_note"] + MERGE_CELLS[5:]  # a level-3 heading is inside
    kept = copy.deepcopy(notebook.cells[: span.start] + notebook.cells[span.stop :])
    assert leave_out.without_questions(notebook, [CHECKS[MERGE]]) == dropped
    assert notebook.cells == kept


def _move(notebook, gid: str, before: str | None) -> None:
    moved = cell(notebook, gid)
    notebook.cells.remove(moved)
    at = len(notebook.cells) if before is None else notebook.cells.index(cell(notebook, before))
    notebook.cells.insert(at, moved)


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda nb: setattr(cell(nb, "md_12"), "source", "Question 4, no heading"),
            "hold those of 11.tiled_attention too",  # Question 3's heading is then the last above
        ),
        (lambda nb: setattr(cell(nb, "md_13"), "source", "## Merging, part two"), 'no "## Question" heading'),
        (
            lambda nb: setattr(cell(nb, "md_note"), "source", "## A section"),
            "_test, .*_hidden, .*_study are not",
        ),
        (lambda nb: _move(nb, "merge_softmax_states_hidden", None), "_hidden are not between its heading"),
        (lambda nb: _move(nb, "tiled_attention_test", "code_merge"), "hold those of 11.tiled_attention too"),
        (
            lambda nb: cell(nb, "merge_softmax_states").metadata.nbgrader.update(grade_id="merge"),
            "no answer cell",
        ),
    ],
    ids=[
        "no heading",
        "another heading",
        "a heading inside",
        "a cell outside",
        "another's inside",
        "no answer",
    ],
)
def test_a_layout_the_rule_does_not_fit_raises(change, says):
    notebook = question()
    change(notebook)
    with pytest.raises(ValueError, match=says):
        leave_out.question_cells(notebook, CHECKS[MERGE])


def test_notebook_11_without_its_question_4_is_the_same_notebook_less_those_cells():
    original = nbformat.read(source_notebook(TILED), as_version=4)
    notebook = copy.deepcopy(original)
    assert leave_out.without_questions(notebook, [CHECKS[MERGE]]) == MERGE_CELLS
    ids = [grade_id(c) for c in original.cells]
    start, stop = ids.index(MERGE_CELLS[0]), ids.index(MERGE_CELLS[-1]) + 1
    assert original.cells[start].source.startswith("## Question 4")
    assert original.cells[stop].source.startswith("## Summary")
    assert notebook.cells == original.cells[:start] + original.cells[stop:]


@pytest.mark.parametrize("name", sorted(ADDED))
def test_every_added_question_comes_after_the_homework_and_nothing_after_uses_it(name):
    """Between an added question and the summary there are only other added questions, so that
    leaving out any of them leaves the homework whole."""
    check = CHECKS[name]
    notebook = nbformat.read(source_notebook(assignment_of(name)), as_version=4)
    span = leave_out.question_cells(notebook, check)
    later = [CHECKS[n] for n in ADDED if n != name and assignment_of(n) == assignment_of(name)]
    spans = [leave_out.question_cells(notebook, c) for c in later]
    start = span.stop
    while (following := next((s for s in spans if s.start == start), None)) is not None:
        start = following.stop
    assert notebook.cells[start].source.startswith("## Summary"), name
    after = "\n".join(c.source for c in notebook.cells[span.stop :] if c.cell_type == "code")
    assert not any(target in after for target in check.target_names), name


# ------------------------------------------------------------------------------ the release


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Notebook 11 and the checks package as `course release` makes them with 11's Question 4 left out."""
    tmp = tmp_path_factory.mktemp("released")
    source = tmp / "solutions"
    assert leave_out.copy_solutions(source, frozenset({MERGE}), ignore=INSTRUCTOR_ONLY) == {
        TILED: MERGE_CELLS
    }
    generate_release(tmp / "notebooks", [TILED], source)
    write_package(tmp / "checks", source, frozenset({MERGE}))
    return tmp


def test_the_source_copy_drops_the_question_and_nothing_of_the_instructors(released):
    source = released / "solutions"
    assert not [p for p in source.rglob("*") if p.name in INSTRUCTOR_ONLY]
    for assignment in (p.name for p in source.iterdir()):
        copied = nbformat.read(source / assignment / f"{assignment}.ipynb", as_version=4)
        if assignment != TILED:
            assert copied == nbformat.read(source_notebook(assignment), as_version=4), assignment


def test_the_students_notebook_lacks_the_question_and_only_it(released):
    full = nbformat.read(NOTEBOOKS / TILED / f"{TILED}.ipynb", as_version=4)  # `course build`'s: everything
    notebook = nbformat.read(released / "notebooks" / TILED / f"{TILED}.ipynb", as_version=4)
    expected = [(grade_id(c), c.source) for c in full.cells if grade_id(c) not in MERGE_CELLS]
    assert [(grade_id(c), c.source) for c in notebook.cells] == expected
    assert "merge_softmax_states" not in json.dumps(notebook)


def test_the_package_neither_has_nor_lists_the_question(released):
    expected = released / "checks" / "autograder" / "expected"
    snapshots = {p.stem for p in expected.glob("*.pt")}
    assert snapshots == {name for name in CHECKS if name != MERGE}
    questions = json.loads((expected / "questions.json").read_text())
    listed = [name for q in questions[TILED] for name in q["checks"]]
    assert listed == ["11.score_matrix_bytes", "11.online_softmax", "11.tiled_attention"]
    whole = json.loads(json.dumps({a: [asdict(q) for q in qs] for a, qs in read_all_questions().items()}))
    assert {k: v for k, v in questions.items() if k != TILED} == {
        k: v for k, v in whole.items() if k != TILED
    }


# ------------------------------------------------------------------------------ grading


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_the_templates_gradebook_lacks_the_question_and_its_points(tmp_path, cache):
    template = prepare_template(tmp_path / "work", frozenset({MERGE}))
    assert json.loads((template / LEFT_OUT).read_text()) == {"checks": [MERGE], "cells": {TILED: MERGE_CELLS}}
    full = sum(c.points + c.hidden_points for n, c in CHECKS.items() if n.startswith("11."))
    with Gradebook(f"sqlite:///{template / 'gradebook.db'}") as gradebook:
        assert (
            gradebook.find_assignment(TILED).max_score
            == full - CHECKS[MERGE].points - CHECKS[MERGE].hidden_points
        )
        rope = gradebook.find_assignment("04_rope").max_score
    assert rope == sum(c.points + c.hidden_points for n, c in CHECKS.items() if n.startswith("04."))
    released = nbformat.read(template / "release" / TILED / f"{TILED}.ipynb", as_version=4)
    assert not {grade_id(c) for c in released.cells} & set(MERGE_CELLS)


@pytest.fixture
def generated(cache, monkeypatch):
    """nbgrader's generation stood in for, as in tests/test_template_cache.py."""
    calls = []

    def generate(config, chosen=None):
        calls.append(config.CourseDirectory.root)
        (Path(config.CourseDirectory.root) / "gradebook.db").write_text(f"gradebook {len(calls)}")

    monkeypatch.setattr(autograde, "generate_all", generate)
    return calls


def test_an_output_folder_graded_under_one_setting_refuses_another(tmp_path, generated):
    work = tmp_path / "out" / "work"
    prepare_template(work, frozenset())
    prepare_template(work, frozenset())  # the same setting: the same folder grades on
    with pytest.raises(SystemExit) as stopped:
        prepare_template(work, frozenset({MERGE}))
    message = str(stopped.value)
    assert "course.toml leaves out other questions than when" in message and str(tmp_path / "out") in message
    assert f"then: none; now: {MERGE}" in message and "grade into a new output folder" in message
    assert "solutions/ changed" not in message
    other = prepare_template(
        tmp_path / "other" / "work", frozenset({MERGE})
    )  # a new folder: its own template
    assert len(generated) == 2 and json.loads((other / LEFT_OUT).read_text())["checks"] == [MERGE]


def test_a_folder_graded_before_questions_could_be_left_out_grades_on_with_none(tmp_path, generated):
    template = prepare_template(tmp_path / "out" / "work", frozenset())
    (template / LEFT_OUT).unlink()
    assert prepare_template(tmp_path / "out" / "work", frozenset()) == template
    with pytest.raises(SystemExit, match="then: none; now: 11.merge_softmax_states"):
        prepare_template(tmp_path / "out" / "work", frozenset({MERGE}))


def test_grade_reads_course_toml_before_it_writes_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(leave_out, "SETTING", setting(tmp_path, 'leave_out = ["07.rmsnorm_norm"]'))
    (tmp_path / "submissions").mkdir()
    with pytest.raises(SystemExit, match="original homework"):
        main(["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), "--no-sandbox"])
    assert not (tmp_path / "out").exists()


@needs_sandbox
@pytest.mark.batches
def test_a_full_course_notebook_grades_without_the_question_left_out(tmp_path, monkeypatch, cache):
    """A student who worked from the full course's notebook 11, Question 4 answered, graded under a
    course.toml that leaves it out: the rest graded as usual, out of the points kept, Question 4's
    cells never run, and the file handed in untouched."""
    monkeypatch.setattr(leave_out, "SETTING", setting(tmp_path, 'leave_out = ["added"]'))
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    (submissions / "ada").mkdir(parents=True)
    nbformat.write(perfect(TILED), submissions / "ada" / f"{TILED}.ipynb")
    before = digests(submissions)
    assert main(["grade", str(submissions), "--out", str(out), "--jobs", "1"]) == 0
    with (out / "grades.csv").open() as f:
        (row,) = csv.DictReader(f)
    kept = sum(
        c.points + c.hidden_points for n, c in CHECKS.items() if n.startswith("11.") and n not in ADDED
    )
    assert (row["status"], row["reason"], row["score"], row["max_score"]) == (
        "graded",
        "",
        f"{kept:g}",
        f"{kept:g}",
    )
    assert not [column for column in row if "merge_softmax_states" in column]
    log = (out / "logs" / "ada" / f"{TILED}.log").read_text()
    assert f"cells of questions left out (course.toml), not run: {', '.join(MERGE_CELLS)}" in log
    assert "not part of this notebook" not in log
    assert "merge_softmax_states" not in (out / "feedback" / "ada" / f"{TILED}.html").read_text()
    assert digests(submissions) == before
    monkeypatch.setattr(leave_out, "SETTING", setting(tmp_path, "leave_out = []"))
    with pytest.raises(SystemExit, match="course.toml leaves out other questions"):
        main(["grade", str(submissions), "--out", str(out), "--jobs", "1"])


# ------------------------------------------------------------------------------ course list


def test_course_list_marks_the_added_questions_and_those_left_out(tmp_path, monkeypatch, capsys):
    assert main(["list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines[MERGE].endswith(" added") and not lines["11.tiled_attention"].endswith("added")
    assert main(["list", "--points"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].endswith("| added |") and len(table) == len(CHECKS) + 2
    rows = {row.split("`")[1]: row for row in table[2:]}
    assert rows[MERGE].endswith("| added |") and rows["11.tiled_attention"].endswith("|  |")

    monkeypatch.setattr(leave_out, "SETTING", setting(tmp_path, f'leave_out = ["{MERGE}"]'))
    assert main(["list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines[MERGE].endswith(" added, left out") and len(lines) == len(CHECKS)
    assert main(["list", "--points"]) == 0
    rows = {row.split("`")[1]: row for row in capsys.readouterr().out.splitlines()[2:]}
    assert rows[MERGE].endswith("| added, left out |")
    assert all(row.endswith(("| added |", "|  |")) for name, row in rows.items() if name != MERGE)
