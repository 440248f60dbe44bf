"""End to end: build's release -> synthetic class -> `course grade` -> grades.csv and feedback pages.

Every catalogued mistake is handed in as a notebook and judged in this process, by the judge
the grader uses (`test_every_mistake_costs_points_and_is_named`). A sample of them, chosen
to carry each kind of failure (see `_sample`), is graded end to end in the sandbox with the
perfect and untouched notebooks and the submissions that stress the pipeline (`graded`), and
must get exactly the score worked out here.
"""

import csv
import html
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell
from nbgrader.api import Gradebook

from autograder.checks import CHECKS
from autograder.core import Mistake, Verdict
from autograder.paths import assignments
from autograder.reference import assignment_of, mistakes
from grader.cli import main
from grader.grading import report

from .helpers.feedback import page_text, report_tables
from .helpers.machine import needs_sandbox
from .helpers.submissions import (
    checks_of,
    digests,
    grade_id,
    perfect,
    release,
    solution_sources,
    verdicts_when_graded,
    with_answer,
)
from .helpers.submissions import mutant as mutant_notebook

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

FULL = {  # what a perfect submission of each notebook scores
    assignment: sum(c.points + c.hidden_points for n, c in CHECKS.items() if assignment_of(n) == assignment)
    for assignment in assignments()
}
BATCH_SEED = 20261122  # fixed, so that each mutant's expected score can be worked out beforehand


@dataclass(frozen=True)
class Mutant:
    """A perfect submission whose answer to `check` ends by redefining its target as `mistake`."""

    check: str
    mistake: Mistake

    @property
    def assignment(self) -> str:
        return assignment_of(self.check)

    @property
    def student(self) -> str:
        words = f"{self.check} {self.mistake.name}".lower()
        return "mutant-" + re.sub(r"[^a-z0-9]+", "-", words).strip("-")[:60]

    @cached_property
    def named_by(self) -> dict[str, str]:
        """check -> the mistake's name there, for each check that catalogues it (one class can
        be a mistake of two questions, such as multi-head and cross-attention)."""
        return {
            name: known.name
            for name in checks_of(self.assignment)
            for known in mistakes(name)
            if known.impl is self.mistake.impl
        }

    def notebook(self) -> nbformat.NotebookNode:
        check = CHECKS[self.check]
        return mutant_notebook(self.assignment, check.answer_cell, check.target, self.mistake.impl)


def _catalogue() -> list[Mutant]:
    """One mutant per catalogued mistake; a mistake two checks share (one wrong class) once."""
    seen, found = set(), []
    for name in CHECKS:
        for mistake in mistakes(name):
            if mistake.impl not in seen:
                seen.add(mistake.impl)
                found.append(Mutant(name, mistake))
    return found


MUTANTS = _catalogue()


@cache
def _own_verdicts(mutant: Mutant) -> dict[tuple[str, bool], Verdict]:
    return verdicts_when_graded(mutant.notebook(), BATCH_SEED, mutant.named_by)


@cache
def _all_verdicts(mutant: Mutant) -> dict[tuple[str, bool], Verdict]:
    others = [name for name in checks_of(mutant.assignment) if name not in mutant.named_by]
    return {**_own_verdicts(mutant), **verdicts_when_graded(mutant.notebook(), BATCH_SEED, others)}


def _costly(verdicts: dict[tuple[str, bool], Verdict]) -> dict[tuple[str, bool], Verdict]:
    return {key: v for key, v in verdicts.items() if v.points < v.max_points}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.student)
def test_every_mistake_costs_points_and_is_named(mutant):
    """Handed in as a notebook, each catalogued mistake costs points (not necessarily all of a
    check), or fails a concern that is advice only, worth none; and the verdicts of the visible
    and the hidden test cell of each check that catalogues it, judged on the batch's cases,
    name it (as the feedback page will), in words and as data (as the class report counts it)."""
    verdicts = _own_verdicts(mutant)
    assert {name for name, _ in verdicts} == set(mutant.named_by)
    advice = any(not part.passed for v in verdicts.values() for part in v.parts)
    assert _costly(verdicts) or advice, f"{mutant.student} earns every point and fails no advice"
    for (name, hidden), verdict in verdicts.items():
        assert f"Looks like: {mutant.named_by[name]}" in verdict.message, (name, hidden, verdict.message)
        findings = [f for f in (verdict.finding, *(part.finding for part in verdict.parts)) if f]
        assert any(mutant.named_by[name] in f.mistakes for f in findings), (name, hidden, findings)


RAISES, WRONG_VALUES, PART_OF_ITS_CHECK, ANOTHER_CHECK = (
    "its code raises",
    "wrong values",
    "costs part of its check",
    "costs another check",
)


def _kinds(mutant: Mutant, verdicts: dict[tuple[str, bool], Verdict]) -> set[str]:
    """The kinds of failure the grader must carry from the kernel to the grade, in `verdicts`."""
    kinds = set()
    for (name, _), verdict in _costly(verdicts).items():
        if name not in mutant.named_by:
            kinds.add(ANOTHER_CHECK)
            continue
        kinds.add(RAISES if "your code raised " in verdict.message else WRONG_VALUES)
        if verdict.points > 0:
            kinds.add(PART_OF_ITS_CHECK)
    return kinds


def _called_by_another_answer(mutant: Mutant) -> bool:
    """Whether another check's answer names this check's target: a mistake there may cost both."""
    answers = solution_sources(mutant.assignment)
    pattern = re.compile(r"\b(" + "|".join(CHECKS[mutant.check].target_names) + r")\b")
    return any(
        pattern.search(answers[CHECKS[name].answer_cell])
        for name in checks_of(mutant.assignment)
        if name not in mutant.named_by
    )


@cache
def _sample() -> tuple[Mutant, ...]:
    """The mutants graded end to end: for each notebook, the fewest (first in catalogue order,
    those whose target another answer calls first) whose own checks' verdicts hold every kind
    of failure found among its mutants'; then, unless one of them costs another check as well
    (which only judging every check shows), the first mutant that does."""
    chosen = []
    for assignment in assignments():
        candidates = [m for m in _by_dependents() if m.assignment == assignment]
        wanted = set().union(*(_kinds(m, _own_verdicts(m)) for m in candidates))
        covered: set[str] = set()
        while wanted - covered:
            best = max(candidates, key=lambda m: len(_kinds(m, _own_verdicts(m)) - covered))
            chosen.append(best)
            covered |= _kinds(best, _own_verdicts(best))
    if not any(ANOTHER_CHECK in _kinds(m, _all_verdicts(m)) for m in chosen):
        costs_another = (m for m in _by_dependents() if ANOTHER_CHECK in _kinds(m, _all_verdicts(m)))
        chosen += [m for m in [next(costs_another, None)] if m]
    return tuple(chosen)


@cache
def _by_dependents() -> tuple[Mutant, ...]:
    """The catalogue, the mutants of checks whose target another answer names first."""
    return tuple(sorted(MUTANTS, key=lambda m: not _called_by_another_answer(m)))


def test_the_sample_carries_every_kind_of_failure():
    """The sample graded end to end holds every kind of failure found in the catalogue, and a
    mistake that costs another check too (a wrong `sigmoid` inside `silu`): what the end-to-end
    tests assert on it then holds for each kind."""
    carried = set().union(*(_kinds(m, _all_verdicts(m)) for m in _sample()))
    found = set().union(*(_kinds(m, _own_verdicts(m)) for m in MUTANTS))
    assert carried >= found | {ANOTHER_CHECK}, carried
    assert {m.assignment for m in _sample()} == set(assignments())
    assert len({m.student for m in MUTANTS}) == len(MUTANTS)  # each its own folder of submissions


def _class(folder: Path) -> dict[tuple[str, str], tuple[float | None, str, str]]:
    """Write the synthetic class; return (student, notebook) -> (score, status, reason fragment)."""
    expected = {}

    def add(student, assignment, notebook, score, status="graded", reason=""):
        path = folder / student / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(notebook, str):
            path.write_text(notebook)
        else:
            nbformat.write(notebook, path)
        expected[(student, assignment)] = (score, status, reason)

    for assignment, full in FULL.items():
        add("perfect", assignment, perfect(assignment), full)
        add("untouched", assignment, release(assignment), 0.0)
    for mutant in _sample():
        score = sum(v.points for v in _all_verdicts(mutant).values())
        add(mutant.student, mutant.assignment, mutant.notebook(), score)
    add("broken-json", "04_rope", '{"cells": [', None, "failed", "not a readable notebook")
    deleted = perfect("04_rope")
    deleted.cells = [c for c in deleted.cells if grade_id(c) != "rope_forward_test"]
    add("deleted-test-cell", "04_rope", deleted, 9.0)
    warning = "import warnings\n" + solution_sources("07_rmsnorm")["rmsnorm"].replace(
        "        ### BEGIN SOLUTION",
        '        warnings.warn("a warning on stderr")\n        ### BEGIN SOLUTION',
    )
    add("warns-on-stderr", "07_rmsnorm", with_answer(perfect("07_rmsnorm"), "rmsnorm", warning), 6.0)
    killer = "import os\nos._exit(1)\n"
    # The answer cell kills every kernel it runs in: skipped, so the tests find no RMSNorm.
    add(
        "kills-kernel",
        "07_rmsnorm",
        with_answer(perfect("07_rmsnorm"), "rmsnorm", killer),
        0.0,
        "graded",
        "kernel died",
    )
    return expected


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    submissions = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("out")
    (out / "work").mkdir()
    (out / "work" / "case_seed").write_text(str(BATCH_SEED))  # the grader draws its cases from it
    expected = _class(submissions)
    before = digests(submissions)
    published = tmp_path_factory.mktemp("published")  # a file of solutions found online, as collected
    (published / "rope.py").write_text(solution_sources("04_rope")["rope_forward"])
    # Under the limits an instructor gets (120 s a cell, 900 s a notebook): a perfect 08 took over 60 s
    # in one CI run on a loaded machine. Notebooks that run past a limit: tests/test_time_limits.py.
    assert (
        main(
            [
                "grade",
                str(submissions),
                "--out",
                str(out),
                "--jobs",
                "2",
                "--compare-with",
                str(published),
            ]
        )
        == 0
    )
    with (out / "grades.csv").open() as f:
        rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}
    return expected, rows, out, before, submissions


@needs_sandbox
def test_every_score_and_status(graded):
    expected, rows, out, *_ = graded
    with (out / "intake.csv").open() as f:
        listed = {(r["student"], r["notebook"]): r for r in csv.DictReader(f) if r["student"]}
    broken = listed["broken-json", "04_rope"]  # taken for grading, then not readable: not "graded"
    assert (broken["outcome"], broken["detail"]) == ("failed", rows["broken-json", "04_rope"]["reason"])
    assert set(rows) == set(expected)
    for key, (score, status, reason) in expected.items():
        row = rows[key]
        assert row["status"] == status, (key, row)
        assert row["score"] == ("" if score is None else f"{score:g}"), (key, row)
        assert reason in row["reason"], (key, row)
        if status != "failed":
            assert row["max_score"] == f"{FULL[key[1]]:g}"


@needs_sandbox
def test_each_mistake_is_named_in_the_feedback(graded):
    _, _, out, *_ = graded
    for mutant in _sample():
        page = (out / "feedback" / mutant.student / f"{mutant.assignment}.html").read_text()
        assert "Looks like: " + mutant.mistake.name in html.unescape(page), mutant.student


@needs_sandbox
def test_the_class_report_counts_each_mistake_named(graded):
    """OUT/report.html, made from the graded class: each sampled mutant's mistake is listed under
    its check with the students who made it."""
    _, rows, out, *_ = graded
    tables = report_tables(out / "report.html")
    for mutant in _sample():
        named = next(t for t in tables[f"check-{mutant.check}"] if t[0][0] == "known mistake named")
        counted = {row[0]: int(row[1]) for row in named[1:]}
        assert counted.get(mutant.mistake.name, 0) >= 1, (mutant.student, counted)
        students = {s for s, notebook in rows if notebook == mutant.assignment}
        assert all(n <= len(students) for n in counted.values())


@needs_sandbox
def test_the_class_report_flags_the_same_answers_for_the_instructor_only(graded):
    """Two students handed in the same 04 (the reference's): their pair is flagged with links to
    both pages, and both against the published file given with --compare-with; no student's page
    says a word of it."""
    _, _, out, *_ = graded
    with (out / "similar-answers.csv").open() as file:
        pairs = {
            (r["notebook"], r["question"], r["student"], r["other"], r["other_from"])
            for r in csv.DictReader(file)
        }
    published = json.loads((out / "work" / "settings.json").read_text())["compare_with"]
    assert ("04_rope", "rope_forward", "deleted-test-cell", "perfect", "this class") in pairs
    for student in ("perfect", "deleted-test-cell"):
        assert ("04_rope", "rope_forward", student, "rope.py", f"source: {published[0]}") in pairs
    assert not any(student == "untouched" or other == "untouched" for _, _, student, other, _ in pairs)
    report = (out / "report.html").read_text()
    assert "href='feedback/deleted-test-cell/04_rope.html'" in report.split("id='similar-04_rope'")[1]
    for page in (out / "feedback").rglob("*.html"):
        assert "Similar answers" not in page.read_text() and "similar-" not in page.read_text(), page
    found = {path.relative_to(out) for path in out.rglob("*") if "similar" in path.name}
    assert found == {Path("similar-answers.csv"), Path("work/similar_answers.json")}  # nothing in upload/


@needs_sandbox
def test_a_fault_in_comparing_answers_costs_no_grade(graded, monkeypatch):
    """The grades, totals and uploads are written before the answers are compared: a bug there
    leaves them whole, and the report says the answers were not compared, and why."""
    out = graded[2]
    written = ("grades.csv", "totals.csv")
    before = {name: (out / name).read_text() for name in written}

    def broken(*_):
        raise RuntimeError("a bug")

    monkeypatch.setattr("grader.grading.similar_answers", broken)
    report(out)
    assert {name: (out / name).read_text() for name in written} == before
    assert (
        "Not compared: the answers could not be compared (RuntimeError: a bug)."
        in (out / "report.html").read_text()
    )
    monkeypatch.undo()
    report(out)  # as it was, for the tests after this one
    assert "Not compared" not in (out / "report.html").read_text()


@needs_sandbox
def test_feedback_hides_hidden_tests_reference_and_tracebacks(graded):
    _, _, out, *_ = graded
    reference_lines = {
        "torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)",
        "torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])",
    }
    pages = list((out / "feedback").rglob("*.html"))
    assert len(pages) == len(list((out / "work" / "results").rglob("*.json")))
    for page in pages:
        text = page_text(page)
        assert "hidden=True" not in text and "BEGIN HIDDEN TESTS" not in text, page
        assert "Traceback" not in text and "grader/" not in text, page  # nor autograder/
        if page.parent.name == "untouched":  # the others hold reference answers of their own
            assert not any(line in text for line in reference_lines), page


@needs_sandbox
def test_originals_untouched_and_rerun_identical(graded):
    expected, rows, out, before, submissions = graded
    assert digests(submissions) == before
    csv_before = (out / "grades.csv").read_text()
    assert main(["grade", str(submissions), "--out", str(out), "--jobs", "2"]) == 0
    assert (out / "grades.csv").read_text() == csv_before


@needs_sandbox
def test_resume_regrades_only_what_is_missing_or_changed(graded):
    _, rows, out, _, submissions = graded
    results = out / "work" / "results"
    kept = {p: p.stat().st_mtime_ns for p in results.rglob("*.json")}
    lost = results / "untouched" / "07_rmsnorm.json"  # as if the batch was killed before it
    changed = submissions / "untouched" / "04_rope.ipynb"
    nbformat.write(perfect("04_rope"), changed)  # a late resubmission
    lost.unlink()
    assert main(["grade", str(submissions), "--out", str(out), "--jobs", "2"]) == 0
    redone = {lost, results / "untouched" / "04_rope.json"}
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items() if p not in redone)
    with (out / "grades.csv").open() as f:
        now = {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}
    assert now[("untouched", "04_rope")]["score"] == "9"
    assert now[("untouched", "07_rmsnorm")] == rows[("untouched", "07_rmsnorm")]


@needs_sandbox
def test_nbgrader_tools_work_on_the_merged_course(graded):
    """OUT/course is one nbgrader course: `nbgrader export` (and formgrader) see the same grades,
    and feedback generated there hides hidden tests as the grader's own pages do."""
    out = graded[2]
    with (out / "grades.csv").open() as f:  # as of now: other tests re-grade into this folder
        rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}
    nbgrader = Path(sys.executable).parent / "nbgrader"
    done = subprocess.run([str(nbgrader), "export"], cwd=out / "course", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    with (out / "course" / "grades.csv").open() as f:
        exported = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(f)}
    for key, row in rows.items():
        if row["status"] != "failed":
            # nbgrader sums the cells' partial credit in floats (9.799999999999999 for 9.8)
            # nbgrader keeps 6 decimals (6.666666), the grades CSV 6 significant digits (6.66667).
            assert float(exported[key]["score"]) == pytest.approx(float(row["score"]), rel=1e-5), key
            assert float(exported[key]["max_score"]) == float(row["max_score"]), key
    feedback = [str(nbgrader), "generate_feedback", "07_rmsnorm", "--student=untouched", "--force"]
    assert subprocess.run(feedback, cwd=out / "course", capture_output=True).returncode == 0
    text = page_text(out / "course" / "feedback" / "untouched" / "07_rmsnorm" / "07_rmsnorm.html")
    assert "[07.rmsnorm_norm] FAILED (0/4)" in text and "hidden=True" not in text and "Traceback" not in text


def _rows(out: Path) -> dict[tuple[str, str], dict]:
    with (out / "grades.csv").open() as f:
        return {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}


def _give_by_hand(out: Path, marks: dict[tuple[str, str, str], tuple[float, str]]) -> None:
    """Grades on test cells and comments on answer cells given in OUT/course, as an instructor
    does in formgrader: (student, notebook, test cell) -> (score, answer cell commented)."""
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gradebook:
        for (student, notebook, cell), (score, answer) in marks.items():
            gradebook.find_grade(cell, notebook, notebook, student).manual_score = score
            gradebook.find_comment(answer, notebook, notebook, student).manual_comment = f"seen: {answer}"
        gradebook.db.commit()


def _by_hand(out: Path, marks) -> dict:
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gradebook:
        return {
            (student, notebook, cell): (
                gradebook.find_grade(cell, notebook, notebook, student).manual_score,
                gradebook.find_comment(answer, notebook, notebook, student).manual_comment,
            )
            for (student, notebook, cell), (_, answer) in marks.items()
        }


@needs_sandbox
def test_a_partial_folder_and_a_resubmission_keep_every_other_row_and_hand_grade(graded, tmp_path):
    """Grading one student's folder into the class's output folder changes that student's rows
    and nothing else: every other row and every grade and comment given by hand stay; a
    resubmission keeps the hand grades whose work is unchanged (its answers, for a test cell),
    and those whose work changed are set aside, said in its row, and kept in the ledger."""
    out = graded[2]
    marks = {
        ("perfect", "07_rmsnorm", "rmsnorm_norm_test"): (0.5, "rmsnorm"),
        ("perfect", "04_rope", "rope_forward_test"): (0.25, "rope_forward"),
        ("untouched", "02_positions", "sinusoidal_test"): (1.0, "sinusoidal"),
    }
    _give_by_hand(out, marks)
    before = _rows(out)
    partial = tmp_path / "late-batch"
    (partial / "perfect").mkdir(parents=True)
    moved_on = perfect("04_rope")  # the same answers, one cell of notes added
    moved_on.cells.append(new_code_cell("# my notes, added after the deadline"))
    nbformat.write(moved_on, partial / "perfect" / "04_rope.ipynb")
    rewritten = with_answer(
        perfect("07_rmsnorm"), "rmsnorm", solution_sources("07_rmsnorm")["rmsnorm"] + "\n"
    )
    nbformat.write(rewritten, partial / "perfect" / "07_rmsnorm.ipynb")
    assert main(["grade", str(partial), "--out", str(out), "--jobs", "2"]) == 0

    after = _rows(out)
    assert set(after) == set(before)
    changed = {("perfect", "04_rope"), ("perfect", "07_rmsnorm")}
    assert all(after[key] == before[key] for key in before if key not in changed and key[0] != "untouched")
    assert (
        after[("untouched", "02_positions")]["score"]
        == f"{float(before[('untouched', '02_positions')]['score']) + 1:g}"
    )
    kept = _by_hand(out, marks)
    assert kept[("perfect", "04_rope", "rope_forward_test")] == (
        0.25,
        "seen: rope_forward",
    )  # answers unchanged
    assert kept[("untouched", "02_positions", "sinusoidal_test")] == (1.0, "seen: sinusoidal")
    assert kept[("perfect", "07_rmsnorm", "rmsnorm_norm_test")] == (None, None)  # its answer changed
    assert "not carried over" in after[("perfect", "07_rmsnorm")]["reason"]
    ledger = json.loads((out / "work" / "hand_grades.json").read_text())
    [aside] = [e for e in ledger["set_aside"] if e["key"] == "perfect/07_rmsnorm"]
    assert aside["grades"]["rmsnorm_norm_test"]["manual_score"] == 0.5
    assert aside["comments"]["rmsnorm"]["manual_comment"] == "seen: rmsnorm"


@needs_sandbox
def test_a_students_folder_graded_alone_never_changes_another_students_grade(graded, tmp_path):
    """mallory's late folder, graded on its own into the class's folder, holds a blank notebook
    named as untouched's flat file: it is mallory's, and untouched's row and hand grade stay."""
    out = graded[2]
    marks = {("untouched", "02_positions", "sinusoidal_test"): (1.0, "sinusoidal")}
    _give_by_hand(out, marks)
    before = _rows(out)
    late = tmp_path / "late"
    (late / "mallory").mkdir(parents=True)
    nbformat.write(release("02_positions"), late / "mallory" / "untouched_02_positions.ipynb")
    assert main(["grade", str(late), "--out", str(out), "--jobs", "1"]) == 0
    after = _rows(out)
    assert after[("untouched", "02_positions")] == before[("untouched", "02_positions")]
    assert _by_hand(out, marks) == {key: (1.0, "seen: sinusoidal") for key in marks}
    assert after[("mallory", "02_positions")]["status"] == "graded"
    with (out / "intake.csv").open() as f:
        [row] = list(csv.DictReader(f))
    assert (row["student"], row["outcome"]) == ("mallory", "graded")
    assert (
        "named as a flat <student>_<notebook> file of 'untouched'"
        in (out / "logs" / "mallory" / "02_positions.log").read_text()
    )


@needs_sandbox
def test_hand_grades_come_back_when_the_course_is_lost(graded):
    """OUT/course deleted (or a run killed while replacing it): the next run rebuilds it from
    the record, with the grades given by hand there."""
    out, submissions = graded[2], graded[4]
    marks = {("perfect", "04_rope", "rotation_matrix_test"): (0.5, "rotation_matrix")}
    _give_by_hand(out, marks)
    assert main(["grade", str(submissions), "--out", str(out), "--jobs", "2"]) == 0  # into the ledger
    shutil.rmtree(out / "course")
    assert main(["grade", str(submissions), "--out", str(out), "--jobs", "2"]) == 0
    assert _by_hand(out, marks) == {key: (0.5, "seen: rotation_matrix") for key in marks}
