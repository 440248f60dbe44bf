"""What a batch reports: one row per student and notebook (OUT/grades.csv)."""

import csv
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    student: str
    notebook: str
    score: float | None
    max_score: float | None
    status: str
    reason: str = ""


def failed(student: str, notebook: str, reason: str) -> Result:
    """A row for a notebook that could not be graded: no score, the reason instead."""
    return Result(student, notebook, None, None, "failed", reason)


def write_csv(path: Path, results: list[Result]) -> None:
    partial = path.with_suffix(".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "notebook", "score", "max_score", "status", "reason"])
        for r in results:
            writer.writerow(
                [r.student, r.notebook, _number(r.score), _number(r.max_score), r.status, r.reason]
            )
    partial.rename(path)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"
