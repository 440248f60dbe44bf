"""Grade one notebook: what a grading worker does with one submission, from the file's bytes to
its grades, feedback page and log, all returned as data.

    worker = Worker(template, scratch, group, threads)   # once per worker process
    graded = worker.grade(NotebookTask(student, notebook, content, seed, limits))

A worker writes nothing to the output folder: it grades in a folder of its own (`scratch`) and the
batch's process stores what comes back (record.store), so that the same task runs in a process of
this machine or on a Dask worker elsewhere (dispatch.py). The notebook is graded in an nbgrader
course of its own (its own copy of the gradebook), so workers never share a file. Its code runs in a
sandboxed kernel (sandbox.py) started ahead of it (kernels.py); its checks are judged in the
worker's process (preprocessors.JudgedExecute), which never runs student code.
"""

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat
import nbgrader
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI

from autograder.cells import grade_id
from autograder.core import without_words
from autograder.paths import SOLUTIONS
from autograder.printable import shown, shown_json, shown_lines, shown_text
from autograder.sandbox import write_font_list
from grader import build, leave_out
from grader.build import generate_all, nbgrader_config
from grader.grades import Result, failed
from grader.notebook.clean import notebook_metadata
from grader.record.feedback import exporter_config
from grader.record.merged_course import automatic_grades, quiet_gradebook


@dataclass(frozen=True)
class Limits:
    cell_timeout: int = 120  # seconds per cell
    notebook_timeout: int = 900  # seconds for the whole notebook (wall clock)
    output_lines: int = 1000  # nbgrader's LimitOutput keeps at most this many lines per output
    output_bytes: int = 4 * 2**20  # output kept per notebook; the rest is dropped while it runs
    memory_bytes: int = 4 * 2**30  # the kernel's address space (RLIMIT_AS), and its sandbox's memory
    processes: int = 256  # processes and threads of one sandbox, together
    sandboxed: bool = True  # False only when the instructor asks for it (--no-sandbox), or on a platform
    kernel_uid: int = 0  # unsandboxed: the unprivileged user id the kernel runs as (grader/platforms/)


MAX_NOTEBOOK_BYTES = 512 * 2**20  # one notebook file (saved outputs included)
GRADER_FAILED = "the grader could not process this notebook"  # its own fault, not the notebook's
TEMPLATES_KEPT = 4  # generated templates kept in the user's cache (2.3 MB each)
# In a template: the checks course.toml left out, and the grade ids of their cells by assignment
LEFT_OUT = "left_out.json"


@dataclass(frozen=True)
class NotebookTask:
    """One submission to grade, as it travels to a worker."""

    student: str
    notebook: str  # the assignment, e.g. "04_rope"
    path: str  # the submitted file (its copy in OUT/work/inbox), read there by workers of this machine
    seed: int  # the batch's: the cases of every check derive from it (the same grades on a re-run)
    limits: Limits
    solutions: str  # the fingerprint of the solutions the batch grades with (a worker must have them)
    content: bytes | None = None  # the file's bytes, for workers on other machines (dispatch.py)

    def read(self) -> bytes:
        if self.content is not None:
            return self.content
        with open(self.path, "rb") as file:  # bounded: a file past the limit is refused unread
            return file.read(MAX_NOTEBOOK_BYTES + 1)


@dataclass(frozen=True)
class Graded:
    """What grading one notebook gave, as data for the batch's process to store."""

    result: Result
    log: str  # the grader's log of this notebook (what was restored, refused, each verdict)
    feedback: bytes = b""  # the feedback page (HTML); empty where there is none
    submitted: bytes = b""  # the notebook as nbgrader took it (outputs dropped): OUT/course/submitted
    autograded: bytes = b""  # the notebook as graded, its outputs cleaned: OUT/course/autograded
    grades: dict = field(default_factory=dict)  # nbgrader's automatic grades and comments, per cell
    kernel_log: bytes = b""  # the start of what the sandboxed kernel process printed
    # Each test's verdict with its words (core.Verdict.record), for a platform's tests (grader/platforms/)
    verdicts: tuple[dict, ...] = ()
    retry: bool = False  # the grader's own failure (a worker died or hung): grade it again next run


# ------------------------------------------------------------------------------ the template


def solutions_fingerprint() -> str:
    """One hash over the files of solutions/ that a batch is graded with: the tests, references,
    cases and mistakes (the correct alternatives are the test suite's own)."""
    digest = hashlib.sha256()
    for path in sorted(
        p
        for p in SOLUTIONS.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.name != "alternatives.py"
    ):
        digest.update(str(path.relative_to(SOLUTIONS)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def prepare_template(work: Path, checks_left_out: frozenset[str] | None = None) -> Path:
    """nbgrader's gradebook with every assignment, without the questions left out (default:
    course.toml's), in `work`; each notebook is graded in a copy of it. Generating it takes about 8 s,
    so it is copied from the user's cache (template_cache) where a batch graded with the same
    solutions, questions left out and nbgrader stored it, and stored there otherwise."""
    template = work / "template"
    fingerprint = solutions_fingerprint()
    checks_left_out = leave_out.left_out() if checks_left_out is None else checks_left_out
    if (template / "gradebook.db").exists():
        if (template / "solutions_sha256").read_text() != fingerprint:
            raise SystemExit(
                f"solutions/ changed since {work.parent} was first graded; grade into a new output folder"
            )
        refuse_other_left_out(work, checks_left_out)
        return template
    staging = work / "template.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(_cached_template(fingerprint, checks_left_out), staging)
    except OSError:  # no cache to write to (a read-only home): generated here, as the first batch does
        shutil.rmtree(staging, ignore_errors=True)
        _generate_template(staging, fingerprint, checks_left_out)
    staging.rename(template)
    return template


def refuse_other_left_out(work: Path, checks_left_out: frozenset[str]) -> None:
    """Stop if `work`'s template, made on the folder's first run, left out other questions."""
    template = work / "template"
    if not (template / "gradebook.db").exists():
        return
    if (then := left_out_of(template)["checks"]) != sorted(checks_left_out):
        raise SystemExit(
            f"course.toml leaves out other questions than when {work.parent} was first graded (then: "
            f"{', '.join(then) or 'none'}; now: {', '.join(sorted(checks_left_out)) or 'none'}): the "
            "points graded would disagree; set it back, or grade into a new output folder "
            '(docs/instructors.md, "Leave out the added questions")'
        )


def left_out_of(template: Path) -> dict:
    """What a template left out: {"checks": [names], "cells": {assignment: [grade ids]}}; nothing
    for a template made before questions could be left out."""
    path = template / LEFT_OUT
    return json.loads(path.read_text()) if path.exists() else {"checks": [], "cells": {}}


def template_cache() -> Path:
    """Where generated templates are kept between batches: $XDG_CACHE_HOME (else ~/.cache), under
    the course's name; outside every sandbox, as the instructor's home is."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "transformer-internals" / "templates"


def _cached_template(fingerprint: str, checks_left_out: frozenset[str]) -> Path:
    """The cache's template for these solutions, these questions left out, this nbgrader and this
    build of its settings, generated there first if it has none. Batches running at once may both
    generate it: the first rename wins, and the other's copy is dropped."""
    left_out = "\0".join(sorted(checks_left_out))
    digest = hashlib.sha256(f"{fingerprint}\0{nbgrader.__version__}\0{left_out}\0".encode())
    digest.update(Path(build.__file__).read_bytes())  # nbgrader's settings for the course
    digest.update(Path(leave_out.__file__).read_bytes())  # which cells a question left out takes
    cache = template_cache()
    entry = cache / digest.hexdigest()[:32]
    if not (entry / "solutions_sha256").exists():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="partial-", dir=cache))
        try:
            _generate_template(staging, fingerprint, checks_left_out)
            staging.rename(entry)
        except OSError:
            if not (entry / "solutions_sha256").exists():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _prune(cache)
    os.utime(entry)  # used now: the least recently used go first
    return entry


def _generate_template(folder: Path, fingerprint: str, checks_left_out: frozenset[str]) -> None:
    cells = leave_out.copy_solutions(folder / "source", checks_left_out)
    (folder / LEFT_OUT).write_text(json.dumps({"checks": sorted(checks_left_out), "cells": cells}))
    generate_all(nbgrader_config(folder, folder / "source", folder / "gradebook.db"))
    (folder / "solutions_sha256").write_text(fingerprint)  # last: a folder without it is incomplete


def _prune(cache: Path) -> None:
    """Keep the TEMPLATES_KEPT templates used last, and the partial ones of the last hour (a batch
    may be generating one)."""
    now = time.time()
    entries = sorted(cache.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    done = [p for p in entries if not p.name.startswith("partial-")]
    stale = [p for p in entries if p.name.startswith("partial-") and now - p.stat().st_mtime > 3600]
    for path in done[TEMPLATES_KEPT:] + stale:
        shutil.rmtree(path, ignore_errors=True)


def pack_template(template: Path) -> bytes:
    """The template as one archive, for workers on other machines (about 2 MB)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(template, arcname=".")
    return buffer.getvalue()


def unpack_template(packed: bytes, folder: Path) -> Path:
    """A template packed by `pack_template` (the batch's own process made it: trusted)."""
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
        archive.extractall(folder, filter="data")
    return folder


# ------------------------------------------------------------------------------ nbgrader's settings


def grading_config(run: Path, template: Path, limits: Limits, seed: int, **worker):
    """nbgrader's settings for grading a submission in the course `run` (and writing its feedback
    page). `worker` (this machine's side of a batch): `scratch` (where sandboxes are made), `group`
    (the batch's cgroup), `threads` (math threads per kernel), `kernels_ahead`, `font_list`
    (sandbox.write_font_list)."""
    threads = worker.get("threads", 1)
    return nbgrader_config(
        run,
        template / "source",
        run / "gradebook.db",
        # No course id: grading needs no exchange, and nbgrader warns about a missing one otherwise.
        CourseDirectory={"course_id": ""},
        Autograde={
            "sanitize_preprocessors": [
                "nbgrader.preprocessors.ClearOutput",
                "nbgrader.preprocessors.DeduplicateIds",
                "nbgrader.preprocessors.OverwriteKernelspec",
                "grader.notebook.preprocessors.Canonicalize",
                "nbgrader.preprocessors.OverwriteCells",
                "nbgrader.preprocessors.CheckCellMetadata",
            ],
            "autograde_preprocessors": [
                "grader.notebook.preprocessors.JudgedExecute",
                "grader.notebook.clean.FenceStudentMarkdown",
                "grader.notebook.clean.CleanMetadata",  # before grades are saved: what is stored is clean
                "nbgrader.preprocessors.IgnorePattern",
                "nbgrader.preprocessors.LimitOutput",
                "nbgrader.preprocessors.SaveAutoGrades",
                "nbgrader.preprocessors.AssignLatePenalties",
                "nbgrader.preprocessors.CheckCellMetadata",
            ],
        },
        JudgedExecute={
            "timeout": limits.cell_timeout,
            "notebook_timeout": limits.notebook_timeout,
            "output_bytes": limits.output_bytes,
            "batch_seed": seed,
            "sandbox_parent": worker.get("scratch", ""),
            "sandboxed": limits.sandboxed,
            "kernel_log": str(run / "kernel.log"),
            "reasons_file": str(run / "reasons.json"),
            "verdicts_file": str(run / "verdicts.json"),
            "kernels_ahead": worker.get("kernels_ahead", False),
        },
        SandboxedKernelManager={
            "memory_bytes": limits.memory_bytes,
            # CPU time: the wall limit's worth on every thread, so only a runaway process hits it
            "cpu_seconds": limits.notebook_timeout * threads + 60,
            "threads": threads,
            "processes": limits.processes,
            "batch_group": worker.get("group", ""),
            "font_list": worker.get("font_list", ""),
            "kernel_uid": limits.kernel_uid,
        },
        Canonicalize={
            "release_directory": str(template / "release"),
            "failure_file": str(run / "refused.txt"),
        },
        # Students' HTML and JavaScript outputs must not run in the instructor's browser
        # (feedback pages, formgrader): nbconvert keeps <script> unless asked to sanitise.
        HTMLExporter={"sanitize_html": True},
        LimitOutput={"max_lines": limits.output_lines},
        GenerateFeedback={
            "preprocessors": [
                "nbgrader.preprocessors.GetGrades",
                "grader.record.feedback.NameHandGrades",
                "grader.record.feedback.NameQuestions",  # before the hidden checks' calls are hidden
                "grader.notebook.preprocessors.HideHiddenTests",
                "grader.notebook.preprocessors.PlainErrors",
                "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
            ],
            # The course's page (summary, wrapped verdicts, maths as MathML: feedback.py).
            "exporter_class": "grader.record.feedback.FeedbackExporter",
            "HTMLExporter": exporter_config(),
        },
    )


# ------------------------------------------------------------------------------ one notebook


def read_notebook(raw: bytes) -> tuple[nbformat.NotebookNode, str]:
    """The submission as an nbformat 4 notebook without outputs, and what reading it involved.

    Lenient where a student's work is still there: text that is not UTF-8 (read as Latin-1),
    an older nbformat (upgraded), a notebook saved with huge outputs (outputs are dropped:
    the grader runs it again anyway).
    """
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    notes = []
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        notes.append("[course] the file is not UTF-8: read as Latin-1")
    try:
        return _read_notebook(text, notes)
    except RecursionError:  # parsing or converting JSON nested past Python's limit: no notebook nests so
        raise ValueError("its JSON nests too deeply for a notebook") from None


def _read_notebook(text: str, notes: list[str]) -> tuple[nbformat.NotebookNode, str]:
    original = nbformat.reader.reads(text)  # parsed, not yet converted
    if original.get("nbformat") != 4:
        notes.append(f"[course] saved as nbformat {original.get('nbformat')}: upgraded to 4")
    if "colab" in original.get("metadata", {}):
        notes.append("[course] saved by Google Colab")
    notebook = nbformat.convert(original, 4)
    if notebook.nbformat_minor < 5:  # cell ids (which editors write anyway) are valid from 4.5 on
        notebook = nbformat.v4.upgrade(notebook, from_version=4, from_minor=notebook.nbformat_minor)
    notebook.metadata = notebook_metadata(notebook.metadata)  # what OUT/course/submitted keeps
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    return notebook, "\n".join(notes)


class UnfitWorker(RuntimeError):
    """A worker that cannot grade for this batch (other solutions: its grades would differ); the
    batch stops with this message."""


@dataclass(frozen=True)
class Worker:
    """What a grading worker process holds for every notebook it grades."""

    template: Path  # the batch's nbgrader template (prepare_template)
    scratch: Path  # a folder of this machine's, where notebooks are graded and sandboxes made
    group: str = ""  # the batch's cgroup on this machine ("": none)
    threads: int = 1  # math library threads of each kernel
    # The fingerprint of the solutions this worker judges with (its own copy of the course's)
    solutions: str = field(default_factory=solutions_fingerprint)

    def grade(self, task: NotebookTask, *, start_next: bool = True) -> Graded:
        """Autograde one notebook; never raises for a bad submission (the result says `failed`).
        `start_next`: start the next notebook's kernel beside this one (kernels.py); not worth it
        where this worker may get no other notebook."""
        if task.solutions != self.solutions:
            raise UnfitWorker(
                f"the solutions/ of the grading worker in {self.scratch} differ from those of the batch: "
                "each worker needs the same version of the course "
                '(docs/grading-at-scale.md, "On a cluster of your own machines")'
            )
        run = Path(tempfile.mkdtemp(prefix="run-", dir=self.scratch))
        try:
            return escaped(self._autograde(task, run, start_next))
        except Exception as error:  # the batch goes on; the reason goes to the CSV, the details to the log
            reason = f"{GRADER_FAILED} ({type(error).__name__})"
            return escaped(Graded(failed(task.student, task.notebook, reason), traceback.format_exc()))
        finally:
            shutil.rmtree(run, ignore_errors=True)

    def _autograde(self, task: NotebookTask, run: Path, start_next: bool) -> Graded:
        student, assignment = task.student, task.notebook
        try:
            notebook, notes = read_notebook(task.read())
        except Exception as error:
            reason = f"not a readable notebook: {str(error).splitlines()[0][:200]}"
            return Graded(failed(student, assignment, reason), reason)
        # The cells of a question left out (a notebook of the full course), never run: nbgrader would
        # keep them ungraded (Canonicalize) and run the student's code of a question nobody grades.
        left_out = set(left_out_of(self.template)["cells"].get(assignment, []))
        if dropped := [grade_id(c) for c in notebook.cells if grade_id(c) in left_out]:
            notebook.cells = [c for c in notebook.cells if grade_id(c) not in left_out]
            note = f"[course] cells of questions left out (course.toml), not run: {', '.join(dropped)}"
            notes = "\n".join(filter(None, [notes, note]))
        submitted = run / "submitted" / student / assignment / f"{assignment}.ipynb"
        submitted.parent.mkdir(parents=True)
        nbformat.write(notebook, submitted)
        shutil.copy(self.template / "gradebook.db", run / "gradebook.db")

        config = grading_config(
            run,
            self.template,
            task.limits,
            task.seed,
            scratch=str(self.scratch),
            group=self.group,
            threads=self.threads,
            kernels_ahead=start_next and task.limits.sandboxed,  # unsandboxed, one could reach the next
            font_list=str(write_font_list(self.scratch) or "") if task.limits.sandboxed else "",
        )
        nbgrader = NbGraderAPI(config=config)
        with quiet_gradebook():
            outcome = nbgrader.autograde(assignment, student, force=True, create=True)
        log = "\n".join(
            filter(
                None,
                [notes, _actionable(outcome.get("log")), "" if outcome["success"] else outcome.get("error")],
            )
        )
        kernel_log = _read(run / "kernel.log")
        if not outcome["success"]:
            refused = run / "refused.txt"
            reason = refused.read_text() if refused.exists() else "nbgrader could not run this notebook"
            return Graded(failed(student, assignment, reason), log, kernel_log=kernel_log)
        with Gradebook(f"sqlite:///{run / 'gradebook.db'}") as gradebook:
            graded = gradebook.find_submission(assignment, student)
            score, max_score, manual = graded.score, graded.max_score, graded.needs_manual_grade
            grades = automatic_grades(gradebook, assignment, student)
        with quiet_gradebook():
            feedback = nbgrader.generate_feedback(assignment, student, force=True)
        page = _read(run / "feedback" / student / assignment / f"{assignment}.html")
        if not (feedback["success"] and page):  # graded all the same; the log says why the page is missing
            log += f"\n[course] no feedback page was written:\n{feedback.get('error') or feedback.get('log')}"
        reasons = run / "reasons.json"
        reason = "; ".join(json.loads(reasons.read_text())) if reasons.exists() else ""
        verdicts_file = run / "verdicts.json"
        verdicts = tuple(json.loads(verdicts_file.read_text())) if verdicts_file.exists() else ()
        checks = tuple(without_words(v) for v in verdicts)
        status = "needs_manual_grading" if manual else "graded"
        return Graded(
            Result(student, assignment, score, max_score, status, reason, checks=checks),
            log,
            feedback=page,
            submitted=submitted.read_bytes(),
            autograded=_read(run / "autograded" / student / assignment / f"{assignment}.ipynb"),
            grades=grades,
            kernel_log=kernel_log,
            verdicts=verdicts,
        )


def escaped(graded: Graded) -> Graded:
    """What grading gave, each text in it that a kernel or a submission could have written escaped as
    `printable.shown` does (line breaks kept): the log (errors, verdicts, tracebacks quote the student),
    the kernel's own output, the reason, the stored notebooks (as JSON escapes: the same
    notebooks), the feedback page and the verdicts' words. Nothing the batch writes or prints from
    it can then move a terminal's cursor, retitle its window, write its clipboard or reorder a line."""
    kernel_log = graded.kernel_log.decode("utf-8", "surrogateescape")  # its bytes that are not text: \xNN
    return replace(
        graded,
        result=replace(graded.result, reason=shown(graded.result.reason)),
        log=shown_lines(graded.log),
        kernel_log=shown_lines(kernel_log).encode(),
        submitted=shown_json(graded.submitted.decode()).encode(),
        autograded=shown_json(graded.autograded.decode()).encode(),
        feedback=shown_text(graded.feedback.decode()).encode(),  # made of the cleaned notebook: a backstop
        verdicts=tuple(_shown_words(v) for v in graded.verdicts),
    )


def _shown_words(verdict: dict) -> dict:
    """A verdict's record (core.Verdict.record) with its words escaped as the log's are."""
    parts = [{**part, "message": shown_lines(part["message"])} for part in verdict["parts"]]
    return {**verdict, "message": shown_lines(verdict["message"]), "parts": parts}


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""


# nbgrader's own report of a locked cell it put back, said already in words by Canonicalize
# ("cell rmsnorm_test: source changed: restored"); for hidden-test cells it fires on every notebook.
NBGRADER_NOISE = re.compile(r"^\[WARNING\] Attribute '\w+' for cell \S+ has changed! \(should be: .*\)$")


def _actionable(log: str | None) -> str:
    """nbgrader's log of a run without the lines an instructor cannot act on. Its lines end at line
    feeds only: a carriage return or a Unicode line separator in a student's message is the
    student's text (`escaped` shows it), never the start of a line of the log."""
    return "\n".join(line for line in (log or "").rstrip("\n").split("\n") if not NBGRADER_NOISE.match(line))
