"""Seconds per notebook: `course grade` with and without the sandbox, and plain nbclient
execution (the floor), side by side.

    .venv/bin/python benchmarks/grading_overhead.py [--rounds N]

All three run the same perfect submission, one notebook at a time (--jobs 1), in this one
run. Each round times one notebook of each kind, in a rotating order, so that drift in the
machine's load or caches falls on all three alike.
"""

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.paths import assignments  # noqa: E402
from grader.grading import Limits, grade  # noqa: E402
from tests.helpers.submissions import perfect  # noqa: E402


def floor(assignment: str, folder: Path) -> Callable[[], None]:
    def run() -> None:
        notebook = perfect(assignment)
        NotebookClient(
            notebook, timeout=300, allow_errors=True, resources={"metadata": {"path": str(folder)}}
        ).execute()

    return run


def grading(assignment: str, folder: Path, sandboxed: bool) -> Callable[[], None]:
    submissions, out = folder / f"in-{assignment}-{sandboxed}", folder / f"out-{assignment}-{sandboxed}"
    path = submissions / "student" / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(perfect(assignment), path)
    limits = Limits(sandboxed=sandboxed)
    grade(submissions, out, jobs=1, limits=limits)  # the batch's template is built here, untimed

    def run() -> None:
        for result in (out / "work" / "results").rglob("*.json"):
            result.unlink()  # grade the notebook again; the template is kept
        (result,) = grade(submissions, out, jobs=1, limits=limits)
        assert result.status == "graded" and result.score == result.max_score, result

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("assignments", nargs="*", default=assignments(), help="default: every notebook")
    args = parser.parse_args()
    rounds = args.rounds
    print(f"({rounds} rounds, jobs=1; seconds per notebook)")
    columns = ("floor", "unsandboxed", "sandboxed", "sandbox cost", "vs floor")
    print(f"{'notebook':<12} " + " ".join(f"{c:>{max(len(c), 7)}}" for c in columns))
    with tempfile.TemporaryDirectory() as tmp:
        for assignment in args.assignments:
            runs = {
                "floor": floor(assignment, Path(tmp)),
                "unsandboxed": grading(assignment, Path(tmp), sandboxed=False),
                "sandboxed": grading(assignment, Path(tmp), sandboxed=True),
            }
            seconds = dict.fromkeys(runs, 0.0)
            for round_ in range(rounds):
                names = list(runs)
                for name in names[round_ % 3 :] + names[: round_ % 3]:
                    start = time.perf_counter()
                    runs[name]()
                    seconds[name] += (time.perf_counter() - start) / rounds
            bare, boxed = seconds["unsandboxed"], seconds["sandboxed"]
            print(
                f"{assignment:<12} {seconds['floor']:>7.2f} {bare:>11.2f} {boxed:>9.2f} "
                f"{boxed - bare:>+11.2f}s {boxed / seconds['floor']:>7.2f}x"
            )


if __name__ == "__main__":
    main()
