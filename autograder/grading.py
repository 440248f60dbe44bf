"""`course grade SUBMISSIONS --out OUT`: a folder or zip of notebooks -> grades.csv + feedback pages.

Layout of OUT:
    grades.csv                       student, notebook, score, max_score, status, reason
    course/                          one nbgrader course with every graded submission, for
                                     formgrader and `nbgrader export` (run them from there)
    feedback/<student>/<nb>.html     one page per graded notebook
    logs/<student>/<nb>.log          the grader's log: what was restored, what the sandbox refused,
                                     each verdict (or the grader's traceback, where grading failed)
    work/template/                   nbgrader course generated once per batch (gradebook + release)
    work/inbox/                      copies of the submissions (the originals are only read)
    work/runs/<student>/<nb>/        one nbgrader course per submission, so submissions run in parallel
    work/results/<student>/<nb>.json the outcome of each submission and the hash of the file graded:
                                     present and same hash = done (resume, idempotence)
    work/runs/<student>/<nb>/kernel.log  the first MiB of what the sandboxed kernel process printed
    work/case_seed                   the batch's seed for all cases (same grades on a re-run)

Each submission is graded in its own process and its own copy of the gradebook, so one
broken notebook never stops the batch and a batch killed midway resumes where it stopped.
Its notebook runs in a sandboxed kernel (autograder/sandbox.py); the checks are judged in
the grading process (preprocessors.JudgedExecute), which never runs student code.
"""

import hashlib
import html
import json
import os
import re
import resource
import secrets
import shutil
import sys
import tempfile
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import torch
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from sqlalchemy.exc import SAWarning
from traitlets.config import Config

from . import cgroup
from .build import generate_all, nbgrader_config
from .clean import notebook_metadata
from .exchange import remove_tree
from .feedback import exporter_config, install_mathjax
from .inbox import Submission, find_submissions
from .paths import SOLUTIONS
from .report import Result, failed, write_csv
from .sandbox import unavailable_reason


@dataclass(frozen=True)
class Limits:
    cell_timeout: int = 120  # seconds per cell
    notebook_timeout: int = 900  # seconds for the whole notebook (wall clock)
    output_lines: int = 1000  # nbgrader's LimitOutput keeps at most this many lines per output
    output_bytes: int = 4 * 2**20  # output kept per notebook; the rest is dropped while it runs
    memory_bytes: int = 4 * 2**30  # the kernel's address space (RLIMIT_AS), and its sandbox's memory
    processes: int = 256  # processes and threads of one sandbox, together
    sandboxed: bool = True  # False only when the instructor asks for it (--no-sandbox)


MAX_NOTEBOOK_BYTES = 512 * 2**20  # one notebook file (saved outputs included)


# ------------------------------------------------------------------------------ one course per batch


def prepare_template(work: Path) -> Path:
    """nbgrader's gradebook with every assignment, generated once; copied for each submission."""
    template = work / "template"
    fingerprint = _solutions_fingerprint()
    if (template / "gradebook.db").exists():
        if (template / "solutions_sha256").read_text() != fingerprint:
            raise SystemExit(
                f"solutions/ changed since {work.parent} was first graded; grade into a new output folder"
            )
        return template
    staging = work / "template.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(SOLUTIONS, staging / "source", ignore=shutil.ignore_patterns("__pycache__"))
    generate_all(nbgrader_config(staging, staging / "source", staging / "gradebook.db"))
    (staging / "solutions_sha256").write_text(fingerprint)
    staging.rename(template)
    return template


def _solutions_fingerprint() -> str:
    """One hash over every file of solutions/: the tests and references a batch is graded with."""
    digest = hashlib.sha256()
    for path in sorted(p for p in SOLUTIONS.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(SOLUTIONS)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Batch:
    """What every notebook of one `course grade` run shares."""

    seed: int  # the cases of every check derive from it (the same grades on a re-run)
    scratch: str = ""  # the folder its sandboxes are made in (default: the system's temporary folder)
    group: str = ""  # its cgroup, in which each sandbox's group is made
    # Both go with the batch, with whatever a worker killed midway left in them.


def _grading_config(
    run: Path, template: Path, limits: Limits, batch: Batch, threads: int, page_depth: int = 1
):
    """nbgrader's settings for grading a submission in `run` and writing its feedback page, which is
    read `page_depth` folders below a feedback folder (OUT/feedback/<student>/<nb>.html: 1)."""
    return nbgrader_config(
        run,
        template / "source",
        run / "gradebook.db",
        Autograde={
            "sanitize_preprocessors": [
                "nbgrader.preprocessors.ClearOutput",
                "nbgrader.preprocessors.DeduplicateIds",
                "nbgrader.preprocessors.OverwriteKernelspec",
                "autograder.preprocessors.Canonicalize",
                "nbgrader.preprocessors.OverwriteCells",
                "nbgrader.preprocessors.CheckCellMetadata",
            ],
            "autograde_preprocessors": [
                "autograder.preprocessors.JudgedExecute",
                "autograder.clean.FenceStudentMarkdown",
                "autograder.clean.CleanMetadata",  # before grades are saved: the stored notebook is clean
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
            "batch_seed": batch.seed,
            "sandbox_parent": batch.scratch,
            "sandboxed": limits.sandboxed,
            "kernel_log": str(run / "kernel.log"),
            "reasons_file": str(run / "reasons.json"),
        },
        SandboxedKernelManager={
            "memory_bytes": limits.memory_bytes,
            # CPU time: the wall limit's worth on every thread, so only a runaway process hits it
            "cpu_seconds": limits.notebook_timeout * threads + 60,
            "threads": threads,
            "processes": limits.processes,
            "batch_group": batch.group,
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
                "autograder.feedback.NameQuestions",  # before the hidden checks' calls are hidden
                "autograder.preprocessors.HideHiddenTests",
                "autograder.preprocessors.PlainErrors",
                "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
            ],
            # The course's page (summary, wrapped verdicts, MathJax beside the pages: feedback.py).
            "HTMLExporter": exporter_config(page_depth),
        },
    )


# ------------------------------------------------------------------------------ one submission


def grade_one(submission: Submission, out: Path, limits: Limits, batch: Batch, threads: int = 1) -> Result:
    """Autograde one notebook in its own nbgrader course; never raises for a bad submission."""
    digest = _sha256(submission.path)
    saved = _saved_result(submission, out, digest)
    if saved is not None:
        return saved
    try:
        result, log = _autograde(submission, out, limits, batch, threads)
    except Exception as error:  # the batch goes on; the reason goes to the CSV, the details to the log
        reason = f"the grader could not process this notebook ({type(error).__name__})"
        result, log = failed(submission.student, submission.notebook, reason), traceback.format_exc()
    return _save_result(submission, out, result, log, digest)


def _result_file(out: Path, student: str, notebook: str) -> Path:
    return out / "work" / "results" / student / f"{notebook}.json"


def _saved_result(submission: Submission, out: Path, digest: str) -> Result | None:
    """The outcome of an earlier run on this very file (a changed submission is graded again)."""
    result_file = _result_file(out, submission.student, submission.notebook)
    if result_file.exists():
        saved = json.loads(result_file.read_text())
        if saved.pop("submission_sha256", None) == digest:
            return Result(**saved)
    return None


def _save_result(submission: Submission, out: Path, result: Result, log: str, digest: str) -> Result:
    log_file = out / "logs" / submission.student / f"{submission.notebook}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text(log)
    _write_failure_page(out, submission, result)
    result_file = _result_file(out, submission.student, submission.notebook)
    result_file.parent.mkdir(parents=True, exist_ok=True)
    partial = result_file.with_suffix(".partial")
    partial.write_text(json.dumps({**asdict(result), "submission_sha256": digest}))
    partial.rename(result_file)  # atomic: a killed batch never leaves half a result
    return result


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_notebook(path: Path) -> tuple[nbformat.NotebookNode, str]:
    """The submission as an nbformat 4 notebook without outputs, and what reading it involved.

    Lenient where a student's work is still there: text that is not UTF-8 (read as Latin-1),
    an older nbformat (upgraded), a notebook saved with huge outputs (outputs are dropped:
    the grader runs it again anyway).
    """
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    raw = path.read_bytes()
    notes = []
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        notes.append("[course] the file is not UTF-8: read as Latin-1")
    original = nbformat.reader.reads(text)  # parsed, not yet converted
    if original.get("nbformat") != 4:
        notes.append(f"[course] saved as nbformat {original.get('nbformat')}: upgraded to 4")
    if "colab" in original.get("metadata", {}):
        notes.append("[course] saved by Google Colab")
    notebook = nbformat.convert(original, 4)
    notebook.metadata = notebook_metadata(notebook.metadata)  # what OUT/course/submitted keeps
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    return notebook, "\n".join(notes)


def _autograde(
    submission: Submission, out: Path, limits: Limits, batch: Batch, threads: int
) -> tuple[Result, str]:
    try:
        notebook, notes = read_notebook(submission.path)
    except Exception as error:
        reason = f"not a readable notebook: {str(error).splitlines()[0][:200]}"
        return failed(submission.student, submission.notebook, reason), reason
    work = out / "work"
    template = prepare_template(work)
    run = work / "runs" / submission.student / submission.notebook
    shutil.rmtree(run, ignore_errors=True)
    target = run / "submitted" / submission.student / submission.notebook / f"{submission.notebook}.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)
    shutil.copy(template / "gradebook.db", run / "gradebook.db")

    nbgrader = NbGraderAPI(config=_grading_config(run, template, limits, batch, threads))
    with _quiet_gradebook():
        outcome = nbgrader.autograde(submission.notebook, submission.student, force=True, create=True)
    log = "\n".join(
        filter(None, [notes, outcome.get("log"), "" if outcome["success"] else outcome.get("error")])
    )
    if not outcome["success"]:
        refused = run / "refused.txt"
        reason = refused.read_text() if refused.exists() else "nbgrader could not run this notebook"
        return failed(submission.student, submission.notebook, reason), log
    with Gradebook(f"sqlite:///{run / 'gradebook.db'}") as gradebook:
        graded = gradebook.find_submission(submission.notebook, submission.student)
        score, max_score, manual = graded.score, graded.max_score, graded.needs_manual_grade
    with _quiet_gradebook():
        feedback = nbgrader.generate_feedback(submission.notebook, submission.student, force=True)
    page = run / "feedback" / submission.student / submission.notebook / f"{submission.notebook}.html"
    if feedback["success"] and page.exists():
        destination = out / "feedback" / submission.student / f"{submission.notebook}.html"
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(page, destination)
    else:  # graded all the same; the log says why the page is missing
        log += f"\n[course] no feedback page was written:\n{feedback.get('error') or feedback.get('log')}"
    status = "needs_manual_grading" if manual else "graded"
    reasons = run / "reasons.json"
    reason = "; ".join(json.loads(reasons.read_text())) if reasons.exists() else ""
    return Result(submission.student, submission.notebook, score, max_score, status, reason), log


@contextmanager
def _quiet_gradebook():
    """Without nbgrader's own SQLAlchemy session warnings about its gradebook (noise, not ours)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        yield


def _write_failure_page(out: Path, submission: Submission, result: Result) -> None:
    if result.status != "failed":
        return
    page = out / "feedback" / submission.student / f"{submission.notebook}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(
        f"<!doctype html><title>{html.escape(submission.notebook)}</title>"
        f"<h1>{html.escape(submission.notebook)}: not graded</h1>"
        f"<p>{html.escape(result.reason)}</p><p>Please contact your instructor.</p>"
    )


# ------------------------------------------------------------------------------ one course for formgrader


def merge_course(out: Path, results: list[Result], limits: Limits, seed: int) -> Path:
    """OUT/course: one nbgrader course holding every graded submission and its grades.

    Each submission was graded in a course of its own (so they run in parallel); this puts
    them together for nbgrader's own tools: formgrader (review, grading by hand) and
    `nbgrader export`. Its nbgrader_config.py is the grading config, so autograding or
    feedback started from there sandboxes and judges the same way. Rebuilt on every run, so
    it always matches grades.csv; grades given by hand in the previous build are carried over
    for every submission whose file is unchanged.
    """
    work, course, staging = out / "work", out / "course", out / "course.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(work / "template", staging, ignore=shutil.ignore_patterns("solutions_sha256"))
    before = course / GRADED_FILES
    previous = json.loads(before.read_text()) if before.exists() else {}
    graded = {}
    with ExitStack() as open_books:
        open_books.enter_context(_quiet_gradebook())
        merged = open_books.enter_context(Gradebook(f"sqlite:///{staging / 'gradebook.db'}"))
        old = (
            open_books.enter_context(Gradebook(f"sqlite:///{course / 'gradebook.db'}")) if previous else None
        )
        for result in results:
            if result.status == "failed":
                continue
            key = f"{result.student}/{result.notebook}"
            run = work / "runs" / result.student / result.notebook
            for stage in ("submitted", "autograded"):
                shutil.copytree(
                    run / stage / result.student / result.notebook,
                    staging / stage / result.student / result.notebook,
                )
            with Gradebook(f"sqlite:///{run / 'gradebook.db'}") as single:
                submitted = single.find_submission(result.notebook, result.student)
                merged.update_or_create_student(result.student)
                merged.add_submission(result.notebook, result.student, timestamp=submitted.timestamp)
                _copy_grades(single, merged, result.notebook, result.student, AUTOMATIC)
            saved = json.loads(_result_file(out, result.student, result.notebook).read_text())
            graded[key] = saved["submission_sha256"]
            if old is not None and previous.get(key) == graded[key]:
                _copy_grades(old, merged, result.notebook, result.student, BY_HAND)
    (staging / GRADED_FILES).write_text(json.dumps(graded, indent=1))
    # Feedback generated there by nbgrader lands in feedback/<student>/<nb>/<nb>.html
    install_mathjax(staging / "feedback")
    config = _grading_config(course, course, limits, Batch(seed), threads=1, page_depth=2)
    (staging / "nbgrader_config.py").write_text(_config_file(config))
    shutil.rmtree(course, ignore_errors=True)
    staging.rename(course)
    return course


GRADED_FILES = ".graded_sha256.json"  # in OUT/course: the hash of each submission file it holds
# (grade fields, comment fields) that the grader fills, and those an instructor fills in formgrader
AUTOMATIC = (("auto_score", "manual_score", "needs_manual_grade"), ("auto_comment",))
BY_HAND = (("manual_score", "extra_credit", "needs_manual_grade"), ("manual_comment",))


def _copy_grades(source: Gradebook, target: Gradebook, assignment: str, student: str, fields) -> None:
    grade_fields, comment_fields = fields
    for notebook in source.find_submission(assignment, student).notebooks:
        for grade in notebook.grades:
            copy = target.find_grade(grade.name, notebook.name, assignment, student)
            for field in grade_fields:
                setattr(copy, field, getattr(grade, field))
        for comment in notebook.comments:
            copy = target.find_comment(comment.name, notebook.name, assignment, student)
            for field in comment_fields:
                setattr(copy, field, getattr(comment, field))
    target.db.commit()


def _config_file(config) -> str:
    lines = [
        "# The configuration `course grade` graded this batch with (written by it).",
        "c = get_config()  # noqa",
    ]
    return "\n".join(lines + _config_lines("c", config)) + "\n"


def _config_lines(prefix: str, section: Config) -> list[str]:
    """`prefix.key = value` for each setting, nested sections (GenerateFeedback.HTMLExporter) included."""
    lines = []
    for key, value in section.items():
        if isinstance(value, Config):
            lines += _config_lines(f"{prefix}.{key}", value)
        else:
            lines.append(f"{prefix}.{key} = {value!r}")
    return lines


# ------------------------------------------------------------------------------ the batch


def grade(source: Path, out: Path, *, jobs: int = 1, limits: Limits = Limits()) -> list[Result]:
    """Grade every submission under `source`; write OUT/grades.csv and feedback; return the rows."""
    if limits.sandboxed and (why := unavailable_reason()):
        raise SystemExit(
            f"Refusing to grade: {why}.\n"
            "Without a sandbox a student's code runs as you: it can read solutions/ and your files.\n"
            "Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `dnf install "
            "bubblewrap`), or pass --no-sandbox to grade trusted submissions without one."
        )
    source, out = source.resolve(), out.resolve()  # nbgrader resolves paths against its course root
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    seed_file = work / "case_seed"
    if not seed_file.exists():
        seed_file.write_text(str(secrets.randbits(31)))
    seed = int(seed_file.read_text())
    submissions, results = find_submissions(source, work)
    prepare_template(work)
    batch = _start_batch(work, seed)
    try:
        install_mathjax(out / "feedback")  # the pages' maths renders offline
        results += _grade_all(submissions, out, limits, batch, max(1, jobs))
    finally:
        _end_batch(batch, "sandboxes were left by grading workers killed midway")
        (work / BATCH_RECORD).unlink()
    results.sort(key=lambda r: (r.student, r.notebook))
    merge_course(out, results, limits, seed)
    write_csv(out / "grades.csv", results)
    return results


BATCH_RECORD = "batch.json"  # in OUT/work: the batch running now (its sandboxes' folder and cgroup)


def _start_batch(work: Path, seed: int) -> Batch:
    """A folder and a cgroup for the batch's sandboxes, recorded in OUT/work while it runs: nothing
    of a batch killed midway cleans up after it, so the next run into that folder does."""
    record = work / BATCH_RECORD
    if record.exists() and (earlier := _recorded_batch(record.read_text())):
        killed, pid = earlier
        if _running(pid):
            raise SystemExit(
                f"{work.parent} is being graded by another run (process {pid}): wait for it to end, or grade "
                f"into another folder (if no such run is going on, delete {record})"
            )
        _end_batch(killed, "sandboxes were left by a run into this folder that was killed midway")
    group = f"course-batch-{secrets.token_hex(4)}"
    if not cgroup.start_batch(group):  # only then worth finding out why
        why = cgroup.unavailable_reason() or "the batch's group could not be made"
        print(
            f"warning: each sandbox cannot get a process group of its own here ({why}). "
            "A notebook that forks without end or fills the memory with many processes is stopped only by "
            "the time limit and can slow the others down; grade untrusted classes with --jobs 1 (README, "
            "not covered).",
            file=sys.stderr,
        )
        group = ""
    batch = Batch(seed, tempfile.mkdtemp(prefix="course-"), group)
    record.write_text(json.dumps({"scratch": batch.scratch, "group": batch.group, "pid": os.getpid()}))
    return batch


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return pid != os.getpid()


def _recorded_batch(text: str) -> tuple[Batch, int] | None:
    """The batch a record names and the process that ran it, if it names only what a batch makes:
    a folder course-* right in the temporary folder, and a group course-batch-* (the record is
    removed once a batch ends)."""
    try:
        record = json.loads(text)
        scratch, group, pid = Path(record["scratch"]), str(record["group"]), int(record["pid"])
    except (ValueError, KeyError, TypeError):
        return None
    if scratch.parent != Path(tempfile.gettempdir()) or not re.fullmatch(r"course-\w{8}", scratch.name):
        return None
    if group and not re.fullmatch(r"course-batch-[0-9a-f]{8}", group):
        return None
    return Batch(0, str(scratch), group), pid


def _end_batch(batch: Batch, left_by: str) -> None:
    """Remove the batch's process groups and sandboxes' folder, with whatever was left in them
    (`left_by` says how, in the note printed then); a failure is reported, and costs no grade."""
    try:
        if left := cgroup.end_batch(batch.group) if batch.group else 0:
            print(f"note: {left} {left_by}: removed", file=sys.stderr)
        remove_tree(Path(batch.scratch))
    except OSError as error:
        print(f"warning: the batch's sandboxes could not all be removed: {error}", file=sys.stderr)


def _grade_all(
    submissions: list[Submission], out: Path, limits: Limits, batch: Batch, jobs: int
) -> list[Result]:
    """Grade in `jobs` worker processes, each with a memory cap (the judge's inputs come from
    students). A worker that dies anyway, or is still busy long after the notebook's time
    limit (it is then killed), breaks the pool: what it left unfinished is graded again one at
    a time, so that only the notebook that kills or hangs a worker fails."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    task = (out, limits, batch, threads)
    patience = limits.notebook_timeout + WORKER_GRACE_S
    results, crashed = [], []

    def give_up(submission: Submission, reason: str) -> None:
        row = failed(submission.student, submission.notebook, reason)
        results.append(_save_result(submission, out, row, reason, _sha256(submission.path)))

    with _workers(jobs, limits) as pool:
        futures = {pool.submit(grade_one, s, *task): s for s in submissions}
        for future, submission in futures.items():
            try:
                results.append(_result_within(future, patience, pool))
            except WorkerHung as hung:  # not worth a second wait; the others killed with it are
                give_up(submission, str(hung))
            except BrokenProcessPool:
                crashed.append(submission)
    for submission in crashed:
        with _workers(1, limits) as pool:
            try:
                results.append(_result_within(pool.submit(grade_one, submission, *task), patience, pool))
            except BrokenProcessPool as error:
                give_up(submission, str(error) if isinstance(error, WorkerHung) else WORKER_DIED)
    return results


WORKER_GRACE_S = 300  # past the notebook's own limit: judging, saving grades, the feedback page
WORKER_DIED = "the grader's worker died on this notebook (out of memory?)"


class WorkerHung(BrokenProcessPool):
    """A worker still busy far past the notebook's time limit; the pool's workers were killed."""


def _result_within(future, seconds: float, pool: ProcessPoolExecutor) -> Result:
    """The future's result; a worker that does not finish within `seconds` of this call is
    killed with the rest of the pool (a pool cannot kill one worker), which breaks it."""
    try:
        return future.result(timeout=seconds)
    except TimeoutError:
        for process in list(pool._processes.values()):  # no public way to reach the workers
            process.kill()
        raise WorkerHung(f"grading this notebook did not finish within {seconds:g} s") from None


def _workers(jobs: int, limits: Limits) -> ProcessPoolExecutor:
    # The kernel's own cap must fit under the worker's (a child can only lower its limits).
    worker_bytes = limits.memory_bytes + 4 * 2**30
    return ProcessPoolExecutor(max_workers=jobs, initializer=_start_worker, initargs=(worker_bytes,))


def _start_worker(memory_limit: int) -> None:
    """Cap the worker's memory, and keep its torch on one thread.

    A worker is forked. If the parent ever ran a parallel torch operation, the child inherits
    an OpenMP thread pool whose threads did not survive the fork, and its first parallel
    operation (the judge's) waits for them forever; one thread never waits. The judge's
    tensors are small, so nothing is lost.
    """
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    torch.set_num_threads(1)
