"""Where the course's files live. One place, so that no module guesses a path."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The grader points the checks at another copy of the solutions (e.g. a sandboxed course
# directory) through this variable; a student's clone uses the repo's own folder.
SOLUTIONS = Path(os.environ.get("COURSE_SOLUTIONS", REPO / "solutions"))
NOTEBOOKS = REPO / "notebooks"
IMAGES = REPO / "images"
EXPECTED = Path(__file__).resolve().parent / "expected"


def assignments() -> list[str]:
    """The course's assignments, one per numbered folder of solutions/ (e.g. '04_rope')."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and p.name[:2].isdigit())


def source_notebook(assignment: str) -> Path:
    """The nbgrader source notebook of an assignment: solutions/<a>/<a>.ipynb."""
    return SOLUTIONS / assignment / f"{assignment}.ipynb"
