"""What a batch grades: the submissions found in a folder or zip, copied into OUT/work/inbox.

A student's files are only ever the ones in their own folder (or named after them, flat),
and whatever cannot be graded becomes a `failed` row that says why, never a silent drop.
Only plain files with names that can be shown as they are reach the inbox; one bad file or
zip entry is refused on its own, the rest of the batch is graded.
"""

import lzma
import os
import re
import shutil
import stat
import unicodedata
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .paths import assignments
from .report import UNPRINTABLE, Result, failed


@dataclass(frozen=True)
class Submission:
    student: str
    notebook: str  # an assignment name, e.g. "04_rope"
    path: Path  # the copy in work/inbox


MAX_ARCHIVE_BYTES = 8 * 2**30  # a class's zip; more is a zip bomb, not notebooks
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")
IGNORED_FOLDERS = {".ipynb_checkpoints", "__MACOSX"}  # Jupyter's autosaves, macOS's resource forks


def find_submissions(source: Path, work: Path) -> tuple[list[Submission], list[Result]]:
    """Copy the notebooks of `source` into work/inbox; return the submissions and what was rejected.

    Accepted: <student>/<notebook>.ipynb, flat <student>_<notebook>.ipynb, or a zip of either
    (folders all the files share, such as an LMS export's top folder, are looked through).
    A student's files are only ever the ones directly in their folder, and two files for one
    notebook are both rejected rather than one picked.
    """
    inbox = work / "inbox"
    shutil.rmtree(inbox, ignore_errors=True)
    inbox.mkdir(parents=True)
    if source.is_dir():
        rejected = _copy_folder(source, inbox)
    elif zipfile.is_zipfile(source):
        rejected = _unpack_zip(source, inbox)
    else:
        raise SystemExit(f"{source} is neither a folder nor a zip file")
    paths = [p.relative_to(inbox) for p in sorted(inbox.rglob("*.ipynb")) if p.is_file()]
    wrapper = _shared_folders(paths)
    known = assignments()
    found: dict[tuple[str, str], list[Path]] = {}
    for relative in paths:
        student, notebook = _identify(Path(*relative.parts[wrapper:]), known)
        if student is None or not STUDENT_ID.match(student):
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


def _copy_folder(source: Path, inbox: Path) -> list[Result]:
    """Copy the folder's notebooks into the inbox; a `failed` row for each one that is refused.

    Other files are not looked at: nothing but a notebook is ever graded.
    """
    refused = []

    def unreadable(error: OSError) -> None:  # os.walk would otherwise skip the folder silently
        name = str(Path(error.filename).relative_to(source))
        refused.append(failed(name, "", f"this folder could not be read ({error.strerror})"))

    for folder, subfolders, files in os.walk(source, onerror=unreadable):
        subfolders[:] = [s for s in subfolders if s not in IGNORED_FOLDERS]
        for name in files:
            if name.endswith(".ipynb"):
                path = Path(folder, name)
                relative = path.relative_to(source)
                reason = _name_refusal(str(relative)) or _copy_file(path, inbox / relative)
                if reason:
                    refused.append(failed(str(relative), "", reason))
    return refused


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


def _unpack_zip(archive: Path, inbox: Path) -> list[Result]:
    """Unpack the zip's notebooks into the inbox; a `failed` row for each entry that is refused.

    Every entry is judged on its own before anything is written: one that would land outside
    the inbox, a link, an encrypted or damaged entry, a name given twice... is named in its
    row and the others are still graded. Only notebooks are unpacked, and only the zip as a
    whole being unreadable or a zip bomb stops the batch. The zip itself is only read.
    """
    refused, wanted = [], {}
    with _open_zip(archive) as zf:
        for entry in zf.infolist():
            parts = _entry_parts(entry.filename)
            if _is_folder(entry) or IGNORED_FOLDERS.intersection(parts):
                continue  # folders are made as their files need them
            if reason := _entry_refusal(entry, parts):
                refused.append(failed(entry.filename, "", f"zip entry not unpacked: {reason}"))
            elif entry.filename.endswith(".ipynb"):
                wanted[entry] = parts
        clashes = _clashes(list(wanted.values()))
        for entry, parts in wanted.items():
            reason = clashes.get(parts) or _unpack(zf, entry, inbox.joinpath(*parts))
            if reason:
                refused.append(failed(entry.filename, "", f"zip entry not unpacked: {reason}"))
    return refused


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
    if entry.filename.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", entry.filename):
        return "an absolute path (from / or a drive letter): it would be unpacked outside the grader's folder"
    if ".." in parts:
        return "its path climbs out of its folder (..): it would be unpacked outside the grader's folder"
    mode = entry.external_attr >> 16  # the Unix file type and permissions, where the zip records them
    if stat.S_IFMT(mode) and (reason := _type_refusal(mode)):
        return reason
    if entry.flag_bits & 0x1:
        return "encrypted (password-protected)"
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
