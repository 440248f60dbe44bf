"""One submission, graded where a platform runs it: the student's folder -> the graded notebook.

The folder holds whatever the student uploaded. The intake reads it as one student's folder
(inbox.find_submissions: plain files directly in it, names that can be shown), and the notebook is
recognised by its cells, whatever its name. The one notebook of the
platform's assignment is graded by a worker, as in a batch; every other file is listed with what
became of it, so the student learns what was not graded and why.
"""

import os
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path

from autograder.kernel_user import KernelUser
from autograder.sandbox import unavailable_reason
from grader import leave_out
from grader.intake.inbox import IntakeFile, find_submissions
from grader.notebook.autograde import GRADER_FAILED, Graded, Limits, NotebookTask, Worker, prepare_template

STUDENT = "student"  # the platform knows who; the grade stays with its submission
SHARED_FOLDERS = ["/tmp", "/var/tmp", "/dev/shm"]  # where the kernel's user may leave files behind


@dataclass(frozen=True)
class Settings:
    """What the bundle was made with (platform.json)."""

    notebook: str  # the assignment graded, e.g. "04_rope"
    seed: int  # the cases' seed: a submission graded again gets the same grade
    show_hidden: bool = False  # the hidden checks' verdicts at submission, not once grades are published
    cell_timeout: int = 120
    notebook_timeout: int = 480
    memory_gib: float = 3.0


@dataclass
class Outcome:
    notebook: str
    isolation: str  # how the kernel was confined, in words
    graded: Graded | None = None  # None: no notebook of the assignment could be graded
    file: str = ""  # the file graded, as the student named it
    notes: list[str] = field(default_factory=list)  # for the student: what was not graded, and why


def isolation() -> tuple[Limits, str, str]:
    """The strongest confinement this container allows: bubblewrap, else a user of the kernel's own;
    its limits, what the student is told of it, and why bubblewrap could not run ("" where it could)."""
    why = unavailable_reason()
    if why is None:
        return Limits(), "bubblewrap (the kernel's own namespaces, no network)", ""
    user = KernelUser.drawn()
    said = "an unprivileged user of its own (this container does not let bubblewrap run)"
    return Limits(sandboxed=False, kernel_uid=user.uid), said, why


def grade_submission(folder: Path, settings: Settings, work: Path, scratch: Path) -> Outcome:
    """Grade the notebook of `settings.notebook` found in `folder`, working in `work` (new, root's
    alone: it holds the nbgrader course) with the kernel's folders in `scratch` (new)."""
    base, confinement, why = isolation()
    if why:  # for the instructor: the run's standard output
        print(f"[course] no bubblewrap here ({why}): the kernel runs as user {base.kernel_uid}")
    limits = replace(
        base,
        cell_timeout=settings.cell_timeout,
        notebook_timeout=settings.notebook_timeout,
        memory_bytes=int(settings.memory_gib * 2**30),
    )
    outcome = Outcome(settings.notebook, confinement)
    intake = find_submissions(folder, work, frozenset({folder.name}))
    chosen = [s for s in intake.submissions if s.notebook == settings.notebook]
    for file in intake.files:
        if not (file.outcome == "graded" and file.notebook == settings.notebook):
            what = f" ({file.notebook})" if file.notebook else ""
            outcome.notes.append(f"{file.path}{what}: not graded: {_why(file)}")
    if not chosen:
        copies = sum(file.notebook == settings.notebook for file in intake.files)
        outcome.notes.insert(0, _not_found(settings.notebook, len(intake.files), copies))
        return outcome
    (submission,) = chosen  # the intake refuses two files of one notebook in one folder
    outcome.file = submission.origin
    os.chmod(scratch, 0o711)  # the kernel's user goes through it to its own folder (kernel_user.py)
    template = prepare_template(work, leave_out.left_out())
    worker = Worker(template, scratch)
    task = NotebookTask(
        STUDENT, settings.notebook, str(submission.path), settings.seed, limits, worker.solutions
    )
    try:
        outcome.graded = worker.grade(task, start_next=False)
        if outcome.graded.result.reason.startswith(GRADER_FAILED):  # not the student's doing: no grade
            raise RuntimeError(f"{outcome.graded.result.reason}:\n{outcome.graded.log}")
    finally:  # the worker killed them at the kernel's end; once more before any result, whatever happened
        if limits.kernel_uid:
            user = KernelUser.of(limits.kernel_uid)
            user.kill_all()
            user.remove_files(SHARED_FOLDERS)
    return outcome


def new_seed() -> int:
    """A bundle's seed for the cases (as a batch's OUT/work/case_seed)."""
    return secrets.randbits(31)


def _why(file: IntakeFile) -> str:
    """Why the intake did not take a file, in the student's terms: its words are the instructor's
    (who collects a class's folders), but a platform's upload is the student's alone."""
    if file.outcome == "refused" and "/" in file.path:
        return "it is inside a folder: upload the notebook file itself, not a folder or an archive"
    return file.detail or file.outcome


def _not_found(notebook: str, files: int, copies: int) -> str:
    if not files:
        return f"Nothing was submitted: upload your {notebook}.ipynb (the notebook file itself)."
    if copies > 1:
        return (
            f"{copies} files submitted are the notebook {notebook}, so which to grade cannot be told and "
            "none was graded (0 points): submit it once, as one file. The files that came:"
        )
    return (
        f"None of the files submitted is the notebook {notebook}, so nothing was graded (0 points). "
        f"Upload {notebook}.ipynb as Jupyter saves it (File > Download in JupyterLab); the files "
        "that came, and what each is:"
    )
