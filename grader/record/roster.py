"""A class roster read from an LMS export, and each student's total written back for upload.

`read_roster` takes the file an instructor downloads from Canvas, Moodle, Blackboard or
Gradescope (or a plain `id,name` CSV), tells which from its header, and gives each student
under the id that LMS puts in its submission file names, so that rows of grades.csv and
roster rows meet. `write_uploads` writes OUT/totals.csv and, for Canvas, Moodle and
Blackboard, OUT/upload/<lms>.csv in the format that LMS imports (docs/rosters-and-uploads.md
says, per LMS, where each file comes from, where it goes, and how sure we are of each format).

Every value of a roster is text that students or their LMS control (names, sections, emails):
ids must be ids the grader accepts (`exports.STUDENT_ID`), and every text field written goes
through `grades.csv_cell`, so that no name forges a row or runs as a spreadsheet formula.
"""

import codecs
import csv
import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from autograder.printable import shown
from grader.grades import csv_cell
from grader.intake.exports import LMS_NAMES as EXPORT_NAMES
from grader.intake.exports import STUDENT_ID


@dataclass(frozen=True)
class Student:
    id: str  # the id the grader knows the student by: the one in the LMS's submission file names
    name: str = ""  # full name, "First Last", for formgrader and the reports
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_fields: tuple[tuple[str, str], ...] = ()  # columns the LMS needs back on upload, in its order


@dataclass(frozen=True)
class Roster:
    students: dict[str, Student]  # by id, in the file's order
    lms: str  # a key of FORMATS: an LMS's (exports.EXPORTS), or "" (a plain id,name file)
    path: Path
    notes: tuple[str, ...] = ()  # rows skipped on purpose (Canvas's test student, Gradescope's staff)


@dataclass(frozen=True)
class Total:
    student: str
    score: float | None  # the total to upload; None: upload nothing for this student
    max_score: float
    # "complete", "partial: <notebooks not handed in, counted 0>", "missing" (no submission at all),
    # or "incomplete: <why>" (a notebook failed or awaits hand grading: no total is uploaded)
    status: str
    notebooks: tuple[tuple[str, float | None], ...]  # each notebook's score (None: missing or failed)


CANVAS_FIELDS = ("SIS User ID", "SIS Login ID", "Integration ID", "Root Account", "Section")
CANVAS_DEFAULT_FIELDS = ("SIS User ID", "SIS Login ID", "Section")  # written without a Canvas roster
CANVAS_TEST_STUDENT = "Student, Test"  # the sortable name of the student "Student View" adds
MOODLE_IDENTIFIER = re.compile(r"Participant ([0-9]+)")


# ------------------------------------------------------------------------------ reading a roster


def read_roster(path: Path) -> Roster:
    """The roster in `path`, its format told from its header; a file it cannot use is a SystemExit.

    Rows are numbered as a spreadsheet shows them (the header is row 1), since that is where
    an instructor goes to fix one.
    """
    text = _decode(path)
    lms, rows = _table(path, text)
    header = [column.strip() for column in rows[0]]
    row_student = FORMATS[lms].student
    students: dict[str, Student] = {}
    rows_of: dict[str, list[int]] = {}
    notes: list[str] = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        record = dict(zip(header, row + [""] * (len(header) - len(row)), strict=False))
        try:
            student = row_student(record, notes)
            if student is None:
                continue
            _check_id(student.id)
        except RowRefused as e:
            raise SystemExit(f"{path}: row {number} (the header is row 1): {e}") from None
        rows_of.setdefault(student.id, []).append(number)
        students.setdefault(student.id, student)
    duplicates = {i: numbers for i, numbers in rows_of.items() if len(numbers) > 1}
    if duplicates:
        listed = "; ".join(f"'{shown(i)}' on rows {', '.join(map(str, n))}" for i, n in duplicates.items())
        raise SystemExit(f"{path}: ids that appear more than once: {listed}. Keep one row per student.")
    if not students:
        raise SystemExit(f"{path}: no students in this {FORMATS[lms].name} roster")
    return Roster(students, lms, path, tuple(notes))


def missing_students(roster: Roster, graded_ids: Iterable[str]) -> list[Student]:
    """The students of `roster` with nothing among `graded_ids`, in the roster's order."""
    graded = set(graded_ids)
    return [s for s in roster.students.values() if s.id not in graded]


def _decode(path: Path) -> str:
    """The file's text: UTF-16 where it starts with that BOM (Blackboard's .xls), else UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SystemExit(f"{path}: cannot read the roster: {e.strerror}") from None
    utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    encoding = "utf-16" if utf16 else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise SystemExit(
            f"{path}: not {'UTF-16' if utf16 else 'UTF-8'} text (byte {e.start} is not): download it "
            "from the LMS again, or save it from the spreadsheet as 'CSV UTF-8'"
        ) from None


def _table(path: Path, text: str) -> tuple[str, list[list[str]]]:
    """The roster's format and rows, trying the separators LMSs use (`;` where Canvas is asked to)."""
    headers: list[list[str]] = []
    for delimiter in (",", "\t", ";"):
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        try:
            header = next(reader, [])
            lms = _format_of([column.strip() for column in header])
            if lms is not None:
                return lms, [header, *reader]
        except csv.Error as e:  # a field over the csv module's size limit (128 KiB)
            raise SystemExit(f"{path}: line {reader.line_num} is not CSV: {e}") from None
        headers.append(header)
    found = max(headers, key=len)  # the separator that splits it most is the likeliest
    if not found:
        raise SystemExit(f"{path}: an empty file, not a roster")
    expected = "\n".join(f"  {f.name}: {f.columns}" for f in FORMATS.values())
    raise SystemExit(
        f"{path}: not a roster this grader reads. Columns found: "
        f"{', '.join(shown(c) for c in found)}\nColumns expected, per format:\n{expected}"
    )


def _format_of(header: list[str]) -> str | None:
    """The first format (in FORMATS' order) whose columns the header holds."""
    return next((lms for lms, f in FORMATS.items() if f.recognises(header)), None)


def _canvas_header(header: list[str]) -> bool:
    return header[:2] == ["Student", "ID"] and "Section" in header


def _holds(*columns: str) -> Callable[[list[str]], bool]:
    return lambda header: set(columns) <= set(header)


def _plain_header(header: list[str]) -> bool:
    lower = {c.lower() for c in header}
    return bool(lower & {"id", "student"}) and ("name" in lower or {"first_name", "last_name"} <= lower)


class RowRefused(Exception):
    """A roster row the grader cannot use; read_roster names its row."""


def _check_id(student_id: str) -> None:
    # fullmatch: STUDENT_ID ends in `$`, which `match` also lets through before a final newline
    if not STUDENT_ID.fullmatch(student_id):
        raise RowRefused(
            f"the id '{shown(student_id)}' is not one the grader can use: an id starts with a letter "
            "or digit and holds only letters, digits and . _ @ + - (no spaces). Fix the cell so that "
            "it reads as the id in this student's submission file names, or delete the row."
        )


def _canvas_student(record: dict[str, str], notes: list[str]) -> Student | None:
    """A row of Canvas's gradebook export; None for its "Points Possible", posting and test-student rows.

    id: Canvas's user id (`ID`), the number after the name in "Download Submissions" file names
    (`doejane_12345_67890_04_rope.ipynb`). Names are "Last, First".
    """
    name, student_id = record["Student"].strip(), record["ID"].strip()
    if name == "Points Possible" or not (name or student_id):  # the rows under the header
        return None
    if name == CANVAS_TEST_STUDENT:
        notes.append(f"skipped Canvas's test student (Student View), ID '{shown(student_id)}'")
        return None
    if not student_id:
        raise RowRefused(f"'{shown(name)}' has no Canvas user id in column ID")
    last, comma, first = name.partition(",")
    first, last = (first.strip(), last.strip()) if comma else ("", "")
    fields = tuple((column, record[column]) for column in record if column in CANVAS_FIELDS)
    return Student(student_id, f"{first} {last}".strip() if comma else name, first, last, "", fields)


def _moodle_student(record: dict[str, str], notes: list[str]) -> Student:
    """A row of Moodle's grading worksheet.

    id: the participant number of `Participant 123456`, which Moodle also puts in the folders of
    "Download all submissions" (`Jane Doe_123456_assignsubmission_file_`).
    """
    identifier = record["Identifier"].strip()
    match = MOODLE_IDENTIFIER.fullmatch(identifier)
    if match is None:
        raise RowRefused(
            f"the Identifier '{shown(identifier)}' is not 'Participant <number>', as Moodle writes it "
            "(download the worksheet again, with Moodle's language set to English)"
        )
    return Student(match[1], record["Full name"].strip(), email=record.get("Email address", "").strip())


def _blackboard_student(record: dict[str, str], notes: list[str]) -> Student:
    """A row of Blackboard's Grade Center download.

    id: the Username, which Blackboard puts in its assignment downloads
    (`Notebook 04_jdoe_attempt_2025-02-03-10-12-00_04_rope.ipynb`).
    """
    first, last = record["First Name"].strip(), record["Last Name"].strip()
    return Student(record["Username"].strip(), f"{first} {last}".strip(), first, last)


def _gradescope_student(record: dict[str, str], notes: list[str]) -> Student | None:
    """A row of Gradescope's roster with Role Student (staff are skipped); id: the SID, else the email."""
    if record["Role"].strip().lower() != "student":
        notes.append(f"skipped '{shown(record['Email'].strip())}', role '{shown(record['Role'].strip())}'")
        return None
    first, last = record["First Name"].strip(), record["Last Name"].strip()
    email = record["Email"].strip()
    student_id = record["SID"].strip() or email
    if not student_id:
        raise RowRefused("neither an SID nor an Email to know the student by")
    return Student(student_id, f"{first} {last}".strip(), first, last, email)


def _plain_student(record: dict[str, str], notes: list[str]) -> Student:
    """A row of a plain roster: id (or student), name (or first_name, last_name), email."""
    lower = {column.lower(): value.strip() for column, value in record.items()}
    first, last = lower.get("first_name", ""), lower.get("last_name", "")
    name = lower.get("name") or f"{first} {last}".strip()
    student_id = lower["id"] if "id" in lower else lower["student"]
    return Student(student_id, name, first, last, lower.get("email", ""))


# ------------------------------------------------------------------------------ writing totals


def write_uploads(
    out: Path,
    totals: list[Total],
    roster: Roster | None,
    lms: str,
    title: str,
    names: dict[str, str] | None = None,
) -> list[Path]:
    """Write OUT/totals.csv and, for Canvas, Moodle and Blackboard, OUT/upload/<lms>.csv; return them.

    Rows follow `totals`. Names and emails come from the roster, else from `names` (what the
    submission export said). `title` heads the grade column of Canvas and Blackboard: a column
    header from their own export ("Notebooks (12345)", "Notebooks |12345") updates that column,
    a plain title creates one. Upload files of the other LMSs, left by an earlier run, are removed.
    """
    if lms not in FORMATS:
        raise ValueError(f"unknown LMS {lms!r}: expected one of {sorted(FORMATS)}")
    chosen = FORMATS[lms]
    if roster is not None and roster.lms and lms and roster.lms != lms:
        raise SystemExit(
            f"{roster.path} is a {FORMATS[roster.lms].name} roster: its ids are not {chosen.name}'s"
        )
    if chosen.titled and not title.strip():
        raise ValueError(f"a {chosen.name} upload needs a title for its grade column")
    known = roster.students if roster is not None else {}
    given = names or {}

    def student(student_id: str) -> Student:
        return known.get(student_id) or Student(student_id, given.get(student_id, ""))

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "totals.csv"]
    _write(written[0], _totals_rows(totals, student))
    upload = out / "upload"
    for f in FORMATS.values():
        if f.upload:
            (upload / f.upload).unlink(missing_ok=True)
    if chosen.upload:
        upload.mkdir(parents=True, exist_ok=True)
        max_score = max((t.max_score for t in totals), default=0.0)
        written.append(upload / chosen.upload)
        _write(
            written[-1],
            chosen.upload_rows(Upload(totals, student, title, max_score, roster, datetime.now(UTC))),
        )
    return written


@dataclass(frozen=True)
class Upload:
    """What an LMS's upload file is written from."""

    totals: list[Total]
    student: Callable[[str], Student]  # by id: the roster's row, else what the submissions said
    title: str  # the grade column's, where the LMS heads one
    max_score: float
    roster: Roster | None
    now: datetime


def _totals_rows(totals: list[Total], student: Callable[[str], Student]) -> list[list[str]]:
    notebooks = list(dict.fromkeys(notebook for t in totals for notebook, _ in t.notebooks))
    rows = [["student", "name", "email", "score", "max_score", "status", *map(csv_cell, notebooks)]]
    for t in totals:
        s, scores = student(t.student), dict(t.notebooks)
        rows.append(
            [csv_cell(t.student), csv_cell(s.name), csv_cell(s.email), _points(t.score), _points(t.max_score)]
            + [csv_cell(t.status)]
            + [_points(scores.get(notebook)) for notebook in notebooks]
        )
    return rows


def _canvas_rows(u: Upload) -> list[list[str]]:
    """Canvas's gradebook import: its export's student columns (which it counts by name), the grade.

    Canvas matches rows by ID; a blank grade leaves the student's grade as it is. The columns
    between ID and the grade are the roster's own (Integration ID where it had one), since
    Canvas finds the first grade column by counting the ones it knows.
    """
    first = next(iter(u.roster.students.values()), None) if u.roster is not None else None
    fields = list(CANVAS_DEFAULT_FIELDS)
    if u.roster is not None and u.roster.lms == "canvas" and first is not None:
        fields = [column for column, _ in first.lms_fields]
    rows = [
        ["Student", "ID", *fields, csv_cell(u.title)],
        ["    Points Possible", "", *[""] * len(fields), _points(u.max_score)],
    ]
    for t in u.totals:
        s = u.student(t.student)
        values = dict(s.lms_fields)
        name = f"{s.last_name}, {s.first_name}" if s.last_name and s.first_name else s.name
        rows.append(
            [
                csv_cell(name),
                csv_cell(t.student),
                *[csv_cell(values.get(f, "")) for f in fields],
                _points(t.score),
            ]
        )
    return rows


def _moodle_rows(u: Upload) -> list[list[str]]:
    """Moodle's "Upload grading worksheet": the worksheet's columns its importer reads.

    It needs Identifier, Grade and "Last modified (grade)": a grade changed in Moodle after that
    time is kept unless the instructor ticks "Allow updating records that have been modified more
    recently in Moodle than in the spreadsheet". A student with no total is left out, which
    certainly leaves their grade alone; "Feedback comments" is left out, since a blank one would
    replace comments written in Moodle.
    """
    stamp = u.now.isoformat(timespec="seconds")  # with its UTC offset, which PHP's strtotime reads
    rows = [["Identifier", "Full name", "Email address", "Grade", "Maximum Grade", "Last modified (grade)"]]
    for t in u.totals:
        if t.score is not None:
            s = u.student(t.student)
            rows.append(
                [csv_cell(f"Participant {t.student}"), csv_cell(s.name), csv_cell(s.email), _points(t.score)]
                + [_points(u.max_score), csv_cell(stamp)]
            )
    return rows


def _blackboard_rows(u: Upload) -> list[list[str]]:
    """Blackboard's Grade Center upload: Username and one column headed as its own download heads it.

    A column id (`|12345`, from a download) updates that column; a header without one creates a
    column. A student with no total is left out, which leaves their grade alone.
    """
    header = u.title.strip()
    if "[Total Pts:" not in header:
        name, bar, column_id = header.rpartition("|")
        if bar and re.fullmatch(r"[0-9]+", column_id.strip()):
            header = f"{name.strip()} [Total Pts: {_points(u.max_score)} Score] |{column_id.strip()}"
        else:
            header = f"{header} [Total Pts: {_points(u.max_score)} Score]"
    rows = [["Username", csv_cell(header)]]
    rows += [[csv_cell(t.student), _points(t.score)] for t in u.totals if t.score is not None]
    return rows


def _points(value: float | None) -> str:
    """A score as LMS importers read it: plain decimals, never `1e+03`; blank for none."""
    return "" if value is None else f"{value:.4f}".rstrip("0").rstrip(".")


def _write(path: Path, rows: list[list[str]]) -> None:
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    partial.rename(path)


# ------------------------------------------------------------------------------ the formats


@dataclass(frozen=True)
class RosterFormat:
    """An LMS's roster download and grade upload, as this module reads and writes them: the one
    entry a new LMS needs here (its submission file names are grader/intake/exports.py's)."""

    name: str
    recognises: Callable[[list[str]], bool]  # from the header's columns, stripped
    columns: str  # what the header holds, and where in the LMS the instructor downloads it
    student: Callable[[dict[str, str], list[str]], Student | None]  # a row (None: skipped, noted)
    upload: str = ""  # OUT/upload/<file>; "" where no grade import of the LMS is written
    upload_rows: Callable[[Upload], list[list[str]]] | None = None
    titled: bool = False  # whether the upload's grade column needs a title


# In the order headers are tried: the plain format, the loosest, last.
FORMATS: dict[str, RosterFormat] = {
    "canvas": RosterFormat(
        EXPORT_NAMES["canvas"],
        _canvas_header,
        "Student, ID, [SIS User ID, SIS Login ID, Integration ID,] Section, <assignments...> "
        "(Grades > Export)",
        _canvas_student,
        "canvas.csv",
        _canvas_rows,
        titled=True,
    ),
    "moodle": RosterFormat(
        EXPORT_NAMES["moodle"],
        _holds("Identifier", "Full name"),
        "Identifier, Full name, [Email address,] Status, Grade, Maximum Grade, ... "
        '(Assignment > View all submissions > "Download grading worksheet")',
        _moodle_student,
        "moodle.csv",
        _moodle_rows,
    ),
    "blackboard": RosterFormat(
        EXPORT_NAMES["blackboard"],
        _holds("Last Name", "First Name", "Username"),
        "Last Name, First Name, Username, Student ID, Last Access, Availability, ... "
        "(Full Grade Center > Work Offline > Download)",
        _blackboard_student,
        "blackboard.csv",
        _blackboard_rows,
        titled=True,
    ),
    "gradescope": RosterFormat(
        EXPORT_NAMES["gradescope"],
        _holds("First Name", "Last Name", "SID", "Email", "Role"),
        "First Name, Last Name, SID, Email, Role, Sections (Roster > Download Roster)",
        _gradescope_student,
    ),
    "": RosterFormat(
        "plain",
        _plain_header,
        "id (or student), name (or first_name and last_name), optionally email",
        _plain_student,
    ),
}
