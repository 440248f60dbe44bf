"""What an output folder remembers: it is the instructor's record of a class, kept across runs.

    work/results/<student>/<nb>.json  the outcome of the last file graded for each student and
                                      notebook, with that file's hash; every run adds to these and
                                      replaces those it grades again, and only `course forget`
                                      removes one
    work/refused.json                 the rows of files that could not be taken (bad names, two
                                      files for one notebook), kept until that student's notebook
                                      is graded
    work/hand_grades.json             every grade and comment given by hand in OUT/course, by the
                                      file it was given to; set-aside ones (a resubmission changed
                                      the work they graded) are kept under "set_aside"
    work/settings.json                due date, late policy, roster, upload title: given once, kept

A run grades what its source holds and merges it into this record, so grading one student's
folder into a class's output folder changes that student's rows and nothing else.
"""

import html
import json
import os
import shutil
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.printable import shown_lines
from grader.grades import Result

if TYPE_CHECKING:  # types only: the grading side imports the record, not the reverse
    from grader.intake.inbox import Submission
    from grader.notebook.autograde import Graded


def _write_json(path: Path, value) -> None:
    """Whole or not at all: a run killed while writing leaves the previous file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=1, ensure_ascii=False))
    os.replace(partial, path)


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


# ------------------------------------------------------------------------------ results


def result_file(out: Path, student: str, notebook: str) -> Path:
    return out / "work" / "results" / student / f"{notebook}.json"


def result_files(out: Path) -> list[Path]:
    """Every outcome's file in the record, work/results/<student>/<nb>.json, in order."""
    return sorted((out / "work" / "results").glob("*/*.json"))


def holds_a_class(out: Path) -> bool:
    """Whether `out` is an output folder something was graded into (it has work/results/)."""
    return (out / "work" / "results").is_dir()


def submitted_file(out: Path, student: str, notebook: str) -> Path:
    """The notebook as nbgrader took it for grading, kept for OUT/course (work/runs/)."""
    return out / "work" / "runs" / student / notebook / "submitted" / student / notebook / f"{notebook}.ipynb"


def _result(saved: dict) -> Result:
    known = {f.name for f in fields(Result)}
    values = {k: v for k, v in saved.items() if k in known}
    values["questions"] = tuple(tuple(q) for q in values.get("questions", ()))
    values["checks"] = tuple(values.get("checks", ()))
    return Result(**values)


def saved_result(out: Path, student: str, notebook: str) -> tuple[Result, str] | None:
    """The outcome recorded for this student's notebook and the hash of the file it graded."""
    saved = _read_json(result_file(out, student, notebook), None)
    return None if saved is None else (_result(saved), saved.get("submission_sha256", ""))


def save_result(out: Path, result: Result, digest: str) -> None:
    _write_json(
        result_file(out, result.student, result.notebook), {**asdict(result), "submission_sha256": digest}
    )


def recorded(out: Path) -> dict[str, tuple[Result, str]]:
    """Every outcome in the record, this run's and every earlier run's into `out`:
    student/notebook -> (the outcome, the hash of the file it graded)."""
    record = {}
    for path in result_files(out):
        saved = json.loads(path.read_text())
        record[f"{path.parent.name}/{path.stem}"] = (_result(saved), saved.get("submission_sha256", ""))
    return record


def store(out: Path, submission: "Submission", graded: "Graded", digest: str) -> Result:
    """What grading one submission gave, into the record: its log, its feedback page as grading
    wrote it (work/runs/<student>/<nb>/feedback.html, published by feedback.write_pages) or a page
    saying it was not graded, what OUT/course is rebuilt from (work/runs/<student>/<nb>/), and
    its outcome, last and atomically: a batch killed midway never leaves half a result. Where the
    grader itself gave nothing back (`graded.retry`), an earlier outcome of the same file stands;
    without one, the failure is kept without the file's hash, so that the next run grades it again."""
    student, notebook = submission.student, submission.notebook
    if graded.retry:
        saved = saved_result(out, student, notebook)
        if saved and saved[1] == digest:  # the grader's own failures are saved without a hash
            note = f"[course] graded again, it gave nothing back ({graded.log}): the outcome above stands"
            log = out / "logs" / student / f"{notebook}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as file:
                file.write(f"\n{shown_lines(note)}\n")
            return saved[0]
        digest = ""
    result = replace(
        graded.result,
        name=submission.name,
        late=submission.late,
        submitted_at=submission.submitted_at,
        origin=submission.origin,
        lms=submission.lms,
    )
    intake = [f"[course] graded file: {submission.origin}"] if submission.origin else []
    log = "\n".join(intake + [f"[course] {line}" for line in submission.note.splitlines()] + [graded.log])
    _write(out / "logs" / student / f"{notebook}.log", shown_lines(log).encode())  # text of students
    page = out / "feedback" / student / f"{notebook}.html"
    if result.status == "failed":
        _write(page, _not_graded_page(notebook, result.reason).encode())
    else:  # the graded page is published from the run with the whole record's grades (feedback.py)
        page.unlink(missing_ok=True)
    run = out / "work" / "runs" / student / notebook
    shutil.rmtree(run, ignore_errors=True)
    if graded.feedback and result.status != "failed":
        _write(run / AUTOMATIC_PAGE, graded.feedback)
    if graded.submitted:
        _write(submitted_file(out, student, notebook), graded.submitted)
        _write(run / "autograded" / student / notebook / f"{notebook}.ipynb", graded.autograded)
        _write(run / GRADES_FILE, json.dumps(graded.grades).encode())
    if graded.kernel_log:
        _write(run / "kernel.log", graded.kernel_log)
    save_result(out, result, digest)
    return result


GRADES_FILE = "grades.json"  # in work/runs/<student>/<nb>/: what grading wrote into its gradebook
AUTOMATIC_PAGE = "feedback.html"  # in work/runs/<student>/<nb>/: the page with the automatic grades


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _not_graded_page(notebook: str, reason: str) -> str:
    return plain_page(notebook, "not graded", f"{reason}\nPlease contact your instructor.")


def plain_page(notebook: str, heading: str, text: str) -> str:
    """A page of a few lines in place of a feedback page: `notebook: heading`, then each line of
    `text` as a paragraph, all escaped."""
    paragraphs = "".join(f"<p>{html.escape(line)}</p>" for line in text.split("\n"))
    title = html.escape(notebook)
    return f"<!doctype html><title>{title}</title><h1>{title}: {html.escape(heading)}</h1>{paragraphs}"


# ------------------------------------------------------------------------------ refusals


def remember_refusals(out: Path, refused: list[Result], graded: set[str]) -> list[Result]:
    """This run's refused rows added to the earlier runs'; those of a student's notebook that
    has an outcome in the record now (`graded`: student/notebook) are dropped (the file graded
    since replaces them)."""
    path = out / "work" / "refused.json"
    rows = {(r["student"], r["notebook"]): r for r in _read_json(path, [])}
    rows.update({(r.student, r.notebook): asdict(r) for r in refused})
    kept = [_result(r) for key, r in rows.items() if f"{key[0]}/{key[1]}" not in graded]
    _write_json(path, [asdict(r) for r in kept])
    return kept


# ------------------------------------------------------------------------------ hand grades


class HandGrades:
    """The ledger of grades and comments given by hand: {student/notebook: entry}, where an entry is
    {"submission_sha256", "grades": {cell: {"manual_score", "extra_credit", "work"}},
    "comments": {cell: {"manual_comment", "work"}}}. `work` fingerprints what the grade judged
    (merged_course.work_fingerprint), so that it can follow a resubmission where that is unchanged."""

    def __init__(self, out: Path):
        self.path = out / "work" / "hand_grades.json"
        saved = _read_json(self.path, {})
        self.entries: dict[str, dict] = saved.get("current", {})
        self.set_aside: list[dict] = saved.get("set_aside", [])

    def save(self) -> None:
        _write_json(self.path, {"current": self.entries, "set_aside": self.set_aside})

    def record(self, key: str, entry: dict) -> None:
        """What OUT/course holds by hand for `key` now (the instructor's latest word on that file);
        an entry for another file of `key` is set aside, never dropped."""
        earlier = self.entries.get(key)
        if earlier and earlier["submission_sha256"] != entry["submission_sha256"] and _given(earlier):
            self.put_aside(key, earlier, "replaced by hand grades of a later file")
        if _given(entry):
            self.entries[key] = entry
        else:
            self.entries.pop(key, None)

    def put_aside(self, key: str, entry: dict, why: str) -> None:
        if _given(entry):
            self.set_aside.append({"key": key, "why": why, **entry})


def _given(entry: dict) -> bool:
    return bool(entry.get("grades") or entry.get("comments"))


# ------------------------------------------------------------------------------ settings


def settings(out: Path) -> dict:
    return _read_json(out / "work" / "settings.json", {})


def save_settings(out: Path, values: dict) -> dict:
    _write_json(out / "work" / "settings.json", values)
    return values


# ------------------------------------------------------------------------------ forgetting


def forgettable(out: Path, student: str, notebook: str | None) -> list[Path]:
    """What `course forget` removes for a student (and one notebook of theirs, if given)."""
    names = [f"{notebook}.json", f"{notebook}.log", f"{notebook}.html"] if notebook else None
    found = []
    for folder in ("work/results", "logs", "feedback", "work/runs"):
        base = out / folder / student
        if not base.is_dir():
            continue
        if names is None:
            found.append(base)
        else:
            found += [p for p in base.iterdir() if p.name in names or p.name == notebook]
    return found


def forget(out: Path, student: str, notebook: str | None) -> list[Path]:
    """Remove a student's outcomes from the record (their hand grades stay in the ledger, set aside)."""
    removed = forgettable(out, student, notebook)
    ledger = HandGrades(out)
    for key in list(ledger.entries):
        owner, graded = key.split("/", 1)
        if owner == student and notebook in (None, graded):
            ledger.put_aside(key, ledger.entries.pop(key), "its submission was removed by `course forget`")
    ledger.save()
    refusals = out / "work" / "refused.json"
    rows = [
        r
        for r in _read_json(refusals, [])
        if r["student"] != student or notebook not in (None, r["notebook"])
    ]
    _write_json(refusals, rows)
    for path in removed:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return removed
