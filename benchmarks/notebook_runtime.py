"""Seconds to execute each notebook top to bottom, against the course's budget of 30 s.

    .venv/bin/python benchmarks/notebook_runtime.py [--rounds N] [ASSIGNMENT ...]

Two runs per notebook and round, in one fresh kernel each, as nbclient runs them:
- "solution": the source notebook in solutions/ (answers, visible and hidden checks; the
  hidden checks also run the reference on fresh cases), what `course build` executes;
- "student": the release with every answer filled in (a student who is done), visible
  checks only, what a student's "Run all" costs.
Kernel start-up is included, since a student pays it too. Each round times the notebooks
in a rotating order, so that drift in the machine's load falls on all of them alike. The
slowest cells of the last solution run are listed, to show where the time goes.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.cells import grade_id  # noqa: E402
from autograder.paths import assignments, source_notebook  # noqa: E402
from tests.submissions import perfect  # noqa: E402

BUDGET_S = 30.0


def execute(notebook: nbformat.NotebookNode, folder: Path) -> tuple[float, list[tuple[float, str]]]:
    """Wall seconds for the whole notebook, and (seconds, grade_id) per code cell."""
    cell_times: list[tuple[float, str]] = []
    client = NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(folder)}})
    started = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            cell_start = time.perf_counter()
            client.execute_cell(cell, index)
            cell_times.append((time.perf_counter() - cell_start, grade_id(cell) or f"cell {index}"))
    return time.perf_counter() - started, cell_times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("assignments", nargs="*", default=assignments())
    args = parser.parse_args()

    seconds: dict[tuple[str, str], list[float]] = {}
    slowest: dict[str, list[tuple[float, str]]] = {}
    for round_index in range(args.rounds):
        shift = round_index % len(args.assignments)
        for assignment in args.assignments[shift:] + args.assignments[:shift]:
            folder = source_notebook(assignment).parent
            solution = nbformat.read(source_notebook(assignment), as_version=4)
            total, cells = execute(solution, folder)
            seconds.setdefault((assignment, "solution"), []).append(total)
            slowest[assignment] = sorted(cells, reverse=True)[:3]
            total, _ = execute(perfect(assignment), folder)
            seconds.setdefault((assignment, "student"), []).append(total)

    print(f"median of {args.rounds} rounds; budget {BUDGET_S:g} s per notebook\n")
    print("| notebook | solution (s) | of budget | student, all answered (s) | of budget | slowest cells |")
    print("| --- | --- | --- | --- | --- | --- |")
    for assignment in args.assignments:
        solution = statistics.median(seconds[(assignment, "solution")])
        student = statistics.median(seconds[(assignment, "student")])
        cells = ", ".join(f"{name} {s:.1f}" for s, name in slowest[assignment])
        print(
            f"| {assignment} | {solution:.1f} | {solution / BUDGET_S:.2f} | {student:.1f} "
            f"| {student / BUDGET_S:.2f} | {cells} |"
        )


if __name__ == "__main__":
    main()
