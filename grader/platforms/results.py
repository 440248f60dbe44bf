"""A graded submission as each platform's results.json.

One test per part of each check (a check of one concern is one test), named after the check, its
cases (visible or hidden) and the concern, worth the points nbgrader gave it; its output is the
verdict's words (the cases, what came out, what was expected, the mistake it looks like). The
total is nbgrader's score of the notebook, as `course grade` gives it. The summary says which file
was graded, what the grader restored or dropped, which files were not graded and why, and how the
kernel was confined; never a hidden check's verdict, which the platform may keep back.

Gradescope: https://gradescope-autograders.readthedocs.io/en/latest/specs/ (a test's `visibility`:
the hidden checks' "after_published" unless the bundle shows them at once). PrairieLearn:
https://prairielearn.readthedocs.io/en/latest/externalGrading/ (score in [0, 1]; `gradable` false
where no notebook of the assignment came: no attempt is used up). Both are tested against these
documented forms only (tests/test_platforms.py): docs/platforms.md says what was not.
"""

import re
from dataclasses import dataclass

from autograder.printable import shown, shown_lines
from grader.platforms.submission import Outcome

# What the grader's log says of the notebook that the student can act on: cells put back, outputs
# dropped, the sandbox's limits reached (never a verdict: those of hidden checks may be kept back).
RESTORED = re.compile(
    r"^\[WARNING\] \[course\] ((locked )?cell \S+.*: restored|tracked cells were moved.*|"
    r"cell \S+ is not part of this notebook.*|cell \S+ \(#\d+\): an output of type '[\w/.+-]+' was dropped|"
    r"output beyond \d+ bytes dropped \(cell \d+\)|"
    r"the sandbox (refused|ran out of) .*)$"
)
READING = re.compile(r"^\[course\] (the file is not UTF-8.*|saved as nbformat.*|saved by Google Colab)$")
MAX_OUTPUT_CHARS = 20_000  # one test's words; PrairieLearn refuses a results.json past 1 MB


@dataclass(frozen=True)
class Test:
    name: str
    score: float
    max_score: float
    passed: bool
    output: str
    hidden: bool


def tests(outcome: Outcome) -> list[Test]:
    """The graded notebook's checks, one test per part, in the notebook's order."""
    if outcome.graded is None:
        return []
    found = []
    for verdict in outcome.graded.verdicts:
        label = f"{verdict['check']} ({'hidden' if verdict['hidden'] else 'visible'} cases)"
        for part in verdict["parts"] or [verdict]:
            found.append(
                Test(
                    name=f"{label}: {part['concern']}" if part is not verdict else label,
                    score=part["points"],
                    max_score=part["max_points"],
                    passed=part["passed"],
                    output=_bounded(part["message"]),
                    hidden=verdict["hidden"],
                )
            )
    return found


def score(outcome: Outcome) -> tuple[float, float | None]:
    """(points, out of) as nbgrader gave them; (0, None) where nothing was graded."""
    result = outcome.graded.result if outcome.graded else None
    if result is None or result.score is None:
        return 0.0, result.max_score if result else None
    return result.score, result.max_score


KEPT_BACK = {
    "gradescope": "The hidden checks' verdicts are shown once your instructor publishes the grades.",
    "prairielearn": "Your instructor keeps the hidden checks' verdicts back; their points are counted.",
}


def summary(outcome: Outcome, hidden_shown: bool, platform: str) -> str:
    """What the student reads above the tests (on `platform`: a key of KEPT_BACK)."""
    lines = []
    graded = outcome.graded
    if graded is None:
        lines += outcome.notes[:1]
        lines += [f"  {shown(note)}" for note in outcome.notes[1:]]
    elif graded.result.status == "failed":
        lines.append(f"'{shown(outcome.file)}' could not be graded (0 points): {graded.result.reason}")
    else:
        visible = [t for t in tests(outcome) if not t.hidden]
        points = f"{sum(t.score for t in visible):g} of {sum(t.max_score for t in visible):g}"
        lines.append(f"Graded '{shown(outcome.file)}' as {outcome.notebook}: visible checks {points} points.")
        lines.append("The hidden checks' verdicts are below." if hidden_shown else KEPT_BACK[platform])
        if graded.result.reason:
            lines.append(f"Points lost outside the checks: {graded.result.reason}")
        changed = [line for line in graded.log.split("\n") if READING.match(line) or RESTORED.match(line)]
        if changed:
            lines.append("What the grader did with your notebook:")
            lines += [f"  {line.removeprefix('[WARNING] ').removeprefix('[course] ')}" for line in changed]
        if outcome.notes:
            lines.append("Files not graded:")
            lines += [f"  {shown(note)}" for note in outcome.notes]
        lines.append(f"Your code ran confined by {outcome.isolation}.")
    return "\n".join(lines)


def gradescope(outcome: Outcome, show_hidden: bool, seconds: float) -> dict:
    """Gradescope's results.json."""
    later = "visible" if show_hidden else "after_published"
    points, _ = score(outcome)
    return {
        "score": points,
        "execution_time": round(seconds),
        "output": summary(outcome, show_hidden, "gradescope"),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",  # the grader's log: for the instructor
        "tests": [
            {
                "name": test.name,
                "score": test.score,
                "max_score": test.max_score,
                "status": "passed" if test.passed else "failed",
                "output": test.output,
                "output_format": "text",
                "visibility": later if test.hidden else "visible",
            }
            for test in tests(outcome)
        ],
    }


def prairielearn(outcome: Outcome, show_hidden: bool) -> dict:
    """PrairieLearn's results.json. It shows every test at once: without `show_hidden`, a hidden
    check's test gives its points but not its words."""
    points, out_of = score(outcome)
    if outcome.graded is None or not out_of:  # nothing to grade (course.toml may leave every question out)
        said = summary(outcome, show_hidden, "prairielearn")
        return {"gradable": False, "message": said, "format_errors": outcome.notes[:1] or [said]}
    return {
        "gradable": True,
        "score": min(1.0, max(0.0, points / out_of)),
        "message": summary(outcome, show_hidden, "prairielearn"),
        "tests": [
            {
                "name": test.name,
                "points": test.score,
                "max_points": test.max_score,
                "output": test.output if show_hidden or not test.hidden else "(kept back by your instructor)",
            }
            for test in tests(outcome)
        ],
    }


def _bounded(text: str) -> str:
    text = shown_lines(text)
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n[... cut]"
