"""The intake of real LMS exports, renamed notebooks and non-notebooks (no grading: fast).

Each export is built by tests/helpers/lms_exports.py the way its system names files; the intake must
find each student's latest notebook under the id the system knows them by, list every file with
what became of it, and refuse what it cannot take with the cause and the fix.
"""

import csv
import json
import unicodedata
import zipfile
from pathlib import Path

import pytest

import grader.intake.recognition as recognition
from autograder.paths import assignments
from autograder.printable import UNPRINTABLE
from grader.intake import exports
from grader.intake.inbox import Intake, IntakeFile, find_submissions, write_intake_report
from grader.record import feedback_return, roster
from tests.helpers.lms_exports import (
    STUDENTS,
    blackboard_export,
    canvas_export,
    gradescope_export,
    moodle_export,
    release,
)

KNOWN = ("00_warmup", "01_attention", "02_positions", "04_rope", "07_rmsnorm")

NAMES = ", ".join(assignments())  # the course's notebooks, as refusals list them


def handed_in(student: str, notebook: str) -> bytes:
    """A notebook as a student saves it: the release, with a mark of whose it is (distinct bytes)."""
    notebook_json = json.loads(release(notebook))
    notebook_json["metadata"]["handed_in_by"] = student
    return json.dumps(notebook_json).encode()


CLASS = {(s, nb): handed_in(s, nb) for s in STUDENTS for nb in ("04_rope", "07_rmsnorm")}


def _graded(intake: Intake) -> dict[tuple[str, str], bytes]:
    return {(s.student, s.notebook): s.path.read_bytes() for s in intake.submissions}


def _outcomes(intake: Intake) -> dict[str, str]:
    outcomes = {}
    for f in intake.files:
        outcomes.setdefault(f.path, f.outcome)
    return outcomes


def _write(folder: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return folder


def _reasons(intake: Intake) -> dict[str, str]:
    return {r.student: r.reason for r in intake.rejected}


# ------------------------------------------------------------------------------ each export as a whole


BUILDERS = {
    "canvas": lambda folder: canvas_export(folder, CLASS),
    "moodle": lambda folder: moodle_export(folder, CLASS),
    "moodle-blind": lambda folder: moodle_export(folder, CLASS, blind=True),
    "moodle-flat": lambda folder: moodle_export(folder, CLASS, flat=True),
    "blackboard": lambda folder: blackboard_export(folder, CLASS),
    "gradescope": lambda folder: gradescope_export(folder, CLASS),
}


@pytest.mark.parametrize("packed", ["folder", "zip", "zip-in-a-folder"])
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_each_export_grades_each_students_latest_notebook(tmp_path, kind, packed):
    export = BUILDERS[kind](tmp_path / "export")
    source, top = export.folder, ""
    if packed != "folder":  # Gradescope's download has a top folder; an instructor may add one to any
        top = "assignment_123_export" if kind == "gradescope" or packed == "zip-in-a-folder" else ""
        source = export.zip(tmp_path / "class.zip", top)
    prefix = f"{top}/" if top else ""
    intake = find_submissions(source, tmp_path / "work")
    assert intake.rejected == []
    assert _graded(intake) == export.graded
    assert {s.student: s.name for s in intake.submissions} == export.names
    assert {(s.student, s.notebook) for s in intake.submissions if s.late} == export.late
    assert {(s.student, s.notebook): s.submitted_at for s in intake.submissions if s.submitted_at} == (
        export.submitted_at
    )
    assert {s.lms for s in intake.submissions} == {export.lms}
    assert _outcomes(intake) == {prefix + path: outcome for path, outcome in export.outcomes.items()}
    for s in intake.submissions:
        assert s.origin.startswith(prefix) and (
            s.notebook in s.origin or (s.student, s.notebook) in export.renamed
        )
        if (s.student, s.notebook) in export.renamed:
            assert (
                f"'{export.renamed[s.student, s.notebook]}' recognised as {s.notebook} by its cells" in s.note
            )


def test_an_lms_is_one_row_of_each_table():
    """How its files are named and whose they are (exports.EXPORTS), its roster and upload
    (roster.FORMATS), and, where it takes feedback back, its bundle: the tables name the same LMSs,
    under one title."""
    keys = [export.key for export in exports.EXPORTS]
    assert len(set(keys)) == len(keys) and "" not in keys
    assert set(roster.FORMATS) == {*keys, ""}  # "": the plain roster
    assert set(feedback_return.BUNDLES) <= set(keys)
    assert all(roster.FORMATS[key].name == exports.LMS_NAMES[key] for key in keys)
    for export in exports.EXPORTS:  # its ids: refused in its words, with the fix
        refusal = export.refuse_id(exports.Identified("notebook", export.key, key="4"), "a b", "A B", "why")
        assert "'a b'" in refusal and "why" in refusal and export.title in refusal


def test_canvas_names_ids_lateness_and_the_latest_attachment(tmp_path):
    """Canvas: the user id is the student; _LATE_ marks lateness; the larger attachment id wins,
    then Canvas's -N suffix; the note says which file was graded out of how many."""
    rope, old, older = CLASS["jane", "04_rope"], release("04_rope"), release("07_rmsnorm")
    source = _write(
        tmp_path / "in",
        {
            "smithjane_48211_9933017_04_rope.ipynb": old,
            "smithjane_LATE_48211_9933020_04_rope-1.ipynb": rope,
            "smithjane_48211_9933017_04_rope-2.ipynb": older,  # same attachment id: -2 is later than none
            "doejohn_48212_9933018_07_rmsnorm.ipynb": CLASS["jose", "07_rmsnorm"],
            "doejohn_48212_9933019_07_rmsnorm-1.ipynb": old,
            "doejohn_48212_9933019_07_rmsnorm-2.ipynb": CLASS["jose", "07_rmsnorm"],
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert intake.rejected == []
    graded = {(s.student, s.notebook): s for s in intake.submissions}
    assert set(graded) == {("48211", "04_rope"), ("48212", "07_rmsnorm")}
    jane, john = graded["48211", "04_rope"], graded["48212", "07_rmsnorm"]
    assert (jane.path.read_bytes(), jane.late, jane.name, jane.lms) == (rope, True, "smithjane", "canvas")
    assert jane.note == (
        "Canvas export: 3 files for 04_rope; the latest (attachment 9933020, copy -1: "
        "smithjane_LATE_48211_9933020_04_rope-1.ipynb) is graded"
    )
    assert john.origin == "doejohn_48212_9933019_07_rmsnorm-2.ipynb" and not john.late
    superseded = [f for f in intake.files if f.outcome == "superseded"]
    assert {f.path for f in superseded} == {
        "smithjane_48211_9933017_04_rope.ipynb",
        "smithjane_48211_9933017_04_rope-2.ipynb",
        "doejohn_48212_9933018_07_rmsnorm.ipynb",
        "doejohn_48212_9933019_07_rmsnorm-1.ipynb",
    }
    assert superseded[0].detail.startswith("an older attempt (attachment ")


def test_canvas_names_are_read_from_the_left(tmp_path):
    """The end of a Canvas name is the student's own file name: whatever it holds (another
    student's Canvas name, a Blackboard attempt, digits) it never changes whose work it is."""
    layout = exports.Layout(KNOWN)
    for name in (
        "smithjane_48211_9933017_doejohn_48212_9933018_04_rope.ipynb",
        "smithjane_48211_9933017_HW 4_jdoe_attempt_2026-11-20-22-10-05_04_rope.ipynb",
        "smithjane_48211_9933017_x_04_rope.ipynb",  # also reads as plain <student>_04_rope.ipynb
        "_48211_9933017_04_rope.ipynb",  # a name Canvas left empty (no ASCII letter in it)
    ):
        found = layout.identify((name,))
        assert (found.lms, found.student) == ("canvas", "48211"), name
    plain = layout.identify(
        ("jdoe_2_10_moe.ipynb",)
    )  # no 10_moe yet: the tie-break with a course that has one
    assert plain.lms == "canvas"
    plain = exports.Layout((*KNOWN, "10_moe")).identify(("jdoe_2_10_moe.ipynb",))
    assert (plain.lms, plain.student, plain.notebook) == ("", "jdoe_2", "10_moe")
    for not_canvas in ("ann_2024_04_rope.ipynb", "ann_0_1_04_rope.ipynb"):  # ids never start with 0
        assert layout.identify((not_canvas,)).lms == "", not_canvas


def test_moodle_folders_blind_marking_flat_names_and_online_text(tmp_path):
    source = _write(
        tmp_path / "in",
        {
            "José García-López_123456_assignsubmission_file_/04_rope.ipynb": CLASS["jose", "04_rope"],
            "José García-López_123456_assignsubmission_file_/sub/07_rmsnorm.ipynb": CLASS[
                "jose", "07_rmsnorm"
            ],
            "José García-López_123456_assignsubmission_onlinetext_/onlinetext.html": b"<p>hi</p>",
            "Participant_777_assignsubmission_file_/04_rope.ipynb": CLASS["li", "04_rope"],
            "Ann O'Neil_123458_assignsubmission_file_07_rmsnorm.ipynb": CLASS["ann", "07_rmsnorm"],
            # a student's own file named like another student's folder stays theirs
            "Jane Smith_123451_assignsubmission_file_/Li Wei_123457_assignsubmission_file_04_rope.ipynb": (
                CLASS["jane", "04_rope"]
            ),
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert intake.rejected == []
    assert {(s.student, s.notebook, s.name) for s in intake.submissions} == {
        ("123456", "04_rope", "José García-López"),
        ("123456", "07_rmsnorm", "José García-López"),
        ("777", "04_rope", ""),
        ("123458", "07_rmsnorm", "Ann O'Neil"),
        ("123451", "04_rope", "Jane Smith"),
    }
    assert _graded(intake)["123451", "04_rope"] == CLASS["jane", "04_rope"]
    online = next(f for f in intake.files if f.path.endswith("onlinetext.html"))
    assert (online.outcome, online.student) == ("ignored", "123456")
    assert online.detail == "Moodle's online text (assignsubmission_onlinetext), not a submitted file"


def test_blackboard_takes_the_latest_attempt_and_the_name_from_its_receipt(tmp_path):
    """Several attempts: the latest is graded and the note says so. The username holds `_`
    (aoneil_2): the receipt's `Name: Ann O'Neil (aoneil_2)` tells where the assignment ends."""
    export = blackboard_export(tmp_path / "in", CLASS)
    intake = find_submissions(export.folder, tmp_path / "work")
    ann = {s.notebook: s for s in intake.submissions if s.student == "aoneil_2"}
    rope = ann["04_rope"]
    assert (rope.name, rope.lms, rope.submitted_at) == ("Ann O'Neil", "blackboard", "2026-11-20T22:24:05")
    graded = "HW 4 Rope_aoneil_2_attempt_2026-11-20-22-24-05_04_rope.ipynb"
    latest = f"the latest (submitted 2026-11-20 22:24:05: {graded}) is graded"
    assert rope.note == f"Blackboard export: 2 files for 04_rope; {latest}"
    files = {f.path: f for f in intake.files}
    older = files["HW 4 Rope_aoneil_2_attempt_2026-11-20-22-17-05_04_rope.ipynb"]
    assert (older.outcome, older.student, older.notebook) == ("superseded", "aoneil_2", "04_rope")
    assert older.detail == f"an older attempt (submitted 2026-11-20 22:17:05); graded: {graded}"
    receipt = files["HW 4 Rope_aoneil_2_attempt_2026-11-20-22-17-05.txt"]
    assert (receipt.outcome, receipt.student) == ("read", "aoneil_2")
    assert receipt.detail == (
        "Blackboard's receipt of the attempt submitted 2026-11-20 22:17:05: Ann O'Neil (aoneil_2)"
    )


def test_blackboard_without_receipts_reads_only_names_with_one_reading(tmp_path):
    source = _write(
        tmp_path / "in",
        {
            "HW 4 Rope_jdoe12_attempt_2026-11-20-22-10-05_04_rope.ipynb": CLASS["jane", "04_rope"],
            "HW 4 Rope_jdoe12_attempt_2026-11-20-22-10-05_04_rope (1).ipynb": CLASS["jane", "04_rope"],
            "HW_4 Rope_kim_attempt_2026-11-20-22-10-05_04_rope.ipynb": CLASS["li", "04_rope"],  # kim, HW_4?
            "HW 4 Rope_kim_attempt_2026-13-20-22-10-05_04_rope.ipynb": CLASS["li", "04_rope"],  # month 13
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert intake.submissions == []
    assert _reasons(intake)["jdoe12"] == (
        "more than one file for this notebook in the latest attempt (submitted 2026-11-20 22:10:05: "
        "HW 4 Rope_jdoe12_attempt_2026-11-20-22-10-05_04_rope (1).ipynb, "
        "HW 4 Rope_jdoe12_attempt_2026-11-20-22-10-05_04_rope.ipynb)"
    )
    assert _reasons(intake)["HW_4 Rope_kim_attempt_2026-11-20-22-10-05_04_rope.ipynb"] == (
        "whose attempt it is cannot be told: the username in 'HW_4 Rope_kim_attempt_…' may be "
        "'4 Rope_kim' or 'kim', and there is no receipt of the attempt: download the assignment again with "
        "its receipts (Blackboard writes one per attempt)"
    )
    not_a_time = _reasons(intake)["HW 4 Rope_kim_attempt_2026-13-20-22-10-05_04_rope.ipynb"]
    assert not_a_time.startswith("'HW 4 Rope_kim_attempt_2026-13-20-22-10-05' cannot be a student id")
    receipt = exports.read_receipt("Name: Ann\tO'Neil  (a_b)\nAssignment: HW 4\n")
    assert receipt == exports.Receipt("Ann O'Neil", "a_b")
    assert exports.blackboard_student("HW 4_a_b_attempt_2026-11-20-22-10-05", receipt) == (
        "a_b",
        "Ann O'Neil",
    )
    with pytest.raises(exports.Ambiguous):
        exports.blackboard_student("HW 4_a_b_attempt_2026-11-20-22-10-05", None)


def test_a_receipt_names_its_student_by_the_last_parenthesis_of_its_line(tmp_path):
    """A full name may hold parentheses: `Lee (Ann) Kim (lee_kim)` is lee_kim's, not Ann's; with
    usernames kim and lee_kim in one class, each keeps her own attempt."""
    assert exports.read_receipt("Name: Lee (Ann) Kim (lee_kim)\r\nAssignment: HW 4\r\n") == exports.Receipt(
        "Lee (Ann) Kim", "lee_kim"
    )
    assert exports.read_receipt("Name: Lee (Ann) Kim (lee_kim) and more\n") is None
    attempt = "HW 4_{}_attempt_2026-11-20-22-10-05"
    source = _write(
        tmp_path / "in",
        {
            f"{attempt.format('kim')}_04_rope.ipynb": CLASS["jane", "04_rope"],
            f"{attempt.format('kim')}.txt": b"Name: Kim Park (kim)\n",
            f"{attempt.format('lee_kim')}_04_rope.ipynb": CLASS["li", "04_rope"],
            f"{attempt.format('lee_kim')}.txt": b"Name: Lee (Ann) Kim (lee_kim)\n",
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert intake.rejected == []
    assert _graded(intake) == {
        ("kim", "04_rope"): CLASS["jane", "04_rope"],
        ("lee_kim", "04_rope"): CLASS["li", "04_rope"],
    }
    assert {s.student: s.name for s in intake.submissions} == {"kim": "Kim Park", "lee_kim": "Lee (Ann) Kim"}


def test_gradescope_grades_each_member_of_a_group_on_a_copy_of_its_own(tmp_path):
    files = {k: v for k, v in CLASS.items() if k[0] != "li"}
    export = gradescope_export(tmp_path / "in", files, groups=(("jane", "li"),))
    intake = find_submissions(export.folder, tmp_path / "work")
    assert intake.rejected == []
    assert _graded(intake) == export.graded
    jane, li = (
        next(s for s in intake.submissions if s.student == sid and s.notebook == "04_rope")
        for sid in ("1001", "li.wei@uni.example")
    )
    assert jane.path != li.path and jane.path.read_bytes() == li.path.read_bytes() == CLASS["jane", "04_rope"]
    assert jane.origin == li.origin == "submission_4568/04_rope.ipynb"  # ann's is 4567
    assert (li.name, li.submitted_at, li.lms) == ("Li Wei", "2026-11-20T22:36:05-08:00", "gradescope")
    everyone = "Jane Smith (1001), Li Wei (li.wei@uni.example)"
    assert f"Gradescope group submission 4568 of {everyone}: graded for each of them" in jane.note
    rows = [f for f in intake.files if f.path == "submission_4568/04_rope.ipynb"]
    assert sorted((f.outcome, f.student) for f in rows) == [
        ("graded", "1001"),
        ("graded", "li.wei@uni.example"),
    ]


def test_gradescope_refuses_what_its_metadata_does_not_name(tmp_path):
    export = gradescope_export(tmp_path / "in", {("jane", "04_rope"): CLASS["jane", "04_rope"]})
    _write(export.folder, {"submission_9999/04_rope.ipynb": CLASS["li", "04_rope"]})
    intake = find_submissions(export.folder, tmp_path / "work")
    assert _reasons(intake) == {
        "submission_9999/04_rope.ipynb": (
            "submission_9999 is not in Gradescope's submission_metadata.yml, so whose work it is cannot be "
            "told: the metadata and the folders must come from the same export (download it again)"
        )
    }
    (export.folder / "submission_metadata.yml").write_text(":submission_4567: [unclosed\n")
    intake = find_submissions(export.folder, tmp_path / "work")
    assert intake.submissions == []
    reasons = _reasons(intake)
    assert reasons["submission_metadata.yml"].startswith(
        "Gradescope's submission_metadata.yml cannot be used: it is not readable YAML (while parsing"
    )
    assert (
        reasons["submission_4567/04_rope.ipynb"]
        == f"whose work it is cannot be told: {reasons['submission_metadata.yml']}"
    )
    (export.folder / "submission_metadata.yml").unlink()
    intake = find_submissions(export.folder, tmp_path / "work")
    assert (
        "there is no submission_metadata.yml at the top of the source"
        in _reasons(intake)["submission_4567/04_rope.ipynb"]
    )


def test_gradescope_metadata_as_ruby_writes_it():
    text = """---
:submission_1:
  :submitters:
  - :name: "José\\tGarcía"
    :sid: 777
    :email: jose@uni.example
  - :name: No Id
    :sid:
    :email:
  :created_at: 2026-11-20 22:10:05.123456000 -08:00
submission_2:
  :submitters:
  - :name: Li
    :sid: ''
    :email: li@uni.example
  :created_at: '2026-11-21 08:00:00 +0100'
:some_other_key: 1
"""
    found = exports.gradescope_submissions(text)
    assert found["1"] == exports.GradescopeSubmission(
        "1",
        (exports.Submitter("777", "José García"), exports.Submitter("", "No Id")),
        "2026-11-20T22:10:05-08:00",
    )
    assert found["2"].submitters == (exports.Submitter("li@uni.example", "Li"),)
    assert found["2"].submitted_at == "2026-11-21T08:00:00"
    for bad, why in (
        ("- a list", "it does not map submissions to their students"),
        ("!!python/object:os.system {}", "it is not readable YAML"),
        ("a: 1", "it names no submission"),
        (":submission_3:\n  :submitters: nobody\n", "submission_3 has no list of :submitters:"),
    ):
        with pytest.raises(ValueError, match=why):
            exports.gradescope_submissions(bad)


def test_gradescope_metadata_built_of_aliases_is_read_at_once():
    """Nine levels of nine YAML aliases stand for 9**9 strings in a few hundred bytes: a field that
    is no scalar is no value, and is never written out (which would take the grader's memory)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    lines += [
        ":submission_1:",
        "  :submitters:",
        "  - :name: *a8",
        "    :sid: *a8",
        "    :email: ann@uni.example",
    ]
    lines += ["  :created_at: *a8"]
    [(key, found)] = exports.gradescope_submissions("\n".join(lines) + "\n").items()
    assert (key, found.submitters[0].student, found.submitters[0].name, found.submitted_at) == (
        "1",
        "ann@uni.example",
        "",
        "",
    )


@pytest.mark.parametrize(
    "metadata",
    [
        "a: " + "[" * 30_000 + "]" * 30_000,
        "".join("  " * i + "- \n" for i in range(1500)),
        "- " * 30_000 + "x",
    ],
)
def test_metadata_nested_too_deeply_costs_its_export_a_refusal_not_the_run(tmp_path, metadata):
    export = gradescope_export(tmp_path / "in", {("jane", "04_rope"): CLASS["jane", "04_rope"]})
    (export.folder / "submission_metadata.yml").write_text(metadata)
    intake = find_submissions(export.folder, tmp_path / "work")
    assert intake.submissions == []
    reason = _reasons(intake)["submission_metadata.yml"]
    assert reason.startswith("Gradescope's submission_metadata.yml cannot be used: it ")
    assert "deep" in reason or "not readable YAML" in reason


def test_a_group_submission_that_supersedes_a_members_own_is_flagged(tmp_path):
    """Gradescope grades a student's latest submission, a group's that names her included; whoever
    submits names the members, so the grader says so where it replaces her own."""
    export = gradescope_export(tmp_path / "in", {("jane", "04_rope"): CLASS["jane", "04_rope"]})
    (export.folder / "submission_metadata.yml").write_text(
        (export.folder / "submission_metadata.yml").read_text()
        + ":submission_9000:\n  :submitters:\n  - :name: Mal Lory\n    :sid: '666'\n"
        "  - :name: Jane Smith\n    :sid: '1001'\n  :created_at: 2026-11-21 10:00:00.0 -08:00\n"
    )
    _write(export.folder, {"submission_9000/04_rope.ipynb": CLASS["li", "04_rope"]})
    intake = find_submissions(export.folder, tmp_path / "work")
    jane = next(s for s in intake.submissions if s.student == "1001")
    assert jane.origin == "submission_9000/04_rope.ipynb"  # Gradescope's own rule
    assert "FLAG: 1001's own submission 4567 is superseded by Gradescope group submission 9000" in jane.note
    [own] = [f for f in intake.files if f.path == "submission_4567/04_rope.ipynb"]
    assert own.outcome == "superseded" and own.detail.endswith(
        "which names 1001 as a member: check that 1001 agreed"
    )


def test_gradescope_ids_that_cannot_be_folder_names_are_refused_with_the_fix(tmp_path):
    source = _write(
        tmp_path / "in",
        {
            "submission_metadata.yml": (
                b":submission_1:\n  :submitters:\n  - :name: Ann\n    :sid: 'A 1'\n"
                b"  - :name: Bo\n    :sid: '2'\n  - :name: Cy\n"
            ),
            "submission_1/04_rope.ipynb": CLASS["ann", "04_rope"],
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert [(s.student, s.notebook) for s in intake.submissions] == [("2", "04_rope")]
    assert [r.reason for r in intake.rejected] == [
        "the Gradescope sid (or email) 'A 1' of Ann in submission_1 cannot be a student id: ' ' (a space) is "
        f"not allowed in one ({exports.ID_RULE}); correct it in submission_metadata.yml",
        "Gradescope's submission_metadata.yml gives Cy in submission_1 no :sid: and no :email:: "
        "add their sid there",
    ]


def test_a_gradescope_export_beside_other_things_is_refused_with_the_fix(tmp_path):
    one = gradescope_export(tmp_path / "in" / "hw4_export", {("jane", "04_rope"): CLASS["jane", "04_rope"]})
    _write(tmp_path / "in", {"ann/04_rope.ipynb": CLASS["ann", "04_rope"]})
    intake = find_submissions(tmp_path / "in", tmp_path / "work")
    assert [(s.student, s.notebook) for s in intake.submissions] == [("ann", "04_rope")]
    assert _reasons(intake) == {
        "hw4_export/submission_4567/04_rope.ipynb": (
            "'hw4_export/' is a Gradescope export (it holds submission_metadata.yml) beside other files of "
            "the source: grade it on its own (its folder or zip as downloaded)"
        )
    }
    assert one.outcomes
    (tmp_path / "in" / "hw4_export" / "submission_metadata.yml").unlink()
    intake = find_submissions(tmp_path / "in" / "hw4_export", tmp_path / "work")
    assert _reasons(intake)["submission_4567/04_rope.ipynb"].startswith(
        "'submission_4567/' is named as a Gradescope export's submission folder, but there is no "
        "submission_metadata.yml at the top of the source"
    )


# ------------------------------------------------------------------------------ renames, by content


RENAMES = [
    "04_rope (1).ipynb",
    "Copy of 04_rope.ipynb",
    "04_RoPE.ipynb",
    "04_rope.ipynb.ipynb",
    "homework.ipynb",
]


@pytest.mark.parametrize("name", RENAMES)
def test_a_renamed_notebook_is_recognised_by_its_cells(tmp_path, name):
    source = _write(tmp_path / "in", {f"ann/{name}": CLASS["ann", "04_rope"]})
    intake = find_submissions(source, tmp_path / "work")
    [submission] = intake.submissions
    assert (submission.student, submission.notebook, submission.lms) == ("ann", "04_rope", "")
    assert submission.note == f"'{name}' recognised as 04_rope by its cells"
    assert intake.files == [
        IntakeFile(f"ann/{name}", "graded", "ann", "04_rope", f"plain layout; {submission.note}")
    ]


def test_an_exact_name_is_taken_without_reading_the_file(tmp_path, monkeypatch):
    """A wrong notebook under a right name reaches grading, which refuses it for what it holds."""
    monkeypatch.setattr(recognition, "grade_ids", lambda data: pytest.fail("an exact name was read"))
    source = _write(
        tmp_path / "in",
        {
            "ann/07_rmsnorm.ipynb": CLASS["ann", "04_rope"],
            "bo_04_rope.ipynb": b"{broken",
            "cy/04_rope.ipynb": b"",
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert {(s.student, s.notebook, s.note) for s in intake.submissions} == {
        ("ann", "07_rmsnorm", ""),
        ("bo", "04_rope", ""),
        ("cy", "04_rope", ""),
    }


def test_what_cannot_be_recognised_is_refused_with_the_cause_and_the_fix(tmp_path, monkeypatch):
    both = json.loads(CLASS["ann", "04_rope"])
    both["cells"] += json.loads(CLASS["ann", "07_rmsnorm"])["cells"]
    source = _write(
        tmp_path / "in",
        {
            "ann/broken.ipynb": b'{"cells": [',
            "bo/notes.ipynb": json.dumps({"cells": [{"metadata": {}}], "metadata": {}}).encode(),
            "cy/both.ipynb": json.dumps(both).encode(),
            "eve/list.ipynb": b"[1, 2]",
            "fay/deep.ipynb": b"[" * 100_000,
        },
    )
    reasons = _reasons(find_submissions(source, tmp_path / "work"))
    readable = "ask the student for the notebook as Jupyter saves it (File > Download in JupyterLab)"
    assert reasons == {
        "ann": (
            "'broken.ipynb' is not a readable notebook (its JSON is broken: Expecting value: line 1 "
            f"column 12 (char 11)): {readable}"
        ),
        "bo": (
            "'notes.ipynb' holds none of the cells of this course's notebooks, and its name names none of "
            f"them ({NAMES}), so which notebook it is "
            "cannot be told: if it is one of them, rename it after it (e.g. 00_warmup.ipynb); else ask the "
            "student for the notebook made from the released one"
        ),
        "cy": (
            "'both.ipynb' holds cells of 04_rope and 07_rmsnorm, so which notebook it is cannot be told: ask "
            "the student to hand in each notebook as a file of its own, or rename this file after the one to "
            "grade (e.g. 04_rope.ipynb)"
        ),
        "eve": "'list.ipynb' is not a readable notebook (its JSON is not a notebook (no list of cells)): "
        + readable,
        "fay": f"'deep.ipynb' is not a readable notebook (its JSON is nested too deeply): {readable}",
    }


def test_a_notebook_too_large_to_read_is_refused(tmp_path, monkeypatch):
    source = _write(
        tmp_path / "in", {"dee/big.ipynb": b"{}" + b" " * 2000, "eve/07_rmsnorm.ipynb": b" " * 2000}
    )
    monkeypatch.setattr(recognition, "MAX_NOTEBOOK_BYTES", 1000)
    intake = find_submissions(source, tmp_path / "work")
    assert [(s.student, s.notebook) for s in intake.submissions] == [
        ("eve", "07_rmsnorm")
    ]  # grading's to refuse
    assert _reasons(intake) == {
        "dee": (
            "'big.ipynb' is larger than 0 MiB, more than the grader takes for a notebook: ask the student to "
            "clear its outputs, save it and hand it in again"
        )
    }


def test_recognition_reads_latin1_and_nbformat3():
    rope = json.loads(release("04_rope"))
    v3 = {"worksheets": [{"cells": rope["cells"]}], "nbformat": 3}
    assert recognition.grade_ids(json.dumps(v3).encode()) >= {"rope_forward", "rope_forward_test"}
    latin1 = json.dumps(rope, ensure_ascii=False).replace("RoPE", "RoPÉ").encode("latin-1", "replace")
    assert "rope_forward" in recognition.grade_ids(latin1)
    own = recognition.own_ids(KNOWN)
    assert "imports" not in own["04_rope"] and "rope_forward" in own["04_rope"]
    assert all(own[a] for a in KNOWN)


# ------------------------------------------------------------------------------ plain layouts and refusals


def test_plain_refusals_name_the_character_and_the_fix(tmp_path):
    source = _write(
        tmp_path / "in",
        {
            "José García/04_rope.ipynb": CLASS["jose", "04_rope"],
            "=cmd|x/04_rope.ipynb": CLASS["jose", "04_rope"],
            "carl_homework.ipynb": CLASS["jose", "04_rope"],
            "04_rope.ipynb": CLASS["jose", "04_rope"],
            "ann/old/04_rope.ipynb": CLASS["ann", "04_rope"],
            "ann/07_rmsnorm.ipynb": CLASS["ann", "07_rmsnorm"],
        },
    )
    reasons = _reasons(find_submissions(source, tmp_path / "work"))
    assert reasons == {
        "José García/04_rope.ipynb": (
            "the folder name 'José García' cannot be a student id: 'é' (a letter with an accent), ' ' "
            f"(a space) and 'í' (a letter with an accent) are not allowed in one ({exports.ID_RULE}); rename "
            "the folder, e.g. to 'Jose_Garcia' (it is not a Moodle export's folder either: Moodle names "
            "those '<Full Name>_<id>_assignsubmission_file_')"
        ),
        "=cmd|x/04_rope.ipynb": (
            f"the folder name '=cmd|x' cannot be a student id: it starts with '='; '|' is not allowed in one "
            f"({exports.ID_RULE}); rename the folder, e.g. to 'cmd_x'"
        ),
        "carl_homework.ipynb": (
            "a file at the top of the source must be named <student>_<notebook>.ipynb, ending in a "
            f"notebook's exact name ({NAMES}), for its "
            "student and notebook to be told apart: rename it (e.g. carl_00_warmup.ipynb if it holds "
            "00_warmup), or put it in a folder named after its student, where its notebook is recognised by "
            "its cells"
        ),
        "04_rope.ipynb": (
            "it lies at the top of the source, in no student's folder: put it in a folder named after its "
            "student (<student>/04_rope.ipynb) or name it <student>_04_rope.ipynb"
        ),
        "ann/old/04_rope.ipynb": (
            "it lies in 'ann/old/': only the files directly in a student's folder are that student's "
            "(<student>/<notebook>.ipynb); move it into 'ann/' if it is ann's"
        ),
    }


def test_id_problems_and_suggestions():
    assert exports.id_problem("jdoe12") == exports.id_problem("a.b+c@d-e_f") == ""
    assert exports.id_problem("") == f"it is empty ({exports.ID_RULE})"
    assert exports.id_problem("-x\u00a0y名") == (
        f"it starts with '-'; U+00A0 (a space) and '名' (a letter outside ASCII) are not allowed in one "
        f"({exports.ID_RULE})"
    )
    assert exports.id_problem("éa") == f"it starts with 'é' (a letter with an accent) ({exports.ID_RULE})"
    assert exports.suggested_id("José García-López") == "Jose_Garcia-Lopez"
    assert exports.suggested_id("名前") == ""


def test_a_class_may_mix_layouts_and_every_file_is_listed(tmp_path):
    source = _write(
        tmp_path / "in",
        {
            "ann/04_rope.ipynb": CLASS["ann", "04_rope"],
            "ann/notes.txt": b"not a notebook",
            "bo_07_rmsnorm.ipynb": CLASS["li", "07_rmsnorm"],
            "smithjane_48211_9933017_04_rope.ipynb": CLASS["jane", "04_rope"],
            "José García-López_123456_assignsubmission_file_/07_rmsnorm.ipynb": CLASS["jose", "07_rmsnorm"],
            "HW 4_jdoe12_attempt_2026-11-20-22-10-05_04_rope.ipynb": CLASS["li", "04_rope"],
            "readme.pdf": b"%PDF",
            "script.py": b"print()",
            "other.yml": b"a: 1",
            ".ipynb_checkpoints/ann_04_rope-checkpoint.ipynb": b"{}",
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert intake.rejected == []
    assert {(s.student, s.notebook, s.lms) for s in intake.submissions} == {
        ("ann", "04_rope", ""),
        ("bo", "07_rmsnorm", ""),
        ("48211", "04_rope", "canvas"),
        ("123456", "07_rmsnorm", "moodle"),
        ("jdoe12", "04_rope", "blackboard"),
    }
    ignored = {f.path: f.detail for f in intake.files if f.outcome == "ignored"}
    assert ignored == {
        "ann/notes.txt": "not a notebook (.txt file)",
        "readme.pdf": "not a notebook (.pdf file)",
        "script.py": "not a notebook (.py file)",
        "other.yml": "not a notebook (.yml file)",
        ".ipynb_checkpoints/ann_04_rope-checkpoint.ipynb": (
            "in .ipynb_checkpoints/: Jupyter's autosaves, not a submission"
        ),
    }
    assert sorted(f.path for f in intake.files) == sorted(
        str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()
    )


def test_a_lone_folder_is_a_students_whatever_its_files_are_named(tmp_path):
    """A late student's folder graded on its own: files named as someone else's flat file, as a
    Canvas or Moodle download, or a Gradescope export with its metadata stay hers (each named in
    the log), in a folder or zipped; only Gradescope's own assignment_<id>_export/ is looked through."""
    planted = {
        "victim_04_rope.ipynb": CLASS["jane", "04_rope"],
        "smithjane_48211_9933017_07_rmsnorm.ipynb": CLASS["jane", "07_rmsnorm"],
    }
    for files in (
        planted,
        {"Jane Smith_123451_assignsubmission_file_04_rope.ipynb": CLASS["jane", "04_rope"]},
        {
            "submission_metadata.yml": b":submission_1:\n  :submitters:\n  - :sid: 'victim'\n",
            "submission_1/04_rope.ipynb": CLASS["jane", "04_rope"],
        },
    ):
        source = _write(
            tmp_path / f"late-{len(list(tmp_path.iterdir()))}", {f"mallory/{p}": d for p, d in files.items()}
        )
        archive = tmp_path / "late.zip"
        archive.unlink(missing_ok=True)
        with zipfile.ZipFile(archive, "w") as zf:
            for path in files:
                zf.write(source / "mallory" / path, f"late/mallory/{path}")
        for given in (source, archive):
            intake = find_submissions(given, tmp_path / "work")
            assert {s.student for s in intake.submissions} <= {"mallory"}, given
            assert {f.student for f in intake.files} <= {"mallory", ""}, given
    intake = find_submissions(source.parent / "late-0", tmp_path / "work")
    assert {(s.student, s.notebook) for s in intake.submissions} == {
        ("mallory", "04_rope"),
        ("mallory", "07_rmsnorm"),
    }
    rope = next(s for s in intake.submissions if s.notebook == "04_rope")
    assert (
        "'victim_04_rope.ipynb' is named as a flat <student>_<notebook> file of 'victim', but it lies in "
        "'mallory/': a file in a student's folder is that student's, whatever its name says" in rope.note
    )
    export = gradescope_export(tmp_path / "gs", CLASS)
    wrapped = _write(
        tmp_path / "wrapped",
        {
            f"assignment_7_export/{p.relative_to(export.folder)}": p.read_bytes()
            for p in export.folder.rglob("*")
            if p.is_file()
        },
    )
    assert _graded(find_submissions(wrapped, tmp_path / "work")) == export.graded


def test_a_source_named_after_a_known_student_is_her_folder(tmp_path, monkeypatch):
    """Given as the source itself, mallory's folder is still mallory's when the class knows her
    (its roster or its record); and a file the layout would give to another student from a known
    student's folder is refused, naming both, whatever the layout concluded."""
    source = _write(tmp_path / "mallory", {"victim_04_rope.ipynb": CLASS["jane", "04_rope"]})
    assert _found_students(find_submissions(source, tmp_path / "work")) == {"victim"}  # flat, as documented
    intake = find_submissions(source, tmp_path / "work", frozenset({"mallory", "victim"}))
    assert _found_students(intake) == {"mallory"}
    source = _write(tmp_path / "late", {"mallory/victim/04_rope.ipynb": CLASS["jane", "04_rope"]})
    monkeypatch.setattr(exports, "layout_of", lambda paths, known: exports.Layout(known, ("mallory",)))
    intake = find_submissions(source, tmp_path / "work", frozenset({"mallory"}))
    assert intake.submissions == []
    assert _reasons(intake)["mallory"] == (
        "'mallory/victim/04_rope.ipynb' lies in the folder of mallory but was read as victim's 04_rope: "
        "a file in a student's folder is never graded as another's (victim's grade is kept)"
    )


def _found_students(intake: Intake) -> set[str]:
    return {s.student for s in intake.submissions}


def test_a_students_file_named_like_an_export_stays_that_students(tmp_path):
    source = _write(
        tmp_path / "in",
        {
            "ann/smithjane_48211_9933017_04_rope.ipynb": CLASS["ann", "04_rope"],
            "ann/submission_metadata.yml": b":submission_1:\n  :submitters:\n  - :sid: '48211'\n",
            "bo/07_rmsnorm.ipynb": CLASS["li", "07_rmsnorm"],
        },
    )
    intake = find_submissions(source, tmp_path / "work")
    assert {(s.student, s.notebook, s.lms) for s in intake.submissions} == {
        ("ann", "04_rope", ""),
        ("bo", "07_rmsnorm", ""),
    }
    assert {f.path: f.outcome for f in intake.files}["ann/submission_metadata.yml"] == "ignored"


# ------------------------------------------------------------------------------ intake.csv


def test_intake_csv_lists_every_file_escaped_and_without_formulas(tmp_path):
    files = [
        IntakeFile("=HYPERLINK(1).ipynb", "refused", "", "", "a\nforged,row"),
        IntakeFile(
            "José García-López_1_assignsubmission_file_/04_rope.ipynb", "graded", "1", "04_rope", "ok"
        ),
        IntakeFile("x\x1b[2J.pdf", "ignored", "@x", "", "+1"),
    ]
    path = tmp_path / "intake.csv"
    write_intake_report(path, files)
    assert not (tmp_path / "intake.partial").exists()
    text = path.read_text(encoding="utf-8")
    rows = list(csv.reader(text.splitlines()))
    assert len(text.splitlines()) == len(rows) == 4
    assert rows[0] == ["path", "outcome", "student", "notebook", "detail"]
    assert rows[1] == ["'=HYPERLINK(1).ipynb", "refused", "", "", "a\\nforged,row"]
    assert rows[2][0] == "José García-López_1_assignsubmission_file_/04_rope.ipynb"
    assert rows[3] == ["x\\x1b[2J.pdf", "ignored", "'@x", "", "'+1"]
    assert not any(unicodedata.category(c) in UNPRINTABLE for row in rows for field in row for c in field)


def test_a_zip_of_an_export_lists_its_entries_as_written(tmp_path):
    export = canvas_export(tmp_path / "in", {k: v for k, v in CLASS.items() if k[0] in ("jane", "ann")})
    archive = export.zip(tmp_path / "class.zip")
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("__MACOSX/._smithjane_48211_9933001_04_rope.ipynb", b"\0")
    intake = find_submissions(archive, tmp_path / "work")
    assert _graded(intake) == export.graded
    assert _outcomes(intake)["__MACOSX/._smithjane_48211_9933001_04_rope.ipynb"] == "ignored"
    unpacked = {
        str(p.relative_to(tmp_path / "work" / "inbox")) for p in (tmp_path / "work").rglob("*") if p.is_file()
    }
    assert unpacked == {p for p in export.outcomes if p.endswith(".ipynb")}
