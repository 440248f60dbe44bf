"""Leaving out the questions added beyond the original homework (`Check.added`): course.toml's one
setting, read by `course release` and `course grade` alike, so that the students' notebooks and the
points graded never disagree; and the cells a question left out takes with it.

Each added question stands at the end of its notebook, after the homework's, and no later cell uses
it: its cells run from its "## Question N" heading to the next level-2 heading ("## Summary").
"""

import shutil
import tomllib
from collections.abc import Iterable
from pathlib import Path

import nbformat

from autograder.cells import grade_id
from autograder.checks import CHECKS
from autograder.core import Check
from autograder.paths import REPO, SOLUTIONS
from autograder.printable import shown
from autograder.reference import assignment_of

SETTING = REPO / "course.toml"
KEY = "leave_out"
EVERY_ADDED = "added"  # the entry that stands for every question marked added


def left_out(path: Path | None = None) -> frozenset[str]:
    """The checks whose questions course.toml (`path`, default SETTING) leaves out; none without
    the file. Anything else in it than what it may hold stops with the file, the entry and what may
    be left out."""
    path = path or SETTING
    try:
        setting = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return frozenset()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SystemExit(f"{path}: could not be read as TOML: {shown(str(error))}. {_allowed()}") from None
    if unknown := sorted(set(setting) - {KEY}):
        names = ", ".join(shown(repr(key)) for key in unknown)
        raise SystemExit(f"{path}: no setting {names}: the only one is {KEY}. {_allowed()}")
    entries = setting.get(KEY, [])
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise SystemExit(f"{path}: {KEY} must be a list of quoted names, e.g. {KEY} = []. {_allowed()}")
    names = set()
    for entry in entries:
        if entry == EVERY_ADDED:
            names.update(n for n, check in CHECKS.items() if check.added)
        elif entry not in CHECKS:
            raise SystemExit(f"{path}: {KEY}: no question {shown(repr(entry))}. {_allowed()}")
        elif not CHECKS[entry].added:
            raise SystemExit(
                f"{path}: {KEY}: {entry!r} is a question of the original homework, which later cells use: "
                f"it cannot be left out. {_allowed()}"
            )
        else:
            names.add(entry)
    return frozenset(names)


def _allowed() -> str:
    added = ", ".join(repr(n) for n, check in CHECKS.items() if check.added) or "none"
    return (
        f"What may be left out: {EVERY_ADDED!r} (every question added beyond the original homework) or "
        f"the names of those questions, as `course list` prints them: {added}"
    )


def standing(check: Check, checks_left_out: frozenset[str]) -> str:
    """How `course list` and the points table mark a question: added, and left out, or neither."""
    if check.name in checks_left_out:
        return "added, left out"
    return "added" if check.added else ""


def question_cells(notebook: nbformat.NotebookNode, check: Check) -> range:
    """The indices of the cells of a check's question: from the "## Question" heading above its
    answer cell up to, not including, the next level-2 heading. Raises where the notebook is not laid
    out so (the heading missing, one of the question's cells outside, another check's inside): a rule
    that does not fit must not drop other cells."""
    ids = [grade_id(cell) for cell in notebook.cells]
    where = f"{check.name}'s question"
    if check.answer_cell not in ids:
        raise ValueError(f"{where}: the notebook has no answer cell {check.answer_cell}")
    answer = ids.index(check.answer_cell)
    headings = [i for i, cell in enumerate(notebook.cells) if _level_two(cell)]
    start = max((i for i in headings if i < answer), default=None)
    if start is None or not notebook.cells[start].source.startswith("## Question"):
        raise ValueError(f'{where}: no "## Question" heading is the last level-2 heading above its answer')
    stop = min((i for i in headings if i > answer), default=len(notebook.cells))
    span = set(ids[start:stop])
    if missing := [g for g in own_cells(check) if g not in span]:
        raise ValueError(f"{where}: its cells {', '.join(missing)} are not between its heading and the next")
    others = [other for other in checks_of(assignment_of(check.name)) if other is not check]
    if shared := [other.name for other in others if span & set(own_cells(other))]:
        raise ValueError(f"{where}: its cells hold those of {', '.join(shared)} too")
    return range(start, stop)


def own_cells(check: Check) -> tuple[str, ...]:
    """The grade ids of a check's answer, visible and hidden test and self-study cells."""
    question = check.name.split(".", 1)[1]
    return (check.answer_cell, f"{question}_test", f"{question}_hidden", f"{question}_study")


def checks_of(assignment: str) -> list[Check]:
    return [check for name, check in CHECKS.items() if assignment_of(name) == assignment]


def _level_two(cell) -> bool:
    return cell.cell_type == "markdown" and cell.source.startswith("## ")


def without_questions(notebook: nbformat.NotebookNode, checks: Iterable[Check]) -> list[str]:
    """Drop the cells of these checks' questions from `notebook`; returns the grade ids they had (a
    submission's cells are dropped by these: the student's own, untracked, stay)."""
    dropped = set()
    for check in checks:
        dropped.update(question_cells(notebook, check))
    gone = [gid for i in sorted(dropped) if (gid := grade_id(notebook.cells[i])) is not None]
    notebook.cells = [cell for i, cell in enumerate(notebook.cells) if i not in dropped]
    return gone


def copy_solutions(target: Path, checks: frozenset[str], ignore: Iterable[str] = ()) -> dict[str, list[str]]:
    """solutions/ copied to `target` (but `ignore`'s patterns), the questions of `checks` dropped from
    their source notebooks; the grade ids of the cells dropped, by assignment."""
    shutil.copytree(SOLUTIONS, target, ignore=shutil.ignore_patterns("__pycache__", *ignore))
    dropped = {}
    for assignment in sorted({assignment_of(name) for name in checks}):
        path = target / assignment / f"{assignment}.ipynb"
        notebook = nbformat.read(path, as_version=4)
        in_it = [check for check in checks_of(assignment) if check.name in checks]
        dropped[assignment] = without_questions(notebook, in_it)
        nbformat.write(notebook, path)
    return dropped
