"""OUT/course: one nbgrader course holding every graded submission of the record, for formgrader.

Each submission is graded in a course of its own (so they run in parallel); this puts them
together for nbgrader's own tools: formgrader (review, grading by hand) and `nbgrader export`.
Its nbgrader_config.py is the grading config, so autograding or feedback started there sandboxes
and judges the same way.

It is rebuilt on every run from the record (record.py), never from the run alone, and grades
given there by hand are the instructor's: before the old course is replaced, what it holds by
hand goes to the ledger (record.HandGrades), and the new course gets it back. A hand grade
follows a resubmission where the work it judged is unchanged (`work_fingerprint`); the others
are set aside in the ledger, never dropped, and the run says so. The old course is swapped out
only once the new one is whole, and a run killed in between finds it again.
"""

import hashlib
import json
import shutil
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning
from traitlets.config import Config

from autograder.cells import grade_id, nbgrader_meta
from autograder.paths import source_notebook
from grader.grades import Result
from grader.record.feedback import NBGRADER_TEMPLATES, TEMPLATES, question
from grader.record.late import LatePolicy
from grader.record.record import GRADES_FILE, HandGrades

# Before nbgrader's: its base/mathjax.html.j2 replaces nbconvert's, which loads MathJax from a CDN, in
# the pages formgrader renders; so formgrader works with no network (the template says how).
FORMGRADER_TEMPLATES = TEMPLATES / "formgrader"
GRADED_FILES = ".graded_sha256.json"  # in OUT/course: the hash of each submission file it holds
# (grade fields, comment fields) that the grader fills
AUTOMATIC = (("auto_score", "manual_score", "needs_manual_grade"), ("auto_comment",))


@dataclass(frozen=True)
class Person:
    first_name: str = ""
    last_name: str = ""
    email: str = ""

    @classmethod
    def from_name(cls, name: str, email: str = "") -> "Person":
        """A full name split as formgrader shows it (last name, first name): the last word is the
        last name; a name of one word is a first name."""
        first, _, last = name.strip().rpartition(" ")
        return cls(first, last, email) if first else cls(last, "", email)


@contextmanager
def quiet_gradebook():
    """Without nbgrader's own SQLAlchemy session warnings about its gradebook (noise, not ours)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        yield


def merge_course(
    out: Path,
    record: dict[str, tuple[Result, str]],
    config: Config,
    people: dict[str, Person],
    late: LatePolicy,
) -> tuple[list[Result], list[str]]:
    """Rebuild OUT/course from the whole record (record.recorded); return the rows as the course holds
    them (hand grades, late penalty, each test cell's score) and notes for the instructor."""
    work, course, staging, old = out / "work", out / "course", out / "course.partial", out / "course.old"
    if old.exists() and not course.exists():  # a run killed between the two renames below
        old.rename(course)
    ledger = HandGrades(out)
    _keep_hand_grades(course, ledger)
    ledger.save()  # before the old course goes: the hand grades are on disk twice from here

    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(work / "template", staging, ignore=shutil.ignore_patterns("solutions_sha256"))
    notes, rows, graded = [], [], {}
    with ExitStack() as books:
        books.enter_context(quiet_gradebook())
        merged = books.enter_context(Gradebook(f"sqlite:///{staging / 'gradebook.db'}"))
        for assignment in {result.notebook for result, _ in record.values()}:
            merged.update_or_create_assignment(assignment, duedate=late.due)
        for key, (result, digest) in record.items():
            person = people.get(result.student, Person())
            merged.update_or_create_student(
                result.student, first_name=person.first_name, last_name=person.last_name, email=person.email
            )
            if result.status == "failed":
                rows.append(result)
                continue
            graded[key] = digest
            _add_submission(merged, work, staging, result, late)
            note = _restore_hand_grades(merged, ledger, key, digest, result, staging)
            if note:
                notes.append(f"{key}: {note}")
            _penalise(merged, result, late)
            rows.append(_row(merged, result, late, note))
    ledger.save()
    (staging / GRADED_FILES).write_text(json.dumps(graded, indent=1))
    (staging / "nbgrader_config.py").write_text(_config_file(config))
    if course.exists():
        shutil.rmtree(old, ignore_errors=True)
        course.rename(old)
    staging.rename(course)
    shutil.rmtree(old, ignore_errors=True)
    return rows, notes


def _add_submission(merged: Gradebook, work: Path, staging: Path, result: Result, late: LatePolicy) -> None:
    run = work / "runs" / result.student / result.notebook
    for stage in ("submitted", "autograded"):
        shutil.copytree(
            run / stage / result.student / result.notebook, staging / stage / result.student / result.notebook
        )
    merged.add_submission(result.notebook, result.student, timestamp=late.timestamp(result))
    _give_automatic(merged, _automatic_grades(run, result), result.notebook, result.student)


def automatic_grades(gradebook: Gradebook, assignment: str, student: str) -> dict:
    """{notebook: {"grades": {cell: {field: value}}, "comments": {cell: {field: value}}}}: what
    grading wrote into a submission's gradebook (the fields of AUTOMATIC)."""
    grade_fields, comment_fields = AUTOMATIC
    return {
        notebook.name: {
            "grades": {g.name: {f: getattr(g, f) for f in grade_fields} for g in notebook.grades},
            "comments": {c.name: {f: getattr(c, f) for f in comment_fields} for c in notebook.comments},
        }
        for notebook in gradebook.find_submission(assignment, student).notebooks
    }


def _automatic_grades(run: Path, result: Result) -> dict:
    saved = run / GRADES_FILE
    if saved.exists():
        return json.loads(saved.read_text())
    # Graded before the grades came back as data (0.10 and earlier): the run's own gradebook.
    with Gradebook(f"sqlite:///{run / 'gradebook.db'}") as single:
        return automatic_grades(single, result.notebook, result.student)


def _give_automatic(merged: Gradebook, grades: dict, assignment: str, student: str) -> None:
    grade_fields, comment_fields = AUTOMATIC
    for notebook, given in grades.items():
        for cell, values in given["grades"].items():
            copy = merged.find_grade(cell, notebook, assignment, student)
            for key in grade_fields:
                setattr(copy, key, values[key])
        for cell, values in given["comments"].items():
            copy = merged.find_comment(cell, notebook, assignment, student)
            for key in comment_fields:
                setattr(copy, key, values[key])
    merged.db.commit()


def _penalise(merged: Gradebook, result: Result, late: LatePolicy) -> None:
    """Each notebook's late penalty, on its score with the hand grades (as nbgrader's step would)."""
    seconds = late.seconds_late(result)
    for notebook in merged.find_submission(result.notebook, result.student).notebooks:
        notebook.late_submission_penalty = late.penalty(notebook.score, seconds)
    merged.db.commit()


def _row(merged: Gradebook, result: Result, late: LatePolicy, note: str) -> Result:
    """The row of grades.csv for a graded submission, as the merged course holds it."""
    submission = merged.find_submission(result.notebook, result.student)
    labels = question_labels(result.notebook)
    scores = [(g.name, g.score) for nb in submission.notebooks for g in nb.grades]
    return replace(
        result,
        score=submission.score,
        max_score=submission.max_score,
        status="needs_manual_grading" if submission.needs_manual_grade else "graded",
        reason="; ".join(filter(None, [result.reason, note])),
        late=late.is_late(result),
        penalty=submission.late_submission_penalty or None,
        questions=tuple(
            sorted(((labels.get(name, name), score) for name, score in scores), key=_in_order(labels))
        ),
    )


@cache
def question_labels(assignment: str) -> dict[str, str]:
    """grade_id -> what the cell grades ("07.rmsnorm (hidden cases)"), in the notebook's order."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {
        grade_id(cell): question(cell.source) or grade_id(cell)
        for cell in notebook.cells
        if nbgrader_meta(cell).get("grade")
    }


def _in_order(labels: dict[str, str]):
    order = {label: i for i, label in enumerate(labels.values())}
    return lambda pair: order.get(pair[0], len(order))


# ------------------------------------------------------------------------------ hand grades


def work_fingerprint(notebook: nbformat.NotebookNode, cell: str, auto_score: float | None) -> str:
    """What a hand grade on `cell` judged: an answer cell's own source; for any other cell (a
    test whose automatic score was overridden, a comment on it), every answer of the notebook
    and the cell's automatic score."""
    answers = {grade_id(c): c.source for c in notebook.cells if nbgrader_meta(c).get("solution")}
    judged = answers[cell] if cell in answers else json.dumps([sorted(answers.items()), auto_score])
    return hashlib.sha256(judged.encode()).hexdigest()


def _autograded(course: Path, student: str, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)


def _hand_entry(book: Gradebook, course: Path, assignment: str, student: str, digest: str) -> dict:
    """What `book` holds by hand for one submission, fingerprinted against its notebook."""
    notebook = _autograded(course, student, assignment)
    grades, comments = {}, {}
    for nb in book.find_submission(assignment, student).notebooks:
        for g in nb.grades:
            if g.manual_score is not None or g.extra_credit:
                grades[g.name] = {
                    "manual_score": g.manual_score,
                    "extra_credit": g.extra_credit,
                    "work": work_fingerprint(notebook, g.name, g.auto_score),
                }
        for c in nb.comments:
            if c.manual_comment:
                auto = _auto_score(nb, c.name)
                comments[c.name] = {
                    "manual_comment": c.manual_comment,
                    "work": work_fingerprint(notebook, c.name, auto),
                }
    return {"submission_sha256": digest, "grades": grades, "comments": comments}


def _auto_score(notebook, cell: str) -> float | None:
    return next((g.auto_score for g in notebook.grades if g.name == cell), None)


def _keep_hand_grades(course: Path, ledger: HandGrades) -> None:
    """Copy what the current OUT/course holds by hand into the ledger."""
    listed = course / GRADED_FILES
    if not listed.exists():
        return
    with quiet_gradebook(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        for key, digest in json.loads(listed.read_text()).items():
            student, assignment = key.split("/")
            try:
                ledger.record(key, _hand_entry(book, course, assignment, student, digest))
            except (MissingEntry, FileNotFoundError):  # not in the course after all: nothing by hand
                continue


def _restore_hand_grades(
    merged: Gradebook, ledger: HandGrades, key: str, digest: str, result: Result, staging: Path
) -> str:
    """Give the new course the hand grades of `key`; a note where some could not follow a
    resubmission ("" otherwise)."""
    entry = ledger.entries.get(key)
    if not entry:
        return ""
    same_file = entry["submission_sha256"] == digest
    notebook = None if same_file else _autograded(staging, result.student, result.notebook)
    submission = merged.find_submission(result.notebook, result.student)
    kept = {"submission_sha256": digest, "grades": {}, "comments": {}}
    left = {"submission_sha256": entry["submission_sha256"], "grades": {}, "comments": {}}
    for kind in ("grades", "comments"):
        for cell, given in entry[kind].items():
            auto = next((_auto_score(nb, cell) for nb in submission.notebooks), None)
            follows = same_file or given["work"] == work_fingerprint(notebook, cell, auto)
            (kept if follows else left)[kind][cell] = given
            if follows:
                _give(merged, kind, cell, result, given)
    merged.db.commit()
    if same_file:
        return ""
    if kept["grades"] or kept["comments"]:
        ledger.entries[key] = kept
    else:
        del ledger.entries[key]
    ledger.put_aside(key, left, "resubmitted: the work these judged changed")
    if not (left["grades"] or left["comments"]):
        return ""
    count = len(left["grades"]) + len(left["comments"])
    return (
        f"resubmitted: {count} hand grade(s) or comment(s) given to the earlier file judged work that "
        "changed and were not carried over (kept in work/hand_grades.json, under set_aside)"
    )


def _give(merged: Gradebook, kind: str, cell: str, result: Result, given: dict) -> None:
    """Put one hand grade ("grades") or comment ("comments") of the ledger into the course."""
    if kind == "grades":
        grade = merged.find_grade(cell, result.notebook, result.notebook, result.student)
        grade.manual_score, grade.extra_credit = given["manual_score"], given["extra_credit"]
        grade.needs_manual_grade = False
    else:
        comment = merged.find_comment(cell, result.notebook, result.notebook, result.student)
        comment.manual_comment = given["manual_comment"]


# ------------------------------------------------------------------------------ its config


def _config_file(config) -> str:
    """The grading config, and formgrader's MathJax from the Jupyter server rather than a CDN."""
    lines = [
        "# The configuration `course grade` graded this batch with (written by it).",
        "c = get_config()  # noqa",
        f"c.HTMLExporter.extra_template_basedirs = {[str(FORMGRADER_TEMPLATES), str(NBGRADER_TEMPLATES)]!r}",
    ]
    return "\n".join(lines + _config_lines("c", config)) + "\n"


def _config_lines(prefix: str, section: Config) -> list[str]:
    """`prefix.key = value` for each setting, nested sections (GenerateFeedback.HTMLExporter) included."""
    lines = []
    for key, value in section.items():
        if isinstance(value, Config):
            lines += _config_lines(f"{prefix}.{key}", value)
        else:
            lines.append(f"{prefix}.{key} = {value!r}")
    return lines
