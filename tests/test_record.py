"""The output folder as the instructor's record, and the late policy (no grading here: see
test_grading.py and test_lms_exports.py for the same end to end)."""

import json
from datetime import datetime

import pytest

from grader.cli import main
from grader.grades import Result, failed
from grader.record.late import CoursePenalty, LatePolicy
from grader.record.record import HandGrades, forget, recorded, remember_refusals, save_result


def _graded(student, notebook, score=3.0):
    return Result(student, notebook, score, 6.0, "graded")


def test_refused_rows_stay_until_that_notebook_is_graded(tmp_path):
    refused = [failed("ann", "07_rmsnorm", "more than one file"), failed("x y.ipynb", "", "name")]
    remember_refusals(tmp_path, refused, set())
    save_result(tmp_path, _graded("ann", "07_rmsnorm"), "sha-1")
    kept = remember_refusals(tmp_path, [], set(recorded(tmp_path)))  # a later run that refuses nothing
    assert [(r.student, r.reason) for r in kept] == [("x y.ipynb", "name")]


def test_hand_grades_are_set_aside_never_dropped(tmp_path):
    ledger = HandGrades(tmp_path)
    first = {
        "submission_sha256": "a",
        "grades": {"t": {"manual_score": 1, "extra_credit": None, "work": "w"}},
    }
    ledger.record("ann/07_rmsnorm", {**first, "comments": {}})
    ledger.record("ann/07_rmsnorm", {"submission_sha256": "b", "grades": {}, "comments": {}})
    ledger.save()
    saved = json.loads((tmp_path / "work" / "hand_grades.json").read_text())
    assert saved["current"] == {}
    assert saved["set_aside"][0]["grades"]["t"]["manual_score"] == 1


def test_forget_lists_first_and_removes_only_with_yes(tmp_path, capsys):
    save_result(tmp_path, _graded("ann", "07_rmsnorm"), "sha-1")
    save_result(tmp_path, _graded("ann", "04_rope"), "sha-2")
    save_result(tmp_path, _graded("bob", "07_rmsnorm"), "sha-3")
    assert main(["forget", str(tmp_path), "ann/07_rmsnorm"]) == 1
    assert "nothing was removed" in capsys.readouterr().out
    assert len(recorded(tmp_path)) == 3
    forget(tmp_path, "ann", "07_rmsnorm")
    assert {(r.student, r.notebook) for r, _ in recorded(tmp_path).values()} == {
        ("ann", "04_rope"),
        ("bob", "07_rmsnorm"),
    }
    with pytest.raises(SystemExit, match="nothing of this"):
        main(["forget", str(tmp_path), "carol"])


@pytest.mark.parametrize(
    "due, penalty, message",
    [
        ("tomorrow", None, "not a date and time"),
        (None, "zero", "needs the due date"),
        ("2026-11-20T23:59", "half", "a percentage per day"),
    ],
)
def test_a_wrong_late_flag_says_what_to_write(due, penalty, message):
    with pytest.raises(SystemExit, match=message):
        LatePolicy.parse(due, penalty)


def test_late_penalties():
    due = "2026-11-20T23:59"
    result = Result("ann", "07_rmsnorm", 6.0, 6.0, "graded", submitted_at="2026-11-22T10:00:00")
    assert LatePolicy.parse(due, None).penalty(6.0, 3600) is None  # none by default
    assert LatePolicy.parse(due, "zero").penalty(6.0, 3600) == 6.0
    per_day = LatePolicy.parse(due, "10%/day")
    assert per_day.seconds_late(result) == 24 * 3600 + 10 * 3600 + 60  # 1 day, 10 h 1 min
    assert per_day.penalty(6.0, per_day.seconds_late(result)) == pytest.approx(1.2)  # 2 started days
    assert per_day.penalty(6.0, 0) is None
    marked = Result("ann", "07_rmsnorm", 6.0, 6.0, "graded", late=True)  # Canvas: late, no time
    assert per_day.timestamp(marked) == datetime(2026, 11, 20, 23, 59, 1)
    assert per_day.is_late(marked) and not per_day.is_late(Result("b", "07_rmsnorm", 1.0, 6.0, "graded"))
    plugin = CoursePenalty(method="per_day", percent_per_day=10)  # what nbgrader's step calls
    assert plugin.late_submission_penalty("ann", 6.0, 3600) == pytest.approx(0.6)
