"""Run a check on a student's object: the Python API behind the notebooks' test cells.

    from autograder import evaluate
    verdict = evaluate("07.rmsnorm", RMSNorm)            # visible cases
    verdict = evaluate("07.rmsnorm", RMSNorm, hidden=True)  # fresh seeds and edge cases
    verdict.passed, verdict.points, verdict.max_points, verdict.message
    verdict.parts  # one per concern of the question, each with its share of the points

Visible cases and what they should give are stored in autograder/expected/ by `course
build`, so a student's copy needs no reference solutions. Hidden cases are drawn from a
fresh seed and judged against the reference read from solutions/.

At grading time the same `check(...)` call runs in a sandboxed kernel and does stage 2 only:
it reads the cases the grader prepared, runs the student's object and writes the outputs
back (autograder/exchange.py); the grader judges them with `judge_results`.
"""

import functools
import secrets
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import exchange, progress, reference
from .checks import CHECKS
from .core import STUB, Case, CheckFailed, Expectation, Mistake, Verdict, expectations, judge, run_stage
from .paths import EXPECTED

VISIBLE_SEED = 0


def get_check(name: str):
    """The check of that name, or a KeyError listing the known ones."""
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"no check named {name!r}; known checks: {', '.join(sorted(CHECKS))}") from None


def grading_seed(batch_seed: int, name: str, hidden: bool) -> int:
    """The seed of a check's cases at grading time: drawn per batch (a re-run gives the same
    grades), different for the visible and hidden cells, never the visible seed students saw."""
    return zlib.crc32(f"{batch_seed}:{exchange.key(name, hidden)}".encode()) & 0x7FFFFFFF


def make_cases(name: str, *, hidden: bool, seed: int) -> list[Case]:
    get_check(name)  # an unknown name says which are known
    return reference.case_generator(name)(torch.Generator().manual_seed(seed), hidden)


def live_expectations(
    name: str, cases: list[Case], *, with_mistakes: bool = True
) -> tuple[list[Expectation], list[Mistake]]:
    """The reference's outputs on the cases, and (only if asked) each known mistake's."""
    check = get_check(name)
    ref = reference.reference_object(name, check.target)
    known = reference.mistakes(name) if with_mistakes else []
    return expectations(check, ref, known, cases), known


@dataclass(frozen=True, eq=False)
class Drawn:
    """A check's cases from one seed, and what the reference and the known mistakes give on them,
    each worked out once (trusted side only: it reads solutions/). Every notebook of a batch is
    judged on the same cases: a grading worker judges a class's answers against one Drawn."""

    name: str
    hidden: bool
    cases: list[Case]

    @functools.cached_property
    def reference_only(self) -> tuple[list[Expectation], list[Mistake]]:
        return live_expectations(self.name, self.cases, with_mistakes=False)

    @functools.cached_property
    def with_mistakes(self) -> tuple[list[Expectation], list[Mistake]]:
        return live_expectations(self.name, self.cases)


# Enough for every check's visible and hidden cases of a batch (118 of them): about 33 MB in all
# with each mistake's outputs (10.record_activations' 7 MB the largest).
DRAWS_KEPT = 256


@functools.lru_cache(maxsize=DRAWS_KEPT)
def draw(name: str, *, hidden: bool, seed: int) -> Drawn:
    """The cases a seed draws for a check, kept with their expectations for the next notebook."""
    return Drawn(name, hidden, make_cases(name, hidden=hidden, seed=seed))


def snapshot_path(name: str, directory: Path = EXPECTED) -> Path:
    return directory / f"{name}.pt"


def write_snapshot(name: str, directory: Path = EXPECTED) -> None:
    """Store the visible cases with the reference's and each mistake's outputs (build step)."""
    cases = make_cases(name, hidden=False, seed=VISIBLE_SEED)
    expected, known = live_expectations(name, cases)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "cases": [
                {"name": c.name, "inputs": c.inputs, "judge_only": c.judge_only, "concern": c.concern}
                for c in cases
            ],
            "expected": [{"reference": e.reference, "mistakes": e.mistakes} for e in expected],
            "mistakes": [{"name": m.name, "advice": m.advice} for m in known],
        },
        snapshot_path(name, directory),
    )


def same_snapshot(a: Path, b: Path) -> bool:
    return _same(torch.load(a, weights_only=True), torch.load(b, weights_only=True))


# Floats may differ between two machines' builds by a few units in the last place of a tensor's
# largest values: their CPUs take other vector paths through the same calls (sin, BLAS blocking),
# and training amplifies it (seen: 2.5e-5 on logits as large as 57, 8.5e-6 after 00.spirals'
# training on logits as large as 6.6). Far below any check's tolerance, far above nothing: a
# changed case or reference moves a snapshot by orders of magnitude more.
SNAPSHOT_RTOL, SNAPSHOT_ATOL = 1e-5, 1e-6  # relative to the tensor's largest finite magnitude


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, torch.Tensor):
        if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape):
            return False
        if not (x.is_floating_point() or x.is_complex()):
            return bool(torch.equal(x, y))
        finite = y[torch.isfinite(y)].abs()
        scale = float(finite.max()) if finite.numel() else 0.0
        tolerance = SNAPSHOT_ATOL + SNAPSHOT_RTOL * scale  # NaN equal to NaN (known mistakes produce NaN)
        return bool(torch.isclose(x, y, rtol=0, atol=tolerance, equal_nan=True).all())
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same, x, y))
    return x == y


def load_snapshot(name: str) -> tuple[list[Case], list[Expectation], list[Mistake]]:
    path = snapshot_path(name)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `course build` to create it")
    data = torch.load(path, weights_only=True)
    cases = [Case(c["name"], c["inputs"], c["judge_only"], c["concern"]) for c in data["cases"]]
    expected = [Expectation(e["reference"], e["mistakes"]) for e in data["expected"]]
    known = [Mistake(m["name"], m["advice"], None) for m in data["mistakes"]]
    return cases, expected, known


def judge_results(drawn: Drawn, results: list) -> Verdict:
    """Stage 3 against the live reference (trusted side only: it reads solutions/)."""
    check = get_check(drawn.name)
    # The known mistakes only serve a diagnosis: run them once a result is wrong, and not for an
    # unfilled stub, which no mistake's result can look like (the untouched notebooks of a class).
    verdict = judge(check, drawn.cases, results, *drawn.reference_only)
    wrong = not verdict.passed or any(not part.passed for part in verdict.parts)  # advice parts too
    if wrong and not all(isinstance(result, str) and result.endswith(STUB) for result in results):
        verdict = judge(check, drawn.cases, results, *drawn.with_mistakes)
    return verdict.worth(points(drawn.name, drawn.hidden))


def points(name: str, hidden: bool) -> float:
    """What the visible or the hidden test cell of a check is worth."""
    check = get_check(name)
    return check.hidden_points if hidden else check.points


def evaluate(name: str, obj: Any, *, hidden: bool = False, seed: int | None = None) -> Verdict:
    """All three stages in this process; returns the verdict (never raises for a wrong answer)."""
    check = get_check(name)
    if hidden:
        if seed is None:  # a fresh seed is never drawn again: not kept
            drawn = Drawn(name, True, make_cases(name, hidden=True, seed=secrets.randbits(31)))
        else:
            drawn = draw(name, hidden=True, seed=seed)
        return judge_results(drawn, run_stage(check, obj, drawn.cases))
    cases, expected, known = load_snapshot(name)
    verdict = judge(check, cases, run_stage(check, obj, cases), expected, known)
    return verdict.worth(points(name, hidden))


def check(name: str, obj: Any, *, hidden: bool = False) -> None:
    """The notebook's test cells call this: prints the verdict, or raises CheckFailed.

    In a grading kernel it runs stage 2 only and hands the outputs to the grader, which
    judges them outside the kernel and writes the verdict into the graded notebook.
    Returns nothing: a value would be the cell's result, which nbgrader reads as partial credit.
    """
    folder = exchange.directory()
    if folder is not None:
        cases = exchange.read_cases(folder, name, hidden)
        exchange.write_results(folder, name, hidden, run_stage(get_check(name), obj, cases))
        return
    verdict = evaluate(name, obj, hidden=hidden)
    if not hidden:
        progress.record(verdict)  # for the summary at the end of the notebook
    if not verdict.passed:
        raise CheckFailed(verdict)
    print(verdict)
