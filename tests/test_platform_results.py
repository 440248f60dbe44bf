"""A graded submission as the platforms' results.json, without a platform: what each test says and who
sees it. The same forms, from real runs in simulated containers: tests/test_platforms.py."""

import json

import jsonschema
import nbformat
import pytest

from autograder.core import Part, Verdict
from grader.cli import main
from grader.grades import Result
from grader.notebook.autograde import Graded, escaped
from grader.platforms import results
from grader.platforms.submission import Outcome, Settings, grade_submission

from .helpers.platform_schemas import GRADESCOPE, PRAIRIELEARN
from .helpers.submissions import perfect

HIDDEN_WORDS = "3 of 8 cases differ: case 'long rows' got 0.5, expected 0.25"
LOG = "\n".join(
    [
        "[course] saved by Google Colab",
        "[WARNING] [course] cell rmsnorm_test: source changed: restored",
        "[INFO] [course] [07.rmsnorm_norm] FAILED (0/4): " + HIDDEN_WORDS,  # a verdict: never in the summary
        "[WARNING] [course] test cell rmsnorm_hidden (#9): judging 07.rmsnorm_norm failed:\nTraceback ...",
        # what the student's code printed in a hidden test cell: never shown at submission
        "[WARNING] [course] test cell rmsnorm_hidden (#9) printed output of its own (ignored): "
        "'x=0.25 was dropped'",
        "[WARNING] [course] cell rmsnorm (#4): an output of type 'application/javascript' was dropped",
    ]
)


def outcome() -> Outcome:
    visible = Verdict("07.rmsnorm_norm", True, "5 cases match the reference", 2.0)
    hidden = Verdict("07.rmsnorm_norm", False, HIDDEN_WORDS, 4.0)
    parts = (
        Part("float32 x", True, "5 cases match", 0.5),
        Part("a bfloat16 model", False, "the output is float32,\x1b[2J not bfloat16", 0.5),
    )
    layer = Verdict("07.rmsnorm", False, "", 1.0, parts)
    verdicts = (visible.record(False), hidden.record(True), layer.record(False))
    result = Result("student", "07_rmsnorm", 2.5, 7.0, "graded")
    graded = Graded(result, LOG, verdicts=verdicts)
    return Outcome("07_rmsnorm", "bubblewrap", escaped(graded), "homework.ipynb", ["notes.txt: not graded"])


def test_gradescope_keeps_hidden_verdicts_back_unless_told():
    kept = results.gradescope(outcome(), show_hidden=False, seconds=12.3)
    jsonschema.validate(kept, GRADESCOPE)
    assert [t["name"] for t in kept["tests"]] == [
        "07.rmsnorm_norm (visible cases)",
        "07.rmsnorm_norm (hidden cases)",
        "07.rmsnorm (visible cases): float32 x",
        "07.rmsnorm (visible cases): a bfloat16 model",
    ]
    assert [t["visibility"] for t in kept["tests"]] == ["visible", "after_published", "visible", "visible"]
    assert [(t["score"], t["max_score"], t["status"]) for t in kept["tests"]] == [
        (2.0, 2.0, "passed"),
        (0.0, 4.0, "failed"),
        (0.5, 0.5, "passed"),
        (0.0, 0.5, "failed"),
    ]
    assert kept["score"] == 2.5 and kept["stdout_visibility"] == "hidden"
    assert (
        HIDDEN_WORDS not in kept["output"]
        and "judging" not in kept["output"]
        and "x=0.25" not in kept["output"]
    )
    assert "cell rmsnorm (#4): an output of type 'application/javascript' was dropped" in kept["output"]
    assert "visible checks 2.5 of 3 points" in kept["output"]  # never the total: it counts the hidden ones
    assert "cell rmsnorm_test: source changed: restored" in kept["output"]
    assert "saved by Google Colab" in kept["output"] and "notes.txt: not graded" in kept["output"]
    assert "\x1b" not in json.dumps(kept, ensure_ascii=False)  # a student's escape codes, escaped
    shown = results.gradescope(outcome(), show_hidden=True, seconds=1)
    assert all(t["visibility"] == "visible" for t in shown["tests"])
    assert shown["tests"][1]["output"] == HIDDEN_WORDS


def test_prairielearn_scores_a_fraction_and_keeps_the_words_back():
    kept = results.prairielearn(outcome(), show_hidden=False)
    jsonschema.validate(kept, PRAIRIELEARN)
    assert kept["score"] == 2.5 / 7.0
    assert HIDDEN_WORDS not in json.dumps(kept)
    assert [t["points"] for t in kept["tests"]] == [2.0, 0.0, 0.5, 0.0]
    assert HIDDEN_WORDS in json.dumps(results.prairielearn(outcome(), show_hidden=True))


def test_nothing_to_grade_uses_no_attempt_on_prairielearn():
    nothing = Outcome(
        "07_rmsnorm", "bubblewrap", notes=["Nothing was submitted: upload your 07_rmsnorm.ipynb"]
    )
    said = results.prairielearn(nothing, show_hidden=False)
    jsonschema.validate(said, PRAIRIELEARN)
    assert said["gradable"] is False and "Nothing was submitted" in said["message"]
    gradescope = results.gradescope(nothing, show_hidden=False, seconds=0)
    jsonschema.validate(gradescope, GRADESCOPE)
    assert gradescope["score"] == 0 and gradescope["tests"] == []


def test_a_long_verdict_is_cut():
    long = Verdict("07.rmsnorm_norm", False, "x" * 50_000, 2.0)
    graded = Graded(Result("s", "07_rmsnorm", 0.0, 2.0, "graded"), "", verdicts=(long.record(False),))
    (test,) = results.tests(Outcome("07_rmsnorm", "bubblewrap", graded, "f.ipynb"))
    assert len(test.output) < 21_000 and test.output.endswith("[... cut]")


def test_release_refuses_an_unknown_notebook_and_a_folder_in_use(tmp_path):
    with pytest.raises(SystemExit, match="no notebook 99_nothing in this course"):
        main(["release", "--gradescope", str(tmp_path / "new"), "--notebook", "99_nothing"])
    (tmp_path / "used" / "kept.txt").parent.mkdir()
    (tmp_path / "used" / "kept.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not a new or empty folder"):
        main(["release", "--prairielearn", "me/grader", str(tmp_path / "used")])
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["kept.txt"]


def test_release_refuses_platform_flags_alone_and_a_timeout_prairielearn_would_cut(tmp_path):
    with pytest.raises(SystemExit, match="--show-hidden: only with --gradescope or --prairielearn"):
        main(["release", str(tmp_path / "students"), "--show-hidden"])
    with pytest.raises(SystemExit, match="at most 540 s with --prairielearn"):
        main(["release", "--prairielearn", "me/grader", str(tmp_path / "pl"), "--notebook-timeout", "590"])
    assert not (tmp_path / "students").exists() and not (tmp_path / "pl").exists()


def test_prairielearn_cannot_grade_a_notebook_worth_nothing():
    nothing = Graded(Result("s", "07_rmsnorm", 0.0, 0.0, "graded"), "")
    said = results.prairielearn(Outcome("07_rmsnorm", "bubblewrap", nothing, "f.ipynb"), show_hidden=False)
    jsonschema.validate(said, PRAIRIELEARN)
    assert said["gradable"] is False


def test_a_student_is_told_in_their_terms_why_a_file_was_not_graded(tmp_path):
    upload = tmp_path / "submission"
    (upload / "homework").mkdir(parents=True)
    nbformat.write(perfect("07_rmsnorm"), upload / "homework" / "07_rmsnorm.ipynb")
    (upload / "notes.txt").write_text("see the notebook")
    settings = Settings(notebook="07_rmsnorm", seed=1)
    (tmp_path / "work").mkdir()
    (tmp_path / "kernels").mkdir()
    outcome = grade_submission(upload, settings, tmp_path / "work", tmp_path / "kernels")
    assert outcome.graded is None
    said = results.summary(outcome, hidden_shown=False, platform="gradescope")
    assert "None of the files submitted is the notebook 07_rmsnorm" in said
    assert "homework/07_rmsnorm.ipynb: not graded: it is inside a folder" in said, said
    assert "Your code ran" not in said  # none did
    assert "notes.txt: not graded: not a notebook" in said and "if it is submission's" not in said
