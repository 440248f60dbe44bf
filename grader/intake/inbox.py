"""What a batch grades: the submissions found in a folder or zip, copied into OUT/work/inbox.

A source is a class's files as the instructor collected them: plain folders (<student>/<file>,
flat <student>_<notebook>.ipynb), a learning-management system's export (Canvas, Moodle,
Blackboard, Gradescope: exports.py reads their names, docs/lms-exports.md says how), or a zip
of either. Each file's path is read on its own; a notebook whose name does not name a notebook
exactly is recognised by its cells (recognition.py). Where an export holds several attempts at
one notebook, the latest is graded and the others are listed as superseded.

A student's files are only ever the ones in their own folder (or named after them, flat, or
given to them by the export's metadata), and whatever cannot be graded becomes a `failed` row
that says why and what to do, never a silent drop. Only plain files with names that can be
shown as they are reach the inbox; one bad file or zip entry is refused on its own, the rest of
the batch is graded. Every file of the source is listed with what became of it (Intake.files,
written to OUT/intake.csv by write_intake_report).
"""

import csv
import lzma
import os
import re
import shutil
import stat
import unicodedata
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograder.paths import assignments
from autograder.printable import UNPRINTABLE
from grader.grades import Result, csv_cell, failed
from grader.intake import exports
from grader.intake.exports import LMS_NAMES, METADATA, STUDENT_ID, Identified
from grader.intake.recognition import recognise

__all__ = ["STUDENT_ID", "Intake", "IntakeFile", "Submission", "find_submissions", "write_intake_report"]


@dataclass(frozen=True)
class Submission:
    student: str  # the id the LMS knows the student by, or the plain layout's name: a folder name in OUT
    notebook: str  # an assignment name, e.g. "04_rope"
    path: Path  # the copy in work/inbox
    name: str = ""  # the student's full name where the export gives one
    late: bool = False  # the export marks it late (Canvas _LATE_)
    submitted_at: str = ""  # when the export says it was submitted, ISO 8601, "" if it does not say
    origin: str = ""  # the file's path in the source as given (folder or zip), for the logs
    lms: str = ""  # the key of its export's row of exports.EXPORTS, "" for the plain layouts
    note: str = ""  # what the intake recognised, one or more lines for the notebook's log


@dataclass(frozen=True)
class IntakeFile:
    path: str  # the file's path in the source
    # "graded", "failed" (taken for grading, not gradable: grades.csv says why), "superseded" (an older
    # attempt), "read" (metadata used), "ignored", "refused"
    outcome: str
    student: str = ""
    notebook: str = ""
    detail: str = ""  # why, in words


@dataclass
class Intake:
    submissions: list[Submission] = field(default_factory=list)
    rejected: list[Result] = field(default_factory=list)  # the `failed` rows
    files: list[IntakeFile] = field(default_factory=list)  # every file of the source, and what became of it


MAX_ARCHIVE_BYTES = 8 * 2**30  # a class's zip; more is a zip bomb, not notebooks
# A receipt or submission_metadata.yml; more is not what an export writes (Gradescope's metadata of a
# class of 1000 is about 0.3 MiB; libyaml reads 4 MiB in a second).
MAX_TEXT_BYTES = 4 * 2**20
IGNORED_FOLDERS = {  # never submissions: listed, not looked at
    ".ipynb_checkpoints": "in .ipynb_checkpoints/: Jupyter's autosaves, not a submission",
    "__MACOSX": "in __MACOSX/: macOS's copies of file attributes, not a submission",
}


def find_submissions(source: Path, work: Path, students: frozenset[str] = frozenset()) -> Intake:
    """Copy what the intake reads of `source` into work/inbox; the submissions, the refused and every file.

    Accepted, per file: <student>/<file>, flat <student>_<notebook>.ipynb, the exports of Canvas,
    Moodle, Blackboard and Gradescope, or a zip of any (Gradescope's assignment_<id>_export/ is
    looked through). A student's files are only ever the ones directly in their folder; two files
    for one notebook are both refused rather than one picked, unless the export orders them as
    attempts (the latest is graded). `students`: the ones the class already knows (its roster,
    its record); a source named after one of them is that student's folder.
    """
    inbox = work / "inbox"
    shutil.rmtree(inbox, ignore_errors=True)
    inbox.mkdir(parents=True)
    if source.is_dir():
        entries, own = _copy_folder(source, inbox), source.name
    elif zipfile.is_zipfile(source):
        entries, own = _zipped_folder(_unpack_zip(source, inbox), source.stem)
    else:
        raise SystemExit(f"{source} is neither a folder nor a zip file")
    if own in students:  # one student's folder given as the source: its files are still only hers
        for entry in entries:
            entry.parts = (own, *entry.parts)
    return _Assembly(inbox, tuple(assignments()), students).run(entries)


def write_intake_report(path: Path, files: list[IntakeFile]) -> None:
    """OUT/intake.csv: every file of the source and what became of it (text fields as in grades.csv)."""
    partial = path.with_suffix(".partial")
    with partial.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "outcome", "student", "notebook", "detail"])
        for r in files:
            writer.writerow(
                [
                    csv_cell(r.path),
                    csv_cell(r.outcome),
                    csv_cell(r.student),
                    csv_cell(r.notebook),
                    csv_cell(r.detail),
                ]
            )
    partial.rename(path)


@dataclass
class _Entry:
    """A file of the source, as listed, and its copy in the inbox where the intake reads it."""

    origin: str  # its path in the source as given
    parts: tuple[str, ...]  # its folders and name
    copy: Path | None = None
    refusal: str = ""  # why it was refused before its name was read (it gets a failed row)
    skipped: str = ""  # why it was not looked at


@dataclass
class _Candidate:
    """A notebook file that is one student's work on one notebook."""

    entry: _Entry
    found: Identified
    student: str
    name: str
    notebook: str
    note: str  # how its notebook was told, where not by its exact name
    owners: exports.Owners  # every member of its group, and its attempt

    @property
    def attempt(self) -> tuple:
        return self.owners.attempt

    @property
    def attempt_label(self) -> str:
        return self.owners.attempt_label


# ------------------------------------------------------------------------------ assembly


class _Assembly:
    """Turns the listed files into submissions, failed rows and the intake's list of files."""

    def __init__(self, inbox: Path, known: tuple[str, ...], students: frozenset[str] = frozenset()):
        self.inbox, self.known, self.students = inbox, known, students
        self.intake = Intake()
        self.recognised: dict[str, tuple[str, str]] = {}
        self.group_copies: Path | None = None

    def run(self, entries: list[_Entry]) -> Intake:
        listed = []
        for entry in entries:
            if entry.refusal:
                self._refuse(entry, entry.origin, "", entry.refusal)
            elif entry.skipped:
                self._file(entry, "ignored", detail=entry.skipped)
            else:
                listed.append(entry)
        layout = exports.layout_of([e.parts for e in listed if e.copy], self.known)
        found = [(entry, layout.identify(entry.parts)) for entry in listed]
        receipts = self._receipts([(e, f) for e, f in found if f.kind == "receipt" and e.copy])
        metadata = self._metadata([e for e, f in found if f.kind == "metadata" and e.copy])
        companions = exports.Companions(receipts, metadata)
        candidates: dict[tuple[str, str], list[_Candidate]] = {}
        for entry, what in found:
            if what.kind in ("receipt", "metadata") and entry.copy:
                continue
            if what.kind == "refused":
                self._refuse(entry, entry.origin, "", what.detail)
            elif what.kind != "notebook" or not entry.copy:
                detail = what.detail or exports.not_a_notebook(entry.parts[-1])
                self._file(entry, "ignored", what.student, detail=detail)
            else:
                for candidate in self._candidates(entry, what, companions):
                    candidates.setdefault((candidate.student, candidate.notebook), []).append(candidate)
        for (student, notebook), group in candidates.items():
            self._select(student, notebook, group)
        self.intake.submissions.sort(key=lambda s: (s.student, s.notebook))
        self.intake.files.sort(key=lambda f: (f.path, f.student))
        return self.intake

    def _file(
        self, entry: _Entry, outcome: str, student: str = "", notebook: str = "", detail: str = ""
    ) -> None:
        self.intake.files.append(IntakeFile(entry.origin, outcome, student, notebook, detail))

    def _refuse(self, entry: _Entry, student: str, notebook: str, reason: str) -> None:
        self._file(entry, "refused", student if student != entry.origin else "", notebook, reason)
        self.intake.rejected.append(failed(student, notebook, reason))

    # -------------------------------------------------------------------------- what exports add

    def _receipts(self, found: list[tuple[_Entry, Identified]]) -> dict[str, exports.Receipt]:
        """Blackboard's receipts, by attempt: they give the student's name and username."""
        receipts = {}
        for entry, what in found:
            text, why = _read_text(entry.copy)
            receipt = exports.read_receipt(text) if text is not None else None
            if receipt is None:
                why = why or "it has no line 'Name: <full name> (<username>)'"
                detail = f"Blackboard's receipt of the attempt {what.attempt_label}, not used: {why}"
                self._file(entry, "ignored", what.student, detail=detail)
                continue
            receipts[what.key] = receipt
            who = f"{receipt.name} ({receipt.username})"
            try:
                username = exports.blackboard_student(what.key, receipt)[0]
            except exports.Ambiguous as error:
                self._file(entry, "ignored", detail=f"Blackboard's receipt of {who}, not used: {error}")
                continue
            self._file(
                entry,
                "read",
                username,
                detail=f"Blackboard's receipt of the attempt {what.attempt_label}: {who}",
            )
        return receipts

    def _metadata(self, entries: list[_Entry]) -> dict[str, exports.GradescopeSubmission] | str:
        """Gradescope's submissions by id, or why there are none to use (no metadata, or unreadable)."""
        if not entries:
            return f"there is no {METADATA} at the top of the source"
        entry = entries[0]
        text, why = _read_text(entry.copy)
        try:
            if text is None:
                raise ValueError(why)
            submissions = exports.gradescope_submissions(text)
        except ValueError as error:
            reason = f"Gradescope's {METADATA} cannot be used: {error}"
            self._refuse(entry, entry.origin, "", reason)
            return reason
        self._file(
            entry, "read", detail=f"Gradescope's list of submissions and their students ({len(submissions)})"
        )
        return submissions

    def _candidates(
        self, entry: _Entry, what: Identified, companions: exports.Companions
    ) -> list[_Candidate]:
        """The students whose work the file is (a Gradescope group: each member), with its notebook."""
        export = exports.export_of(what.lms)
        try:
            owners = export.owners(what, companions)
        except exports.Unowned as error:
            self._refuse(entry, entry.origin, "", str(error))
            return []
        notebook, note = self._notebook(entry, what)
        logged = "\n".join(line for line in (what.note, note) if line)  # for the log, not a reason
        candidates = []
        for student, name in owners.members:
            if problem := exports.id_problem(student):
                self._refuse(entry, entry.origin, notebook, export.refuse_id(what, student, name, problem))
            elif not notebook:
                self._refuse(entry, student, "", note)
            else:
                candidates.append(_Candidate(entry, what, student, name, notebook, logged, owners))
        return candidates

    def _notebook(self, entry: _Entry, what: Identified) -> tuple[str, str]:
        """(notebook, how it was told) or ("", why it cannot be): by its exact name, else by its cells."""
        if what.notebook:
            return what.notebook, ""
        if entry.origin not in self.recognised:
            notebook, why = recognise(entry.copy, what.file, self.known)
            note = f"'{what.file}' recognised as {notebook} by its cells" if notebook else why
            self.recognised[entry.origin] = (notebook, note)
        return self.recognised[entry.origin]

    # -------------------------------------------------------------------------- one student, one notebook

    def _select(self, student: str, notebook: str, group: list[_Candidate]) -> None:
        """Grade the one file, or the latest attempt where the export orders them; refuse the rest."""
        kept = []
        for c in group:  # whatever the layout concluded: a known student's folder holds her work only
            if owner := next((p for p in c.entry.parts[:-1] if p in self.students and p != student), None):
                reason = (
                    f"'{c.entry.origin}' lies in the folder of {owner} but was read as {student}'s "
                    f"{notebook}: a file in a student's folder is never graded as another's "
                    f"({student}'s grade is kept)"
                )
                self._file(c.entry, "refused", owner, notebook, reason)
                self.intake.rejected.append(failed(owner, notebook, reason))
            else:
                kept.append(c)
        if not (group := kept):
            return
        ranked = len({c.found.lms for c in group}) == 1 and all(c.attempt for c in group)
        if len(group) > 1 and not ranked:
            reason = f"more than one file for this notebook ({', '.join(c.entry.origin for c in group)})"
            for c in group:
                self._file(c.entry, "refused", student, notebook, reason)
            self.intake.rejected.append(failed(student, notebook, reason))
            return
        group.sort(key=lambda c: c.attempt)
        latest = [c for c in group if c.attempt == group[-1].attempt]
        older = group[: len(group) - len(latest)]
        if len(latest) > 1:
            names = ", ".join(c.entry.origin for c in latest)
            label = latest[0].attempt_label
            reason = f"more than one file for this notebook in the latest attempt ({label}: {names})"
            for c in latest:
                self._file(c.entry, "refused", student, notebook, reason)
            self.intake.rejected.append(failed(student, notebook, reason))
            for c in older:
                self._file(c.entry, "superseded", student, notebook, f"an older attempt ({c.attempt_label})")
            return
        graded = latest[0]
        notes = [graded.note] if graded.note else []
        group_of = ""
        lms = LMS_NAMES.get(graded.found.lms, "")
        if len(members := graded.owners.members) > 1:
            everyone = ", ".join(f"{name} ({member})" if name else member for member, name in members)
            group_of = f"{lms} group submission {graded.found.key} of {everyone}"
            notes.append(f"{group_of}: graded for each of them")
        if older:
            notes.append(
                f"{lms} export: {len(group)} files for {notebook}; the latest ({graded.attempt_label}: "
                f"{graded.entry.origin}) is graded"
            )
            for c in older:
                detail = f"an older attempt ({c.attempt_label}); graded: {graded.entry.origin}"
                if group_of and c.found.key != graded.found.key:
                    # Gradescope's own rule; but whoever submits names the group's members, unasked.
                    detail += f", {group_of}, which names {student} as a member: check that {student} agreed"
                    notes.append(f"FLAG: {student}'s own {c.attempt_label} is superseded by {group_of}")
                self._file(c.entry, "superseded", student, notebook, detail)
        path = graded.entry.copy if not group_of else self._group_copy(graded)
        submission = Submission(
            student,
            notebook,
            path,
            name=graded.name,
            late=graded.found.late,
            submitted_at=graded.owners.submitted_at,
            origin=graded.entry.origin,
            lms=graded.found.lms,
            note="\n".join(notes),
        )
        self.intake.submissions.append(submission)
        self._file(graded.entry, "graded", student, notebook, _how(submission, graded.note))

    def _group_copy(self, graded: _Candidate) -> Path:
        """A copy of a group's file of its own for one member, beside the source's files in the inbox."""
        if self.group_copies is None:
            self.group_copies = self.inbox / "_group_copies"
            while self.group_copies.exists():  # a source's own folder of that name
                self.group_copies = self.group_copies.with_name(self.group_copies.name + "_")
        destination = (
            self.group_copies / graded.student / f"submission_{graded.found.key}" / graded.entry.parts[-1]
        )
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(graded.entry.copy, destination)
        return destination


def _how(submission: Submission, recognised: str) -> str:
    """How a graded file was read, for intake.csv (`recognised`: how its cells told its notebook)."""
    where = f"{LMS_NAMES[submission.lms]} export" if submission.lms else "plain layout"
    if submission.name:
        where += f" ({submission.name})"
    if submission.late:
        where += ", late"
    return f"{where}; {'; '.join(recognised.splitlines()) or f'{submission.notebook} by its name'}"


def _read_text(path: Path) -> tuple[str | None, str]:
    """A small text file (a receipt, Gradescope's metadata): (its text, "") or (None, why not)."""
    try:
        if path.stat().st_size > MAX_TEXT_BYTES:
            return None, f"it is larger than {MAX_TEXT_BYTES // 2**20} MiB"
        data = path.read_bytes()
    except OSError as error:
        return None, f"it could not be read ({error.strerror or error})"
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError:
        return data.decode("latin-1"), ""


def _skipped(parts: tuple[str, ...]) -> str:
    return next((IGNORED_FOLDERS[p] for p in parts[:-1] if p in IGNORED_FOLDERS), "")


# ------------------------------------------------------------------------------ rules for any file


def _name_refusal(name: str) -> str | None:
    """Why a file name is refused before anything else is done with it.

    Names reach grades.csv, logs and the terminal: a newline would forge a row, an escape code
    would rewrite the summary, a text-direction mark would show another name than the real one.
    """
    categories = {unicodedata.category(c) for c in name}
    if "Cs" in categories:  # a byte that is not UTF-8, as Python reads such names from the disk
        return "its name is not UTF-8 text"
    if categories & UNPRINTABLE:
        return "its name holds control characters (line breaks, terminal escapes or text-direction marks)"
    return None


def _type_refusal(mode: int) -> str | None:
    """Why a file of this kind (`st_mode`) is refused: only plain files are submissions."""
    if stat.S_ISLNK(mode):
        return "a symbolic link, not a plain file"
    if not stat.S_ISREG(mode):
        return "a special file (pipe, socket or device), not a plain file"
    return None


# ------------------------------------------------------------------------------ a folder


def _copy_folder(source: Path, inbox: Path) -> list[_Entry]:
    """List every file of the folder, and copy the ones the intake reads into the inbox.

    Those (notebooks, Blackboard's receipts, Gradescope's metadata) are refused one by one for
    their names or kinds; the others are only listed, never opened.
    """
    entries = []

    def unreadable(error: OSError) -> None:  # os.walk would otherwise skip the folder silently
        name = str(Path(error.filename).relative_to(source))
        entries.append(
            _Entry(name, Path(name).parts, refusal=f"this folder could not be read ({error.strerror})")
        )

    for folder, subfolders, files in os.walk(source, onerror=unreadable):
        subfolders.sort()
        for name in subfolders:
            if Path(folder, name).is_symlink():  # os.walk neither follows nor lists it
                relative = Path(folder, name).relative_to(source)
                entries.append(
                    _Entry(str(relative), relative.parts, refusal="a symbolic link to a folder, not followed")
                )
        for name in sorted(files):
            path = Path(folder, name)
            relative = path.relative_to(source)
            entry = _Entry(str(relative), relative.parts, skipped=_skipped(relative.parts))
            if not entry.skipped and exports.wanted(name):
                reason = _name_refusal(str(relative)) or _copy_file(path, inbox / relative)
                entry.refusal, entry.copy = (reason, None) if reason else ("", inbox / relative)
            entries.append(entry)
    return entries


def _copy_file(path: Path, destination: Path) -> str | None:
    """Copy one plain file; why not, if it is something else or cannot be read."""
    try:
        reason = _type_refusal(path.lstat().st_mode)
        if reason is None:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
        return reason
    except OSError as error:
        return f"this file could not be read ({error.strerror or error})"


# ------------------------------------------------------------------------------ a zip


def _unpack_zip(archive: Path, inbox: Path) -> list[_Entry]:
    """List every entry of the zip, and unpack the ones the intake reads into the inbox.

    Every entry is judged on its own before anything is written: one that would land outside
    the inbox, a link, an encrypted or damaged entry, a name given twice... is refused with its
    reason and the others are still graded. Only the files the intake reads (notebooks,
    receipts, Gradescope's metadata) are unpacked, and only the zip as a whole being unreadable
    or a zip bomb stops the batch. The zip itself is only read.
    """
    entries, wanted = [], {}
    with _open_zip(archive) as zf:
        for info in zf.infolist():
            parts = _entry_parts(info.filename)
            if _is_folder(info):
                continue  # folders are made as their files need them
            entry = _Entry(info.filename, parts, skipped=_skipped(parts))
            entries.append(entry)
            if entry.skipped:
                continue
            if reason := _entry_refusal(info, parts):
                entry.refusal = f"zip entry not unpacked: {reason}"
            elif exports.wanted(parts[-1]):
                wanted[info] = entry
        clashes = _clashes([entry.parts for entry in wanted.values()])
        for info, entry in wanted.items():
            reason = clashes.get(entry.parts) or _unpack(zf, info, inbox.joinpath(*entry.parts))
            if reason:
                entry.refusal = f"zip entry not unpacked: {reason}"
            else:
                entry.copy = inbox.joinpath(*entry.parts)
    return entries


def _zipped_folder(entries: list[_Entry], stem: str) -> tuple[list[_Entry], str]:
    """A zip of one folder (what zipping a folder makes) is read as that folder: (its entries, read
    from inside it; its name). Any other zip is read from its top, under the zip's own name."""
    # Judged on every entry but macOS's __MACOSX/ beside the folder and paths that lead out of the
    # zip: a student's refused or skipped files are still in her folder. A folder whose name says
    # whose it is (Moodle's, Gradescope's submission_<id>) is never read as the source.
    inside = [
        e for e in entries if e.parts and e.parts[0] not in IGNORED_FOLDERS and not _escape(e.origin, e.parts)
    ]
    if not inside or any(len(e.parts) < 2 or e.parts[0] != inside[0].parts[0] for e in inside):
        return entries, stem
    if exports.MOODLE.fullmatch(inside[0].parts[0]) or exports.GRADESCOPE_FOLDER.fullmatch(
        inside[0].parts[0]
    ):
        return entries, stem
    top = inside[0].parts[0]
    for entry in inside:
        entry.parts = entry.parts[1:]
    return entries, top


def _open_zip(archive: Path) -> zipfile.ZipFile:
    """The zip, open for reading; the batch stops if its list of entries is unreadable or too large."""
    try:
        zf = zipfile.ZipFile(archive)
    except UnicodeDecodeError:  # Python's zipfile cannot list such a zip at all
        raise SystemExit(
            f"{archive}: refusing the zip: an entry's name is marked as UTF-8 text but is not, so its "
            "list of files cannot be read; nothing was graded (re-create the zip with another tool)"
        ) from None
    except (zipfile.BadZipFile, NotImplementedError, OSError) as error:
        raise SystemExit(f"{archive}: refusing the zip: its list of files cannot be read ({error})") from None
    unpacked = sum(entry.file_size for entry in zf.infolist())
    if unpacked > MAX_ARCHIVE_BYTES:
        zf.close()
        raise SystemExit(
            f"{archive}: refusing to unpack {unpacked / 2**30:.1f} GiB (more than 8 GiB): a zip bomb, "
            "not a class's notebooks; nothing was graded"
        )
    return zf


def _entry_parts(name: str) -> tuple[str, ...]:
    """The folders and file name of a zip entry.

    A backslash separates folders too: the zip format only allows `/`, so a backslash comes from
    a Windows tool that meant a folder (Python's zipfile reads it so on Windows), and taking it
    as one keeps `..\\` from slipping past the checks as part of a name.
    """
    return tuple(part for part in name.replace("\\", "/").split("/") if part not in ("", "."))


def _is_folder(entry: zipfile.ZipInfo) -> bool:
    return entry.is_dir() or stat.S_ISDIR(entry.external_attr >> 16)


def _entry_refusal(entry: zipfile.ZipInfo, parts: tuple[str, ...]) -> str | None:
    """Why this entry is not unpacked, judged from the zip's list of files alone."""
    if reason := _name_refusal(entry.filename):
        return reason
    if not parts:
        return "it has no name"
    if reason := _escape(entry.filename, parts):
        return reason
    mode = entry.external_attr >> 16  # the Unix file type and permissions, where the zip records them
    if stat.S_IFMT(mode) and (reason := _type_refusal(mode)):
        return reason
    if entry.flag_bits & 0x1:
        return "encrypted (password-protected)"
    return None


def _escape(name: str, parts: tuple[str, ...]) -> str | None:
    """Why a zip entry's path leads out of the folder it is unpacked into, if it does."""
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path (from / or a drive letter): it would be unpacked outside the grader's folder"
    if ".." in parts:
        return "its path climbs out of its folder (..): it would be unpacked outside the grader's folder"
    return None


def _clashes(paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """The paths that two entries would claim, and why: the same name twice (both are refused,
    none picked), or a file where another entry needs a folder (the file is refused). What is
    left are paths that nothing else is written to, so `_unpack` always writes a new file."""
    counts = Counter(paths)
    folders = {path[:i] for path in paths for i in range(1, len(path))}
    clashes = {}
    for path, n in counts.items():
        if n > 1:
            clashes[path] = "the zip holds more than one entry with this name"
        elif path in folders:
            clashes[path] = "the zip also holds a folder of this name"
    return clashes


def _unpack(zf: zipfile.ZipFile, entry: zipfile.ZipInfo, destination: Path) -> str | None:
    """Write one entry (as a new plain file, never through a link); why not, if it cannot be read.

    Nothing is left of an entry that fails halfway. Its data cannot exceed the size the zip
    declares for it (zipfile stops there), which is what the zip-bomb limit adds up.
    """
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(entry) as data, destination.open("xb") as file:
            shutil.copyfileobj(data, file)
        return None
    except (NotImplementedError, RuntimeError) as error:  # e.g. Deflate64, which Windows writes
        method = zipfile.compressor_names.get(entry.compress_type, f"method {entry.compress_type}")
        reason = f"stored in a form this grader cannot unpack ({method}: {error})"
    except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError) as error:
        reason = f"damaged in the zip ({error})"
    except OSError as error:
        reason = f"could not be unpacked ({error.strerror or error})"
    destination.unlink(missing_ok=True)
    return reason
