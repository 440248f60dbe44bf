"""What a batch grades: the submissions found in a folder or zip, copied into OUT/work/inbox.

A student's files are only ever the ones in their own folder (or named after them, flat),
and whatever cannot be graded becomes a `failed` row that says why, never a silent drop.
"""

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .paths import assignments
from .report import Result, failed


@dataclass(frozen=True)
class Submission:
    student: str
    notebook: str  # an assignment name, e.g. "04_rope"
    path: Path  # the copy in work/inbox


MAX_ARCHIVE_BYTES = 8 * 2**30  # a class's zip; more is a zip bomb, not notebooks
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")


def find_submissions(source: Path, work: Path) -> tuple[list[Submission], list[Result]]:
    """Copy what `source` holds into work/inbox; return the submissions and what was rejected.

    Accepted: <student>/<notebook>.ipynb, flat <student>_<notebook>.ipynb, or a zip of either
    (folders all the files share, such as an LMS export's top folder, are looked through).
    A student's files are only ever the ones directly in their folder, and two files for one
    notebook are both rejected rather than one picked.
    """
    inbox = work / "inbox"
    shutil.rmtree(inbox, ignore_errors=True)
    if zipfile.is_zipfile(source):
        _safe_extract(source, inbox)
    elif source.is_dir():  # links are copied as links, then refused: a submission is a file
        shutil.copytree(
            source, inbox, symlinks=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__MACOSX")
        )
    else:
        raise SystemExit(f"{source} is neither a folder nor a zip file")
    paths = [
        p.relative_to(inbox)
        for p in sorted(inbox.rglob("*.ipynb"))
        if not any(part in (".ipynb_checkpoints", "__MACOSX") for part in p.parts)
    ]
    wrapper = _shared_folders(paths)
    known = assignments()
    found: dict[tuple[str, str], list[Path]] = {}
    rejected: list[Result] = []
    for relative in paths:
        student, notebook = _identify(Path(*relative.parts[wrapper:]), known)
        if (inbox / relative).is_symlink() or not (inbox / relative).is_file():
            rejected.append(failed(str(relative), notebook or "", "not a plain file"))
        elif student is None or not STUDENT_ID.match(student):
            reason = "cannot tell the student and notebook from this file name"
            rejected.append(failed(str(relative), notebook or "", reason))
        elif notebook is None:
            rejected.append(failed(student, relative.stem, "not a notebook of this course"))
        else:
            found.setdefault((student, notebook), []).append(relative)
    submissions = []
    for (student, notebook), files in found.items():
        if len(files) == 1:
            submissions.append(Submission(student, notebook, inbox / files[0]))
        else:
            names = ", ".join(map(str, files))
            rejected.append(failed(student, notebook, f"more than one file for this notebook ({names})"))
    return submissions, rejected


def _shared_folders(paths: list[Path]) -> int:
    """How many leading folders every path shares, keeping a student folder when all are nested."""
    shared = 0
    while paths and all(
        len(p.parts) > shared + 2 and p.parts[shared] == paths[0].parts[shared] for p in paths
    ):
        shared += 1
    return shared


def _identify(relative: Path, known: list[str]) -> tuple[str | None, str | None]:
    stem = relative.stem
    if len(relative.parts) == 2:  # <student>/<notebook>.ipynb
        return relative.parts[0], next((a for a in known if stem == a or stem.startswith(a)), None)
    if len(relative.parts) == 1:  # <student>_<notebook>.ipynb
        for assignment in known:
            if stem.endswith("_" + assignment):
                return stem[: -len(assignment) - 1], assignment
    return None, None


def _safe_extract(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        unpacked = sum(member.file_size for member in zf.infolist())
        if unpacked > MAX_ARCHIVE_BYTES:
            raise SystemExit(f"{archive}: refusing to unpack {unpacked / 2**30:.1f} GiB (more than 8 GiB)")
        for member in zf.infolist():
            destination = (target / member.filename).resolve()
            if not destination.is_relative_to(target.resolve()):
                raise SystemExit(f"{archive}: refusing the entry {member.filename!r} (outside the archive)")
        zf.extractall(target)
