"""`course grade SUBMISSIONS --out OUT`: a folder or zip of notebooks -> grades.csv + feedback pages.

Layout of OUT (an instructor's record: each run merges into it, see record.py):
    grades.csv                       one row per student and notebook (report.py)
    totals.csv, upload/              one row per student, and the files to upload to the LMS (roster.py)
    intake.csv                       every file of the last source, and what became of it (inbox.py)
    course/                          one nbgrader course with every graded submission, for
                                     formgrader and `nbgrader export` (merged_course.py)
    feedback/<student>/<nb>.html     one page per graded notebook
    logs/<student>/<nb>.log          the grader's log: what was restored, what the sandbox refused,
                                     each verdict (or the grader's traceback, where grading failed)
    work/template/                   nbgrader course generated once per batch (gradebook + release)
    work/inbox/                      copies of the submissions (the originals are only read)
    work/runs/<student>/<nb>/        one nbgrader course per submission, so submissions run in parallel
    work/results/<student>/<nb>.json the outcome of each submission and the hash of the file graded:
                                     present and same hash = done (resume, idempotence)
    work/hand_grades.json, refused.json, settings.json   the rest of the record (record.py)
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
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import nbformat
import torch
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from traitlets.config import Config

from . import cgroup
from .build import generate_all, nbgrader_config
from .class_list import keep_roster, missing_rows, named, people, read_roster, write_totals
from .clean import notebook_metadata
from .exchange import remove_tree
from .feedback import exporter_config, install_mathjax
from .inbox import Submission, find_submissions, write_intake_report
from .late import LatePolicy
from .merged_course import merge_course, quiet_gradebook
from .paths import SOLUTIONS
from .record import (
    recorded,
    remember_refusals,
    save_result,
    save_settings,
    saved_result,
    settings,
)
from .report import Result, failed, shown, write_csv
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
        # No course id: grading needs no exchange, and nbgrader warns about a missing one otherwise.
        CourseDirectory={"course_id": ""},
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


def grade_one(
    submission: Submission, out: Path, limits: Limits, batch: Batch, threads: int = 1, again: bool = False
) -> Result:
    """Autograde one notebook in its own nbgrader course; never raises for a bad submission.
    A file graded before into `out` is not graded again unless `again`."""
    digest = _sha256(submission.path)
    intake = {"name": submission.name, "late": submission.late, "submitted_at": submission.submitted_at}
    saved = saved_result(out, submission.student, submission.notebook)
    if saved and saved[1] == digest and not again:
        result = replace(saved[0], **intake)  # what the export says of the file may be newer
        if result != saved[0]:
            save_result(out, result, digest)
        return result
    try:
        result, log = _autograde(submission, out, limits, batch, threads)
    except Exception as error:  # the batch goes on; the reason goes to the CSV, the details to the log
        reason = f"the grader could not process this notebook ({type(error).__name__})"
        result, log = failed(submission.student, submission.notebook, reason), traceback.format_exc()
    intake_log = [f"[course] graded file: {submission.origin}"] if submission.origin else []
    log = "\n".join(intake_log + [f"[course] {line}" for line in submission.note.splitlines()] + [log])
    return _save_result(submission, out, replace(result, **intake), log, digest)


def _save_result(submission: Submission, out: Path, result: Result, log: str, digest: str) -> Result:
    log_file = out / "logs" / submission.student / f"{submission.notebook}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text(log)
    _write_failure_page(out, submission, result)
    save_result(out, result, digest)  # last, and atomic: a killed batch never leaves half a result
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
    if notebook.nbformat_minor < 5:  # cell ids (which editors write anyway) are valid from 4.5 on
        notebook = nbformat.v4.upgrade(notebook, from_version=4, from_minor=notebook.nbformat_minor)
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
    with quiet_gradebook():
        outcome = nbgrader.autograde(submission.notebook, submission.student, force=True, create=True)
    log = "\n".join(
        filter(
            None, [notes, _actionable(outcome.get("log")), "" if outcome["success"] else outcome.get("error")]
        )
    )
    if not outcome["success"]:
        refused = run / "refused.txt"
        reason = refused.read_text() if refused.exists() else "nbgrader could not run this notebook"
        return failed(submission.student, submission.notebook, reason), log
    with Gradebook(f"sqlite:///{run / 'gradebook.db'}") as gradebook:
        graded = gradebook.find_submission(submission.notebook, submission.student)
        score, max_score, manual = graded.score, graded.max_score, graded.needs_manual_grade
    with quiet_gradebook():
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


# nbgrader's own report of a locked cell it put back, said already in words by Canonicalize
# ("cell rmsnorm_test: source changed: restored"); for hidden-test cells it fires on every notebook.
NBGRADER_NOISE = re.compile(r"^\[WARNING\] Attribute '\w+' for cell \S+ has changed! \(should be: .*\)$")


def _actionable(log: str | None) -> str:
    """nbgrader's log of a run without the lines an instructor cannot act on."""
    return "\n".join(line for line in (log or "").splitlines() if not NBGRADER_NOISE.match(line))


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


# ------------------------------------------------------------------------------ the batch


def grade(
    source: Path,
    out: Path,
    *,
    jobs: int = 1,
    limits: Limits = Limits(),
    again: bool = False,
    due: str | None = None,
    late_penalty: str | None = None,
    roster: Path | None = None,
    title: str | None = None,
) -> list[Result]:
    """Grade every submission under `source` into the record in `out` (new and changed files are
    graded, the rest of the record is kept); write grades.csv, totals and feedback from the whole
    record; return its rows. `again`: grade the source's files again even where unchanged.
    `due`, `late_penalty`, `roster` and `title` are kept in `out` once given."""
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
    given = {"due": due, "late_penalty": late_penalty, "title": title, "limits": asdict(limits)}
    kept = {**settings(out), **{k: v for k, v in given.items() if v is not None}}
    LatePolicy.parse(kept.get("due"), kept.get("late_penalty"))  # a wrong flag stops the run here
    kept = save_settings(out, {**kept, "roster": keep_roster(out, roster) or kept.get("roster")})
    seed_file = work / "case_seed"
    if not seed_file.exists():
        seed_file.write_text(str(secrets.randbits(31)))
    seed = int(seed_file.read_text())
    intake = find_submissions(source, work)
    write_intake_report(out / "intake.csv", intake.files)
    if exports := Counter(s.lms for s in intake.submissions if s.lms):
        save_settings(out, {**kept, "lms": exports.most_common(1)[0][0]})
    prepare_template(work)
    batch = _start_batch(work, seed)
    try:
        install_mathjax(out / "feedback")  # the pages' maths renders offline
        _grade_all(intake.submissions, out, limits, batch, max(1, jobs), again)
    finally:
        _end_batch(batch, "sandboxes were left by grading workers killed midway")
        (work / BATCH_RECORD).unlink()
    return report(out, intake.rejected)


def report(out: Path, refused_now: list[Result] = ()) -> list[Result]:
    """grades.csv, totals, uploads and OUT/course, from the whole record of `out`; its rows."""
    kept = settings(out)
    policy = LatePolicy.parse(kept.get("due"), kept.get("late_penalty"))
    class_list = read_roster(out / kept["roster"]) if kept.get("roster") else None
    limits = Limits(**kept["limits"]) if "limits" in kept else Limits()
    seed = int((out / "work" / "case_seed").read_text())
    record = recorded(out)
    refused = remember_refusals(out, list(refused_now), set(record))
    config = _grading_config(out / "course", out / "course", limits, Batch(seed), threads=1, page_depth=2)
    config.merge(Config(policy.nbgrader_config()))
    results = [result for result, _ in record.values()]
    rows, notes = merge_course(out, record, config, people(results, class_list), policy)
    rows = named(rows + refused + missing_rows(rows + refused, class_list), class_list)
    rows.sort(key=lambda r: (r.student, r.notebook))
    write_csv(out / "grades.csv", rows)
    write_totals(out, rows, class_list, kept.get("lms", ""), kept.get("title"))
    for note in notes:
        print(f"note: {shown(note)}", file=sys.stderr)
    return rows


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
    submissions: list[Submission], out: Path, limits: Limits, batch: Batch, jobs: int, again: bool = False
) -> None:
    """Grade into the record, in `jobs` worker processes, each with a memory cap (the judge's
    inputs come from students). A worker that dies anyway, or is still busy long after the
    notebook's time limit (it is then killed), breaks the pool: what it left unfinished is graded
    again one at a time, so that only the notebook that kills or hangs a worker fails."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    task = (out, limits, batch, threads, again)
    patience = limits.notebook_timeout + WORKER_GRACE_S
    crashed = []

    def give_up(submission: Submission, reason: str) -> None:
        row = failed(submission.student, submission.notebook, reason)
        _save_result(submission, out, row, reason, _sha256(submission.path))

    with _workers(jobs, limits) as pool:
        futures = {pool.submit(grade_one, s, *task): s for s in submissions}
        for future, submission in futures.items():
            try:
                _result_within(future, patience, pool)
            except WorkerHung as hung:  # not worth a second wait; the others killed with it are
                give_up(submission, str(hung))
            except BrokenProcessPool:
                crashed.append(submission)
    for submission in crashed:
        with _workers(1, limits) as pool:
            try:
                _result_within(pool.submit(grade_one, submission, *task), patience, pool)
            except BrokenProcessPool as error:
                give_up(submission, str(error) if isinstance(error, WorkerHung) else WORKER_DIED)


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
