"""`course grade SUBMISSIONS --out OUT`: a folder or zip of notebooks -> grades, feedback pages,
an nbgrader course for formgrader, and a class report.

A submission's path, a folder of grader/ for each stage:
    intake/    inbox.py (with exports.py, recognition.py): the source's files -> submissions, refusals
    dispatch/  dispatch.py (worker processes of this machine) or dask_cluster.py (a Dask cluster)
    notebook/  autograde.py: a worker grades one notebook and sends back what it gave, as data
    record/    record.py: this process stores what comes back (no other process writes to OUT); the
               reports from the record: merged_course.py, grades.py (grades.csv), class_list.py,
               roster.py, class_report.py

Layout of OUT (an instructor's record: each run merges into it, see record.py):
    grades.csv                       one row per student and notebook (grades.py)
    report.html                      the class report: scores, pass rates, the mistakes made
                                     (class_report.py), the pairs of similar answers (grader/similarity/)
    similar-answers.csv              those pairs, one row each (grader/similarity/page.py)
    totals.csv, upload/              one row per student, and the files to upload to the LMS (roster.py):
                                     the grades, and the feedback pages as the LMS takes them back
                                     (feedback_return.py)
    intake.csv                       every file of the last source, and what became of it (inbox.py)
    course/                          one nbgrader course with every graded submission, for
                                     formgrader and `nbgrader export` (merged_course.py)
    feedback/<student>/<nb>.html     one page per graded notebook, with the score of its row (feedback.py)
    logs/<student>/<nb>.log          the grader's log: what was restored, what the sandbox refused,
                                     each verdict (or the grader's traceback, where grading failed)
    work/template/                   nbgrader course generated once per output folder (gradebook + release)
    work/inbox/                      copies of the submissions (the originals are only read)
    work/runs/<student>/<nb>/        the notebook as submitted and as graded, its automatic grades
                                     (grades.json) and the start of its kernel's output (kernel.log)
    work/results/<student>/<nb>.json the outcome of each submission and the hash of the file graded:
                                     present and same hash = done (resume, idempotence)
    work/hand_grades.json, refused.json, settings.json   the rest of the record (record.py)
    work/case_seed                   the batch's seed for all cases (same grades on a re-run)
    work/similar_answers.json        the answers as the similarity search reads them, by hash (a cache)
    work/batch.json                  while a batch runs: its sandboxes' folder and cgroup, its process

A notebook that breaks its worker costs only itself (dispatch.py), and a batch killed midway
resumes where it stopped: each outcome is stored as it comes back.
"""

import hashlib
import json
import os
import re
import secrets
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from tqdm import tqdm
from traitlets.config import Config

from autograder import cgroup
from autograder.exchange import remove_tree
from autograder.paths import assignments
from autograder.printable import shown
from autograder.sandbox import unavailable_reason
from grader import leave_out
from grader.dispatch.dispatch import Batch, LocalPool
from grader.grades import Result, write_csv
from grader.intake.inbox import IntakeFile, Submission, find_submissions, write_intake_report
from grader.notebook.autograde import (
    Limits,
    NotebookTask,
    UnfitWorker,
    grading_config,
    prepare_template,
    refuse_other_left_out,
)
from grader.record.class_list import keep_roster, missing_rows, named, people, read_roster, write_totals
from grader.record.class_report import write_class_report
from grader.record.feedback import write_pages
from grader.record.feedback_return import write_feedback_bundles
from grader.record.late import LatePolicy
from grader.record.merged_course import merge_course
from grader.record.record import (
    recorded,
    remember_refusals,
    save_result,
    save_settings,
    saved_result,
    settings,
    store,
)
from grader.similarity import similar_answers
from grader.similarity.page import CSV_NAME as SIMILAR_CSV
from grader.similarity.page import write_csv as write_similar_csv


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
    dask: str | None = None,
    compare_with: list[Path] | None = None,
) -> list[Result]:
    """Grade every submission under `source` into the record in `out` (new and changed files are
    graded, the rest of the record is kept); write grades.csv, totals, feedback and the class
    report from the whole record; return its rows. `again`: grade the source's files again even
    where unchanged. `dask`: a Dask scheduler's address, or local[:N], to grade on (else `jobs`
    worker processes here). `compare_with`: earlier classes' output folders and folders of
    published solutions, for the similar answers of the class report. `due`, `late_penalty`,
    `roster`, `title` and `compare_with` are kept in `out` once given."""
    if limits.sandboxed and (why := unavailable_reason()):
        raise SystemExit(
            f"Refusing to grade: {why}.\n"
            "Without a sandbox a student's code runs as you: it can read solutions/ and your files.\n"
            "Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `dnf install "
            "bubblewrap`), or pass --no-sandbox to grade trusted submissions without one."
        )
    source, out = source.resolve(), out.resolve()  # nbgrader resolves paths against its course root
    work = out / "work"
    new_folder = not out.exists()
    given = {"due": due, "late_penalty": late_penalty, "title": title, "limits": asdict(limits)}
    if compare_with:
        given["compare_with"] = [str(folder.resolve()) for folder in compare_with]
    kept = {**settings(out), **{k: v for k, v in given.items() if v is not None}}
    # A wrong flag, an unreadable roster, a bad course.toml or one that leaves out other questions than
    # when this folder was first graded stops the run here, before anything is written.
    LatePolicy.parse(kept.get("due"), kept.get("late_penalty"))
    checks_left_out = leave_out.left_out()
    refuse_other_left_out(work, checks_left_out)
    kept = save_settings(out, {**kept, "roster": keep_roster(out, roster) or kept.get("roster")})
    work.mkdir(parents=True, exist_ok=True)
    seed_file = work / "case_seed"
    if not seed_file.exists():
        seed_file.write_text(str(secrets.randbits(31)))
    seed = int(seed_file.read_text())
    intake = find_submissions(source, work, known_students(out, kept.get("roster")))
    if not (intake.submissions or intake.rejected):
        if new_folder:  # nothing was graded: nothing is left behind
            remove_tree(out)
        raise SystemExit(_nothing_to_grade(source, intake.files))
    write_intake_report(out / "intake.csv", intake.files)
    if exports := Counter(s.lms for s in intake.submissions if s.lms):
        save_settings(out, {**kept, "lms": exports.most_common(1)[0][0]})
    template = prepare_template(work, checks_left_out)
    batch = _start_batch(work)
    try:
        tasks = _to_grade(intake.submissions, out, template, limits, seed, again)
        if tasks:
            _grade_all(tasks, out, _dispatcher(dask, jobs, limits, template, batch))
    finally:
        _end_batch(batch, "sandboxes were left by grading workers killed midway")
        (work / BATCH_RECORD).unlink()
    write_intake_report(out / "intake.csv", _as_graded(intake.files, out))
    return report(out, intake.rejected)


def _as_graded(files: list[IntakeFile], out: Path) -> list[IntakeFile]:
    """The intake's list with each file taken for grading that could not be graded marked `failed`,
    with the reason, as its row of grades.csv is."""
    listed = []
    for file in files:
        saved = saved_result(out, file.student, file.notebook) if file.outcome == "graded" else None
        if saved and saved[0].status == "failed":
            file = replace(file, outcome="failed", detail=saved[0].reason)
        listed.append(file)
    return listed


def _nothing_to_grade(source: Path, files) -> str:
    """Why a source gave no notebook to grade, in one line and a few examples."""
    examples = "".join(f"\n  {shown(f.path)}: {shown(f.detail or f.outcome)}" for f in files[:5])
    return (
        f"Nothing to grade in {source}: {len(files)} file(s), none a notebook of this course "
        f"({', '.join(assignments())}); nothing was written.{examples}"
    )


def known_students(out: Path, roster: str | None) -> frozenset[str]:
    """The students a class knows: its roster's and those with an outcome in `out` (whose folders
    the intake never reads as anyone else's)."""
    students = {key.partition("/")[0] for key in recorded(out)}
    if roster:
        students.update(read_roster(out / roster).students)
    return frozenset(students)


def _to_grade(
    submissions: list[Submission], out: Path, template: Path, limits: Limits, seed: int, again: bool
) -> dict[NotebookTask, tuple[Submission, str]]:
    """The submissions to grade now, as tasks, with the hash of each file. A file graded before
    into `out` is not graded again unless `again`; what the export says of it may be newer."""
    solutions = (template / "solutions_sha256").read_text()
    tasks = {}
    for submission in submissions:
        digest = _sha256(submission.path)
        saved = saved_result(out, submission.student, submission.notebook)
        if saved and saved[1] == digest and not again:
            intake = {
                "name": submission.name,
                "late": submission.late,
                "submitted_at": submission.submitted_at,
                "origin": submission.origin,
                "lms": submission.lms,
            }
            if (result := replace(saved[0], **intake)) != saved[0]:
                save_result(out, result, digest)
            continue
        path = str(submission.path)
        task = NotebookTask(submission.student, submission.notebook, path, seed, limits, solutions)
        tasks[task] = (submission, digest)
    return tasks


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dispatcher(dask: str | None, jobs: int, limits: Limits, template: Path, batch: Batch):
    if dask is None:
        return LocalPool(max(1, jobs), limits, template, batch)
    from grader.dispatch.dask_cluster import DaskCluster  # Dask's import costs a second: only when asked for

    return DaskCluster(dask, limits, template, batch)


def _grade_all(tasks: dict[NotebookTask, tuple[Submission, str]], out: Path, dispatcher) -> None:
    """Store each notebook's outcome as its worker sends it back, with a progress bar on a
    terminal (counts, the failures so far, the time left)."""
    bar = tqdm(total=len(tasks), desc="grading", unit="notebook", disable=None, file=sys.stderr)
    failures = 0
    try:
        for task, graded in dispatcher.graded(list(tasks)):
            submission, digest = tasks[task]
            failures += store(out, submission, graded, digest).status == "failed"
            bar.set_postfix(failed=failures, refresh=False)
            bar.update()
    except UnfitWorker as error:
        raise SystemExit(f"Stopped: {error}") from None
    finally:
        bar.close()
        dispatcher.close()


def report(out: Path, refused_now: list[Result] = ()) -> list[Result]:
    """grades.csv, the feedback pages, the class report, totals, uploads and OUT/course, from the
    whole record of `out`; its rows."""
    kept = settings(out)
    policy = LatePolicy.parse(kept.get("due"), kept.get("late_penalty"))
    class_list = read_roster(out / kept["roster"]) if kept.get("roster") else None
    limits = Limits(**kept["limits"]) if "limits" in kept else Limits()
    seed = int((out / "work" / "case_seed").read_text())
    record = recorded(out)
    refused = remember_refusals(out, list(refused_now), set(record))
    config = grading_config(out / "course", out / "course", limits, seed)
    config.merge(Config(policy.nbgrader_config()))
    results = [result for result, _ in record.values()]
    rows, notes = merge_course(out, record, config, people(results, class_list), policy)
    rows = named(rows + refused + missing_rows(rows + refused, class_list), class_list)
    rows.sort(key=lambda r: (r.student, r.notebook))
    write_csv(out / "grades.csv", rows)
    write_pages(out, rows, config)
    write_totals(out, rows, class_list, kept.get("lms", ""), kept.get("title"))
    write_feedback_bundles(out, rows)
    try:
        matches, compared = similar_answers(out, [Path(folder) for folder in kept.get("compare_with", [])])
        failure = ""
    except Exception as error:  # the grades are written: a fault here must cost none of them
        matches, compared = [], []
        failure = f"the answers could not be compared ({type(error).__name__}: {error})"
        notes.append(failure)
    write_class_report(out / "report.html", rows, matches, failure)
    write_similar_csv(out / SIMILAR_CSV, matches)
    for note in notes + compared:
        print(f"note: {shown(note)}", file=sys.stderr)
    return rows


BATCH_RECORD = "batch.json"  # in OUT/work: the batch running now (its sandboxes' folder and cgroup)


def _start_batch(work: Path) -> Batch:
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
            "the time limit and can slow the others down; grade untrusted classes with --jobs 1 "
            '(docs/security.md, "What is not covered").',
            file=sys.stderr,
        )
        group = ""
    batch = Batch(tempfile.mkdtemp(prefix="course-"), group)
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
    return Batch(str(scratch), group), pid


def _end_batch(batch: Batch, left_by: str) -> None:
    """Remove the batch's process groups and sandboxes' folder, with whatever was left in them
    (`left_by` says how, in the note printed then); a failure is reported, and costs no grade."""
    try:
        if left := cgroup.end_batch(batch.group) if batch.group else 0:
            print(f"note: {left} {left_by}: removed", file=sys.stderr)
        remove_tree(Path(batch.scratch))
    except OSError as error:
        print(f"warning: the batch's sandboxes could not all be removed: {error}", file=sys.stderr)
