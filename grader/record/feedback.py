"""Feedback pages as a student and an instructor read them.

nbgrader's generate_feedback renders each graded notebook with the course's template,
grader/templates/course_feedback, which is nbgrader's feedback template with three changes:

- the summary at the top names the checks each test cell runs ("07.rmsnorm (hidden cases)"),
  where nbgrader writes "Test cell" for every one (NameQuestions gives the template the names);
- outputs wrap, so the whole verdict of a failed check (got, expected) is read without scrolling;
- the maths of the markdown is MathML, written into the page (`mathml`), where nbgrader loads MathJax
  from a CDN: one HTML file is the whole page, read offline, handed out alone, and opening it runs
  no script and asks nothing of the network. Browsers draw MathML themselves (Chrome 109+,
  Firefox, Safari).

The page is otherwise nbgrader's, and as safe: what of a student's notebook reaches it is
cleaned before grades are saved (clean.py), and HTML in outputs is sanitised. The MathML written
for a formula keeps only MathML's own elements and attributes (`MATHML_ELEMENTS`): a formula is
text its writer controls, a student's markdown included.
"""

import hashlib
import html
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import jinja2
import nbgrader
from jinja2 import pass_context
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.preprocessors.base import NbGraderPreprocessor as Preprocessor
from traitlets.config import Config

from autograder.cells import check_calls, grade_id, is_test_cell
from autograder.printable import shown, shown_lines
from grader import TEMPLATES
from grader.grades import Result
from grader.record.record import AUTOMATIC_PAGE, HandGrades, plain_page

TEMPLATE = "course_feedback"  # its conf.json names nbgrader's "feedback" as its base
# Not index.html.j2: the course's page extends nbgrader's index.html.j2, found after it in the path.
TEMPLATE_FILE = "course_feedback.html.j2"
NBGRADER_TEMPLATES = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"


def exporter_config() -> Config:
    """HTMLExporter's settings for feedback pages: the course's template, and markdown whose maths
    is MathML.

    Set under GenerateFeedback, so that they reach the feedback exporter alone: nbgrader's API
    sets the global HTMLExporter.template_name to its own, and formgrader to its own.
    """
    return Config(
        template_name=TEMPLATE,
        template_file=TEMPLATE_FILE,
        extra_template_basedirs=[str(TEMPLATES), str(NBGRADER_TEMPLATES)],
        filters={"markdown2html": "grader.record.feedback.markdown_with_mathml"},
    )


class CompiledTemplates(jinja2.BytecodeCache):
    """The templates of this process's feedback pages, compiled once: nbgrader makes an exporter,
    and with it a Jinja environment, for every page. Jinja checks each template's source against
    the one it compiled, so an edited template is compiled again."""

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if (compiled := self._compiled.get(bucket.key)) is not None:
            bucket.bytecode_from_string(compiled)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()


COMPILED = CompiledTemplates()


# An <img> tag without an alt attribute, as the template writes an output's picture.
IMAGE_WITHOUT_ALT = re.compile(r"<img\b(?![^>]*\balt=)")
NO_ALT = '<img alt="No description has been provided for this image"'  # nbconvert's own words


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter, its templates compiled once per process (0.15 s of the 0.7 s of
    CPU a page costs) and without its BeautifulSoup pass over the finished page (0.2-0.4 s)."""

    def _create_environment(self) -> jinja2.Environment:
        environment = super()._create_environment()
        environment.bytecode_cache = COMPILED
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        """HTMLExporter's page as its own method makes it; where that method would then parse the
        whole page (240-420 kB) only to give pictures alternative text (the course's template has
        none of the JupyterLab cells it also makes focusable), that text is added by a pattern."""
        if self.template_name != TEMPLATE:
            return super().from_notebook_node(nb, resources, **kw)
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        self.register_filter(
            "highlight_code",
            self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)),
        )
        resources = self._init_resources(resources)
        self.register_filter(
            "filter_data_type",
            WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources),
        )
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return IMAGE_WITHOUT_ALT.sub(NO_ALT, page), resources


# ------------------------------------------------------------------------------ maths as MathML

# MathML's presentation elements and the attributes latex2mathml writes: a formula keeps these
# and nothing else (no script, no link, no event handler can reach the page through one).
MATHML_ELEMENTS = frozenset(
    "math mrow mi mn mo ms mtext mspace msub msup msubsup mfrac msqrt mroot mstyle mover munder "
    "munderover mtable mtr mtd mpadded mphantom menclose merror mfenced semantics annotation".split()
)
MATHML_ATTRIBUTES = frozenset(
    "display displaystyle scriptlevel mathvariant stretchy fence separator form lspace rspace width "
    "height depth linethickness accent accentunder columnalign rowspacing columnspacing columnlines "
    "rowlines notation minsize maxsize movablelimits symmetric largeop linebreak open close "
    "separators encoding".split()
)
MATHML_NAMESPACE = "{http://www.w3.org/1998/Math/MathML}"


def mathml(latex: str, display: bool) -> str:
    """`latex` as one <math> element; where it cannot be written as MathML (LaTeX it does not
    know, or anything but MathML's own elements), the LaTeX itself as text, between its delimiters."""
    try:
        written = latex_to_mathml(_arrows_with_labels(latex), display="block" if display else "inline")
        return _serialised(ElementTree.fromstring(written))
    except Exception:  # noqa: BLE001 - any failure of the converter leaves the formula as text
        delimiter = "$$" if display else "$"
        return html.escape(f"{delimiter}{latex}{delimiter}", quote=False)


def _arrows_with_labels(latex: str) -> str:
    """`\\xrightarrow{label}`, which the converter does not know, as the same arrow with the label over it."""
    while (start := latex.find("\\xrightarrow{")) >= 0:
        opening = start + len("\\xrightarrow")
        depth, end = 0, opening
        for end in range(opening, len(latex)):
            depth += {"{": 1, "}": -1}.get(latex[end], 0)
            if depth == 0:
                break
        else:
            raise ValueError("unbalanced braces")
        label = latex[opening + 1 : end]
        latex = f"{latex[:start]}\\overset{{{label}}}{{\\longrightarrow}}{latex[end + 1 :]}"
    return latex


def _serialised(element: ElementTree.Element) -> str:
    """MathML with only the elements and attributes allowed, every text escaped; ValueError for
    anything else."""
    name = element.tag.removeprefix(MATHML_NAMESPACE)
    if (
        name not in MATHML_ELEMENTS
        or element.tag.startswith("{")
        and not element.tag.startswith(MATHML_NAMESPACE)
    ):
        raise ValueError(f"not MathML: {element.tag}")
    attributes = ""
    for key, value in element.attrib.items():
        if key not in MATHML_ATTRIBUTES:
            raise ValueError(f"not a MathML attribute: {key}")
        attributes += f' {key}="{html.escape(value)}"'
    if name == "math":
        attributes = ' xmlns="http://www.w3.org/1998/Math/MathML"' + attributes
    inner = html.escape(element.text or "", quote=False)
    for child in element:
        inner += _serialised(child) + html.escape(child.tail or "", quote=False)
    return f"<{name}{attributes}>{inner}</{name}>"


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with each formula as MathML instead of LaTeX for MathJax."""

    def inline_math(self, body: str) -> str:
        return mathml(body, display=False)

    def block_math(self, body: str) -> str:
        return mathml(body, display=True)

    def multiline_math(self, text: str) -> str:
        for opening, closing in (("$$", "$$"), ("\\[", "\\]")):
            if text.startswith(opening) and text.endswith(closing):
                return mathml(text[len(opening) : -len(closing)], display=True)
        return mathml(text, display=True)  # \begin{...}...\end{...}: the converter reads environments

    def latex_environment(self, name: str, body: str) -> str:
        return mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


@pass_context
def markdown_with_mathml(context, source: str) -> str:
    """The markdown2html filter of feedback pages: nbconvert's, with the maths as MathML."""
    cell = context.get("cell", {})
    renderer = MathMLRenderer(escape=False, attachments=cell.get("attachments", {}))
    return MarkdownWithMath(renderer=renderer).render(source)


# ------------------------------------------------------------------------------ the summary


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


class NameHandGrades(Preprocessor):
    """resources["course_by_hand"]: grade_id -> the automatic score, for each test cell whose score
    was given by hand, so that the summary says which scores an instructor gave."""

    def preprocess(self, nb, resources):
        nbgrader = resources["nbgrader"]
        with Gradebook(nbgrader["db_url"]) as gradebook:
            notebook = gradebook.find_submission_notebook(
                nbgrader["notebook"], nbgrader["assignment"], nbgrader["student"]
            )
            resources["course_by_hand"] = {
                grade.name: grade.auto_score for grade in notebook.grades if grade.manual_score is not None
            }
        return nb, resources


# ------------------------------------------------------------------------------ the pages of OUT

# In work/runs/<student>/<nb>/: the page with hand grades and the late penalty, and what it shows.
FINAL_PAGE, FINAL_PAGE_KEY = "feedback-final.html", "feedback-final.key"


def write_pages(out: Path, rows: list[Result], course_config: Config) -> None:
    """OUT/feedback/<student>/<nb>.html for each graded row, showing that row's score.

    A submission with neither a grade or comment given by hand nor a late penalty gets the page
    its grading wrote; the others get a page generated from OUT/course, which holds both (nbgrader
    names the penalty, the course's summary names the hand grades). Such a page is made again only
    when what it shows changes (`_shown`), so a re-run costs nothing for the pages it keeps.
    """
    ledger = HandGrades(out).entries
    final, to_generate = [], []
    for row in rows:
        if row.status not in ("graded", "needs_manual_grading"):
            continue
        run = out / "work" / "runs" / row.student / row.notebook
        page = out / "feedback" / row.student / f"{row.notebook}.html"
        automatic = run / AUTOMATIC_PAGE
        if not automatic.exists() and page.exists() and not (run / FINAL_PAGE).exists():
            shutil.copyfile(page, automatic)  # graded by 0.15 or earlier: the page there is grading's
        hand = ledger.get(f"{row.student}/{row.notebook}")
        if not (hand or row.penalty):
            _publish(automatic, page)
            continue
        final.append((run / FINAL_PAGE, page))
        key = _shown(row, hand, automatic)
        if _read_text(run / FINAL_PAGE_KEY) != key:
            to_generate.append((row, run, key))
    if to_generate:
        api = NbGraderAPI(config=course_config)
        for row, run, key in to_generate:
            made = api.generate_feedback(row.notebook, row.student, force=True)
            generated = out / "course" / "feedback" / row.student / row.notebook / f"{row.notebook}.html"
            if made["success"] and generated.exists():
                shutil.copyfile(generated, run / FINAL_PAGE)
                (run / FINAL_PAGE_KEY).write_text(key)
                continue
            # Never grading's page, whose score is not the grade; the next run tries again.
            log = made.get("log") or ""
            print(
                f"warning: {shown(row.student)}/{row.notebook}: no feedback page could be made from "
                f"OUT/course; the student's page gives the score alone:\n{shown_lines(log)[-2000:]}",
                file=sys.stderr,
            )
            (run / FINAL_PAGE).write_text(_score_only_page(row))
            (run / FINAL_PAGE_KEY).unlink(missing_ok=True)
    for source, page in final:
        _publish(source, page)


def _score_only_page(row: Result) -> str:
    score = f"{row.final_score:g} / {row.max_score:g}" if row.score is not None else "none"
    text = "The page with each check's verdict could not be made; please ask your instructor."
    return plain_page(row.notebook, score, text)


def _shown(row: Result, hand: dict | None, automatic: Path) -> str:
    """What a page generated from OUT/course shows beyond grading's own page: its scores, its hand
    grades and comments, the penalty, and that page (the file graded and the template)."""
    template = [_digest(path) for path in sorted((TEMPLATES / TEMPLATE).iterdir())]
    shown = [row.score, row.max_score, row.penalty, row.questions, hand, _digest(automatic), template]
    return hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def _read_text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _publish(source: Path, page: Path) -> None:
    """Copy `source` to `page` unless it holds the same bytes; without a source, no page (graded
    without one: the log says why)."""
    if not source.exists():
        page.unlink(missing_ok=True)
    elif _digest(page) != _digest(source):
        page.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, page)
