"""The one channel between a sandboxed grading kernel and the judge: files of plain data.

Before a test cell runs, the grader writes the cases of each check the cell calls into
`<exchange>/cases/`; the kernel's `check(...)` runs the student's object on them (stage 2)
and writes what came out to `<exchange>/results/`; the grader reads that back and judges.

The kernel is untrusted, so everything read back from it is parsed as data only
(`torch.load(weights_only=True)`, no unpickling of arbitrary objects), bounded in size and
checked for shape: a list with one entry per case, each a dict of CPU tensors or the text
of an error. Anything else is a malformed result, which fails the check.
"""

import errno
import io
import os
import secrets
import stat
import zipfile
from pathlib import Path

import torch

from .core import MAX_ERROR_CHARS, Case, RunResult, plain_tensor

ENV = "COURSE_EXCHANGE"  # set only inside a grading kernel: check() then runs stage 2 alone
MAX_RESULT_BYTES = 256 * 2**20
# Bounds on what one results file may hold, checked before anything is materialised. The
# largest the checks send: 82k elements in one case (02.pe_figure), 14 outputs (00.spirals), a
# pickle of a few kB.
MAX_CASE_ELEMENTS = 2**21
MAX_FILE_ELEMENTS = 2**22
MAX_OUTPUTS = 64  # per case
MAX_PICKLE_BYTES = 2**20  # the structure (keys, tensor headers); tensor data is stored beside it
MAX_ENTRIES = 4096  # archive members: one per tensor storage


class MalformedResults(ValueError):
    """What the kernel sent back is not results of the expected form; the message says why."""


def key(name: str, hidden: bool) -> str:
    return f"{name}.hidden" if hidden else name


def directory() -> Path | None:
    """The exchange folder when this process is a grading kernel, else None."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


# ------------------------------------------------------------------ grader side (trusted)


def prepare(exchange: Path) -> None:
    """Empty folders before a test cell, so that its results come from its own run.

    The kernel is still running and may refill results/ as it goes: one pass removes what is
    there (through file descriptors, as remove_tree does) and what it cannot is left to the
    clean-up after the kernel is killed. That costs nothing: whatever lies in results/ is
    what the kernel sends, and is judged as such.
    """
    for sub in ("cases", "results"):
        (exchange / sub).mkdir(parents=True, exist_ok=True)
    parent = os.open(exchange, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        top = _open_folder(parent, "results")  # a mount point the kernel owns: it may have made it 000
    finally:
        os.close(parent)
    if top is None:
        raise OSError(f"{exchange / 'results'} is not a folder")
    try:
        for name in os.listdir(top):
            try:
                _clear(top, top, name, NESTING, once=True)
            except OSError:
                continue
    finally:
        os.close(top)
    for name in os.listdir(exchange / "cases"):  # the grader's alone: the kernel cannot write there
        (exchange / "cases" / name).unlink()


def remove_tree(folder: Path) -> None:
    """Delete a folder a kernel wrote into, whatever it put there and whatever it does meanwhile.

    Every step goes through file descriptors opened without following links (unlinkat,
    openat with O_NOFOLLOW, chmod of an O_PATH descriptor): never by a path name, so a
    kernel still running cannot swap a folder for a symlink between the grader's look and
    its act, and the grader, perhaps root, never changes or deletes anything outside.
    Modes the kernel set are overridden on the folders themselves; the depth of the tree
    costs neither recursion nor open descriptors (deep folders are moved up, not entered).
    """
    parent = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if _unlink(parent, folder.name):
            return
        top = _open_folder(parent, folder.name)
        if top is None:  # swapped for a link since: that goes instead
            _unlink(parent, folder.name)
            return
        try:
            _empty_at(top, top, NESTING)
        finally:
            os.close(top)
        os.rmdir(folder.name, dir_fd=parent)
    finally:
        os.close(parent)


NESTING = 32  # folders entered below the top one; deeper ones are moved up to the top first


def _empty_at(top: int, folder: int, depth: int, *, once: bool = False) -> None:
    """Remove everything in `folder` (a folder under `top`), or with `once` what one look finds."""
    while names := os.listdir(folder):
        for name in names:
            _clear(top, folder, name, depth, once=once)
        if once:
            return


def _clear(top: int, parent: int, name: str, depth: int, *, once: bool = False) -> None:
    if _unlink(parent, name):
        return
    if depth == 0:  # entering would hold one more descriptor: move it up, to be emptied from the top
        os.rename(name, f".up-{secrets.token_hex(8)}", src_dir_fd=parent, dst_dir_fd=top)
        return
    folder = _open_folder(parent, name)
    if folder is None:  # swapped for a link since: the next look at `parent` unlinks it
        return
    try:
        _empty_at(top, folder, depth - 1, once=once)
    finally:
        os.close(folder)
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass


def _unlink(parent: int, name: str) -> bool:
    """unlinkat: removes a file, link, FIFO or socket itself (never a link's target); False for a folder."""
    try:
        os.unlink(name, dir_fd=parent)
    except IsADirectoryError:
        return False
    except FileNotFoundError:
        pass
    return True


def _open_folder(parent: int, name: str) -> int | None:
    """A readable descriptor of the folder `name` in `parent`, its mode made 0700 first (a kernel
    may have made it unreadable); None when `name` is not a folder (a link is never followed)."""
    try:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=parent)
    except (NotADirectoryError, FileNotFoundError):
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink
            return None
        raise
    try:
        same = f"/proc/self/fd/{handle}"  # this very folder, not whatever its name points to now
        os.chmod(same, 0o700)
        return os.open(same, os.O_RDONLY | os.O_DIRECTORY)
    finally:
        os.close(handle)


def write_cases(exchange: Path, name: str, hidden: bool, cases: list[Case]) -> None:
    # The concern goes too: a run stage may send other outputs for another part of the question
    # (it is no secret, every verdict names it). judge_only stays here.
    payload = [{"name": c.name, "inputs": c.inputs, "concern": c.concern} for c in cases]
    torch.save(payload, exchange / "cases" / f"{key(name, hidden)}.pt")


def read_results(exchange: Path, name: str, hidden: bool, n_cases: int) -> list[RunResult] | None:
    """The results the kernel wrote for this check, or None if it wrote none.

    Raises MalformedResults when the file is there but is not results.
    """
    path = exchange / "results" / f"{key(name, hidden)}.pt"
    try:  # never through a symlink, never blocking on a FIFO the kernel put there
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise MalformedResults(f"the results are not a plain file ({error.strerror})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise MalformedResults("the results are not a plain file")
        if status.st_size > MAX_RESULT_BYTES:
            raise MalformedResults(f"the results are larger than {MAX_RESULT_BYTES // 2**20} MiB")
        with os.fdopen(os.dup(fd), "rb") as file:
            raw = file.read(MAX_RESULT_BYTES + 1)
    finally:
        os.close(fd)
    _check_archive(raw)
    try:
        data = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except Exception as error:
        raise MalformedResults(f"the results file cannot be read as data ({type(error).__name__})") from None
    return _validated(data, n_cases)


def _check_archive(raw: bytes) -> None:
    """torch.save writes a zip of stored (uncompressed) entries: one small pickle, one entry per
    tensor storage. Anything else, compressed data (a bomb), an outsized pickle (millions of
    objects), or names that do not even decode, is refused before loading."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            entries = archive.infolist()
    except Exception as error:  # BadZipFile, or e.g. a UnicodeDecodeError on a member's name
        what = type(error).__name__
        raise MalformedResults(f"the results file is not what torch.save writes ({what})") from None
    if len(entries) > MAX_ENTRIES:
        raise MalformedResults(f"the results file holds more than {MAX_ENTRIES} entries")
    if any(e.compress_type != zipfile.ZIP_STORED for e in entries) or sum(e.file_size for e in entries) > len(
        raw
    ):
        raise MalformedResults("the results file holds compressed data")
    if any(e.filename.endswith(".pkl") and e.file_size > MAX_PICKLE_BYTES for e in entries):
        raise MalformedResults(f"the structure of the results is larger than {MAX_PICKLE_BYTES // 2**10} kB")


def _validated(data, n_cases: int) -> list[RunResult]:
    """The results as one string or one dict of plain tensors per case, within the bounds above.

    Tensors are only views of the file's storages until `.contiguous().clone()`; a zero-stride
    view of one stored number can claim billions of elements, so sizes are summed first."""
    if not isinstance(data, list) or len(data) != n_cases:
        raise MalformedResults(f"expected a list of {n_cases} results")
    if not all(isinstance(e, str) or _tensor_dict(e) for e in data):
        raise MalformedResults("a result is neither a dict of tensors nor an error message")
    sizes = [sum(v.numel() for v in e.values()) for e in data if isinstance(e, dict)]
    if any(len(e) > MAX_OUTPUTS for e in data if isinstance(e, dict)):
        raise MalformedResults(f"a result has more than {MAX_OUTPUTS} outputs")
    if max(sizes, default=0) > MAX_CASE_ELEMENTS:
        raise MalformedResults(f"a result holds more than {MAX_CASE_ELEMENTS} numbers")
    if sum(sizes) > MAX_FILE_ELEMENTS:
        raise MalformedResults(f"the results hold more than {MAX_FILE_ELEMENTS} numbers")
    return [
        e[:MAX_ERROR_CHARS] if isinstance(e, str) else {k: v.contiguous().clone() for k, v in e.items()}
        for e in data
    ]


def _tensor_dict(entry) -> bool:
    return isinstance(entry, dict) and all(isinstance(k, str) and plain_tensor(v) for k, v in entry.items())


# ------------------------------------------------------------------ kernel side (untrusted)


def read_cases(exchange: Path, name: str, hidden: bool) -> list[Case]:
    path = exchange / "cases" / f"{key(name, hidden)}.pt"
    if not path.is_file():
        raise LookupError(f"the grader prepared no cases for {key(name, hidden)!r} in this cell")
    return [Case(c["name"], c["inputs"], concern=c["concern"]) for c in torch.load(path, weights_only=True)]


def write_results(exchange: Path, name: str, hidden: bool, results: list[RunResult]) -> None:
    torch.save(results, exchange / "results" / f"{key(name, hidden)}.pt")
