"""Feedback pages as their readers see them: one notebook graded end to end, its page read.

The summary names the question of each test cell, a failed verdict wraps instead of
scrolling sideways, the self-study widget shows as one line of text, and the maths is MathML
written into the page: one file, read offline and handed out alone, runs no script. The same
holds for the page that nbgrader's own generate_feedback writes in OUT/course (one folder deeper).
"""

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbgrader.api import Gradebook
from traitlets.config import Config

from autograder.checks import CHECKS
from autograder.reference import assignment_of, mistakes
from grader import grading
from grader.grades import Result
from grader.record import feedback
from grader.record.feedback import mathml, question

from .helpers.feedback import document, page_text
from .helpers.jupyter_server import browse, running_lab
from .helpers.submissions import mutant

ASSIGNMENT = "07_rmsnorm"
STUDENT = "ann"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CANARY = Path(__file__).parent / "helpers" / "canary.py"


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """A submission whose _norm adds eps outside the root (failed checks with long verdicts),
    graded without the sandbox (the notebook is ours), and the two pages made of it."""
    submissions = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("out")
    check = CHECKS["07.rmsnorm_norm"]
    mistake = mistakes("07.rmsnorm_norm")[0]
    notebook = mutant(ASSIGNMENT, check.answer_cell, check.target, mistake.impl)
    (submissions / STUDENT).mkdir()
    nbformat.write(notebook, submissions / STUDENT / f"{ASSIGNMENT}.ipynb")
    limits = grading.Limits(cell_timeout=30, notebook_timeout=120, sandboxed=False)
    [result] = grading.grade(submissions, out, limits=limits)
    assert result.status == "graded", result
    nbgrader = Path(sys.executable).parent / "nbgrader"
    command = [str(nbgrader), "generate_feedback", ASSIGNMENT, f"--student={STUDENT}", "--force"]
    done = subprocess.run(command, cwd=out / "course", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        "batch": out / "feedback" / STUDENT / f"{ASSIGNMENT}.html",
        "course": out / "course" / "feedback" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.html",
    }


def _summary(page: Path) -> list[str]:
    toc = re.search(r'<div id="toc">(.*?)</div>', page.read_text(), re.DOTALL).group(1)
    return re.findall(r'<li><a href="#[^"]+">([^<]*)</a>', toc)


@pytest.mark.parametrize("which", ["batch", "course"])
def test_the_summary_names_each_question(pages, which):
    names = [name for name in CHECKS if assignment_of(name) == ASSIGNMENT]
    expected = [f"{name} ({cases} cases)" for name in names for cases in ("visible", "hidden")]
    assert sorted(_summary(pages[which])) == sorted(expected)  # each once, none left as "Test cell"


@pytest.mark.parametrize("which", ["batch", "course"])
def test_the_page_wraps_outputs_and_shows_no_widget_repr(pages, which):
    page = pages[which]
    assert "white-space: pre-wrap" in page.read_text()
    text = page_text(page)
    assert "FAILED" in text and "Looks like: " in text
    assert "VBox(" not in text and "HBox(" not in text
    assert 'Hints and the solution: the widget in the notebook, or study("07.rmsnorm", text=True)' in text


@pytest.mark.parametrize("which", ["batch", "course"])
def test_the_page_is_one_file_with_its_maths_written_in(pages, which):
    html = pages[which].read_text()
    assert "<script" not in html and "MathJax" not in html  # nothing to load, nothing to run
    loaded = re.findall(r'src="(?!data:)[^"]*"|<link[^>]*href="[^"]*"', html)  # links are only followed
    assert not loaded  # nothing beside it to keep, nothing online
    assert html.count("<math ") > 10 and 'display="block"' in html
    assert r"\sqrt" not in html and r"\frac" not in html  # no formula left as LaTeX


def test_templates_compiled_once_per_process_make_the_same_page(pages, monkeypatch):
    """nbgrader makes an exporter per page; the course's keeps its compiled templates for the next
    (nbconvert's own template here: the course's needs what nbgrader's preprocessors add)."""
    course = pages["course"].parents[3]
    autograded = nbformat.read(course / "autograded" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4)
    monkeypatch.setattr(feedback.COMPILED, "_compiled", {})
    compiled = []
    dump = feedback.COMPILED.dump_bytecode
    monkeypatch.setattr(
        feedback.COMPILED, "dump_bytecode", lambda bucket: (compiled.append(bucket.key), dump(bucket))
    )
    first = feedback.FeedbackExporter().from_notebook_node(autograded)[0]
    assert compiled and first == HTMLExporter().from_notebook_node(autograded)[0]
    once = len(compiled)
    assert feedback.FeedbackExporter().from_notebook_node(autograded)[0] == first
    assert len(compiled) == once  # the second page's templates were read, not compiled again


def test_the_course_page_is_the_document_nbconverts_own_exporter_makes(pages):
    """FeedbackExporter skips HTMLExporter's parse of the whole finished page: generate_feedback
    with nbconvert's exporter gives the same elements, attributes and text, pictures described."""
    course_page = pages["course"]
    ours = course_page.read_text()
    nbgrader = Path(sys.executable).parent / "nbgrader"
    command = [str(nbgrader), "generate_feedback", ASSIGNMENT, f"--student={STUDENT}", "--force"]
    nbconverts = "--GenerateFeedback.exporter_class=nbconvert.exporters.HTMLExporter"
    try:
        done = subprocess.run(
            [*command, nbconverts], cwd=course_page.parents[3], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        theirs = course_page.read_text()
    finally:
        course_page.write_text(ours)  # the page the other tests read
    assert document(ours) == document(theirs)
    assert ours.count("<img ") == ours.count('<img alt="No description has been provided for this image"') > 0


def test_a_formula_keeps_only_mathml_and_what_cannot_be_written_stays_text():
    assert mathml(r"\sqrt{x_i^2}", display=False).startswith(
        '<math xmlns="http://www.w3.org/1998/Math/MathML"'
    )
    assert "<mover>" in mathml(r"a \xrightarrow{\text{block}_1} b", display=True)  # the converter lacks it
    # Markup in a formula's text reaches the page as text, never as an element
    assert mathml(r"\text{<img src=x onerror=alert(1)>}", display=False) == (
        r"$\text{&lt;img src=x onerror=alert(1)&gt;}$"
    )
    assert mathml(r"\href{javascript:alert(1)}{x}", display=False) == r"$\href{javascript:alert(1)}{x}$"
    assert mathml(r"x_{", display=True) == "$$x_{$$"  # LaTeX the converter cannot read


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)")
def test_in_a_browser_offline_the_maths_is_drawn_and_verdicts_wrap(pages, tmp_path):
    """Each page handed out alone: copied into a folder of its own, opened with no network."""
    alone = tmp_path / "handed-out"
    alone.mkdir()
    copies = [shutil.copyfile(page, alone / f"{which}-{page.name}") for which, page in pages.items()]
    done = subprocess.run(
        [sys.executable, str(CANARY), "--read", f"--screenshots={tmp_path}", *map(str, copies)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for page, seen in json.loads(done.stdout).items():
        maths = seen["maths"]
        assert maths["formulas"] > 10 and maths["drawn"] == maths["formulas"] and maths["raw"] == 0, page
        assert seen["scrolling"] == 0, page  # every output fits its box at 1280 pixels
        assert seen["outside"] == [] and seen["pwned"] is None, page
    assert len(list(tmp_path.glob("*.png"))) == len(pages)  # what the student and instructor see


def test_a_question_is_named_by_the_checks_its_cell_calls():
    assert question('check("07.rmsnorm", RMSNorm)') == "07.rmsnorm (visible cases)"
    hidden = '### BEGIN HIDDEN TESTS\ncheck("07.rmsnorm", RMSNorm, hidden=True)\n### END HIDDEN TESTS'
    assert question(hidden) == "07.rmsnorm (hidden cases)"
    assert question('check("00.a", f)\ncheck("00.b", g)') == "00.a (visible cases), 00.b (visible cases)"
    assert question("print(1)") is None and question("check(") is None


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)")
def test_formgrader_lists_the_graded_class(pages, tmp_path):
    """JupyterLab started in OUT/course, as docs/instructors.md, "Hand grading" says: formgrader lists
    the assignment and the student the batch graded."""
    course = pages["course"].parents[3]
    with running_lab(course, cwd=course) as (base, token):
        status, output = browse(f"{base}/formgrader?token={token}", tmp_path / "formgrader.png", "formgrader")
    assert status == 0, output[-3000:]
    assert (tmp_path / "formgrader-assignments.png").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)")
def test_formgrader_offline_saves_a_hand_grade_that_the_next_run_reports(pages, tmp_path):
    """Formgrader opened on OUT/course with no network beyond the Jupyter server (nbconvert's pages
    load MathJax from a CDN, and without it formgrader's script stops): a score and a comment given
    through the page reach grades.csv and the student's page at the next run."""
    course = pages["course"].parents[3]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, STUDENT).id
    with running_lab(course, cwd=course) as (base, token):
        url = f"{base}/formgrader/submissions/{submission}/?index=0&token={token}"
        status, output = browse(url, tmp_path / "hand-grade.png", "hand grade")
    assert status == 0, output[-3000:]
    [row] = grading.report(course.parent)
    assert dict(row.questions)["07.rmsnorm_norm (visible cases)"] == 1.5
    with (course.parent / "grades.csv").open() as file:
        assert next(csv.DictReader(file))["07.rmsnorm_norm (visible cases)"] == "1.5"
    page = pages["batch"].read_text()
    assert "score given by hand" in page and "see me" in page


def test_a_page_that_cannot_be_made_gives_the_score_alone_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    """nbgrader failing to render one student's page costs that page its details, never the run,
    and never shows grading's page, whose score is not the grade."""
    run = tmp_path / "work" / "runs" / "ann" / ASSIGNMENT
    run.mkdir(parents=True)
    (run / "feedback.html").write_text("<h4>07_rmsnorm (Score: 6.0 / 6.0)</h4>")
    monkeypatch.setattr(feedback, "NbGraderAPI", _FailingAPI)
    late = Result("ann", ASSIGNMENT, 6.0, 6.0, "graded", late=True, penalty=0.6)
    feedback.write_pages(tmp_path, [late], Config())
    page = (tmp_path / "feedback" / "ann" / f"{ASSIGNMENT}.html").read_text()
    assert "07_rmsnorm: 5.4 / 6" in page and "Score: 6.0" not in page
    assert "no feedback page could be made" in capsys.readouterr().err


class _FailingAPI:
    def __init__(self, config):
        pass

    def generate_feedback(self, *_, **__):
        return {"success": False, "log": "boom"}
