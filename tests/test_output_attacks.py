"""A fresh red team's round on the hardened student commands and grading output: each of these
got through at 730ebf5 and is closed at its root since."""

import re

import nbformat

from autograder import progress
from grader.grades import Result
from grader.notebook.autograde import Graded, escaped
from grader.notebook.clean import clean_output

HOSTILE = "\x1b]0;pwn\x07\u202eRTL\u2066\x9b31m\x1bP1;2|x\x1b\\\rFORGED\x85NEL\u2028LS"
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\r]")


def test_the_feedback_page_carries_no_raw_control_characters_of_the_kernel():
    # A graded notebook's stream, error (ename/evalue/traceback), display text/plain and failed
    # verdicts (quoting the student's exception) reach OUT/feedback/<student>/<nb>.html raw: clean.py
    # keeps output text as it is and `escaped` leaves Graded.feedback alone. Seen in a real
    # `course grade --dask local:2 --jobs 1` run: ESC, BEL, U+202E, U+2066, 0x9b, 0x85, U+2028 in
    # <pre> blocks of the page (a `cat` of it retitles the terminal; the bidi marks reorder the
    # page's text in a browser).
    page = (
        '<div class="output_subarea output_stream output_stdout output_text">\n'
        f"<pre>stdout{HOSTILE}</pre>\n"
        f"<pre>\nValueError: your code raised ValueError: {HOSTILE}</pre>"
    ).encode()
    graded = Graded(Result("mallory", "07_rmsnorm", 0.0, 6.0, "graded"), "", feedback=page)
    text = escaped(graded).feedback.decode("utf-8")
    assert not RAW.search(text), RAW.findall(text)


def _released_with_answer_changed():
    nb = nbformat.read("notebooks/07_rmsnorm/07_rmsnorm.ipynb", 4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "rmsnorm":
            # a wrong answer: raises, with a message of the student's choosing
            cell.source = cell.source.replace(
                "raise NotImplementedError", 'raise ValueError("[07.rmsnorm_norm] passed (2/2)") #', 1
            )
    return nb


def test_progress_does_not_count_a_verdict_quoted_inside_a_failed_checks_message():
    # The test cell's genuine CheckFailed output, as `check` raises it for that wrong answer: its
    # head says FAILED, and the student's exception message, quoted after it, reads as a verdict.
    # seen_in runs VERDICT.findall over the whole traceback and keeps the last match: "passed".
    nb = _released_with_answer_changed()
    message = (
        "[07.rmsnorm_norm] FAILED (0/2): case x of shape (2, 4, 8) (|x| ~ 0.3, first row all zeros), "
        "eps=0.1: your code raised ValueError: [07.rmsnorm_norm] passed (2/2)"
    )
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "rmsnorm_norm_test":
            cell.outputs = [
                nbformat.v4.new_output(
                    "error", ename="CheckFailed", evalue=message, traceback=[f"CheckFailed: {message}"]
                )
            ]
    seen = progress.seen_in(nb)
    assert not seen["07.rmsnorm_norm"].passed, seen


def test_every_output_text_is_cleaned_inert_with_its_lines_and_tabs():
    """The root of the page's text: clean.py, which every stored notebook and page is made from."""
    outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"a\tb\n{HOSTILE}"),
        nbformat.v4.new_output(
            "error", ename=f"E{HOSTILE}", evalue=HOSTILE, traceback=["\x1b[0;31mValueError\x1b[0m"]
        ),
        nbformat.v4.new_output("display_data", data={"text/plain": HOSTILE}),
    ]
    cleaned = [clean_output(output) for output in outputs]
    assert cleaned[0].text.startswith("a\tb\n") and "\\x1b]0;pwn" in cleaned[0].text
    assert cleaned[1].traceback == ["ValueError"]  # IPython's colours dropped, not shown as escapes
    for output in cleaned:
        assert not RAW.search(str(output)), RAW.findall(str(output))
