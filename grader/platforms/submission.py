"""One submission, graded where a platform runs it: the student's folder -> the graded notebook.

The folder holds whatever the student uploaded. The intake reads it as one student's folder
(inbox.find_submissions: plain files only, names that can be shown, zips unpacked with their
bounds), and the notebook is recognised by its cells, whatever its name. The one notebook of the
platform's assignment is graded by a worker, as in a batch; every other file is listed with what
became of it, so the student learns what was not graded and why.
"""

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from autograder.kernel_user import KernelUser
from autograder.sandbox import unavailable_reason
from grader import leave_out
from grader.intake.inbox import find_submissions
from grader.notebook.autograde import Graded, Limits, NotebookTask, Worker, prepare_template

KERNEL_USER = "course-kernel"  # made by setup.sh (grader/templates/platforms/)
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


def isolation() -> tuple[Limits, str]:
    """The strongest confinement this container allows: bubblewrap, else the kernel's own user;
    RuntimeError where neither is there (the grader never runs a student's code as root)."""
    why = unavailable_reason()
    if why is None:
        return Limits(), "bubblewrap (the kernel's own namespaces, no network)"
    try:
        KernelUser.named(KERNEL_USER)
    except LookupError as error:
        raise RuntimeError(f"no sandbox: {why}; and {error}") from None
    return Limits(sandboxed=False, kernel_user=KERNEL_USER), (
        f"the unprivileged user {KERNEL_USER} (bubblewrap could not run here: {why})"
    )


def grade_submission(folder: Path, settings: Settings, work: Path, scratch: Path) -> Outcome:
    """Grade the notebook of `settings.notebook` found in `folder`, working in `work` (new, root's
    alone: it holds the nbgrader course) with the kernel's folders in `scratch` (new)."""
    base, confinement = isolation()
    limits = Limits(
        cell_timeout=settings.cell_timeout,
        notebook_timeout=settings.notebook_timeout,
        memory_bytes=int(settings.memory_gib * 2**30),
        sandboxed=base.sandboxed,
        kernel_user=base.kernel_user,
    )
    outcome = Outcome(settings.notebook, confinement)
    intake = find_submissions(folder, work, frozenset({folder.name}))
    chosen = [s for s in intake.submissions if s.notebook == settings.notebook]
    for file in intake.files:
        if not (file.outcome == "graded" and file.notebook == settings.notebook):
            what = f" ({file.notebook})" if file.notebook else ""
            outcome.notes.append(f"{file.path}{what}: not graded: {file.detail or file.outcome}")
    if not chosen:
        outcome.notes.insert(0, _not_found(settings.notebook, bool(intake.files)))
        return outcome
    (submission,) = chosen  # the intake refuses two files of one notebook in one folder
    outcome.file = submission.origin
    os.chmod(scratch, 0o711)  # the kernel's user goes through it to its own folder (kernel_user.py)
    template = prepare_template(work, leave_out.left_out())
    worker = Worker(template, scratch)
    task = NotebookTask(
        STUDENT, settings.notebook, str(submission.path), settings.seed, limits, worker.solutions
    )
    outcome.graded = worker.grade(task, start_next=False)
    if limits.kernel_user:  # the worker killed them at the kernel's end; once more before any result
        user = KernelUser.named(limits.kernel_user)
        user.kill_all()
        user.remove_files(SHARED_FOLDERS)
    return outcome


def new_seed() -> int:
    """A bundle's seed for the cases (as a batch's OUT/work/case_seed)."""
    return secrets.randbits(31)


def _not_found(notebook: str, any_file: bool) -> str:
    if not any_file:
        return f"Nothing was submitted: upload your {notebook}.ipynb (the notebook file itself)."
    return (
        f"None of the files submitted is the notebook {notebook}, so nothing was graded (0 points). "
        f"Upload {notebook}.ipynb as Jupyter saves it (File > Download in JupyterLab); the files "
        "that came, and what each is:"
    )
