"""The class as the record and the roster see it: names, the rows of students who handed in
nothing, and one total per student for the LMS (roster.py writes the files)."""

import shutil
import sys
from dataclasses import replace
from pathlib import Path

from autograder.paths import assignments
from autograder.printable import shown
from grader.grades import Result, missing
from grader.record.merged_course import Person
from grader.record.roster import Roster, Total, read_roster, write_uploads

__all__ = ["keep_roster", "missing_rows", "named", "people", "read_roster", "write_totals"]


def keep_roster(out: Path, roster: Path | None) -> str | None:
    """Copy a roster given now into OUT/work (later runs use it without being given it again); its
    path there, relative to OUT. A roster that cannot be read stops the run before anything changes."""
    if roster is None:
        return None
    for note in read_roster(roster).notes:
        print(f"note: {roster.name}: {shown(note)}", file=sys.stderr)
    kept = Path("work") / f"roster{roster.suffix.lower()}"
    (out / kept).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(roster, out / kept)
    return str(kept)


def people(record: list[Result], roster: Roster | None) -> dict[str, Person]:
    """Each student's name for formgrader: the roster's, else the one the export gave."""
    found = {r.student: Person.from_name(r.name) for r in record if r.name}
    for student in roster.students.values() if roster else ():
        first, last = student.first_name, student.last_name
        person = (
            Person(first, last, student.email)
            if first or last
            else Person.from_name(student.name, student.email)
        )
        found[student.id] = person
    return found


def _notebooks(rows: list[Result]) -> list[str]:
    """The course notebooks this output folder grades: those anyone handed in."""
    known = set(assignments())
    return sorted({r.notebook for r in rows if r.notebook in known})


def missing_rows(rows: list[Result], roster: Roster | None) -> list[Result]:
    """A `missing` row for each student of the roster and each notebook they did not hand in."""
    if roster is None:
        return []
    handed_in = {(r.student, r.notebook) for r in rows}
    return [
        missing(student.id, notebook, student.name)
        for student in roster.students.values()
        for notebook in _notebooks(rows)
        if (student.id, notebook) not in handed_in
    ]


def named(rows: list[Result], roster: Roster | None) -> list[Result]:
    """The rows with the roster's names where it has them."""
    names = {s.id: s.name for s in roster.students.values()} if roster else {}
    return [replace(r, name=names[r.student]) if names.get(r.student) else r for r in rows]


def write_totals(
    out: Path, rows: list[Result], roster: Roster | None, lms: str, title: str | None
) -> list[Path]:
    """OUT/totals.csv and the LMS's upload file: one total per student over the folder's notebooks."""
    notebooks = _notebooks(rows)
    full = {r.notebook: r.max_score for r in rows if r.max_score is not None}
    by_student: dict[str, dict[str, Result]] = {}
    order = list(roster.students) if roster else []
    for r in rows:
        if r.notebook in notebooks:
            by_student.setdefault(r.student, {})[r.notebook] = r
            if r.student not in order:
                order.append(r.student)
    totals = [_total(student, by_student.get(student, {}), notebooks, full) for student in order]
    names = {r.student: r.name for r in rows if r.name}
    if roster and roster.lms:  # the roster's ids are the ones the upload must carry
        if lms and lms != roster.lms:
            print(
                f"warning: the roster is a {roster.lms} class list but the submissions came from {lms}: "
                f"the upload is written for {roster.lms}, and students are matched by id only",
                file=sys.stderr,
            )
        lms = roster.lms
    title = title or "Transformer internals " + " + ".join(notebooks)
    return write_uploads(out, totals, roster, lms, title, names)


def _total(student: str, rows: dict[str, Result], notebooks: list[str], full: dict) -> Total:
    max_score = sum(full.get(n) or 0 for n in notebooks)
    scores = tuple((n, rows[n].final_score if n in rows else None) for n in notebooks)
    handed_in = [r for r in rows.values() if r.status != "missing"]
    if not handed_in:
        return Total(student, None, max_score, "missing", scores)
    open_ = [
        f"{r.notebook} {r.status.replace('_', ' ')}"
        for r in handed_in
        if r.status in ("failed", "needs_manual_grading")
    ]
    if open_:
        return Total(student, None, max_score, "incomplete: " + ", ".join(open_), scores)
    absent = [n for n in notebooks if n not in rows or rows[n].status == "missing"]
    score = sum(r.final_score or 0 for r in handed_in)
    status = f"partial: no submission for {', '.join(absent)} (each counted 0)" if absent else "complete"
    return Total(student, score, max_score, status, scores)
