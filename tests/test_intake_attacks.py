"""A fresh red team's round on the hardened intake (grader/intake/inbox.py, exports.py): each of these
got through at 7c2c087 and is closed at its root since.

A hostile student controls the files (names, contents, subfolders) inside her own folder or
upload, and her display name in the LMS. Each test says the layout and the safe behaviour.
"""

import json
import zipfile
from pathlib import Path

import pytest

from autograder.paths import NOTEBOOKS
from grader import grading
from grader.intake.inbox import find_submissions
from grader.notebook.autograde import Limits


def _nb(mark: str) -> bytes:
    notebook = json.loads((NOTEBOOKS / "07_rmsnorm" / "07_rmsnorm.ipynb").read_bytes())
    notebook["metadata"]["handed_in_by"] = mark
    return json.dumps(notebook).encode()


def _write(folder: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return folder


def _zip(archive: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(archive, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return archive


class _Stop(Exception):
    pass


def test_course_grade_of_a_known_students_lone_folder_keeps_her_files_hers(tmp_path, monkeypatch):
    """GAP 1. `course grade late/mallory --out OUT` where OUT's roster knows mallory and victim:
    grading.grade calls find_submissions(source, work) without `students`, so the protection of
    "a source named after a known student is her folder" never applies through the CLI: mallory's
    victim_07_rmsnorm.ipynb (and mallory/ann/07_rmsnorm.ipynb) are graded as victim's (ann's),
    replacing their record (confirmed with two real `course grade` runs)."""
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name\nvictim,Vic Tim\nmallory,Mal Lory\nann,Ann Lee\n")
    source = _write(
        tmp_path / "late" / "mallory",
        {"victim_07_rmsnorm.ipynb": _nb("mallory"), "ann/07_rmsnorm.ipynb": _nb("mallory")},
    )
    real, intakes = grading.find_submissions, []

    def spy(*args, **kwargs):
        intakes.append(real(*args, **kwargs))
        raise _Stop

    monkeypatch.setattr(grading, "find_submissions", spy)
    with pytest.raises(_Stop):
        grading.grade(source, tmp_path / "out", roster=roster, limits=Limits(sandboxed=False))
    [intake] = intakes
    assert {s.student for s in intake.submissions} <= {"mallory"}
    assert {f.student for f in intake.files} <= {"mallory", ""}


def test_a_moodle_download_of_one_students_folder_keeps_her_files_hers(tmp_path):
    """GAP 2. Moodle's "download selected submissions" of one student (or an assignment with one
    submission) is a zip of one folder, so _zipped_folder strips her Moodle folder and her files are
    read at the top: her victim_07_rmsnorm.ipynb becomes victim's, and a Moodle-named subfolder
    another participant's (555). Moodle's folder says whose the files are: it must never be stripped."""
    folder = "Mallory Evil_777_assignsubmission_file_"
    archive = _zip(
        tmp_path / "selected.zip",
        {
            f"{folder}/victim_07_rmsnorm.ipynb": _nb("mallory"),
            f"{folder}/Ann Lee_555_assignsubmission_file_/07_rmsnorm.ipynb": _nb("mallory"),
        },
    )
    intake = find_submissions(archive, tmp_path / "work")
    assert {s.student for s in intake.submissions} <= {"777"}
    assert {f.student for f in intake.files} <= {"777", ""}


def test_a_students_refused_files_do_not_change_how_the_others_are_read(tmp_path):
    """GAP 3. A class zip of ann/ and mallory/, where mallory hands in only a file whose name holds
    a newline (refused) and an autosave (skipped): _zipped_folder judges "one folder" on the entries
    that were not refused, reads the zip as ann's folder, and ann's notebook is refused as lying
    "at the top of the source, in no student's folder". Whether a zip is one folder must be judged
    on all its entries."""
    archive = _zip(
        tmp_path / "class.zip",
        {
            "ann/07_rmsnorm.ipynb": _nb("ann"),
            "mallory/evil\nname.ipynb": _nb("mallory"),
            "mallory/.ipynb_checkpoints/07_rmsnorm-checkpoint.ipynb": _nb("mallory"),
        },
    )
    intake = find_submissions(archive, tmp_path / "work")
    assert [(s.student, s.notebook) for s in intake.submissions] == [("ann", "07_rmsnorm")]


def test_a_blackboard_receipt_is_read_from_its_own_name_line_only(tmp_path):
    """GAP 4 (defence in depth). RECEIPT_NAME.search looks through the whole receipt (64 KiB), which
    also holds what the student typed (Submission Field, Comments). Where Blackboard's own Name line
    does not fit the grammar (here: no username), a `Name: Kim (kim)` line the student typed decides,
    and lee_kim's attempt is graded as kim's. Only the first Name: line should be read."""
    time = "2026-11-20-22-10-05"
    source = _write(
        tmp_path / "bb",
        {
            f"HW 4_lee_kim_attempt_{time}_07_rmsnorm.ipynb": _nb("lee_kim"),
            f"HW 4_lee_kim_attempt_{time}.txt": (
                b"Name: Lee Kim\nAssignment: HW 4\nDate Submitted: ...\n\n"
                b"Submission Field:\nName: Kim (kim)\nComments for Assignment:\nnone\n"
            ),
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert "kim" not in {s.student for s in intake.submissions}


def test_gradescope_attempts_are_ordered_by_time_not_by_text(tmp_path):
    """GAP 5 (correctness, low). :created_at: is compared as ISO text with its offset, so across a
    change of offset (DST) the earlier submission wins: submission_2 (04:00 UTC on the 2nd) is later
    than submission_1 (15:00 UTC on the 1st) but submission_1 is graded."""
    meta = (
        b":submission_1:\n  :submitters:\n  - :sid: 'ann'\n  :created_at: 2026-01-02 00:00:00.0 +09:00\n"
        b":submission_2:\n  :submitters:\n  - :sid: 'ann'\n  :created_at: 2026-01-01 20:00:00.0 -08:00\n"
    )
    source = _write(
        tmp_path / "gs",
        {
            "submission_metadata.yml": meta,
            "submission_1/07_rmsnorm.ipynb": _nb("first"),
            "submission_2/07_rmsnorm.ipynb": _nb("second"),
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    [graded] = intake.submissions
    assert graded.origin == "submission_2/07_rmsnorm.ipynb"
