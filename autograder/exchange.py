"""The one channel between a sandboxed grading kernel and the judge: files of plain data.

Before a test cell runs, the grader writes the cases of each check the cell calls into
`<exchange>/cases/`; the kernel's `check(...)` runs the student's object on them (stage 2)
and writes what came out to `<exchange>/results/`; the grader reads that back and judges.

The kernel is untrusted, so everything read back from it is parsed as data only
(`torch.load(weights_only=True)`, no unpickling of arbitrary objects), bounded in size and
checked for shape: a list with one entry per case, each a dict of CPU tensors or the text
of an error. Anything else is a malformed result, which fails the check.
"""

import io
import os
import stat
import subprocess
import zipfile
from pathlib import Path

import torch

from .core import Case, RunResult

ENV = "COURSE_EXCHANGE"  # set only inside a grading kernel: check() then runs stage 2 alone
MAX_RESULT_BYTES = 256 * 2**20
MAX_ERROR_CHARS = 2000
MAX_ELEMENTS = 2**24  # per result tensor; the checks' outputs are far smaller
RESULT_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
}  # fmt: skip


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
    """Empty folders before a test cell: results can only come from this cell's run.

    What the kernel left in results/ is removed without following links (a symlink goes,
    not its target).
    """
    for sub in ("cases", "results"):
        folder = exchange / sub
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            if stale.is_dir() and not stale.is_symlink():
                remove_tree(stale)
            else:
                stale.unlink()


def remove_tree(folder: Path) -> None:
    """Delete a real folder a kernel wrote into: links inside are removed, never followed, at
    any depth and whatever modes the kernel set (chmod -R skips links it meets; Python 3.11.7's
    TemporaryDirectory cleanup would chmod their targets, and rmtree recurses in Python)."""
    subprocess.run(["chmod", "-R", "u+rwX", "--", str(folder)], capture_output=True)
    subprocess.run(["rm", "-rf", "--", str(folder)], capture_output=True, check=True)


def write_cases(exchange: Path, name: str, hidden: bool, cases: list[Case]) -> None:
    payload = [{"name": c.name, "inputs": c.inputs} for c in cases]
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
    """torch.save writes a zip of stored (uncompressed) entries; anything else could unpack to
    far more than the file's size (a compressed bomb) and is refused before loading."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            entries = archive.infolist()
    except zipfile.BadZipFile:
        raise MalformedResults("the results file is not what torch.save writes") from None
    if any(e.compress_type != zipfile.ZIP_STORED for e in entries) or sum(e.file_size for e in entries) > len(
        raw
    ):
        raise MalformedResults("the results file holds compressed data")


def _validated(data, n_cases: int) -> list[RunResult]:
    if not isinstance(data, list) or len(data) != n_cases:
        raise MalformedResults(f"expected a list of {n_cases} results")
    results: list[RunResult] = []
    for entry in data:
        if isinstance(entry, str):
            results.append(entry[:MAX_ERROR_CHARS])
        elif isinstance(entry, dict) and any(
            isinstance(v, torch.Tensor) and v.numel() > MAX_ELEMENTS for v in entry.values()
        ):  # a zero-stride view of one stored number can claim billions of elements
            raise MalformedResults(f"a result tensor has more than {MAX_ELEMENTS} elements")
        elif isinstance(entry, dict) and all(
            isinstance(k, str) and _plain_tensor(v) for k, v in entry.items()
        ):
            results.append({k: v.contiguous().clone() for k, v in entry.items()})
        else:
            raise MalformedResults("a result is neither a dict of tensors nor an error message")
    return results


def _plain_tensor(value) -> bool:
    """A dense CPU tensor of an ordinary dtype: what every check returns. Meta, nested and
    quantized tensors pass as `torch.Tensor` too, but would break the judge's arithmetic."""
    return (
        type(value) is torch.Tensor
        and value.layout == torch.strided
        and value.device.type == "cpu"
        and not value.is_nested
        and value.dtype in RESULT_DTYPES
    )


# ------------------------------------------------------------------ kernel side (untrusted)


def read_cases(exchange: Path, name: str, hidden: bool) -> list[Case]:
    path = exchange / "cases" / f"{key(name, hidden)}.pt"
    if not path.is_file():
        raise LookupError(f"the grader prepared no cases for {key(name, hidden)!r} in this cell")
    return [Case(c["name"], c["inputs"]) for c in torch.load(path, weights_only=True)]


def write_results(exchange: Path, name: str, hidden: bool, results: list[RunResult]) -> None:
    torch.save(results, exchange / "results" / f"{key(name, hidden)}.pt")
