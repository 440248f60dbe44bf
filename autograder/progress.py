"""Where a student stands: the questions of each notebook, with their labels, and which pass.

Each question's labels are written once, in the source notebook, on a line under its heading:

    > **Difficulty** ●●○○○ · **Importance** ★★★★☆ · **about 20 min**

(Characters every font has: a colour-emoji font is not installed everywhere a page is read.)

A question is a labelled markdown cell and the visible checks whose test cells follow it, up to
the next labelled cell. `course build` stores every notebook's questions in
autograder/expected/questions.json, so that a student's copy (which has no solutions/) knows them.

Two summaries read it:
- `progress("07_rmsnorm")`, the last cell of each notebook: the checks run in this kernel;
- `course progress [FOLDER]`: every notebook of a working copy, from the verdicts its test cells
  show since they were last run and saved (a self-learner's own record, not a grade).

A saved notebook is anyone's to edit, so `course progress` reads it as data from a stranger: bounded,
checked against nbformat's schema (else "could not be read", never done), a verdict only from the
test cell that calls its check, none for an answer cell left as released, and everything it prints
escaped. What a test cell's saved output claims cannot be checked without running the notebook:
`course check` does that (student.py).
"""

import hashlib
import json
import re
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .cells import check_calls, grade_id, is_test_cell, nbgrader_meta
from .core import STUB
from .paths import EXPECTED
from .printable import shown

QUESTIONS = EXPECTED / "questions.json"
LABEL = re.compile(
    r"^> \*\*Difficulty\*\* (●*)(○*) · \*\*Importance\*\* (★*)(☆*) · \*\*about (\d+) min\*\*$", re.M
)
# The head of a verdict as a check prints it ("[07.rmsnorm] passed (1/1):") and as a failed
# check's error shows it ("CheckFailed: [07.rmsnorm] FAILED (0.75/1):").
VERDICT = re.compile(r"\[(\d\d\.\w+)\] (passed|FAILED) \(([\d.]+)/([\d.]+)\)")
VERDICT_LINE = re.compile(r"^" + VERDICT.pattern, re.MULTILINE)


@dataclass(frozen=True)
class Question:
    title: str  # the heading of its markdown cell, e.g. "Question 1: `RMSNorm._norm`"
    checks: tuple[str, ...]  # its visible checks, in notebook order
    difficulty: int  # 1 to 5
    importance: int  # 1 to 5
    minutes: int  # about how long it takes

    @property
    def labels(self) -> str:
        return f"difficulty {self.difficulty}/5, importance {self.importance}/5, ~{self.minutes} min"


def label_of(markdown: str, where: str) -> tuple[int, int, int] | None:
    """(difficulty, importance, minutes) of a markdown cell's label line, None if it has none."""
    found = LABEL.findall(markdown)
    if not found:
        if "**Difficulty**" in markdown:
            raise ValueError(f"{where}: a label line that does not read as {LABEL.pattern}")
        return None
    if len(found) > 1:
        raise ValueError(f"{where}: {len(found)} label lines in one cell")
    hard, easy, important, unimportant, minutes = found[0]
    if len(hard) + len(easy) != 5 or len(important) + len(unimportant) != 5 or not hard or not important:
        raise ValueError(f"{where}: difficulty and importance take five symbols, at least one filled")
    return len(hard), len(important), int(minutes)


def heading_of(markdown: str) -> str:
    """The question's heading: the cell's first that names a question or a check (a cell may open
    with a section's heading), else its first."""
    headings = [line.lstrip("#").strip() for line in markdown.splitlines() if line.startswith("#")]
    named = [h for h in headings if h.startswith(("Question", "Check"))]
    return (named or headings or [""])[0]


def read_questions(notebook, where: str) -> list[Question]:
    """The questions of a source or student notebook, in order; raises where a visible check has no
    question or a label no check."""
    questions: list[dict] = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and (label := label_of(cell.source, f"{where}, cell {index}")):
            if questions and not questions[-1]["checks"]:
                raise ValueError(f"{where}: the question {questions[-1]['title']!r} has no visible check")
            difficulty, importance, minutes = label
            questions.append(
                {"title": heading_of(cell.source), "checks": [], "difficulty": difficulty}
                | {"importance": importance, "minutes": minutes}
            )
        elif is_test_cell(cell):
            for name, hidden in check_calls(cell.source):
                if hidden:
                    continue
                if not questions:
                    raise ValueError(f"{where}: the check {name} comes before any labelled question")
                questions[-1]["checks"].append(name)
    if questions and not questions[-1]["checks"]:
        raise ValueError(f"{where}: the question {questions[-1]['title']!r} has no visible check")
    return [Question(**{**q, "checks": tuple(q["checks"])}) for q in questions]


def write_questions(path: Path, by_notebook: dict[str, list[Question]]) -> None:
    data = {notebook: [asdict(q) for q in questions] for notebook, questions in sorted(by_notebook.items())}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def course_questions(path: Path = QUESTIONS) -> dict[str, list[Question]]:
    """Every notebook's questions, as `course build` stored them."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `course build` to create it")
    data = json.loads(path.read_text(encoding="utf-8"))
    return {nb: [Question(**{**q, "checks": tuple(q["checks"])}) for q in qs] for nb, qs in data.items()}


# ------------------------------------------------------------------------------ the summaries


@dataclass(frozen=True)
class Seen:
    """A check's last verdict: passed or not, the visible points it earned, and whether the answer
    was still the unfilled stub (a question not started, not a failed one)."""

    passed: bool
    points: float
    max_points: float
    stub: bool = False


def question_state(question: Question, seen: dict[str, Seen]) -> str:
    """'passed' when every check of the question passed, 'failed' when one ran and failed, else 'to do'."""
    verdicts = [seen.get(name) for name in question.checks]
    if all(v is not None and v.passed for v in verdicts):
        return "passed"
    return "failed" if any(v is not None and not v.passed and not v.stub for v in verdicts) else "to do"


@dataclass(frozen=True)
class Standing:
    """One notebook's row of the progress table."""

    notebook: str
    passed: int
    total: int
    points: float
    max_points: float
    minutes_left: int
    next_question: Question | None
    problem: str = ""  # shown instead of the next question: the notebook is missing or unreadable


def standing(notebook: str, questions: list[Question], seen: dict[str, Seen]) -> Standing:
    from .checks import CHECKS

    states = [question_state(q, seen) for q in questions]
    names = [name for q in questions for name in q.checks]
    left = [q for q, state in zip(questions, states, strict=True) if state != "passed"]
    return Standing(
        notebook,
        passed=states.count("passed"),
        total=len(questions),
        points=sum(seen[n].points for n in names if n in seen),
        max_points=sum(CHECKS[n].points for n in names),
        minutes_left=sum(q.minutes for q in left),
        next_question=left[0] if left else None,
    )


def _number(value: float) -> str:
    return f"{value:g}"


def table(rows: list[Standing]) -> str:
    """The progress table, plain text for a terminal or a notebook's output, with a total line."""
    header = ("notebook", "questions passed", "visible points", "time left", "next question")
    lines = [header]
    for row in rows:
        upcoming = row.problem or ("all done" if row.next_question is None else _next(row.next_question))
        lines.append(
            (
                shown(row.notebook),
                f"{row.passed}/{row.total}",
                f"{_number(row.points)}/{_number(row.max_points)}",
                f"~{row.minutes_left} min",
                upcoming,
            )
        )
    if len(rows) > 1:
        total = (
            "all",
            f"{sum(r.passed for r in rows)}/{sum(r.total for r in rows)}",
            f"{_number(sum(r.points for r in rows))}/{_number(sum(r.max_points for r in rows))}",
            f"~{sum(r.minutes_left for r in rows)} min",
            "",
        )
        lines.append(total)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)) + "  " + line[-1]
        for line in lines
    ).rstrip()


def _next(question: Question) -> str:
    return shown(f"{_plain(question.title)} ({question.labels})")


def _plain(title: str) -> str:
    """A heading as short plain text: a signature's arguments left out (`f(x, dim=-1)` -> f()), no
    code quotes, no maths delimiters."""
    return re.sub(r"`([^`(]*)\([^`]*\)`", r"\1()", title).replace("`", "").replace("$", "")


# ----------------------------------------------------------------- in the notebook: this kernel

_verdicts: dict[str, Seen] = {}  # check name -> its last verdict in this kernel


def record(verdict) -> None:
    """Called by `check` in a student's kernel, passed or failed."""
    _verdicts[verdict.check] = Seen(
        verdict.passed, verdict.points, verdict.max_points, STUB in verdict.message
    )


def progress(notebook: str) -> None:
    """Print this notebook's questions and where each stands in this kernel (the checks run since
    it started), with the next question to do. Prints nothing in a grading kernel."""
    from . import exchange

    if exchange.directory() is not None:
        return
    every = course_questions()
    questions = every[notebook]
    row = standing(notebook, questions, _verdicts)
    lines = [f"{notebook}: {row.passed} of {row.total} questions pass in this session "]
    lines[0] += f"({_number(row.points)}/{_number(row.max_points)} visible points)."
    for question in questions:
        state = question_state(question, _verdicts)
        lines.append(f"  {state:<7} {_plain(question.title)} ({question.labels})")
    if row.next_question is None:
        lines.append("Every question passes its visible checks; hidden tests run when your work is graded.")
    else:
        lines.append(f"Next: {_next(row.next_question)}.")
    lines.append(
        "A check not run since the kernel started counts as to do. In a shell, `course progress` "
        f"sums up all {len(every)} notebooks from what they showed when last saved."
    )
    print("\n".join(lines))


# ------------------------------------------------------------- from a shell: a working copy

MAX_NOTEBOOK_BYTES = 50 * 2**20  # a working copy's notebook, saved outputs included; larger is not read


class Unreadable(ValueError):
    """A file that is not a notebook of nbformat 4 as its schema has it; the message says why."""


def read_notebook(path: Path):
    """A saved notebook, read as data from a stranger: at most MAX_NOTEBOOK_BYTES, JSON that Python's
    recursion can parse, nbformat 4 with every field of the type its schema gives. Raises Unreadable
    (or OSError) otherwise: a malformed notebook is never half read."""
    import nbformat

    with path.open("rb") as file:
        raw = file.read(MAX_NOTEBOOK_BYTES + 1)
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise Unreadable(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise Unreadable("not a notebook: its JSON is not an object")
        version = data.get("nbformat"), data.get("nbformat_minor")
        if [type(v) for v in version] != [int, int] or version[0] != 4:
            raise Unreadable(f"not a notebook of nbformat 4: its version reads {repr(version)[:80]}")
        with warnings.catch_warnings():  # of ids it adds, say: the schema's answer is the one that counts
            warnings.simplefilter("ignore")
            nbformat.validate(data, relax_add_props=True)  # a key an editor adds is no harm; a type is
        return nbformat.v4.to_notebook_json(data)  # multi-line fields joined, as nbformat.read does
    except Unreadable:
        raise
    except (ValueError, RecursionError, nbformat.ValidationError) as error:  # ValueError: bad JSON too
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise Unreadable(reason[:200]) from None


def test_cells(notebook) -> list[tuple[object, list[tuple[str, bool]]]]:
    """(cell, its check calls) of each test cell: nbgrader's test cells; in a notebook whose nbgrader
    metadata an editor (Colab) dropped, the cells that call check()."""

    def calls(cell) -> list[tuple[str, bool]]:
        try:
            return check_calls(cell.source) if cell.cell_type == "code" else []
        except (SyntaxError, ValueError):  # a cell of the student's own that is not a test cell
            return []

    marked = [cell for cell in notebook.cells if is_test_cell(cell)]
    return [(cell, found) for cell in marked or notebook.cells if (found := calls(cell))]


def seen_in(notebook) -> dict[str, Seen]:
    """The verdicts a saved notebook's test cells show, the last one of each check in cell order:
    only in the cell that calls that check, only in the form `check` gives it (printed when passed,
    raised as CheckFailed when not), and none for a check whose answer cell is still as released,
    whatever its outputs say."""
    from .checks import CHECKS

    released = {grade_id(cell) for cell in notebook.cells if _as_released(cell)}
    seen: dict[str, Seen] = {}
    for cell, calls in test_cells(notebook):
        names = {n for n, hidden in calls if not hidden and n in CHECKS}
        names -= {n for n in names if CHECKS[n].answer_cell in released}
        for output in cell.get("outputs", []):
            # Only a verdict's head as `check` writes it: a line of its own when printed, the start of
            # CheckFailed's message when raised; what follows may quote the student's own text.
            if output.output_type == "stream" and output.name == "stdout":
                text, heads = output.text, VERDICT_LINE.finditer(output.text)
            elif output.output_type == "error" and output.ename == "CheckFailed":
                text, heads = output.evalue, [VERDICT.match(output.evalue)]
            else:
                continue
            found = {}
            for head in heads:
                if head and head[1] in names:
                    found.setdefault(head[1], head)
            for name, head in found.items():
                seen[name] = Seen(head[2] == "passed", float(head[3]), float(head[4]), STUB in text)
    return seen


def _as_released(cell) -> bool:
    """An answer cell whose source is still the release's: the checksum nbgrader wrote into it then
    still matches (nbgrader.utils.compute_checksum, which a student's copy does without)."""
    meta = nbgrader_meta(cell)
    if not meta.get("solution") or not isinstance(meta.get("checksum"), str):
        return False
    parts = [cell.source, cell.cell_type, str(meta.get("grade", False)), str(meta["solution"]), "False"]
    parts.append(str(meta.get("grade_id")))
    try:
        if meta.get("grade"):
            parts.append(str(float(meta.get("points"))))
    except (TypeError, ValueError):
        return False
    return hashlib.md5("".join(parts).encode(), usedforsecurity=False).hexdigest() == meta["checksum"]


def find_notebook(folder: Path, notebook: str) -> tuple[Path | None, list[Path]]:
    """A working copy's notebook and the other copies passed over: FOLDER/NN_topic/NN_topic.ipynb,
    else FOLDER/notebooks/NN_topic/NN_topic.ipynb, else the last modified NN_topic.ipynb under FOLDER
    (folders whose names start with a dot, such as .venv and .ipynb_checkpoints, left out)."""
    name = f"{notebook}.ipynb"
    for usual in (folder / notebook / name, folder / "notebooks" / notebook / name):
        if usual.is_file():
            return usual, []
    found = [
        p
        for p in folder.rglob(name)
        if not any(part.startswith(".") for part in p.relative_to(folder).parts[:-1]) and p.is_file()
    ]
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return (found[0], found[1:]) if found else (None, [])


def folder_progress(folder: Path) -> tuple[str, list[str], int]:
    """The table for a working copy, a note per notebook that could not be read, and how many of
    the course's notebooks were found. Paths and reasons come from whoever made the folder: shown."""
    rows, notes, found = [], [], 0
    for notebook, questions in course_questions().items():
        seen: dict[str, Seen] = {}
        path, problem = None, "not found in this folder"
        try:
            path, others = find_notebook(folder, notebook)
            if path is not None:
                found += 1
                problem = ""
                if others:
                    also = ", ".join(map(str, others))
                    notes.append(shown(f"{notebook}: read {path}, the last modified; also there: {also}"))
                seen = seen_in(read_notebook(path))
        except Exception as error:  # a notebook or folder that cannot be read: say so, list the others
            problem = "could not be read (see below)" if path is not None else problem
            why = str(error) if isinstance(error, Unreadable) else f"{type(error).__name__}: {error}"
            notes.append(shown(f"{notebook}: could not be read ({why})"))
        rows.append(replace(standing(notebook, questions, seen), problem=problem))
    return table(rows), notes, found
