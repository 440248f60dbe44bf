"""Discovery of submissions (folder, flat names, zip) and what reaches grades.csv and the terminal.

Names of files, folders and zip entries are the students' (or their LMS's): each test builds a
class whose bad names or bad entries must each cost one `failed` row that says why, while the
rest is still found, and whose rows must reach grades.csv and the summary as harmless text.
LMS exports and notebooks recognised by their cells: tests/test_exports.py.
"""

import csv
import hashlib
import os
import stat
import unicodedata
import warnings
import zipfile
from pathlib import Path

import pytest

import grader.intake.inbox as inbox
from autograder.paths import NOTEBOOKS, assignments
from autograder.printable import UNPRINTABLE, shown
from grader.cli import main, summary_line
from grader.grades import Result, write_csv
from grader.intake.exports import ID_RULE
from grader.intake.inbox import find_submissions

NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'  # never read here
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

NAMES = ", ".join(assignments())  # the course's notebooks, as refusals list them


def _write(folder: Path, *paths: str) -> None:
    for path in paths:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(NOTEBOOK)


def _found(found) -> set[tuple[str, str]]:
    return {(s.student, s.notebook) for s in found}


def _reasons(rejected: list[Result]) -> list[tuple[str, str]]:
    return sorted((r.student, r.reason) for r in rejected)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _csv_lines(tmp_path: Path, rows: list[Result]) -> tuple[str, list[list[str]]]:
    path = tmp_path / "grades.csv"
    write_csv(path, rows)
    text = path.read_text(encoding="utf-8")
    return text, list(csv.reader(text.splitlines()))


def _columns(lines: list[list[str]], *names: str) -> list[list[str]]:
    """The rows of grades.csv reduced to these columns, by their names in its header."""
    at = [lines[0].index(name) for name in names]
    return [[line[i] for i in at] for line in lines[1:]]


def _printable(text: str) -> bool:
    return not any(unicodedata.category(c) in UNPRINTABLE for c in text)


# ------------------------------------------------------------------------------ layouts


def test_submission_layouts(tmp_path):
    """Nested folders, flat <student>_<notebook> names and zips of either are recognised."""
    nested, flat = tmp_path / "nested", tmp_path / "flat"
    _write(nested, "ann/07_rmsnorm.ipynb")
    _write(flat, "bo_b_04_rope.ipynb", "carl_homework.ipynb")
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(nested / "ann" / "07_rmsnorm.ipynb", "export/ann/07_rmsnorm.ipynb")
    for source, want in (
        (nested, {("ann", "07_rmsnorm")}),
        (flat, {("bo_b", "04_rope")}),
        (archive, {("ann", "07_rmsnorm")}),
    ):
        intake = find_submissions(source, tmp_path / f"work-{source.name}")
        assert _found(intake.submissions) == want
        if source is flat:
            [reason] = [r.reason for r in intake.rejected]
            assert reason.startswith(
                "a file at the top of the source must be named <student>_<notebook>.ipynb, ending in a "
                f"notebook's exact name ({NAMES})"
            )


def test_a_student_folder_holds_only_that_students_files(tmp_path):
    """A file planted under another student's name, two files for one notebook, a symlink:
    each is rejected with its reason, never graded as someone's work."""
    source = tmp_path / "in"
    _write(source, "aaron/alice/07_rmsnorm.ipynb", "alice/07_rmsnorm.ipynb", "bea/07_rmsnorm.ipynb")
    release = (NOTEBOOKS / "07_rmsnorm" / "07_rmsnorm.ipynb").read_bytes()
    (source / "bea" / "07_rmsnorm_v2.ipynb").write_bytes(release)  # not its exact name: told by its cells
    (source / "cy").mkdir()
    (source / "cy" / "07_rmsnorm.ipynb").symlink_to(source / "alice" / "07_rmsnorm.ipynb")
    intake = find_submissions(source, tmp_path / "work")
    assert [(s.student, s.notebook) for s in intake.submissions] == [("alice", "07_rmsnorm")]
    assert intake.submissions[0].path == tmp_path / "work" / "inbox" / "alice" / "07_rmsnorm.ipynb"
    reasons = {r.student: r.reason for r in intake.rejected}
    assert reasons == {
        "aaron/alice/07_rmsnorm.ipynb": (
            "it lies in 'aaron/alice/': only the files directly in a student's folder are that student's "
            "(<student>/<notebook>.ipynb); move it into 'aaron/' if it is aaron's"
        ),
        "bea": "more than one file for this notebook (bea/07_rmsnorm.ipynb, bea/07_rmsnorm_v2.ipynb)",
        "cy/07_rmsnorm.ipynb": "a symbolic link, not a plain file",
    }


# ------------------------------------------------------------------------------ names in a folder


FORGED_ROW = "x\nmallory,07_rmsnorm,6,6,graded,_07_rmsnorm.ipynb"  # a newline that forges a row
CONTROL = "its name holds control characters (line breaks, terminal escapes or text-direction marks)"


def _hostile_folder(source: Path) -> None:
    """A class whose file names attack the CSV, the terminal and the reader, beside two honest ones."""
    _write(source, "ann/07_rmsnorm.ipynb", "bo_04_rope.ipynb")
    _write(source, FORGED_ROW, "\x1b[2J\x1b[Hcarl_07_rmsnorm.ipynb", "dee\u202eb_07_rmsnorm.ipynb")
    _write(source, "=HYPERLINK(1)_07_rmsnorm.ipynb", "-2+3/07_rmsnorm.ipynb")
    with open(os.path.join(os.fsencode(source), b"jos\xe9_07_rmsnorm.ipynb"), "wb") as latin1:
        latin1.write(NOTEBOOK)  # a name saved as Latin-1, not UTF-8
    os.mkfifo(source / "eve_07_rmsnorm.ipynb")  # opening it to copy would hang a naive grader
    _write(source, ".ipynb_checkpoints/ann_07_rmsnorm.ipynb", "fay/__MACOSX/\x1b.ipynb")


def test_folder_names_that_cannot_be_shown_are_refused_one_by_one(tmp_path):
    source = tmp_path / "in"
    _hostile_folder(source)
    intake = find_submissions(source, tmp_path / "work")
    assert _found(intake.submissions) == {("ann", "07_rmsnorm"), ("bo", "04_rope")}
    assert _reasons(intake.rejected) == sorted(
        [
            (FORGED_ROW, CONTROL),
            ("\x1b[2J\x1b[Hcarl_07_rmsnorm.ipynb", CONTROL),
            ("dee\u202eb_07_rmsnorm.ipynb", CONTROL),
            ("jos\udce9_07_rmsnorm.ipynb", "its name is not UTF-8 text"),
            ("eve_07_rmsnorm.ipynb", "a special file (pipe, socket or device), not a plain file"),
            (
                "=HYPERLINK(1)_07_rmsnorm.ipynb",
                f"'=HYPERLINK(1)' cannot be a student id: it starts with '='; '(' and ')' are not allowed in "
                f"one ({ID_RULE}); rename the file, e.g. to HYPERLINK_1_07_rmsnorm.ipynb",
            ),
            (
                "-2+3/07_rmsnorm.ipynb",
                f"the folder name '-2+3' cannot be a student id: it starts with '-' ({ID_RULE}); rename the "
                "folder, e.g. to '2+3'",
            ),
        ]
    )
    copied = {str(p.relative_to(tmp_path / "work" / "inbox")) for p in (tmp_path / "work").rglob("*.ipynb")}
    assert copied == {
        "ann/07_rmsnorm.ipynb",
        "bo_04_rope.ipynb",
        "=HYPERLINK(1)_07_rmsnorm.ipynb",  # named harmlessly, then refused for what the name says
        "-2+3/07_rmsnorm.ipynb",
    }


def test_grades_csv_holds_one_line_per_row_and_no_formula(tmp_path):
    """Whatever the names and reasons hold, each row is one physical line, a spreadsheet reads
    no formula, control characters are written as visible escapes, and scores stay numbers."""
    source = tmp_path / "in"
    _hostile_folder(source)
    rows = find_submissions(source, tmp_path / "work").rejected
    rows += [
        Result("ann", "07_rmsnorm", 0, 6, "graded", "-1 point: a cell\nhung\u2028its kernel\x85"),
        Result("@SUM(A1)", "+cmd", 6, 6, "graded", "\tTab\rCR"),
    ]
    text, lines = _csv_lines(tmp_path, rows)
    assert len(text.splitlines()) == len(lines) == len(rows) + 1
    assert all(_printable(field) for line in lines for field in line)
    assert all(len(line) == len(lines[0]) for line in lines)
    assert not any(field.startswith(FORMULA_STARTS) for line in lines for field in line)
    columns = _columns(lines, "student", "notebook", "score", "max_score", "status", "reason")
    by_student = {line[0]: line for line in columns}
    assert "mallory" not in by_student
    assert by_student["ann"][2:6] == ["0", "6", "graded", "'-1 point: a cell\\nhung\\u2028its kernel\\x85"]
    assert by_student["'@SUM(A1)"][1:5] == ["'+cmd", "6", "6", "graded"]
    assert "'=HYPERLINK(1)_07_rmsnorm.ipynb" in by_student
    assert "x\\nmallory,07_rmsnorm,6,6,graded,_07_rmsnorm.ipynb" in by_student
    assert "jos\\xe9_07_rmsnorm.ipynb" in by_student  # the byte itself, not a mojibake


def test_the_printed_summary_shows_names_escaped(tmp_path):
    source = tmp_path / "in"
    _hostile_folder(source)
    rows = find_submissions(source, tmp_path / "work").rejected
    lines = [summary_line(r) for r in rows]
    assert all(_printable(line) for line in lines)
    printed = "\n".join(lines)
    for escaped in ("x\\nmallory", "\\x1b[2J\\x1b[Hcarl", "dee\\u202eb", "jos\\xe9"):
        assert escaped in printed


def test_shown_is_idempotent_and_keeps_ordinary_text():
    assert shown("José Ünal, 名前 (tab\there)") == "José Ünal, 名前 (tab\\there)"
    for text in ("a\nb\x1b[31m\u202e\udcff\u2029", "already \\n escaped"):
        assert shown(shown(text)) == shown(text)


# ------------------------------------------------------------------------------ entries of a zip


GOOD = {
    "export/ann/07_rmsnorm.ipynb": ("ann", "07_rmsnorm"),
    "export\\cy\\04_rope.ipynb": ("cy", "04_rope"),  # from a Windows tool: `\` is a folder
    "export/bo/04_rope.ipynb": ("bo", "04_rope"),
}
OUTSIDE = "would be unpacked outside the grader's folder"


def _entry(zf: zipfile.ZipFile, name: str, data=NOTEBOOK, mode=0, compress_type=zipfile.ZIP_STORED) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16  # where zip tools record a Unix file's type and permissions
    info.compress_type = compress_type
    zf.writestr(info, data)


def _patch_headers(archive: Path, name: str, offset_local: int, offset_central: int, value: bytes) -> None:
    """Overwrite a field of one entry's local and central headers (as a broken or hostile tool would)."""
    data, encoded = bytearray(archive.read_bytes()), name.encode()
    for signature, name_at, field_at in (
        (b"PK\x03\x04", 30, offset_local),
        (b"PK\x01\x02", 46, offset_central),
    ):
        start = data.find(signature)
        while start >= 0:
            if data[start + name_at : start + name_at + len(encoded)] == encoded:
                data[start + field_at : start + field_at + len(value)] = value
            start = data.find(signature, start + 1)
    archive.write_bytes(bytes(data))


def _corrupt_data(archive: Path, name: str) -> None:
    """Overwrite an entry's compressed bytes with garbage that no decompressor accepts."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(name)
    data = bytearray(archive.read_bytes())
    local = info.header_offset
    start = local + 30 + int.from_bytes(data[local + 26 : local + 28], "little")
    start += int.from_bytes(data[local + 28 : local + 30], "little")
    data[start : start + info.compress_size] = b"\xff" * info.compress_size
    archive.write_bytes(bytes(data))


def _hostile_zip(archive: Path, tmp_path: Path) -> list[tuple[str, str]]:
    """A class zip of three honest submissions and one bad entry of each kind; return the rows due."""
    absolute = str(tmp_path / "abs_07_rmsnorm.ipynb")
    with zipfile.ZipFile(archive, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns of the duplicate it writes
        for name in GOOD:
            _entry(zf, name)
        _entry(zf, "export/readme.txt", b"not a notebook: never unpacked")
        _entry(zf, "export/__MACOSX/._ann\x1b.ipynb")  # macOS's resource forks: skipped unread
        for name in ("../evil_07_rmsnorm.ipynb", "export/../../evil_04_rope.ipynb", "../../.bashrc"):
            _entry(zf, name)
        for name in (absolute, "C:\\Users\\evil_07_rmsnorm.ipynb", "export\\..\\..\\win_07_rmsnorm.ipynb"):
            _entry(zf, name)
        _entry(zf, "export/e\nve/07_rmsnorm.ipynb")
        _entry(zf, "export/\x1b[2Jmal/07_rmsnorm.ipynb")
        _entry(zf, "export/dee/07_rmsnorm.ipynb", b"/etc/passwd", stat.S_IFLNK | 0o777)
        _entry(zf, "export/dee/04_rope.ipynb", b"", stat.S_IFIFO | 0o644)
        _entry(zf, "export/fay/07_rmsnorm.ipynb")
        _entry(zf, "export/fay/07_rmsnorm.ipynb")
        _entry(zf, "export\\gus\\07_rmsnorm.ipynb")
        _entry(zf, "export/gus/07_rmsnorm.ipynb")
        _entry(zf, "export/hal/04_rope.ipynb", b"secret")
        _entry(zf, "export/ida/04_rope.ipynb", b"what ida wrote")
        _entry(zf, "export/jo/04_rope.ipynb", NOTEBOOK * 50, compress_type=zipfile.ZIP_DEFLATED)
        _entry(zf, "export/kim/07_rmsnorm.ipynb", NOTEBOOK, compress_type=zipfile.ZIP_DEFLATED)
    _patch_headers(archive, "export/hal/04_rope.ipynb", 6, 8, b"\x01\x00")  # flag: encrypted
    archive.write_bytes(archive.read_bytes().replace(b"what ida wrote", b"what ida wrotE"))  # bad CRC
    _corrupt_data(archive, "export/jo/04_rope.ipynb")
    _patch_headers(archive, "export/kim/07_rmsnorm.ipynb", 8, 10, b"\x09\x00")  # Deflate64 (Windows)
    return [
        ("../evil_07_rmsnorm.ipynb", f"its path climbs out of its folder (..): it {OUTSIDE}"),
        ("export/../../evil_04_rope.ipynb", f"its path climbs out of its folder (..): it {OUTSIDE}"),
        ("../../.bashrc", f"its path climbs out of its folder (..): it {OUTSIDE}"),
        (absolute, f"an absolute path (from / or a drive letter): it {OUTSIDE}"),
        ("C:\\Users\\evil_07_rmsnorm.ipynb", f"an absolute path (from / or a drive letter): it {OUTSIDE}"),
        ("export\\..\\..\\win_07_rmsnorm.ipynb", f"its path climbs out of its folder (..): it {OUTSIDE}"),
        ("export/e\nve/07_rmsnorm.ipynb", CONTROL),
        ("export/\x1b[2Jmal/07_rmsnorm.ipynb", CONTROL),
        ("export/dee/07_rmsnorm.ipynb", "a symbolic link, not a plain file"),
        ("export/dee/04_rope.ipynb", "a special file (pipe, socket or device), not a plain file"),
        ("export/fay/07_rmsnorm.ipynb", "the zip holds more than one entry with this name"),
        ("export/fay/07_rmsnorm.ipynb", "the zip holds more than one entry with this name"),
        ("export\\gus\\07_rmsnorm.ipynb", "the zip holds more than one entry with this name"),
        ("export/gus/07_rmsnorm.ipynb", "the zip holds more than one entry with this name"),
        ("export/hal/04_rope.ipynb", "encrypted (password-protected)"),
        ("export/ida/04_rope.ipynb", "damaged in the zip (Bad CRC-32 for file 'export/ida/04_rope.ipynb')"),
        (
            "export/jo/04_rope.ipynb",
            "damaged in the zip (Error -3 while decompressing data: invalid block type)",
        ),
        (
            "export/kim/07_rmsnorm.ipynb",
            (
                "stored in a form this grader cannot unpack "
                "(deflate64: That compression method is not supported)"
            ),
        ),
    ]


def test_each_bad_zip_entry_is_refused_on_its_own_and_the_rest_is_found(tmp_path):
    archive, work = tmp_path / "class.zip", tmp_path / "work"
    due = _hostile_zip(archive, tmp_path)
    before = _sha256(archive)
    intake = find_submissions(archive, work)
    found = intake.submissions
    assert _found(found) == set(GOOD.values())
    assert all(s.path.read_bytes() == NOTEBOOK for s in found)
    assert _reasons(intake.rejected) == sorted((name, f"zip entry not unpacked: {why}") for name, why in due)
    unpacked = {p.relative_to(work / "inbox") for p in (work / "inbox").rglob("*") if p.is_file()}
    assert unpacked == {Path("export", s.student, f"{s.notebook}.ipynb") for s in found}
    outcomes = {(f.path, f.outcome) for f in intake.files}
    assert ("export/readme.txt", "ignored") in outcomes and (
        "export/__MACOSX/._ann\x1b.ipynb",
        "ignored",
    ) in outcomes
    assert {f.path for f in intake.files if f.outcome == "refused"} == {name for name, _ in due}
    assert all(not p.is_symlink() for p in (work / "inbox").rglob("*"))
    assert {p for p in tmp_path.rglob("*") if work / "inbox" not in p.parents} == {
        archive,
        work,
        work / "inbox",
    }
    assert _sha256(archive) == before


def test_refused_zip_entries_reach_the_csv_and_the_summary_escaped(tmp_path):
    _hostile_zip(tmp_path / "class.zip", tmp_path)
    rejected = find_submissions(tmp_path / "class.zip", tmp_path / "work").rejected
    text, lines = _csv_lines(tmp_path, rejected)
    assert len(text.splitlines()) == len(lines) == len(rejected) + 1
    assert all(_printable(field) and not field.startswith(FORMULA_STARTS) for line in lines for field in line)
    lines = [summary_line(r) for r in rejected]
    assert all(_printable(line) for line in lines)
    printed = "\n".join(lines)
    assert "export/e\\nve/07_rmsnorm.ipynb" in printed and "export/\\x1b[2Jmal" in printed
    assert "../evil_07_rmsnorm.ipynb" in printed and "encrypted (password-protected)" in printed


def test_a_zip_that_unpacks_too_large_is_refused(tmp_path, monkeypatch):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ann/07_rmsnorm.ipynb", "0" * 10_000)
    monkeypatch.setattr(inbox, "MAX_ARCHIVE_BYTES", 1000)
    with pytest.raises(SystemExit, match="refusing to unpack"):
        find_submissions(archive, tmp_path / "work")
    assert not (tmp_path / "work" / "inbox" / "ann").exists()


def test_a_zip_whose_list_of_files_cannot_be_read_is_refused_with_its_cause(tmp_path):
    """A name flagged as UTF-8 that is not: Python's zipfile cannot list such a zip at all."""
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("export/ann/07_rmsnorm.ipynb", NOTEBOOK)
        zf.writestr("export/jos\u00e9/07_rmsnorm.ipynb", NOTEBOOK)  # written with the UTF-8 flag
    archive.write_bytes(archive.read_bytes().replace("\u00e9".encode(), b"\xff\xfe"))
    with pytest.raises(SystemExit, match="marked as UTF-8 text but is not"):
        find_submissions(archive, tmp_path / "work")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip at all")
    with pytest.raises(SystemExit, match="neither a folder nor a zip file"):
        find_submissions(broken, tmp_path / "work")


def test_course_grade_lists_each_refused_entry_and_prints_no_control_character(tmp_path, capsys):
    """End to end through `course grade` (no notebook gets to run: every entry is refused)."""
    archive, out = tmp_path / "class.zip", tmp_path / "out"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../evil_07_rmsnorm.ipynb", NOTEBOOK)
        zf.writestr("export/\x1b[2J\x1b[31mmal/07_rmsnorm.ipynb", NOTEBOOK)
        zf.writestr("export/=HYPERLINK(1)\nmallory,07_rmsnorm,6,6,graded/07_rmsnorm.ipynb", NOTEBOOK)
    assert main(["grade", str(archive), "--out", str(out), "--no-sandbox", "--jobs", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert all(_printable(line) for line in printed)
    refused = [line for line in printed if "zip entry not unpacked" in line]
    assert len(refused) == 3 and printed[1:4] == refused  # listed first, under what they are
    text = (out / "grades.csv").read_text(encoding="utf-8")
    assert len(text.splitlines()) == 4 and "mallory" not in {r[0] for r in csv.reader(text.splitlines())}
