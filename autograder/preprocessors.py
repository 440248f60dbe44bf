"""nbgrader preprocessors that fix what plain nbgrader gets wrong for this course.

- LimitedExecute: a time limit for the whole notebook on top of the per-cell one, and a
  named reason when the notebook cannot be graded (kernel died, total time exceeded).
- StderrIsNotFailure: a warning printed to stderr in a test cell must not zero it.
- RestoreDeletedCells: deleted test or given-code cells come back before grading.
- HideHiddenTests / PlainErrors: feedback without hidden-test source or grader tracebacks.
"""

import re
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbgrader.preprocessors import Execute
from nbgrader.preprocessors.base import NbGraderPreprocessor as Preprocessor
from traitlets import Integer, Unicode

from .reference import grade_id

HIDDEN_TESTS = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.DOTALL)
HIDDEN_PLACEHOLDER = "# (hidden tests, run at grading time)"


class NotebookFailed(RuntimeError):
    """The notebook as a whole could not be graded; the message is the reason shown to people."""


class LimitedExecute(Execute):
    notebook_timeout = Integer(900, help="Seconds the whole notebook may run.").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_timeout
        try:
            result = super().preprocess(nb, resources, km)
        except DeadKernelError as error:
            raise NotebookFailed(
                "the kernel died while running the notebook (it crashed, exited or ran out of memory)"
            ) from error
        if time.monotonic() >= self._deadline:
            raise self._too_long()
        return result

    def _get_timeout(self, cell):
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self._too_long()
        per_cell = super()._get_timeout(cell)
        return max(1, int(min(per_cell or remaining, remaining)))

    def _too_long(self) -> NotebookFailed:
        return NotebookFailed(f"the notebook ran past its total time limit of {self.notebook_timeout} s")


def _grade_cells(nb):
    return (c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code")


class StderrIsNotFailure(Preprocessor):
    """nbgrader zeroes a test cell with any stderr output (a torch warning!): keep it as stdout."""

    def preprocess(self, nb, resources):
        for cell in _grade_cells(nb):
            for output in cell.get("outputs", []):
                if output.output_type == "stream" and output.name == "stderr":
                    output.name = "stdout"
        return nb, resources


class HideHiddenTests(Preprocessor):
    def preprocess(self, nb, resources):
        for cell in nb.cells:
            cell.source = HIDDEN_TESTS.sub(HIDDEN_PLACEHOLDER, cell.source)
        return nb, resources


class PlainErrors(Preprocessor):
    """Errors as `Name: message` only: tracebacks would show hidden tests and grader code."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return nb, resources


class RestoreDeletedCells(Preprocessor):
    """Put back locked cells (tests, imports, given code) that a student deleted.

    nbgrader's own OverwriteCells.add_missing_cells assumes the cell before a deleted one
    is a grade or solution cell and crashes otherwise (nbgrader 0.9.6). Here each missing
    cell of the release goes back after the nearest earlier cell the submission still has;
    OverwriteCells, which runs next, then restores the source of tests, hidden ones included.
    """

    release_directory = Unicode("", help="Folder holding <assignment>/<notebook>.ipynb as released.").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        path = Path(self.release_directory) / info["assignment"] / f"{info['notebook']}.ipynb"
        released = nbformat.read(path, as_version=4)
        present = {grade_id(c): i for i, c in enumerate(nb.cells) if grade_id(c)}
        insert_at = 0
        for cell in released.cells:
            gid = grade_id(cell)
            if gid in present:
                insert_at = present[gid] + 1
                continue
            if not cell.metadata.get("nbgrader", {}).get("locked"):
                continue
            nb.cells.insert(insert_at, cell)
            present = {grade_id(c): i for i, c in enumerate(nb.cells) if grade_id(c)}
            insert_at += 1
        return nb, resources
