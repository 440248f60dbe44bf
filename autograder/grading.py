"""`course grade SUBMISSIONS --out OUT`: a folder or zip of notebooks -> grades.csv + feedback pages.

Layout of OUT:
    grades.csv                       student, notebook, score, max_score, status, reason
    feedback/<student>/<nb>.html     one page per graded notebook
    work/template/                   nbgrader course generated once per batch (gradebook + release)
    work/inbox/                      copies of the submissions (the originals are only read)
    work/runs/<student>/<nb>/        one nbgrader course per submission, so submissions run in parallel
    work/results/<student>/<nb>.json the outcome of each submission and the hash of the file graded:
                                     present and same hash = done (resume, idempotence)
    work/results/<student>/<nb>.log  the grader's traceback, where grading itself failed
    work/hidden_seed                 the batch's seed for hidden cases (same grades on a re-run)

Each submission is graded in its own process and its own copy of the gradebook, so one
broken notebook never stops the batch and a batch killed midway resumes where it stopped.
"""

import csv
import hashlib
import html
import json
import os
import re
import secrets
import shutil
import traceback
import zipfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI

from .build import generate_all, nbgrader_config
from .paths import SOLUTIONS, assignments

STATUSES = ("graded", "needs_manual_grading", "failed")


@dataclass(frozen=True)
class Limits:
    cell_timeout: int = 120  # seconds per cell
    notebook_timeout: int = 900  # seconds for the whole notebook
    output_lines: int = 1000  # nbgrader's LimitOutput keeps at most this many lines per output


@dataclass(frozen=True)
class Submission:
    student: str
    notebook: str  # an assignment name, e.g. "04_rope"
    path: Path  # the copy in work/inbox


@dataclass(frozen=True)
class Result:
    student: str
    notebook: str
    score: float | None
    max_score: float | None
    status: str
    reason: str = ""


# ------------------------------------------------------------------------------ discovery

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")


def find_submissions(source: Path, work: Path) -> tuple[list[Submission], list[Result]]:
    """Copy what `source` holds into work/inbox; return the submissions and what was rejected.

    Accepted: <student>/<notebook>.ipynb, flat <student>_<notebook>.ipynb, or a zip of either.
    """
    inbox = work / "inbox"
    shutil.rmtree(inbox, ignore_errors=True)
    if zipfile.is_zipfile(source):
        _safe_extract(source, inbox)
    elif source.is_dir():
        shutil.copytree(source, inbox, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__MACOSX"))
    else:
        raise SystemExit(f"{source} is neither a folder nor a zip file")
    known = assignments()
    found: dict[tuple[str, str], Submission] = {}
    rejected: list[Result] = []
    for path in sorted(inbox.rglob("*.ipynb")):
        if any(part in (".ipynb_checkpoints", "__MACOSX") for part in path.parts):
            continue
        student, notebook = _identify(path.relative_to(inbox), known)
        if student is None or not STUDENT_ID.match(student):
            reason = "cannot tell the student and notebook from this file name"
            rejected.append(_failed(str(path.relative_to(inbox)), notebook or "", reason))
        elif notebook is None:
            rejected.append(_failed(student, path.stem, "not a notebook of this course"))
        elif (student, notebook) in found:
            reason = f"more than one file for this notebook ({path.relative_to(inbox)})"
            rejected.append(_failed(student, notebook, reason))
        else:
            found[(student, notebook)] = Submission(student, notebook, path)
    return list(found.values()), rejected


def _identify(relative: Path, known: list[str]) -> tuple[str | None, str | None]:
    stem = relative.stem
    if len(relative.parts) >= 2:  # <...>/<student>/<notebook>.ipynb
        student = relative.parts[-2]
        return student, next((a for a in known if stem == a or stem.startswith(a)), None)
    for assignment in known:  # <student>_<notebook>.ipynb
        if stem.endswith("_" + assignment):
            return stem[: -len(assignment) - 1], assignment
    return None, None


def _safe_extract(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for member in zf.infolist():
            destination = (target / member.filename).resolve()
            if not destination.is_relative_to(target.resolve()):
                raise SystemExit(f"{archive}: refusing the entry {member.filename!r} (outside the archive)")
        zf.extractall(target)


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


def _grading_config(run: Path, template: Path, limits: Limits):
    return nbgrader_config(
        run,
        template / "source",
        run / "gradebook.db",
        Autograde={
            "sanitize_preprocessors": [
                "nbgrader.preprocessors.ClearOutput",
                "nbgrader.preprocessors.DeduplicateIds",
                "nbgrader.preprocessors.OverwriteKernelspec",
                "autograder.preprocessors.RestoreDeletedCells",
                "nbgrader.preprocessors.OverwriteCells",
                "nbgrader.preprocessors.CheckCellMetadata",
            ],
            "autograde_preprocessors": [
                "autograder.preprocessors.LimitedExecute",
                "autograder.preprocessors.StderrIsNotFailure",
                "nbgrader.preprocessors.IgnorePattern",
                "nbconvert.preprocessors.ClearMetadataPreprocessor",
                "nbgrader.preprocessors.LimitOutput",
                "nbgrader.preprocessors.SaveAutoGrades",
                "nbgrader.preprocessors.AssignLatePenalties",
                "nbgrader.preprocessors.CheckCellMetadata",
            ],
        },
        LimitedExecute={"timeout": limits.cell_timeout, "notebook_timeout": limits.notebook_timeout},
        RestoreDeletedCells={"release_directory": str(template / "release")},
        LimitOutput={"max_lines": limits.output_lines},
        GenerateFeedback={
            "preprocessors": [
                "nbgrader.preprocessors.GetGrades",
                "autograder.preprocessors.HideHiddenTests",
                "autograder.preprocessors.PlainErrors",
                "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
            ]
        },
    )


# ------------------------------------------------------------------------------ one submission


def grade_one(submission: Submission, out: Path, limits: Limits, seed: str) -> Result:
    """Autograde one notebook in its own nbgrader course; never raises for a bad submission."""
    work = out / "work"
    result_file = work / "results" / submission.student / f"{submission.notebook}.json"
    digest = hashlib.sha256(submission.path.read_bytes()).hexdigest()
    if result_file.exists():
        saved = json.loads(result_file.read_text())
        if saved.pop("submission_sha256", None) == digest:  # a changed submission is graded again
            return Result(**saved)
    try:
        result = _autograde(submission, out, limits, seed)
    except Exception as error:  # the batch goes on; the reason goes to the CSV, the details to a log
        result = _failed(
            submission.student,
            submission.notebook,
            f"the grader could not process this notebook ({type(error).__name__})",
        )
        result_file.parent.mkdir(parents=True, exist_ok=True)
        result_file.with_suffix(".log").write_text(traceback.format_exc())
    _write_failure_page(out, submission, result)
    result_file.parent.mkdir(parents=True, exist_ok=True)
    partial = result_file.with_suffix(".partial")
    partial.write_text(json.dumps({**asdict(result), "submission_sha256": digest}))
    partial.rename(result_file)  # atomic: a killed batch never leaves half a result
    return result


def _failed(student: str, notebook: str, reason: str) -> Result:
    """A row for a notebook that could not be graded: no score, the reason instead."""
    return Result(student, notebook, None, None, "failed", reason)


def _autograde(submission: Submission, out: Path, limits: Limits, seed: str) -> Result:
    try:
        notebook = nbformat.read(submission.path, as_version=4)
    except Exception as error:
        return _failed(
            submission.student,
            submission.notebook,
            f"not a readable notebook: {str(error).splitlines()[0][:200]}",
        )
    work = out / "work"
    template = prepare_template(work)
    run = work / "runs" / submission.student / submission.notebook
    shutil.rmtree(run, ignore_errors=True)
    target = run / "submitted" / submission.student / submission.notebook / f"{submission.notebook}.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)
    shutil.copy(template / "gradebook.db", run / "gradebook.db")

    os.environ["COURSE_HIDDEN_SEED"] = seed  # inherited by the kernel
    nbgrader = NbGraderAPI(config=_grading_config(run, template, limits))
    outcome = nbgrader.autograde(submission.notebook, submission.student, force=True, create=True)
    if not outcome["success"]:
        return _failed(
            submission.student,
            submission.notebook,
            _reason_from_log(outcome.get("log") or outcome.get("error") or ""),
        )
    with Gradebook(f"sqlite:///{run / 'gradebook.db'}") as gradebook:
        graded = gradebook.find_submission(submission.notebook, submission.student)
        score, max_score, manual = graded.score, graded.max_score, graded.needs_manual_grade
    feedback = nbgrader.generate_feedback(submission.notebook, submission.student, force=True)
    page = run / "feedback" / submission.student / submission.notebook / f"{submission.notebook}.html"
    if feedback["success"] and page.exists():
        destination = out / "feedback" / submission.student / f"{submission.notebook}.html"
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(page, destination)
    status = "needs_manual_grading" if manual else "graded"
    return Result(submission.student, submission.notebook, score, max_score, status)


def _reason_from_log(log: str) -> str:
    match = re.search(r"NotebookFailed: (.+)", log)
    if match:
        return match.group(1).strip()
    return "nbgrader could not run this notebook"


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


def grade(source: Path, out: Path, *, jobs: int = 1, limits: Limits = Limits()) -> list[Result]:
    """Grade every submission under `source`; write OUT/grades.csv and feedback; return the rows."""
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    seed_file = work / "hidden_seed"
    if not seed_file.exists():
        seed_file.write_text(str(secrets.randbits(31)))
    seed = seed_file.read_text().strip()
    submissions, results = find_submissions(source, work)
    prepare_template(work)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(grade_one, s, out, limits, seed) for s in submissions]
        results += [f.result() for f in futures]
    results.sort(key=lambda r: (r.student, r.notebook))
    write_csv(out / "grades.csv", results)
    return results


def write_csv(path: Path, results: list[Result]) -> None:
    partial = path.with_suffix(".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "notebook", "score", "max_score", "status", "reason"])
        for r in results:
            writer.writerow(
                [r.student, r.notebook, _number(r.score), _number(r.max_score), r.status, r.reason]
            )
    partial.rename(path)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"
