"""Which course notebook a file holds, told by its cells: the nbgrader ids of the released notebooks.

Students rename their files ('Copy of 04_rope.ipynb', 'homework.ipynb'), but the cells they were
given keep their nbgrader metadata (`grade_id`), and each notebook has ids that no other one has
(its questions and their tests). A file is recognised as the one notebook whose own ids it holds.
The intake reads a file only when its name does not name a notebook exactly; grading then checks
the identity again (preprocessors.Canonicalize._check_identity).
"""

import json
from functools import lru_cache
from pathlib import Path

from autograder.paths import source_notebook

MAX_NOTEBOOK_BYTES = 512 * 2**20  # grading.MAX_NOTEBOOK_BYTES (grading imports the intake, not the reverse)


def recognise(path: Path, file: str, known: tuple[str, ...]) -> tuple[str, str]:
    """(the notebook `path` holds, "") or ("", why it cannot tell and what to do).

    `file` is the file's name as the student gave it, for the messages.
    """
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return "", (
                f"'{file}' is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB, more than the grader takes "
                "for a notebook: ask the student to clear its outputs, save it and hand it in again"
            )
        ids = grade_ids(path.read_bytes())
    except OSError as error:
        return "", f"'{file}' could not be read ({error.strerror or error})"
    except ValueError as error:
        return "", (
            f"'{file}' is not a readable notebook ({error}): ask the student for the notebook as Jupyter "
            "saves it (File > Download in JupyterLab)"
        )
    holds = [a for a, own in own_ids(known).items() if ids & own]
    if len(holds) == 1:
        return holds[0], ""
    example = holds[0] if holds else known[0]
    if not holds:
        return "", (
            f"'{file}' holds none of the cells of this course's notebooks, and its name names none of "
            f"them ({', '.join(known)}), so which notebook it is cannot be told: if it is one of them, "
            f"rename it after it (e.g. {example}.ipynb); else ask the student for the notebook made from "
            "the released one"
        )
    both = f"{', '.join(holds[:-1])} and {holds[-1]}"
    return "", (
        f"'{file}' holds cells of {both}, so which notebook it is cannot be told: ask the student to "
        "hand in each notebook as a file of its own, or rename this file after the one to grade "
        f"(e.g. {example}.ipynb)"
    )


def grade_ids(data: bytes) -> set[str]:
    """The nbgrader ids of a notebook file's cells; ValueError if it is not a notebook's JSON.

    Read as the grader reads it (grading.read_notebook): UTF-8, else Latin-1; nbformat 4 keeps
    its cells in `cells`, nbformat 3 in `worksheets[*].cells`.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"its JSON is broken: {error}") from None
    except RecursionError:
        raise ValueError("its JSON is nested too deeply") from None
    if not isinstance(notebook, dict):
        raise ValueError("its JSON is not a notebook (no list of cells)")
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        sheets = notebook.get("worksheets")
        if not isinstance(sheets, list):
            raise ValueError("its JSON is not a notebook (no list of cells)")
        cells = [
            c for s in sheets if isinstance(s, dict) and isinstance(s.get("cells"), list) for c in s["cells"]
        ]
    ids = set()
    for cell in cells:
        metadata = cell.get("metadata") if isinstance(cell, dict) else None
        nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
        if isinstance(grade_id, str):
            ids.add(grade_id)
    return ids


@lru_cache
def own_ids(known: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """Each notebook's nbgrader ids that no other notebook of the course has (from solutions/)."""
    ids = {a: grade_ids(source_notebook(a).read_bytes()) for a in known}
    return {a: frozenset(mine - set().union(*(ids[b] for b in known if b != a))) for a, mine in ids.items()}
