"""The subcommands of `course`: the student's and listing ones, and what `course grade` says at once."""

import subprocess
import sys
import unicodedata
import zipfile
from dataclasses import replace

import nbformat
import pytest

from autograder.cells import grade_id
from autograder.checks import CHECKS
from autograder.printable import UNPRINTABLE
from grader.cli import main, summary_line
from grader.grades import Result
from grader.record.class_list import _total

from .helpers.machine import needs_sandbox
from .helpers.submissions import perfect, release, solution_sources, with_answer

pytestmark = pytest.mark.batches  # make test runs it beside another file of batches


def test_list_names_every_check(capsys):
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in CHECKS)


def test_check_reports_visible_checks(tmp_path, capsys):
    done, todo = tmp_path / "done.ipynb", tmp_path / "todo.ipynb"
    nbformat.write(perfect("07_rmsnorm"), done)
    nbformat.write(release("07_rmsnorm"), todo)
    assert main(["check", str(done)]) == 0
    assert "2/2 visible checks pass" in capsys.readouterr().out
    assert main(["check", str(todo)]) == 1
    report = capsys.readouterr().out
    assert "0/2 visible checks pass" in report and "NotImplementedError" in report


# A window title (OSC 0), a clipboard write (OSC 52), clear screen (CSI 2J, then its C1 form), a
# right-to-left override, and a line of the log forged after a carriage return
FORGED = "[INFO] [course] [07.rmsnorm_norm] passed (2/2): forged"
EVIL = f"\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J\u202e\r{FORGED}"


def _unprintable(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in UNPRINTABLE and c not in "\n\t"]


@needs_sandbox
def test_grading_escapes_what_a_kernel_sends_in_every_log_file_and_the_terminal(tmp_path, capfd):
    """A submission whose answer raises, and whose own cell prints and raises, text full of escape
    codes; the kernel also writes it to its own stderr (kernel.log)."""
    answer = solution_sources("07_rmsnorm")["rmsnorm"].replace(
        "return x * torch.rsqrt(", f"raise ValueError({EVIL!r})\n        return x * torch.rsqrt("
    )
    notebook = with_answer(perfect("07_rmsnorm"), "rmsnorm", answer)
    at = [grade_id(c) for c in notebook.cells].index("rmsnorm") + 1
    loud = f"import os\nprint({EVIL!r})\nos.write(2, {EVIL!r}.encode())\nraise RuntimeError({EVIL!r})"
    notebook.cells.insert(at, nbformat.v4.new_code_cell(loud))
    (tmp_path / "in" / "mallory").mkdir(parents=True)
    nbformat.write(notebook, tmp_path / "in" / "mallory" / "07_rmsnorm.ipynb")
    out = tmp_path / "out"

    assert main(["grade", str(tmp_path / "in"), "--out", str(out), "--jobs", "1"]) == 0
    printed = capfd.readouterr()
    assert not _unprintable(printed.out + printed.err)
    written = [*(out / "work" / "runs").rglob("*"), *(out / "logs").rglob("*"), *out.glob("*.csv")]
    # CSV rows end in CRLF, as RFC 4180 has them; any other CR is someone's text
    texts = {p: p.read_bytes().decode("utf-8").replace("\r\n", "\n") for p in written if p.is_file()}
    assert {p.name for p in texts} >= {"07_rmsnorm.log", "kernel.log", "07_rmsnorm.ipynb", "grades.csv"}
    found = {str(p.relative_to(out)): _unprintable(t) for p, t in texts.items() if _unprintable(t)}
    assert not found, "\n".join(f"{p}: {len(c)} characters, {sorted(set(c))}" for p, c in found.items())
    log = (out / "logs" / "mallory" / "07_rmsnorm.log").read_text()
    assert "\\x1b]52;c;" in log  # the student's text is there, shown
    assert not any(line.startswith(FORGED) for line in log.splitlines())
    assert "\\x1b]52;c;" in (out / "work" / "runs" / "mallory" / "07_rmsnorm" / "kernel.log").read_text()


def _grade_fails(source, out, *flags: str) -> str:
    try:
        main(["grade", str(source), "--out", str(out), "--no-sandbox", *flags])
    except SystemExit as stop:
        return str(stop)
    raise AssertionError("course grade ran on")


def test_an_instructors_mistake_is_one_plain_line_and_writes_nothing(tmp_path):
    """A wrong path, an OUT that is a file, a wrong flag, an unreadable roster and a source with no
    notebook (a zip of PDFs) each stop the run before any work with a line that says what is wrong;
    no output folder is created."""
    out = tmp_path / "out"
    assert "no such folder or zip file" in _grade_fails(tmp_path / "Downloads" / "hw1.zip", out)
    for flags, said in [
        (["--due", "tomorrow"], "--due 'tomorrow': not a date and time"),
        (["--late-penalty", "10"], "--late-penalty '10': write none, zero, or a percentage per day"),
        (["--roster", str(tmp_path / "nope.csv")], "nope.csv: cannot read the roster"),
    ]:
        assert said in _grade_fails(tmp_path, out, *flags)
    assert not out.exists()
    taken = tmp_path / "grades.csv"
    taken.write_text("a file")
    assert "is a file: --out names a folder" in _grade_fails(tmp_path, taken)
    assert taken.read_text() == "a file"
    pdfs = tmp_path / "pdfs.zip"
    with zipfile.ZipFile(pdfs, "w") as archive:
        for name in ("ann_1_2_report.pdf", "bob_3_4_report.pdf"):
            archive.writestr(name, b"%PDF-1.4 ...")
    message = _grade_fails(pdfs, out)
    assert message.startswith(f"Nothing to grade in {pdfs}: 2 file(s), none a notebook of this course")
    assert "ann_1_2_report.pdf" in message and "nothing was written" in message
    assert not out.exists()


def test_a_row_for_the_terminal_names_the_student():
    row = Result("48211", "07_rmsnorm", None, None, "failed", "not a readable notebook", name="Ann O'Neil")
    assert summary_line(row).startswith("48211 (Ann O'Neil) ")
    assert summary_line(replace(row, name="")).startswith("48211 ")


def test_the_command_line_parses_its_arguments_before_importing_torch():
    """`course --help` and an instructor's mistake answer at once: torch (seconds to import on a
    loaded machine) is imported only by the commands that run checks or grade."""
    probe = "import sys, grader.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_total_with_notebooks_not_handed_in_is_partial_not_complete():
    rows = {"04_rope": Result("ann", "04_rope", 9.0, 9.0, "graded")}
    total = _total("ann", rows, ["04_rope", "07_rmsnorm", "09_kv_cache"], {"04_rope": 9.0, "07_rmsnorm": 6.0})
    assert (total.score, total.status) == (
        9.0,
        "partial: no submission for 07_rmsnorm, 09_kv_cache (each counted 0)",
    )
