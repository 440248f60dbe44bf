"""Seconds to execute each notebook top to bottom, against the course's budget of 30 s.

    .venv/bin/python benchmarks/notebook_runtime.py [--rounds N] [--busy N] [ASSIGNMENT ...]

Two runs per notebook and round, in one fresh kernel each, as nbclient runs them:
- "solution": the source notebook in solutions/ (answers, visible and hidden checks; the
  hidden checks also run the reference on fresh cases), what `course build` executes;
- "student": the release with every answer filled in (a student who is done), visible
  checks only, what a student's "Run all" costs.
Kernel start-up is included, since a student pays it too. Each round times the notebooks
in a rotating order, so that drift in the machine's load falls on all of them alike. The
slowest cells of the last solution run are listed, to show where the time goes.

--busy N starts N processes that spin for the whole run: N = the number of cores is the loaded
machine the course must stay fast on (a class's batch beside other work, a laptop with a browser
open). A cell whose small matrices run on several threads is the one that suffers: each thread
waits for the others at every operation, and a spinner holds the core one of them needs.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.cells import grade_id  # noqa: E402
from autograder.paths import assignments, source_notebook  # noqa: E402
from tests.helpers.machine import busy_processes  # noqa: E402
from tests.helpers.submissions import perfect  # noqa: E402

BUDGET_S = 30.0
CELL_LIMIT_S = 120  # `course grade`'s default --cell-timeout


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
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside the notebooks")
    parser.add_argument("assignments", nargs="*", default=assignments())
    args = parser.parse_args()

    with busy_processes(args.busy):
        seconds, slowest = measure(args.assignments, args.rounds)
    load = f"{args.busy} busy processes on {os.cpu_count()} cores" if args.busy else "no busy process"
    print(f"median of {args.rounds} rounds, {load}; budget {BUDGET_S:g} s per notebook\n")
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
    worst, where = max((cells[0][0], a) for a, cells in slowest.items())
    print(
        f"\nslowest cell: {worst:.1f} s in {where}, "
        f"{worst / CELL_LIMIT_S:.2f} of the grader's {CELL_LIMIT_S} s per cell"
    )


def measure(assignments: list[str], rounds: int) -> tuple[dict, dict]:
    """Wall seconds per (assignment, run) over the rounds, and the last solution run's slowest cells."""
    seconds: dict[tuple[str, str], list[float]] = {}
    slowest: dict[str, list[tuple[float, str]]] = {}
    for round_index in range(rounds):
        shift = round_index % len(assignments)
        for assignment in assignments[shift:] + assignments[:shift]:
            folder = source_notebook(assignment).parent
            solution = nbformat.read(source_notebook(assignment), as_version=4)
            total, cells = execute(solution, folder)
            seconds.setdefault((assignment, "solution"), []).append(total)
            slowest[assignment] = sorted(cells, reverse=True)[:3]
            total, _ = execute(perfect(assignment), folder)
            seconds.setdefault((assignment, "student"), []).append(total)
    return seconds, slowest


if __name__ == "__main__":
    main()
