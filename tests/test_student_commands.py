"""`course check` on a notebook someone else wrote: it says that it runs the notebook's code, runs it
in the sandbox where there is one, and reports only what it judged outside the kernel."""

import unicodedata

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output

from autograder import sandbox
from autograder.cells import grade_id
from autograder.printable import UNPRINTABLE
from autograder.student import main

from .helpers.machine import needs_sandbox
from .helpers.submissions import release

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches

# A window title (OSC 0), a clipboard write (OSC 52), clear screen (CSI 2J, then its C1 form) and a
# right-to-left override
EVIL = "\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J\u202e"


def unprintable(text: str) -> list[str]:
    """The characters of `text` a terminal would act on or hide, line breaks and tabs apart."""
    return [c for c in text if unicodedata.category(c) in UNPRINTABLE and c not in "\n\t"]


def _after_imports(notebook, source: str) -> nbformat.NotebookNode:
    at = [grade_id(c) for c in notebook.cells].index("imports") + 1
    notebook.cells.insert(at, new_code_cell(source))
    return notebook


def _classmates(tmp_path) -> nbformat.NotebookNode:
    """The unanswered release, with a cell that writes into the home folder and beside the test, and
    a `check` of its own: silent on one check, raising a message full of escape codes on the other."""
    victim = tmp_path / "victim"
    victim.mkdir()
    return _after_imports(
        release("07_rmsnorm"),
        "import pathlib\n"
        f"for target in (pathlib.Path.home() / 'pwned', pathlib.Path({str(victim)!r}) / 'pwned'):\n"
        "    try:\n"
        "        target.write_text('x')\n"
        "    except OSError:\n"
        "        pass\n"
        "def check(name, obj, **kwargs):\n"
        "    if name.endswith('_norm'):\n"
        f"        raise RuntimeError({EVIL!r})",
    )


def test_the_help_says_that_check_runs_the_notebooks_code(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "runs the notebook's code" in " ".join(capsys.readouterr().out.split())


@needs_sandbox
def test_a_classmates_unanswered_notebook_runs_sandboxed_and_passes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    path = tmp_path / "07_rmsnorm.ipynb"
    nbformat.write(_classmates(tmp_path), path)

    assert main(["check", str(path)]) == 1
    printed = capsys.readouterr()
    first = printed.out.splitlines()[0]
    assert "runs the code of 07_rmsnorm.ipynb" in first and "in a sandbox" in first, first
    assert "0/2 visible checks pass" in printed.out, printed.out
    assert "raised RuntimeError" in printed.out and "\\x1b]52;c;" in printed.out  # shown, escaped
    assert "`check` was redefined, patched or bypassed" in printed.out
    assert not unprintable(printed.out + printed.err)
    assert not (tmp_path / "home" / "pwned").exists() and not (tmp_path / "victim" / "pwned").exists()


def test_without_a_sandbox_it_says_so_and_still_counts_only_what_it_judged(tmp_path, monkeypatch, capsys):
    """A kernel that dies before the tests leaves their saved outputs, which claim success: not run."""
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "bubblewrap (`bwrap`) is not installed")
    notebook = _after_imports(release("07_rmsnorm"), "import os\nos._exit(1)")
    for cell in notebook.cells:
        if grade_id(cell) in ("rmsnorm_norm_test", "rmsnorm_test"):
            cell.execution_count = 3
            cell.outputs = [new_output("stream", name="stdout", text="[07.rmsnorm] passed (1/1):\n")]
    path = tmp_path / "07_rmsnorm.ipynb"
    nbformat.write(notebook, path)

    assert main(["check", str(path)]) == 1
    printed = capsys.readouterr().out
    first = printed.splitlines()[0]
    assert "runs the code of 07_rmsnorm.ipynb WITHOUT a sandbox" in first, first
    assert "bubblewrap (`bwrap`) is not installed" in first
    assert "0/2 visible checks pass" in printed and "not run 07.rmsnorm_norm" in printed, printed
