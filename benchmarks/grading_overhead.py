"""Seconds per notebook: `course grade` with and without the sandbox, and plain nbclient
execution (the floor), side by side.

    .venv/bin/python benchmarks/grading_overhead.py [--copies N]

All three run the same perfect submission, one notebook at a time (--jobs 1), in this one
run, so the ratios are measured on the same machine under the same load.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.grading import Limits, grade  # noqa: E402
from autograder.paths import assignments  # noqa: E402
from tests.submissions import perfect  # noqa: E402


def floor_seconds(assignment: str, copies: int, folder: Path) -> float:
    start = time.perf_counter()
    for _ in range(copies):
        notebook = perfect(assignment)
        NotebookClient(
            notebook, timeout=300, allow_errors=True, resources={"metadata": {"path": str(folder)}}
        ).execute()
    return (time.perf_counter() - start) / copies


def grading_seconds(assignment: str, copies: int, folder: Path, sandboxed: bool) -> float:
    submissions = folder / f"submissions-{assignment}-{sandboxed}"
    limits = Limits(sandboxed=sandboxed)
    for i in range(copies):
        path = submissions / f"student{i:03d}" / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(perfect(assignment), path)
    out = folder / f"out-{assignment}-{sandboxed}"
    grade(submissions, out, jobs=1, limits=limits)  # builds the batch's template once, outside the timing
    for result in (out / "work" / "results").rglob("*.json"):
        result.unlink()  # force a regrade of every notebook, template kept
    start = time.perf_counter()
    results = grade(submissions, out, jobs=1, limits=limits)
    elapsed = (time.perf_counter() - start) / copies
    assert all(r.status == "graded" and r.score == r.max_score for r in results), results
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    copies = parser.parse_args().copies
    print(f"({copies} copies, jobs=1; seconds per notebook)")
    columns = ("floor", "unsandboxed", "sandboxed", "sandbox cost", "vs floor")
    print(f"{'notebook':<12} " + " ".join(f"{c:>{max(len(c), 7)}}" for c in columns))
    with tempfile.TemporaryDirectory() as tmp:
        for assignment in assignments():
            floor = floor_seconds(assignment, copies, Path(tmp))
            bare = grading_seconds(assignment, copies, Path(tmp), sandboxed=False)
            boxed = grading_seconds(assignment, copies, Path(tmp), sandboxed=True)
            print(
                f"{assignment:<12} {floor:>7.2f} {bare:>11.2f} {boxed:>9.2f} "
                f"{boxed - bare:>+11.2f}s {boxed / floor:>7.2f}x"
            )


if __name__ == "__main__":
    main()
