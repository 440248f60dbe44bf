"""Run a check on a student's object: the Python API behind the notebooks' test cells.

    from autograder import evaluate
    verdict = evaluate("07.rmsnorm", RMSNorm)            # visible cases
    verdict = evaluate("07.rmsnorm", RMSNorm, hidden=True)  # fresh seeds and edge cases
    verdict.passed, verdict.points, verdict.max_points, verdict.message

Visible cases and what they should give are stored in autograder/expected/ by `course
build`, so a student's copy needs no reference solutions. Hidden cases are drawn from a
fresh seed and judged against the reference read from solutions/.
"""

import os
import secrets
import zlib
from pathlib import Path
from typing import Any

import torch

from . import reference
from .checks import CHECKS
from .core import Case, CheckFailed, Expectation, Mistake, Verdict, expectations, judge, run_stage
from .paths import EXPECTED

VISIBLE_SEED = 0


def get_check(name: str):
    """The check of that name, or a KeyError listing the known ones."""
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"no check named {name!r}; known checks: {', '.join(sorted(CHECKS))}") from None


def hidden_seed(name: str) -> int:
    """The grader sets COURSE_HIDDEN_SEED once per batch, so a re-run gives the same grades."""
    batch = os.environ.get("COURSE_HIDDEN_SEED")
    base = int(batch) if batch else secrets.randbits(31)
    return (base ^ zlib.crc32(name.encode())) & 0x7FFFFFFF


def make_cases(name: str, *, hidden: bool, seed: int) -> list[Case]:
    generator = torch.Generator().manual_seed(seed)
    return get_check(name).cases(generator, hidden)


def live_expectations(
    name: str, cases: list[Case], *, with_mistakes: bool = True
) -> tuple[list[Expectation], list[Mistake]]:
    """The reference's outputs on the cases, and (only if asked) each known mistake's."""
    check = get_check(name)
    ref = reference.reference_object(name, check.target)
    known = reference.mistakes(name) if with_mistakes else []
    return expectations(check, ref, known, cases), known


def snapshot_path(name: str, directory: Path = EXPECTED) -> Path:
    return directory / f"{name}.pt"


def write_snapshot(name: str, directory: Path = EXPECTED) -> None:
    """Store the visible cases with the reference's and each mistake's outputs (build step)."""
    cases = make_cases(name, hidden=False, seed=VISIBLE_SEED)
    expected, known = live_expectations(name, cases)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "cases": [{"name": c.name, "inputs": c.inputs} for c in cases],
            "expected": [{"reference": e.reference, "mistakes": e.mistakes} for e in expected],
            "mistakes": [{"name": m.name, "advice": m.advice} for m in known],
        },
        snapshot_path(name, directory),
    )


def same_snapshot(a: Path, b: Path) -> bool:
    return _same(torch.load(a, weights_only=True), torch.load(b, weights_only=True))


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return (  # bit-equal, NaN equal to NaN (known mistakes produce NaN)
            isinstance(y, torch.Tensor)
            and x.dtype == y.dtype
            and x.shape == y.shape
            and bool(torch.isclose(x, y, rtol=0, atol=0, equal_nan=True).all())
        )
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return isinstance(y, list) and len(x) == len(y) and all(map(_same, x, y))
    return x == y


def load_snapshot(name: str) -> tuple[list[Case], list[Expectation], list[Mistake]]:
    path = snapshot_path(name)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `course build` to create it")
    data = torch.load(path, weights_only=True)
    cases = [Case(c["name"], c["inputs"]) for c in data["cases"]]
    expected = [Expectation(e["reference"], e["mistakes"]) for e in data["expected"]]
    known = [Mistake(m["name"], m["advice"], None) for m in data["mistakes"]]
    return cases, expected, known


def evaluate(name: str, obj: Any, *, hidden: bool = False, seed: int | None = None) -> Verdict:
    """All three stages in this process; returns the verdict (never raises for a wrong answer)."""
    check = get_check(name)
    if hidden:
        cases = make_cases(name, hidden=True, seed=hidden_seed(name) if seed is None else seed)
        results = run_stage(check, obj, cases)
        # The known mistakes only serve a diagnosis: run them once a result is wrong.
        expected, known = live_expectations(name, cases, with_mistakes=False)
        verdict = judge(check, cases, results, expected, known)
        if not verdict.passed:
            expected, known = live_expectations(name, cases)
            verdict = judge(check, cases, results, expected, known)
    else:
        cases, expected, known = load_snapshot(name)
        results = run_stage(check, obj, cases)
        verdict = judge(check, cases, results, expected, known)
    points = check.hidden_points if hidden else check.points
    return Verdict(verdict.check, verdict.passed, verdict.message, points)


def check(name: str, obj: Any, *, hidden: bool = False) -> None:
    """The notebook's test cells call this: prints the verdict, or raises CheckFailed.

    Returns nothing: a value would be the cell's result, which nbgrader reads as partial credit.
    """
    verdict = evaluate(name, obj, hidden=hidden)
    if not verdict.passed:
        raise CheckFailed(verdict)
    print(verdict)
