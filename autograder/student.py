"""The student's commands: `course check NOTEBOOK` and `course progress [FOLDER]`.

The course's own `course` command has them among the instructor's; a student's release installs
this module's `main` as `course`, with these two only.
"""

import argparse
import sys
from pathlib import Path


def _check(args) -> int:
    """Execute a notebook and print each test cell's verdict (visible checks only)."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(args.notebook)
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=args.cell_timeout,
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    passed = total = 0
    for cell, calls in test_cells(notebook):
        if any(hidden for _, hidden in calls):  # a release's hidden cells call nothing
            continue
        total += 1
        names = ", ".join(name for name, _ in calls)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            print(f"FAILED {names}: {errors[0].ename}: {errors[0].evalue}")
        else:
            passed += 1
            print(f"passed {names}")
    print(f"{passed}/{total} visible checks pass in {path.name}")
    return 0 if passed == total and total else 1


def test_cells(notebook) -> list[tuple[object, list[tuple[str, bool]]]]:
    """(cell, its check calls) of each test cell: nbgrader's test cells; in a notebook whose nbgrader
    metadata an editor (Colab) dropped, the cells that call check()."""
    from .cells import check_calls, is_test_cell

    def calls(cell) -> list[tuple[str, bool]]:
        try:
            return check_calls(cell.source) if cell.cell_type == "code" else []
        except (SyntaxError, ValueError):  # a cell of the student's own that is not a test cell
            return []

    marked = [cell for cell in notebook.cells if is_test_cell(cell)]
    return [(cell, found) for cell in marked or notebook.cells if (found := calls(cell))]


def _progress(args) -> int:
    from .progress import folder_progress

    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"{folder} is not a folder: give the folder that holds your notebooks", file=sys.stderr)
        return 2
    summary, notes = folder_progress(folder)
    print(summary)
    for note in notes:
        print(note)
    print(
        "From the verdicts your notebooks showed when last saved: run a question's check cell and save "
        "to update its row. Hidden tests add the rest of each question's points when your work is graded."
    )
    return 0


def add_commands(sub) -> None:
    """The student's subcommands, on an argparse subparsers object."""
    p = sub.add_parser("check", help="run a notebook and report its visible checks")
    p.add_argument("notebook")
    p.add_argument("--cell-timeout", type=int, default=300)
    p.set_defaults(func=_check)

    p = sub.add_parser("progress", help="questions passed, points and the next question, per notebook")
    p.add_argument("folder", nargs="?", default=".", help="your notebooks' folder (default: here)")
    p.set_defaults(func=_progress)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course", description="Check your notebooks and see your progress.")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
