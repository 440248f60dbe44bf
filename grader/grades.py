"""What a batch reports: one row per student and notebook (OUT/grades.csv).

A row's score is the notebook's score in the output folder's nbgrader course: the automatic
score, with the grades an instructor gave by hand there; `penalty` is the late penalty of the
instructor's policy (none by default) and `final_score` what is left after it. One column per
test cell follows ("07.rmsnorm (hidden cases)").

Rows carry text that students control, so what is written or printed from a row goes through
`printable.shown`, and grades.csv's text fields through `csv_cell` as well.
"""

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograder.printable import shown


@dataclass(frozen=True)
class Result:
    student: str
    notebook: str
    score: float | None
    max_score: float | None
    status: str  # graded | needs_manual_grading | failed | missing
    reason: str = ""
    name: str = ""  # the student's name, from the roster or the export
    late: bool = False  # submitted after the due date, or marked late by the export
    submitted_at: str = ""  # ISO 8601, where the export says when
    penalty: float | None = None  # the late penalty taken off `score`
    questions: tuple[tuple[str, float], ...] = ()  # each test cell's score, by what it grades
    origin: str = ""  # the graded file's path in the source (an LMS's download name); not a column
    lms: str = ""  # the LMS whose export it came from ("" for the plain layouts); not a column
    # Each test's verdict as data (core.Verdict.record), for the class report; not a column
    checks: tuple[dict, ...] = field(default=(), compare=False)

    @property
    def final_score(self) -> float | None:
        return None if self.score is None else max(0.0, self.score - (self.penalty or 0.0))


def failed(student: str, notebook: str, reason: str) -> Result:
    """A row for a notebook that could not be graded: no score, the reason instead."""
    return Result(student, notebook, None, None, "failed", reason)


def missing(student: str, notebook: str, name: str = "") -> Result:
    """A row for a student of the roster who handed in nothing for this notebook."""
    return Result(student, notebook, None, None, "missing", "no submission", name=name)


COLUMNS = [
    "student", "name", "notebook", "score", "max_score", "status", "reason",
    "late", "submitted_at", "penalty", "final_score",
]  # fmt: skip


def write_csv(path: Path, results: list[Result]) -> None:
    """grades.csv: the columns above, then one per test cell of the notebooks in `results`."""
    questions = list(dict.fromkeys(q for r in results for q, _ in r.questions))
    partial = path.with_suffix(".partial")
    with partial.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS + [csv_cell(q) for q in questions])
        for r in results:
            scores = dict(r.questions)
            writer.writerow(
                [
                    csv_cell(r.student),
                    csv_cell(r.name),
                    csv_cell(r.notebook),
                    _number(r.score),
                    _number(r.max_score),
                    csv_cell(r.status),
                    csv_cell(r.reason),
                    "yes" if r.late else "",
                    csv_cell(r.submitted_at),
                    _number(r.penalty),
                    _number(r.final_score),
                ]
                + [_number(scores.get(q)) for q in questions]
            )
    partial.rename(path)


STATUSES = ("graded", "needs_manual_grading", "failed", "missing")


def summary(rows: list[Result]) -> str:
    """The batch at a glance: per notebook, how many rows of each status and the mean score of
    those with one (hand grades included, before any late penalty)."""
    labels = [status.replace("_", " ") for status in STATUSES]
    lines = [
        f"{'notebook':<20}"
        + "".join(f"{label:>{len(label) + 2}}" for label in labels)
        + f"{'mean score':>14}"
    ]
    for notebook in [*sorted({r.notebook for r in rows}), "all"]:
        chosen = [r for r in rows if notebook in ("all", r.notebook)]
        counts = Counter(r.status for r in chosen)
        scored = [r for r in chosen if r.score is not None]
        mean = ""
        if scored and notebook != "all":  # "all" mixes notebooks of different maxima
            mean = f"{sum(r.score for r in scored) / len(scored):.2f} / {scored[0].max_score:g}"
        cells = "".join(
            f"{counts[status]:>{len(label) + 2}}" for status, label in zip(STATUSES, labels, strict=True)
        )
        lines.append(f"{shown(notebook):<20}{cells}{mean:>14}")
    return "\n".join(lines)


FORMULA_STARTS = ("=", "+", "-", "@")  # OWASP's list, less tab and CR: `shown` has escaped those


def csv_cell(text: str) -> str:
    """A text field of grades.csv: shown, and never read as a formula by a spreadsheet.

    A field starting with a formula character gets a leading apostrophe, as OWASP recommends
    against CSV injection (`=HYPERLINK(...)` as a folder name). Scores are numbers we write
    ourselves (`_number`) and are left alone.
    """
    text = shown(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"
