"""A class as each LMS exports it, graded with `make grade` end to end, with the LMS's own roster.

Each export (tests/helpers/lms_exports.py) holds 4 students and 2 notebooks, a resubmission (its older
attempt holds the unanswered release, so grading the wrong one shows), a late file, a renamed
file and files that are not notebooks; the roster adds a student who handed in nothing. The zip
sits at a path with spaces and parentheses, as downloads land. Every row of grades.csv (the
LMS's student id, name, status, score, late penalty), the missing rows, intake.csv and the upload
file are checked; then, on the Canvas class, grades given by hand survive a partial re-grade.
"""

import csv
import os
import re
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.paths import REPO
from grader.record.feedback_return import BUNDLES
from grader.record.roster import FORMATS

from .helpers.lms_exports import STUDENTS, blackboard_export, canvas_export, gradescope_export, moodle_export
from .helpers.machine import needs_sandbox
from .helpers.submissions import perfect, release

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

NOTEBOOKS = ("04_rope", "07_rmsnorm")
FULL = {"04_rope": 9.0, "07_rmsnorm": 6.0}
PERFECT = {nb: nbformat.writes(perfect(nb)).encode() for nb in NOTEBOOKS}
UNTOUCHED = {nb: nbformat.writes(release(nb)).encode() for nb in NOTEBOOKS}
# Roles by sorted key (lms_exports.py): ann's 07 is resubmitted, jane's 04 renamed, jane's 07 late.
FILES = {
    ("ann", "07_rmsnorm"): PERFECT["07_rmsnorm"],
    ("jane", "04_rope"): PERFECT["04_rope"],
    ("jane", "07_rmsnorm"): PERFECT["07_rmsnorm"],
    ("jose", "07_rmsnorm"): UNTOUCHED["07_rmsnorm"],
    ("li", "04_rope"): UNTOUCHED["04_rope"],
}
DUE = "2026-11-20T22:30:00"  # Blackboard's attempts come at 22:17 and 22:24 (on time), then later
PENALTY = "10%/day"


@dataclass(frozen=True)
class Sample:
    """What this file needs of an LMS: its export of the class, its roster's lines as it exports
    them (for the students, then one who handed in nothing, of id `absent`), and a student's id there."""

    export: Callable[[Path], object]
    roster: Callable[[list, str], list[str]]  # (students, absent)
    id_of: Callable[[object], str]
    absent: str
    wrapper: str = ""  # the folder the download wraps its files in


SAMPLES = {
    "canvas": Sample(
        lambda folder: canvas_export(folder, FILES),
        lambda people, absent: [
            "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section",
            "    Points Possible,,,,",
            *[f'"{s.last}, {s.first}",{s.canvas},s{s.canvas},{s.username},A' for s in people],
            f'"Absent, Al",{absent},,,A',
        ],
        lambda student: str(student.canvas),
        "48299",
    ),
    "moodle": Sample(
        lambda folder: moodle_export(folder, FILES),
        lambda people, absent: [
            "\ufeffIdentifier,Full name,Email address,Status,Grade,Maximum Grade",
            *[f'"Participant {s.moodle}",{s.full_name},{s.email},Submitted,,15.00' for s in people],
            f'"Participant {absent}",Al Absent,al@uni.example,No submission,,15.00',
        ],
        lambda student: str(student.moodle),
        "123499",
    ),
    "blackboard": Sample(
        lambda folder: blackboard_export(folder, FILES),
        lambda people, absent: [
            "Last Name,First Name,Username,Student ID,Last Access,Availability",
            *[f"{s.last},{s.first},{s.username},{s.canvas},,Available" for s in people],
            f"Absent,Al,{absent},48299,,Available",
        ],
        lambda student: student.username,
        "mabsent",
    ),
    "gradescope": Sample(  # jose hands in with li as a group, and is graded on li's 04_rope
        lambda folder: gradescope_export(
            folder, {k: v for k, v in FILES.items() if k[0] != "jose"}, groups=(("li", "jose"),)
        ),
        lambda people, absent: [
            "First Name,Last Name,SID,Email,Role,Sections",
            *[f"{s.first},{s.last},{s.sid},{s.email},Student," for s in people],
            f"Al,Absent,{absent},al@uni.example,Student,",
        ],
        lambda student: student.sid or student.email,
        "1099",
        wrapper="assignment_123_export",
    ),
}


def _sample(lms: str) -> Sample:
    if lms not in SAMPLES:
        raise LookupError(f"no sample of {lms}: add its export and roster to SAMPLES, as the LMS writes them")
    return SAMPLES[lms]


def _make_grade(source: Path, out: Path, *flags: str) -> None:
    flags = ("--cell-timeout", "30", "--notebook-timeout", "120", *flags)
    done = subprocess.run(
        ["make", "grade", f"SUBMISSIONS={source}", f"OUT={out}", "JOBS=2", "GRADE_FLAGS=" + " ".join(flags)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


# Every LMS the roster reads (a new one fails here until it has its samples), the plain format aside.
@pytest.fixture(scope="module", params=[lms for lms in FORMATS if lms])
def graded_export(request, tmp_path_factory):
    lms = request.param
    base = tmp_path_factory.mktemp(lms)
    sample = _sample(lms)
    export = sample.export(base / "export")
    downloads = base / "HW4 Warm-up (final)"
    downloads.mkdir()
    archive = export.zip(downloads / "submissions (1).zip", sample.wrapper)
    roster = base / "roster.csv"
    roster.write_text(
        "\n".join(sample.roster(list(STUDENTS.values()), sample.absent)) + "\n", encoding="utf-8"
    )
    out = base / "out"
    _make_grade(archive, out, "--roster", str(roster), "--due", DUE, "--late-penalty", PENALTY)
    return lms, export, out, archive


def _late_seconds(export, key) -> float:
    if key in export.late:
        return 1.0  # Canvas marks it late without a time: less than a day
    when = export.submitted_at.get(key)
    if not when:
        return 0.0
    moment = datetime.fromisoformat(when)
    due = datetime.fromisoformat(DUE)
    if moment.tzinfo:
        moment = moment.astimezone().replace(tzinfo=None)
    return max(0.0, (moment - due).total_seconds())


@needs_sandbox
def test_every_row_of_every_export(graded_export):
    lms, export, out, _ = graded_export
    rows = {(r["student"], r["notebook"]): r for r in _csv(out / "grades.csv")}
    graded = {key: r for key, r in rows.items() if r["status"] != "missing"}
    assert set(graded) == set(export.graded), lms
    for key, data in export.graded.items():
        row = rows[key]
        score = FULL[key[1]] if data == PERFECT[key[1]] else 0.0
        late = _late_seconds(export, key) > 0
        penalty = score * 0.1 * -(-_late_seconds(export, key) // 86400) if late and score else 0.0
        assert (row["status"], float(row["score"]), row["max_score"]) == (
            "graded",
            score,
            f"{FULL[key[1]]:g}",
        ), row
        assert row["late"] == ("yes" if late else ""), row
        assert float(row["penalty"] or 0) == pytest.approx(penalty), row
        assert float(row["final_score"]) == pytest.approx(score - penalty), row
        assert row["name"], row  # from the roster
        assert f"{key[1][:2]}." in " ".join(k for k in row if row[k]), row  # per-question columns
    missing = {key for key, r in rows.items() if r["status"] == "missing"}
    roster_ids = {_sample(lms).id_of(s) for s in STUDENTS.values()} | {_sample(lms).absent}
    assert missing == {(s, nb) for s in roster_ids for nb in NOTEBOOKS} - set(export.graded), lms


@needs_sandbox
def test_intake_lists_every_file_and_names_the_renamed_one(graded_export):
    lms, export, out, _ = graded_export
    listed = {Path(r["path"]).name: r["outcome"] for r in _csv(out / "intake.csv")}
    assert listed == {Path(path).name: outcome for path, outcome in export.outcomes.items()}, lms
    for (student, notebook), name in export.renamed.items():
        log = (out / "logs" / student / f"{notebook}.log").read_text()
        assert "recognised" in log and name in log, log[:500]


@needs_sandbox
def test_the_lms_upload_holds_each_students_total(graded_export):
    lms, export, out, _ = graded_export
    totals = {r["student"]: r for r in _csv(out / "totals.csv")}
    expected = {}
    for student, notebook in export.graded:
        row = next(
            r for r in _csv(out / "grades.csv") if (r["student"], r["notebook"]) == (student, notebook)
        )
        expected[student] = expected.get(student, 0.0) + float(row["final_score"])
    for student, total in expected.items():
        assert float(totals[student]["score"]) == pytest.approx(total), totals[student]
    assert totals[_sample(lms).absent]["status"] == "missing" and totals[_sample(lms).absent]["score"] == ""
    if not FORMATS[lms].upload:  # no grade import (Gradescope): totals.csv is what there is
        assert not (out / "upload").exists() or not any((out / "upload").iterdir())
        return
    upload = out / "upload" / FORMATS[lms].upload
    text = upload.read_text(encoding="utf-8-sig")
    for student, total in expected.items():
        line = next(line for line in text.splitlines() if student in line)
        assert f"{total:g}" in line, (student, line)


@needs_sandbox
def test_hand_grades_survive_a_partial_regrade_of_a_canvas_class(graded_export, tmp_path):
    """A late resubmission downloaded on its own (Canvas names it with a larger attachment id) and
    graded into the class's folder: its row changes, no other row, and no hand grade is lost."""
    lms, export, out, _ = graded_export
    if lms != "canvas":
        pytest.skip("run once, on the Canvas class")
    course = f"sqlite:///{out / 'course' / 'gradebook.db'}"
    ann = str(STUDENTS["ann"].canvas)
    with Gradebook(course) as gradebook:  # as in formgrader
        gradebook.find_grade("rmsnorm_norm_test", "07_rmsnorm", "07_rmsnorm", ann).manual_score = 1.5
        gradebook.find_comment("rmsnorm", "07_rmsnorm", "07_rmsnorm", ann).manual_comment = "see me"
        gradebook.db.commit()
    before = {(r["student"], r["notebook"]): r for r in _csv(out / "grades.csv")}
    li = STUDENTS["li"]
    partial = tmp_path / "li only"
    partial.mkdir()
    (partial / f"weili_{li.canvas}_9999999_04_rope.ipynb").write_bytes(PERFECT["04_rope"])
    _make_grade(partial, out)
    after = {(r["student"], r["notebook"]): r for r in _csv(out / "grades.csv")}
    assert set(after) == set(before)
    resubmitted = (str(li.canvas), "04_rope")
    assert after[resubmitted]["score"] == "9"
    changed = {resubmitted, (ann, "07_rmsnorm")}
    assert all(after[key] == before[key] for key in before if key not in changed)
    assert float(after[ann, "07_rmsnorm"]["score"]) == float(before[ann, "07_rmsnorm"]["score"]) - 0.5
    with Gradebook(course) as gradebook:
        grade = gradebook.find_grade("rmsnorm_norm_test", "07_rmsnorm", "07_rmsnorm", ann)
        comment = gradebook.find_comment("rmsnorm", "07_rmsnorm", "07_rmsnorm", ann)
        assert (grade.manual_score, comment.manual_comment) == (1.5, "see me")
        assert gradebook.find_student(ann).last_name == "O'Neil"  # the roster's name, not "None"


@needs_sandbox
def test_every_feedback_page_shows_the_score_of_its_row(graded_export):
    """The page a student gets says what grades.csv and the upload say: the final score after the
    late penalty, the penalty named; on the Canvas class, after a grade and a comment given by hand
    and the next run, the score given by hand named beside the checks' and the comment shown."""
    lms, _, out, archive = graded_export
    if lms == "canvas":
        ann = str(STUDENTS["ann"].canvas)
        with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gradebook:  # as in formgrader
            gradebook.find_grade("rmsnorm_norm_test", "07_rmsnorm", "07_rmsnorm", ann).manual_score = 1.5
            gradebook.find_comment("rmsnorm", "07_rmsnorm", "07_rmsnorm", ann).manual_comment = "see me"
            gradebook.db.commit()
        _make_grade(archive, out)  # nothing changed to grade: the record's reports and pages again
    for row in _csv(out / "grades.csv"):
        page = out / "feedback" / row["student"] / f"{row['notebook']}.html"
        if row["status"] != "graded":
            assert not page.exists() or "not graded" in page.read_text(), row
            continue
        html = page.read_text()
        heading = re.search(
            r"<h4>(\S+) \((Score|Final score, after the late penalty): ([\d.]+) / ([\d.]+)\)</h4>", html
        )
        assert heading.group(1) == row["notebook"], row
        assert float(heading.group(3)) == pytest.approx(float(row["final_score"])), (lms, row)
        assert float(heading.group(4)) == float(row["max_score"]), row
        late = bool(float(row["penalty"] or 0))
        assert ("Late submission penalty" in html) == late == (heading.group(2) != "Score"), row
    if lms == "canvas":
        html = (out / "feedback" / ann / "07_rmsnorm.html").read_text()
        assert "score given by hand; the checks gave 2.0" in html and "see me" in html


def _canvas_reads(name: str) -> tuple[str, str]:
    """(user id, attachment id) as Canvas's Re-Upload Submissions reads a file name: the first two
    parts of the base name, split at "_", made of digits."""
    user, attachment = [part for part in Path(name).name.split("_") if part.isdigit()][:2]
    return user, attachment


def _moodle_reads(name: str) -> tuple[str, str, str]:
    """(participant id, plugin, file) as Moodle's "Upload multiple feedback files in a zip" reads a
    path: the folder split at "_" into fullname_participantid_plugintype_pluginname[_]."""
    folder, _, file = name.partition("/")
    parts = folder.split("_", 4)
    assert len(parts) >= 4 and parts[1].isdigit(), name
    return parts[1], f"{parts[2]}_{parts[3]}", file


@needs_sandbox
def test_feedback_returns_through_the_lms_under_the_names_it_reads(graded_export):
    """Canvas's bundle names each page as the export named the file it answers; Moodle's puts each
    in the participant's folder; each page is the student's page, and nothing else is in them."""
    lms, export, out, _ = graded_export
    rows = {(r["student"], r["notebook"]): r for r in _csv(out / "grades.csv") if r["status"] == "graded"}
    bundles = {p.name for p in (out / "upload").glob("*-feedback.zip")}
    assert bundles == ({BUNDLES[lms][0]} if lms in BUNDLES else set()), bundles
    if not bundles:
        return
    with zipfile.ZipFile(out / "upload" / BUNDLES[lms][0]) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    downloaded = {Path(path).name for path, outcome in export.outcomes.items() if outcome == "graded"}
    graded_as = {
        Path(r["path"]).name: r["notebook"] for r in _csv(out / "intake.csv") if r["outcome"] == "graded"
    }
    returned = set()
    for name, page in entries.items():
        if lms == "canvas":
            assert name in downloaded, name  # the download's own name, in its place
            student, _ = _canvas_reads(name)
            notebook = graded_as[name]
        else:
            student, plugin, file = _moodle_reads(name)
            assert plugin == "assignsubmission_file" and file.endswith("-feedback.html"), name
            notebook = file.removesuffix("-feedback.html")
        assert page == (out / "feedback" / student / f"{notebook}.html").read_bytes(), name
        returned.add((student, notebook))
    assert returned == set(rows), lms
