"""The answers compared: each graded answer cell of a class, read from its output folder, and the
files an instructor collects as known sources (earlier classes' folders, published solutions).

Answer cells are the course's own (a code cell the release marks as a solution, by its grade
id); what a student wrote elsewhere in the notebook is not compared. Every file read here comes
from students or from the internet: a file that cannot be read is skipped, a value of the wrong
type counts as no source, files past a size limit are not read, and every line break ("\r\n",
"\r") is made "\n", as Python reads code.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from autograder.paths import NOTEBOOKS
from grader.record.record import result_files, submitted_file

MAX_FILE_BYTES = 8 * 2**20  # a submitted notebook (outputs dropped: tens of kB)
MAX_SOURCE_BYTES = 2**20  # a source file (a published solution: tens of kB)
GRADED = ("graded", "needs_manual_grading")


@dataclass(frozen=True)
class Answer:
    """One answer, or one source file compared with every answer."""

    owner: str  # a student of this class or of an earlier one; a source file's path
    notebook: str  # e.g. "04_rope"; "" for a source file
    question: str  # the answer cell's grade id; "" for a source file
    source: str
    origin: str = ""  # "" for this class; the earlier class's output folder, or the sources' folder

    @property
    def in_this_class(self) -> bool:
        return not self.origin

    @property
    def page(self) -> Path | None:
        """The feedback page of this answer's notebook: relative to the output folder for this
        class, absolute for an earlier class, None for a source file."""
        if not self.notebook:
            return None
        page = Path("feedback", self.owner, f"{self.notebook}.html")
        return Path(self.origin) / page if self.origin else page


@cache
def _released(notebook: str) -> tuple[tuple[str, bool, str], ...]:
    """The code cells of a notebook as students get it (the release's, read once)."""
    return tuple(_code_cells(_read_notebook(NOTEBOOKS / notebook / f"{notebook}.ipynb") or {}))


def answer_cells(notebook: str) -> dict[str, str]:
    """The answer cells of a notebook as students get it: grade id -> the code it gives (the stub)."""
    return {grade_id: source for grade_id, solution, source in _released(notebook) if grade_id and solution}


def given_code(notebook: str) -> tuple[str, ...]:
    """The code the notebook gives students, cell by cell: its stubs and its given cells."""
    return tuple(source for _, _, source in _released(notebook))


def given_lines(cells: Sequence[str]) -> set[str]:
    """The lines of given cells, stripped: a line of an answer that is one of them is given code."""
    return {line.strip() for cell in cells for line in cell.split("\n")}


def class_answers(out: Path, origin: str = "") -> list[Answer]:
    """The answer cells of every notebook graded into the output folder `out` (the file graded
    last for each student), as graded: OUT/work/runs/<student>/<nb>/submitted/. `origin`: ""
    for this class, the folder's path for an earlier one."""
    answers = []
    for student, notebook in _graded(out):
        cells = answer_cells(notebook)
        path = submitted_file(out, student, notebook)
        first = {}
        for grade_id, _, source in _code_cells(_read_notebook(path) or {}) if cells else ():
            if grade_id in cells and grade_id not in first:
                first[grade_id] = source
        answers += [
            Answer(student, notebook, q, source, origin)
            for q, source in first.items()
            if source.strip() and source != cells[q]  # the stub as given: nothing to compare
        ]
    return answers


def _graded(out: Path) -> list[tuple[str, str]]:
    """(student, notebook) of each outcome in OUT/work/results that was graded, for a notebook of
    the course. A folder given as an earlier class may hold anything: what is not such an outcome
    is passed over."""
    graded = []
    for path in result_files(out):
        try:
            saved = json.loads(path.read_bytes()) if path.stat().st_size < 2**20 else None
        except (OSError, ValueError):
            continue
        notebook = path.stem
        if isinstance(saved, dict) and saved.get("status") in GRADED and (NOTEBOOKS / notebook).is_dir():
            graded.append((path.parent.name, notebook))
    return graded


def source_files(folder: Path, outside: Path) -> list[Answer]:
    """The .py and .ipynb files under `folder`, each one source (a notebook's code cells joined),
    named by its path under the folder; not those under `outside` (the class's own output folder,
    where a folder above it is given)."""
    sources = []
    for path in sorted(folder.rglob("*")):
        try:
            if (
                path.suffix not in (".py", ".ipynb")
                or not path.is_file()
                or path.stat().st_size > MAX_SOURCE_BYTES
            ):
                continue
            if path.resolve().is_relative_to(outside.resolve()):
                continue
            if path.suffix == ".py":
                text = _lines(path.read_bytes().decode("utf-8", errors="replace"))
            else:
                text = "\n".join(source for _, _, source in _code_cells(_read_notebook(path) or {}))
        except OSError:
            continue
        if text.strip():
            sources.append(Answer(str(path.relative_to(folder)), "", "", text, str(folder)))
    return sources


def _read_notebook(path: Path) -> dict | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        notebook = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return notebook if isinstance(notebook, dict) else None


def _code_cells(notebook: dict) -> list[tuple[str, bool, str]]:
    """(grade id or "", marked as a solution, source) of each code cell, in order."""
    cells = notebook.get("cells")
    found = []
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata")
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        grade_id = meta.get("grade_id") if isinstance(meta.get("grade_id"), str) else ""
        found.append((grade_id, meta.get("solution") is True, _text(cell.get("source"))))
    return found


def _text(source) -> str:
    if isinstance(source, str):
        return _lines(source)
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return _lines("".join(source))
    return ""


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
