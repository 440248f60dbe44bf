"""nbgrader preprocessors that fix what plain nbgrader gets wrong for this course.

- LimitedExecute: a time limit for the whole notebook on top of the per-cell one, and a
  named reason when the notebook cannot be graded (kernel died, total time exceeded).
- StderrIsNotFailure: a warning printed to stderr in a test cell must not zero it.
- HideHiddenTests / PlainErrors: feedback without hidden-test source or grader tracebacks.
"""

import re
import time

from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import Execute
from traitlets import Integer

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
