"""Feedback pages as a student and an instructor read them.

nbgrader's generate_feedback renders each graded notebook with the course's template,
autograder/templates/course_feedback, which is nbgrader's feedback template with three changes:

- the summary at the top names the checks each test cell runs ("07.rmsnorm (hidden cases)"),
  where nbgrader writes "Test cell" for every one (NameQuestions gives the template the names);
- outputs wrap, so the whole verdict of a failed check (got, expected) is read without scrolling;
- MathJax is loaded from a copy beside the pages (install_mathjax), where nbgrader loads it from
  a CDN: the maths of a page opened offline renders, and opening a page asks nothing of the network.
  MathJax 2 (the jupyter-server-mathjax package's) writes MathML, which browsers draw themselves:
  its HTML output needs web fonts, which a browser does not load for a page opened from disk.

The page is otherwise nbgrader's, and as safe: what of a student's notebook reaches it is
cleaned before grades are saved (clean.py), and HTML in outputs is sanitised. MathJax typesets
only the release's own markdown: a student's cells and every output are shown in <pre>, which
MathJax skips, and its Safe extension is loaded all the same.
"""

import importlib.util
import shutil
from pathlib import Path

import nbgrader
from nbgrader.preprocessors.base import NbGraderPreprocessor as Preprocessor
from traitlets.config import Config

from .cells import check_calls, grade_id, is_test_cell

TEMPLATES = Path(__file__).with_name("templates")
TEMPLATE = "course_feedback"  # its conf.json names nbgrader's "feedback" as its base
# Not index.html.j2: the course's page extends nbgrader's index.html.j2, found after it in the path.
TEMPLATE_FILE = "course_feedback.html.j2"
NBGRADER_TEMPLATES = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
# Beside the students' folders of a feedback folder; no student id starts with "_" (inbox.py).
MATHJAX_FOLDER = "_mathjax"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"  # the combined configuration the package ships
# Not copied: web fonts, which a browser refuses to a page opened from disk (the pages use MathJax's
# MathML output, drawn by the browser), and the SVG output's font data, shipped without that output.
MATHJAX_LEFT_OUT = ("fonts", "jax/output/SVG")


def exporter_config(page_depth: int) -> Config:
    """HTMLExporter's settings for feedback pages read `page_depth` folders below their feedback
    folder (OUT/feedback/<student>/<nb>.html: 1; nbgrader's feedback/<student>/<nb>/<nb>.html: 2).

    Set under GenerateFeedback, so that they reach the feedback exporter alone: nbgrader's API
    sets the global HTMLExporter.template_name to its own, and formgrader to its own.
    """
    return Config(
        template_name=TEMPLATE,
        template_file=TEMPLATE_FILE,
        extra_template_basedirs=[str(TEMPLATES), str(NBGRADER_TEMPLATES)],
        mathjax_url="../" * page_depth + f"{MATHJAX_FOLDER}/MathJax.js?config={MATHJAX_CONFIG}",
    )


def mathjax_source() -> Path:
    """MathJax 2 as the jupyter-server-mathjax package ships it (MathJax.js, config/, jax/, ...)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")  # found, not imported: no server code runs
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("jupyter-server-mathjax is not installed (requirements.lock pins it)")
    return Path(spec.submodule_search_locations[0]) / "static"


def install_mathjax(feedback: Path) -> Path:
    """Copy MathJax into `feedback`/_mathjax, where the pages of that folder load it from; kept
    when it is there already (a re-run)."""
    target = feedback / MATHJAX_FOLDER
    if (target / "MathJax.js").exists():
        return target
    partial = feedback / f"{MATHJAX_FOLDER}.partial"
    feedback.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(partial, ignore_errors=True)
    source = mathjax_source()

    def left_out(folder: str, names: list[str]) -> set[str]:
        here = Path(folder).relative_to(source)
        return {name for name in names if (here / name).as_posix() in MATHJAX_LEFT_OUT}

    shutil.copytree(source, partial, ignore=left_out)
    partial.rename(target)  # whole or absent: a killed run leaves no half copy behind
    return target


def question(source: str) -> str | None:
    """What a test cell grades, from the check calls of its (instructor's) source: e.g.
    "07.rmsnorm (hidden cases)"; None when the source names no check."""
    try:
        calls = check_calls(source)
    except (SyntaxError, ValueError):
        return None
    return ", ".join(f"{name} ({'hidden' if hidden else 'visible'} cases)" for name, hidden in calls) or None


class NameQuestions(Preprocessor):
    """resources["course_questions"]: grade_id -> what each test cell grades, for the summary.

    Runs before HideHiddenTests, which takes the hidden checks' calls out of the source. The
    source is the release's: nbgrader restored every test cell before grading.
    """

    def preprocess(self, nb, resources):
        resources["course_questions"] = {
            grade_id(cell): question(cell.source) or grade_id(cell) for cell in nb.cells if is_test_cell(cell)
        }
        return nb, resources
